//! The uncontended paths measured against each other: direct Redis (the baseline), the `Lease`
//! stream and the unary calls. Shared by `leasehold bench` and the peers bench
//! (`benches/peers.rs` includes this file), so both measure exactly the same work.

use std::time::Duration;

use fred::prelude::*;
use fred::types::scripts::Script;
use leasehold::store::Token;
use leasehold_client::{Client, ClientError, LeaseBuilder};
use tokio::time::Instant;

use super::figures::Figures;

/// Errors that stop a benchmark.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("redis: {0}")]
    Redis(#[from] fred::error::Error),
    #[error("unexpected answer: {0}")]
    Unexpected(String),
}

/// Runs `operation` `count` times, one after another, timing each.
pub async fn sequential<F, Fut>(
    path: &str,
    count: usize,
    mut operation: F,
) -> Result<Figures, BenchError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), BenchError>>,
{
    let mut samples = Vec::with_capacity(count);
    let started = Instant::now();
    for _ in 0..count {
        let begun = Instant::now();
        operation().await?;
        samples.push(begun.elapsed());
    }
    Ok(Figures::from_samples(path, samples, started.elapsed()))
}

pub fn unexpected(what: impl Into<String>) -> BenchError {
    BenchError::Unexpected(what.into())
}

/// The compare-and-delete a user would write by hand.
pub const RELEASE_SCRIPT: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// What a user would write by hand: `SET NX PX`, then the compare-and-delete script.
pub async fn direct_redis(
    redis: &fred::prelude::Client,
    operations: usize,
) -> Result<Figures, BenchError> {
    let release = Script::from_lua(RELEASE_SCRIPT);
    release.load(redis).await?;
    let key = format!("leasehold-bench-direct:{}", Token::random().lease_id());
    let (key, release) = (&key, &release);
    sequential("direct Redis (fred)", operations, move || async move {
        let token = Token::random();
        let set: Option<String> = redis
            .set(
                key,
                token.secret(),
                Some(Expiration::PX(30_000)),
                Some(SetOptions::NX),
                false,
            )
            .await?;
        if set.is_none() {
            return Err(unexpected("direct SET NX found the key taken"));
        }
        let released: i64 = release.evalsha(redis, key.as_str(), token.secret()).await?;
        if released != 1 {
            return Err(unexpected("direct release did not delete"));
        }
        Ok(())
    })
    .await
}

pub async fn lease_stream(client: &Client, operations: usize) -> Result<Figures, BenchError> {
    shaped_lease_stream(client, operations, "Lease stream", |lease| lease).await
}

/// Acquire + release through the `Lease` stream of a lease `shape` makes (a permit, a reader).
pub async fn shaped_lease_stream(
    client: &Client,
    operations: usize,
    path: &str,
    shape: impl Fn(LeaseBuilder) -> LeaseBuilder,
) -> Result<Figures, BenchError> {
    let name = format!("bench-stream-{}", Token::random().lease_id());
    let (name, shape) = (&name, &shape);
    sequential(path, operations, move || async move {
        let lease = client.lease(name.clone()).ttl(Duration::from_secs(30));
        let guard = shape(lease).acquire().await?;
        if !guard.release().await? {
            return Err(unexpected(format!("{path}: release found the lease gone")));
        }
        Ok(())
    })
    .await
}

pub async fn unary(client: &Client, operations: usize) -> Result<Figures, BenchError> {
    let name = format!("bench-unary-{}", Token::random().lease_id());
    let name = &name;
    sequential("unary Acquire/Release", operations, move || async move {
        let acquired = client
            .acquire_once(name.clone(), Duration::from_secs(30))
            .await?;
        if !acquired.acquired {
            return Err(unexpected(format!(
                "unary acquire refused: {}",
                acquired.holder
            )));
        }
        if !client.release(name.clone(), acquired.token).await? {
            return Err(unexpected("unary release found the lock gone"));
        }
        Ok(())
    })
    .await
}
