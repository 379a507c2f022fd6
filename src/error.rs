//! The one error type of the server, and the one place it becomes a gRPC status.

use std::time::Duration;

/// Everything that can go wrong while serving a request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request breaks a documented limit or the stream protocol. Nothing was changed.
    #[error("{0}")]
    InvalidArgument(String),

    /// The request is valid but not in this state (e.g. proclaiming before being elected).
    #[error("{0}")]
    FailedPrecondition(String),

    /// A request on a stream (`Lease`, `Campaign`) could not be read: malformed protobuf, broken
    /// framing, transport failure. Whatever the stream held is released.
    #[error("unreadable request on the stream: {}", .0.message())]
    Unreadable(tonic::Status),

    /// The lock is taken and the caller asked not to wait.
    #[error("lock {name:?} is held by {holder:?}")]
    LockHeld {
        name: String,
        holder: String,
        /// The holder's remaining TTL, when it has one: the earliest a retry can succeed.
        retry_after: Option<Duration>,
    },

    /// The lock stayed taken for the whole wait.
    #[error("lock {name:?} is still held by {holder:?} after waiting {waited:?}")]
    WaitExpired {
        name: String,
        holder: String,
        waited: Duration,
        /// As in `LockHeld`.
        retry_after: Option<Duration>,
    },

    /// The name is held in another mode than the one asked for.
    #[error(
        "lock {name:?} is held with {held}, but this lease asked for {asked}: every holder of one name must ask for the same limit"
    )]
    ModeMismatch {
        name: String,
        held: crate::mode::Mode,
        asked: crate::mode::Mode,
    },

    /// A resume token that holds no lease of this name.
    #[error(
        "no lease of lock {name:?} holds this resume token: it expired, was released, or was never issued"
    )]
    NotResumable { name: String },

    /// Redlock: contenders split the primaries and none got a majority.
    #[error(
        "lock {name:?}: no majority of the Redlock primaries agreed on a holder (contention); try again"
    )]
    NoMajority { name: String },

    /// Redis answered with an error, or the connection failed.
    #[error("redis {context} failed: {source}")]
    Redis {
        context: &'static str,
        #[source]
        source: fred::error::Error,
    },

    /// Redis did not answer in time.
    #[error("redis {context} did not answer within {timeout:?}")]
    RedisTimeout {
        context: &'static str,
        timeout: Duration,
    },

    /// Redis is full (`maxmemory` reached under `noeviction`) and refuses writes: no new lock
    /// can be written, while held leases keep renewing (a TTL reset takes no memory).
    #[error(
        "redis {context}: Redis is out of memory (maxmemory reached) and takes no new locks until memory is freed or maxmemory raised"
    )]
    RedisOutOfMemory { context: &'static str },

    /// A Redis node that holds locks has a `maxmemory-policy` that may evict them: no new lease
    /// is taken on it. The node's address is for the operator (the start refusal and the logs),
    /// not in the message callers get.
    #[error(
        "Redis has maxmemory-policy {policy}, which may evict held locks: this server takes no new leases until it is set to noeviction"
    )]
    RedisMayEvict { node: String, policy: String },

    /// Too few replicas acknowledged a grant or renewal in time (`WAIT`): a failover could lose
    /// it, so it is not vouched for. A grant is given back; a renewal extends nothing.
    #[error(
        "redis {context}: {acked} of the {needed} replica(s) required acknowledged the write in time, so a failover could lose it: not vouched for (--redis-replicas)"
    )]
    NotReplicated {
        context: &'static str,
        acked: u32,
        needed: u32,
    },

    /// The Redis node restarted empty (no AOF) and grants nothing until every lease its old
    /// incarnation could have held has expired.
    #[error(
        "Redis restarted without its data and grants no lease for {left:?} more, until every lease it held before has expired (--redis-restart-hold)"
    )]
    RedisRestartedEmpty { left: Duration },

    /// The connection is down and the command was not queued (a Redlock primary).
    #[error("redis {context}: not connected")]
    NotConnected { context: &'static str },

    /// Too few of the Redlock primaries answered for a majority to decide.
    #[error(
        "redis {context}: only {answered} of {nodes} Redlock primaries answered, {needed} needed (first error: {first_error})"
    )]
    NoQuorum {
        context: &'static str,
        answered: usize,
        nodes: usize,
        needed: usize,
        first_error: String,
    },

    /// Redis answered something our scripts never return: a bug or a foreign key.
    #[error("unexpected reply from redis to {context}: {detail}")]
    BadReply {
        context: &'static str,
        detail: String,
    },

    /// One connection holds as many lease streams as it may.
    #[error(
        "this connection already has {limit} open lease streams, the server's limit (max-leases-per-connection); close some or open another connection"
    )]
    TooManyLeases { limit: usize },

    /// The server has as many waiters as it accepts.
    #[error(
        "this server already has {limit} waiters, its limit (max-waiters); retry later or with wait_ms = 0"
    )]
    TooManyWaiters { limit: usize },

    /// One lock has as many waiters on this server as it accepts.
    #[error(
        "this lock already has {limit} waiters on this server, its limit (max-waiters-per-lock); retry later or with wait_ms = 0"
    )]
    TooManyWaitersForLock { limit: usize },

    /// One session holds (or waits for) as many leases as it may.
    #[error(
        "this session already has {limit} leases, its limit; release some or open another session"
    )]
    TooManyOnSession { limit: usize },

    /// The server holds as many leases as it may.
    #[error(
        "this server already has {limit} open lease streams, its limit (max-leases); retry later or on another replica"
    )]
    TooManyLeasesOnServer { limit: usize },

    /// A request message above the configured size.
    #[error(
        "request message of {size} bytes is above the server's limit of {limit} bytes (max-message-bytes)"
    )]
    MessageTooLarge { size: usize, limit: usize },

    /// The caller's grant does not cover this call.
    #[error("permission denied: {0}")]
    PermissionDenied(String),

    /// The gRPC server itself failed (not a request's error).
    #[error("gRPC server failed: {0}")]
    Serve(#[source] tonic::transport::Error),

    /// The server is stopping and takes no new work.
    #[error("server is shutting down")]
    ShuttingDown,

    /// The server is stopping and hands a resumable lease over instead of releasing it.
    #[error(
        "server shutting down; the {held} is kept for {grace_ms} ms: resume it on another server with its token"
    )]
    HandedOver { held: &'static str, grace_ms: u128 },
}

impl Error {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Error::InvalidArgument(message.into())
    }

    /// Whether Redis (or too many Redlock primaries) could not be reached or did not answer:
    /// an error that may pass on its own, unlike a refusal or a reply our scripts never give.
    pub fn is_redis_unavailable(&self) -> bool {
        matches!(
            self,
            Error::Redis { .. }
                | Error::RedisTimeout { .. }
                | Error::NotConnected { .. }
                | Error::NoQuorum { .. }
                | Error::NotReplicated { .. }
                | Error::RedisRestartedEmpty { .. }
        )
    }

    /// A failed Redis call: Redis's refusal to write when full is told apart (see
    /// [`Error::RedisOutOfMemory`]); anything else keeps Redis's own words.
    pub(crate) fn redis(context: &'static str) -> impl FnOnce(fred::error::Error) -> Self {
        move |source| {
            // Redis's words for it, alone or inside a script's error ("... script: <sha>").
            if source.details().contains("OOM command not allowed") {
                Error::RedisOutOfMemory { context }
            } else {
                Error::Redis { context, source }
            }
        }
    }
}

use crate::pb::ERROR_DOMAIN;

/// How long a client should wait before retrying a call refused for load or a failing Redis.
const RETRY_LATER: Duration = Duration::from_secs(1);

/// Redlock contenders that split the primaries: a short pause lets one of them win next time.
const RETRY_SPLIT_VOTE: Duration = Duration::from_millis(100);

/// What a program needs to act on an error without parsing its message: the status code, a
/// stable reason, named values, and when a retry is worth it. The table in docs/errors.md is
/// this function written out; the test below checks the two agree.
struct Details {
    code: tonic::Code,
    reason: &'static str,
    metadata: Vec<(&'static str, String)>,
    retry_after: Option<Duration>,
}

impl Details {
    fn new(code: tonic::Code, reason: &'static str) -> Self {
        Details {
            code,
            reason,
            metadata: Vec::new(),
            retry_after: None,
        }
    }

    fn with(mut self, key: &'static str, value: impl ToString) -> Self {
        self.metadata.push((key, value.to_string()));
        self
    }

    fn retry_after(mut self, delay: Option<Duration>) -> Self {
        self.retry_after = delay;
        self
    }
}

impl Error {
    fn details(&self) -> Details {
        use tonic::Code;
        match self {
            Error::InvalidArgument(_) => Details::new(Code::InvalidArgument, "INVALID_REQUEST"),
            Error::Unreadable(_) => Details::new(Code::InvalidArgument, "UNREADABLE_REQUEST"),
            Error::FailedPrecondition(_) => Details::new(Code::FailedPrecondition, "WRONG_STATE"),
            Error::ModeMismatch { name, held, asked } => {
                Details::new(Code::FailedPrecondition, "LIMIT_MISMATCH")
                    .with("lock", name)
                    .with("held_limit", held.kind())
                    .with("asked_limit", asked.kind())
            }
            Error::NotResumable { name } => {
                Details::new(Code::NotFound, "NOT_RESUMABLE").with("lock", name)
            }
            Error::LockHeld {
                name,
                holder,
                retry_after,
            } => Details::new(Code::Aborted, "LOCK_HELD")
                .with("lock", name)
                .with("holder", holder)
                .retry_after(*retry_after),
            Error::WaitExpired {
                name,
                holder,
                waited,
                retry_after,
            } => Details::new(Code::Aborted, "WAIT_EXPIRED")
                .with("lock", name)
                .with("holder", holder)
                .with("waited_ms", waited.as_millis())
                .retry_after(*retry_after),
            Error::NoMajority { name } => Details::new(Code::Aborted, "NO_MAJORITY")
                .with("lock", name)
                .retry_after(Some(RETRY_SPLIT_VOTE)),
            Error::Redis { .. } | Error::RedisTimeout { .. } | Error::NotConnected { .. } => {
                Details::new(Code::Unavailable, "REDIS_UNAVAILABLE").retry_after(Some(RETRY_LATER))
            }
            Error::NoQuorum {
                answered,
                nodes,
                needed,
                ..
            } => Details::new(Code::Unavailable, "NO_QUORUM")
                .with("answered", answered)
                .with("nodes", nodes)
                .with("needed", needed)
                .retry_after(Some(RETRY_LATER)),
            Error::RedisOutOfMemory { .. } => {
                Details::new(Code::ResourceExhausted, "REDIS_OUT_OF_MEMORY")
                    .retry_after(Some(RETRY_LATER))
            }
            Error::NotReplicated { acked, needed, .. } => {
                Details::new(Code::Unavailable, "REDIS_NOT_REPLICATED")
                    .with("acked", acked)
                    .with("needed", needed)
                    .retry_after(Some(RETRY_LATER))
            }
            Error::RedisRestartedEmpty { left } => {
                Details::new(Code::Unavailable, "REDIS_RESTARTED_EMPTY")
                    .with("hold_ms", left.as_millis())
                    .retry_after(Some(*left))
            }
            Error::RedisMayEvict { policy, .. } => {
                Details::new(Code::Unavailable, "REDIS_MAY_EVICT").with("policy", policy)
            }
            Error::ShuttingDown => Details::new(Code::Unavailable, "SHUTTING_DOWN"),
            Error::HandedOver { grace_ms, .. } => {
                Details::new(Code::Unavailable, "HANDED_OVER").with("grace_ms", grace_ms)
            }
            Error::BadReply { .. } => Details::new(Code::Internal, "UNEXPECTED_REDIS_REPLY"),
            Error::Serve(_) => Details::new(Code::Internal, "SERVER_FAILED"),
            Error::TooManyLeases { limit } => {
                Details::new(Code::ResourceExhausted, "CONNECTION_LEASE_LIMIT").with("limit", limit)
            }
            Error::TooManyOnSession { limit } => {
                Details::new(Code::ResourceExhausted, "SESSION_LEASE_LIMIT").with("limit", limit)
            }
            Error::TooManyLeasesOnServer { limit } => {
                Details::new(Code::ResourceExhausted, "SERVER_LEASE_LIMIT")
                    .with("limit", limit)
                    .retry_after(Some(RETRY_LATER))
            }
            Error::TooManyWaiters { limit } => {
                Details::new(Code::ResourceExhausted, "SERVER_WAITER_LIMIT")
                    .with("limit", limit)
                    .retry_after(Some(RETRY_LATER))
            }
            Error::TooManyWaitersForLock { limit } => {
                Details::new(Code::ResourceExhausted, "LOCK_WAITER_LIMIT")
                    .with("limit", limit)
                    .retry_after(Some(RETRY_LATER))
            }
            Error::MessageTooLarge { size, limit } => {
                Details::new(Code::ResourceExhausted, "MESSAGE_TOO_LARGE")
                    .with("size", size)
                    .with("limit", limit)
            }
            Error::PermissionDenied(_) => Details::new(Code::PermissionDenied, "NOT_GRANTED"),
        }
    }
}

/// The one place an error becomes a status: its message for people, and gRPC's standard
/// details (`ErrorInfo`, `RetryInfo`) for programs, so no client parses a message.
impl From<Error> for tonic::Status {
    fn from(error: Error) -> Self {
        use tonic_types::{ErrorDetails, StatusExt};
        let details = error.details();
        let metadata: std::collections::HashMap<String, String> = details
            .metadata
            .into_iter()
            .map(|(key, value)| (key.to_owned(), value))
            .collect();
        let mut rich = ErrorDetails::with_error_info(details.reason, ERROR_DOMAIN, metadata);
        if let Some(delay) = details.retry_after {
            rich.set_retry_info(Some(delay));
        }
        tonic::Status::with_error_details(details.code, error.to_string(), rich)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::Mode;
    use tonic_types::StatusExt;

    /// One of every error a client can be answered with.
    fn every_answer() -> Vec<Error> {
        let name = || "job".to_owned();
        vec![
            Error::invalid("lock name is empty"),
            Error::Unreadable(tonic::Status::internal("h2 protocol error")),
            Error::FailedPrecondition("not elected".into()),
            Error::ModeMismatch {
                name: name(),
                held: Mode::Exclusive { limit: 2 },
                asked: Mode::Shared,
            },
            Error::NotResumable { name: name() },
            Error::LockHeld {
                name: name(),
                holder: "a".into(),
                retry_after: Some(Duration::from_secs(3)),
            },
            Error::WaitExpired {
                name: name(),
                holder: "a".into(),
                waited: Duration::from_secs(1),
                retry_after: None,
            },
            Error::NoMajority { name: name() },
            Error::Redis {
                context: "acquire",
                source: fred::error::Error::new(fred::error::ErrorKind::IO, "reset"),
            },
            Error::RedisTimeout {
                context: "acquire",
                timeout: Duration::from_secs(1),
            },
            Error::NotConnected { context: "acquire" },
            Error::NotReplicated {
                context: "acquire",
                acked: 0,
                needed: 1,
            },
            Error::RedisRestartedEmpty {
                left: Duration::from_secs(3),
            },
            Error::RedisOutOfMemory { context: "acquire" },
            Error::RedisMayEvict {
                node: "127.0.0.1:6379".into(),
                policy: "allkeys-lru".into(),
            },
            Error::NoQuorum {
                context: "acquire",
                answered: 1,
                nodes: 3,
                needed: 2,
                first_error: "reset".into(),
            },
            Error::BadReply {
                context: "acquire",
                detail: "?".into(),
            },
            Error::TooManyLeases { limit: 1 },
            Error::TooManyWaiters { limit: 1 },
            Error::TooManyWaitersForLock { limit: 1 },
            Error::TooManyLeasesOnServer { limit: 1 },
            Error::MessageTooLarge { size: 9, limit: 8 },
            Error::PermissionDenied("no grant".into()),
            Error::TooManyOnSession { limit: 10_000 },
            Error::ShuttingDown,
            Error::HandedOver {
                held: "lease",
                grace_ms: 100,
            },
        ]
    }

    /// A row of docs/errors.md's table: code, reason, metadata keys, whether RetryInfo is sent.
    fn documented() -> Vec<(String, String, Vec<String>, bool)> {
        let text = include_str!("../docs/errors.md");
        let table = text
            .split("| Code | Reason |")
            .nth(1)
            .expect("the table of reasons");
        table
            .lines()
            .skip(2)
            .take_while(|line| line.starts_with('|'))
            .map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                let unquote = |cell: &str| cell.trim_matches('`').to_owned();
                let keys = cells[3]
                    .split(',')
                    .map(|key| unquote(key.trim()))
                    .filter(|key| !key.is_empty())
                    .collect();
                (
                    unquote(cells[1]),
                    unquote(cells[2]),
                    keys,
                    !cells[4].is_empty(),
                )
            })
            .collect()
    }

    #[test]
    fn every_status_carries_the_documented_reason_metadata_and_retry() {
        let rows = documented();
        let mut seen = std::collections::HashSet::new();
        for error in every_answer() {
            let status = tonic::Status::from(error);
            let info = status.get_details_error_info().expect("ErrorInfo");
            assert_eq!(info.domain, ERROR_DOMAIN);
            let code = format!("{:?}", status.code());
            let row = rows
                .iter()
                .find(|row| row.1 == info.reason)
                .unwrap_or_else(|| panic!("{} is not in docs/errors.md", info.reason));
            assert_eq!(
                row.0.replace('_', "").to_lowercase(),
                code.to_lowercase(),
                "{}",
                info.reason
            );
            let mut keys: Vec<&String> = info.metadata.keys().collect();
            keys.sort();
            let mut documented: Vec<&String> = row.2.iter().collect();
            documented.sort();
            assert_eq!(keys, documented, "{}", info.reason);
            // WAIT_EXPIRED above has no holder TTL: RetryInfo is only where one is known.
            let retry = status.get_details_retry_info().is_some();
            assert!(
                retry == row.3 || info.reason == "WAIT_EXPIRED",
                "{}",
                info.reason
            );
            seen.insert(info.reason);
        }
        for row in &rows {
            assert!(
                seen.contains(&row.1),
                "{} is documented but never sent",
                row.1
            );
        }
    }
}
