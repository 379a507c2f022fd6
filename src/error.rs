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
    LockHeld { name: String, holder: String },

    /// The lock stayed taken for the whole wait.
    #[error("lock {name:?} is still held by {holder:?} after waiting {waited:?}")]
    WaitExpired {
        name: String,
        holder: String,
        waited: Duration,
    },

    /// The name is held in another mode than the one asked for.
    #[error(
        "lock {name:?} is held with {held}, but this lease asked for {asked}: every holder of one name must ask for the same limit"
    )]
    ModeMismatch {
        name: String,
        held: crate::store::locks::Mode,
        asked: crate::store::locks::Mode,
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

    pub(crate) fn redis(context: &'static str) -> impl FnOnce(fred::error::Error) -> Self {
        move |source| Error::Redis { context, source }
    }
}

impl From<Error> for tonic::Status {
    fn from(error: Error) -> Self {
        let message = error.to_string();
        match error {
            Error::InvalidArgument(_) | Error::Unreadable(_) => {
                tonic::Status::invalid_argument(message)
            }
            Error::FailedPrecondition(_) | Error::ModeMismatch { .. } => {
                tonic::Status::failed_precondition(message)
            }
            Error::NotResumable { .. } => tonic::Status::not_found(message),
            Error::LockHeld { .. } | Error::WaitExpired { .. } | Error::NoMajority { .. } => {
                tonic::Status::aborted(message)
            }
            Error::Redis { .. }
            | Error::RedisTimeout { .. }
            | Error::NotConnected { .. }
            | Error::NoQuorum { .. }
            | Error::ShuttingDown
            | Error::HandedOver { .. } => tonic::Status::unavailable(message),
            Error::BadReply { .. } | Error::Serve(_) => tonic::Status::internal(message),
            Error::TooManyLeases { .. }
            | Error::TooManyWaiters { .. }
            | Error::TooManyWaitersForLock { .. }
            | Error::TooManyLeasesOnServer { .. }
            | Error::MessageTooLarge { .. } => tonic::Status::resource_exhausted(message),
            Error::PermissionDenied(_) => tonic::Status::permission_denied(message),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
