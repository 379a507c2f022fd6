//! The Rust SDK: hold a lock as a guard value that knows when the lock is gone, run for
//! leader, and guard a resource with fencing tokens.
//!
//! - [`Client`] (here): the connection, and the unary calls.
//! - [`lease`]: [`LeaseBuilder`] and [`LeaseGuard`] (`lost()`, `fencing_token()`, `release()`).
//! - [`election`]: `campaign`, `leader`, `observe`.
//! - [`fence`]: the protected resource's side, a value that refuses stale fencing tokens.
//!
//! ```no_run
//! # async fn do_work(_fencing_token: u64) {}
//! # async fn example() -> Result<(), leasehold::client::ClientError> {
//! use std::time::Duration;
//! use leasehold::client::Client;
//!
//! let client = Client::connect("http://127.0.0.1:50051").await?;
//! let guard = client
//!     .lease("nightly-report")
//!     .ttl(Duration::from_secs(10))
//!     .wait(Duration::from_secs(30))
//!     .holder("report@host-a")
//!     .acquire()
//!     .await?;
//! tokio::select! {
//!     reason = guard.lost() => eprintln!("lock lost, stopping: {reason}"),
//!     () = do_work(guard.fencing_token()) => {}
//! }
//! guard.release().await?; // Dropping the guard releases too.
//! # Ok(())
//! # }
//! ```

pub mod election;
pub mod fence;
pub mod lease;

use std::time::Duration;

use tonic::Status;
use tonic::transport::{Channel, Endpoint};

use crate::pb::lock_service_client::LockServiceClient;
use crate::pb::{self, millis};
pub use election::{Candidate, Leader, Observation};
pub use lease::{LeaseBuilder, LeaseGuard};

/// What can go wrong on the client side.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: tonic::transport::Error,
    },
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

/// A connection to a Leasehold server. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Client {
    inner: LockServiceClient<Channel>,
    /// Shared with the election calls.
    channel: Channel,
}

impl Client {
    /// Connects to `url`, e.g. `http://127.0.0.1:50051`.
    pub async fn connect(url: impl Into<String>) -> Result<Self, ClientError> {
        let url = url.into();
        let endpoint = Endpoint::from_shared(url.clone()).map_err(|source| ClientError::Url {
            url: url.clone(),
            source,
        })?;
        let channel = endpoint
            .connect()
            .await
            .map_err(|source| ClientError::Connect { url, source })?;
        Ok(Client {
            inner: LockServiceClient::new(channel.clone()),
            channel,
        })
    }

    /// Starts building a lease on `name`.
    pub fn lease(&self, name: impl Into<String>) -> LeaseBuilder {
        LeaseBuilder::new(self.inner.clone(), name.into())
    }

    /// Takes `name` once with the unary call, without renewal and without waiting: the caller
    /// must release it (or let `ttl` run out). A taken lock answers `acquired == false`.
    pub async fn acquire_once(
        &self,
        name: impl Into<String>,
        ttl: Duration,
    ) -> Result<pb::AcquireResponse, ClientError> {
        let request = pb::AcquireRequest {
            name: name.into(),
            ttl_ms: millis(ttl),
            ..Default::default()
        };
        Ok(self.inner.clone().acquire(request).await?.into_inner())
    }

    /// Releases a lock taken elsewhere, by its token. `false`: the token no longer held it.
    pub async fn release(
        &self,
        name: impl Into<String>,
        token: impl Into<String>,
    ) -> Result<bool, ClientError> {
        let request = pb::ReleaseRequest {
            name: name.into(),
            token: token.into(),
        };
        Ok(self
            .inner
            .clone()
            .release(request)
            .await?
            .into_inner()
            .released)
    }

    /// The locks held now, at most `limit` (0: the server's maximum, 1,000); `truncated` says
    /// whether more are held.
    pub async fn list(&self, limit: u32) -> Result<pb::ListResponse, ClientError> {
        let request = pb::ListRequest { limit };
        Ok(self.inner.clone().list(request).await?.into_inner())
    }

    /// Who holds `name`, without changing anything.
    pub async fn describe(
        &self,
        name: impl Into<String>,
    ) -> Result<pb::DescribeResponse, ClientError> {
        let request = pb::DescribeRequest { name: name.into() };
        Ok(self.inner.clone().describe(request).await?.into_inner())
    }
}
