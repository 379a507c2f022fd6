//! The token check (`Check`): what asking "is this fencing token current?" before each write
//! costs, against one direct Redis `GET` (the least a read can cost Redis) and, when the server
//! has `--echo`, a unary echo that makes the server `PING` Redis once (the least a call needing
//! one Redis round trip can cost the caller).

use std::time::Duration;

use fred::prelude::*;
use serde_json::json;

use leasehold::store::Token;
use leasehold_client::{Client, TokenState};

use super::figures::{Figures, print_uncontended, ratio};
use super::paths::{BenchError, sequential, unexpected};
use super::stats::redis_cpu_seconds;
use super::{BenchOptions, Progress, echo};

/// Rounds: every path runs once per round, in turn, so noise falls on all of them.
const ROUNDS: usize = 5;

/// Checks of a held lease's fencing token, one at a time, against the floors above.
pub async fn section(
    options: &BenchOptions,
    redis: &fred::prelude::Client,
    progress: &Progress,
) -> Result<serde_json::Value, BenchError> {
    let operations: usize = if options.quick { 200 } else { 5_000 };
    let per_round = operations.div_ceil(ROUNDS);
    let client = Client::connect_with(options.connect.clone()).await?;
    let with_echo = echo::available(&client).await;
    let name = format!("bench-check-{}", Token::random().lease_id());
    let guard = client
        .lease(name.clone())
        .ttl(Duration::from_secs(30))
        .acquire()
        .await?;
    let fencing_token = guard.fencing_token();
    let key = format!("leasehold-bench-check:{}", Token::random().lease_id());
    let _: () = redis.set(&key, "value", None, None, false).await?;
    // Redis CPU of the direct GETs and of the checks, over every round.
    let mut redis_cpu = [0.0f64; 2];
    let mut rounds: [Vec<Figures>; 3] = Default::default();
    for round in 1..=ROUNDS {
        progress.say(&format!("check: round {round} of {ROUNDS}"));
        let before = redis_cpu_seconds(redis).await?;
        rounds[0].push(direct_get(redis, &key, per_round).await?);
        let between = redis_cpu_seconds(redis).await?;
        rounds[1].push(checks(&client, &name, fencing_token, per_round).await?);
        let after = redis_cpu_seconds(redis).await?;
        redis_cpu[0] += between - before;
        redis_cpu[1] += after - between;
        if with_echo {
            rounds[2].push(echo::unary_calls(&client, per_round, 1, true).await?);
        }
    }
    progress.clear();
    guard.release().await?;
    let _: i64 = redis.del(&key).await?;
    let [direct, check, floor] = rounds.map(|path| Figures::combine(&path));
    let (Some(direct), Some(check)) = (direct, check) else {
        return Err(unexpected("no check rounds ran"));
    };
    let mut rows = vec![&direct, &check];
    rows.extend(floor.as_ref());
    println!();
    print_uncontended("Token check, one client", &rows);
    let calls = (per_round * ROUNDS) as f64;
    let [get_us, check_us] = redis_cpu.map(|seconds| seconds * 1e6 / calls);
    let cpu_ratio = check_us / get_us.max(f64::MIN_POSITIVE);
    println!(
        "\n| Redis CPU per call | direct GET | Check | Check against GET |\n| --- | --- | --- | --- |\n| | {get_us:.1} µs | {check_us:.1} µs | {cpu_ratio:.2}x |"
    );
    let mut figures = json!({
        "paths": rows.iter().map(|row| row.to_json(Some(&direct))).collect::<Vec<_>>(),
        "redis_cpu_us_per_call": { "direct_get": get_us, "check": check_us },
        "redis_cpu_ratio_to_get": cpu_ratio,
    });
    if let Some(floor) = &floor {
        let (p50, mean) = (ratio(check.p50, floor.p50), ratio(check.mean, floor.mean));
        println!(
            "\n| path | against | p50 ratio | mean ratio |\n| --- | --- | --- | --- |\n| {} | {} | {p50:.2}x | {mean:.2}x |",
            check.path, floor.path
        );
        figures["against_echo_with_redis"] = json!({ "p50_ratio": p50, "mean_ratio": mean });
    }
    Ok(figures)
}

/// One Redis read, done directly.
async fn direct_get(
    redis: &fred::prelude::Client,
    key: &str,
    operations: usize,
) -> Result<Figures, BenchError> {
    sequential("direct Redis GET (fred)", operations, || async move {
        let value: Option<String> = redis.get(key).await?;
        value
            .map(drop)
            .ok_or_else(|| unexpected("GET found no value"))
    })
    .await
}

/// `Check` of the holder's own fencing token, which must answer current.
async fn checks(
    client: &Client,
    name: &str,
    fencing_token: u64,
    operations: usize,
) -> Result<Figures, BenchError> {
    sequential("Check", operations, || async move {
        let answer = client.check(name.to_owned(), fencing_token).await?;
        if answer.state != TokenState::Current {
            return Err(unexpected(format!("check answered {:?}", answer.state)));
        }
        Ok(())
    })
    .await
}
