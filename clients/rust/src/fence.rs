//! The protected side of fencing: a value in Redis that refuses writes from an older lock holder.
//!
//! A lock alone cannot stop a holder that paused (GC, SIGSTOP, a slow network) past its lease
//! from writing after someone else took over. The resource must check the holder's fencing token:
//! [`FencedKey`] keeps, beside the value, the highest token it has seen, and refuses any read or
//! write that carries an older one. Reads record their token too, so a value read by a newer
//! holder can no longer be overwritten by an older holder's read-modify-write.
//!
//! ```no_run
//! # async fn example(redis: fred::prelude::Client, fencing_token: u64) -> Result<(), leasehold_client::fence::FenceError> {
//! use leasehold_client::fence::{Fenced, FencedKey};
//!
//! let balance = FencedKey::new(redis, "accounts:42:balance").await?;
//! if let Fenced::Accepted(current) = balance.get(fencing_token).await? {
//!     let next = current.map_or(0, |v| v.parse::<i64>().unwrap_or(0)) + 10;
//!     match balance.set(fencing_token, &next.to_string()).await? {
//!         Fenced::Accepted(()) => println!("written"),
//!         Fenced::Stale { highest_seen } => println!("a newer holder ({highest_seen}) took over"),
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Tokens are compared as Lua numbers (doubles): exact below 2^53, which Leasehold's
//! microsecond-clock tokens stay under until the year 2255. On a Redis Cluster, give `data_key`
//! a hash tag (`{…}`) so the value and its fence key (`<data_key>:fence`) share a slot.

use fred::prelude::*;
use fred::types::scripts::Script;

/// What stops a fenced access. The client's own error type: the SDK does not depend on the
/// server's.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    /// Redis refused the call or did not answer.
    #[error("redis {context}: {source}")]
    Redis {
        context: &'static str,
        #[source]
        source: fred::error::Error,
    },
    /// The script answered something it never returns (another script under its name?).
    #[error("unexpected reply to {context}: {detail}")]
    BadReply {
        context: &'static str,
        detail: String,
    },
}

type Result<T> = std::result::Result<T, FenceError>;

fn redis(context: &'static str) -> impl FnOnce(fred::error::Error) -> FenceError {
    move |source| FenceError::Redis { context, source }
}

/// The answer of a fenced access.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fenced<T> {
    /// The token was current; here is the result.
    Accepted(T),
    /// A newer token has been seen: the caller is no longer the holder and must stop.
    Stale { highest_seen: u64 },
}

/// A Redis value guarded by fencing tokens.
#[derive(Clone)]
pub struct FencedKey {
    client: Client,
    data: String,
    fence: String,
    script: Script,
}

impl FencedKey {
    /// Guards `data_key`; its fence lives at `<data_key>:fence`. Loads the scripts once.
    pub async fn new(client: Client, data_key: impl Into<String>) -> Result<Self> {
        let data = data_key.into();
        let key = FencedKey {
            fence: format!("{data}:fence"),
            data,
            script: Script::from_lua(include_str!("fenced.lua")),
            client,
        };
        key.script
            .load(&key.client)
            .await
            .map_err(redis("fence script load"))?;
        Ok(key)
    }

    /// Reads the value if `fencing_token` is not older than any seen, and records the token.
    pub async fn get(&self, fencing_token: u64) -> Result<Fenced<Option<String>>> {
        let reply = self.run(fencing_token, None).await?;
        parse(reply, "fenced get", |rest| match rest {
            [] => Some(None),
            [value] => value.as_string().map(Some),
            _ => None,
        })
    }

    /// Writes the value if `fencing_token` is not older than any seen, and records the token.
    pub async fn set(&self, fencing_token: u64, value: &str) -> Result<Fenced<()>> {
        let reply = self.run(fencing_token, Some(value)).await?;
        parse(reply, "fenced set", |rest| rest.is_empty().then_some(()))
    }

    async fn run(&self, token: u64, value: Option<&str>) -> Result<Vec<Value>> {
        let mut args = vec![Value::from(token.to_string())];
        args.extend(value.map(Value::from));
        self.script
            .evalsha_with_reload(
                &self.client,
                vec![self.fence.clone(), self.data.clone()],
                args,
            )
            .await
            .map_err(redis("fenced access"))
    }
}

fn parse<T>(
    reply: Vec<Value>,
    context: &'static str,
    accepted: impl FnOnce(&[Value]) -> Option<T>,
) -> Result<Fenced<T>> {
    let bad = || FenceError::BadReply {
        context,
        detail: format!("{reply:?}"),
    };
    match reply.split_first() {
        Some((flag, rest)) if flag.as_i64() == Some(1) => {
            accepted(rest).map(Fenced::Accepted).ok_or_else(bad)
        }
        Some((flag, [seen])) if flag.as_i64() == Some(0) => Ok(Fenced::Stale {
            highest_seen: seen.as_u64().ok_or_else(bad)?,
        }),
        _ => Err(bad()),
    }
}
