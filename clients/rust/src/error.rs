//! The client's one error type.

use tonic::Status;

use crate::Refusal;

/// What can go wrong on the client side.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: tonic::transport::Error,
    },
    /// A bearer token that cannot be sent as a header (not ASCII).
    #[error("the bearer token must be printable ASCII")]
    Token,
    #[error("invalid server url {url:?}: {source}")]
    Url {
        url: String,
        #[source]
        source: tonic::transport::Error,
    },
    /// The server answered with an error status (e.g. `ABORTED`: the lock is taken).
    #[error("server refused ({:?}): {}", .0.code(), .0.message())]
    Status(#[from] Status),
    /// The server broke the protocol (e.g. ended the stream without an answer).
    #[error("unexpected answer from the server: {0}")]
    Protocol(String),
}

impl ClientError {
    /// The server's reason and values for refusing, when it refused (e.g. `LOCK_HELD` with the
    /// holder and when to retry); `None` for errors that are not the server's answer.
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            ClientError::Status(status) => Refusal::of(status),
            _ => None,
        }
    }
}
