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
use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

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

/// How to reach a server: its URL, TLS (for `https://`) and a bearer token.
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    url: String,
    token: Option<String>,
    ca_pem: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl ConnectOptions {
    /// `http://host:port`, or `https://host:port` for TLS.
    pub fn new(url: impl Into<String>) -> Self {
        ConnectOptions {
            url: url.into(),
            ..Default::default()
        }
    }

    /// A bearer token sent with every call (`authorization: Bearer <token>`).
    pub fn token(mut self, token: Option<String>) -> Self {
        self.token = token;
        self
    }

    /// Trust this CA (PEM) for the server's certificate instead of the system's roots.
    pub fn ca_pem(mut self, pem: Vec<u8>) -> Self {
        self.ca_pem = Some(pem);
        self
    }

    /// Present this certificate and key (PEM) to the server: mutual TLS.
    pub fn identity_pem(mut self, cert: Vec<u8>, key: Vec<u8>) -> Self {
        self.identity = Some((cert, key));
        self
    }

    pub fn url(&self) -> &str {
        &self.url
    }
}

/// The client side of every call: the connection, and the token each call carries.
pub type Transport = InterceptedService<Channel, BearerToken>;

/// Adds the bearer token, if any, to every call.
#[derive(Clone, Debug)]
pub struct BearerToken(Option<AsciiMetadataValue>);

impl Interceptor for BearerToken {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        if let Some(token) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", token.clone());
        }
        Ok(request)
    }
}

/// A connection to a Leasehold server. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Client {
    inner: LockServiceClient<Transport>,
    /// Shared with the election calls.
    transport: Transport,
}

impl Client {
    /// Connects to `url`, e.g. `http://127.0.0.1:50051`.
    pub async fn connect(url: impl Into<String>) -> Result<Self, ClientError> {
        Client::connect_with(ConnectOptions::new(url)).await
    }

    /// Connects with TLS settings and a token.
    pub async fn connect_with(options: ConnectOptions) -> Result<Self, ClientError> {
        let url = options.url.clone();
        let bad_url = |source| ClientError::Url {
            url: url.clone(),
            source,
        };
        let mut endpoint = Endpoint::from_shared(url.clone()).map_err(bad_url)?;
        if url.starts_with("https://") || options.ca_pem.is_some() || options.identity.is_some() {
            let mut tls = ClientTlsConfig::new().with_enabled_roots();
            if let Some(ca) = options.ca_pem {
                tls = tls.ca_certificate(Certificate::from_pem(ca));
            }
            if let Some((cert, key)) = options.identity {
                tls = tls.identity(Identity::from_pem(cert, key));
            }
            endpoint = endpoint.tls_config(tls).map_err(bad_url)?;
        }
        let token = match options.token {
            Some(token) => Some(
                MetadataValue::try_from(format!("Bearer {token}"))
                    .map_err(|_| ClientError::Token)?,
            ),
            None => None,
        };
        let channel = endpoint
            .connect()
            .await
            .map_err(|source| ClientError::Connect { url, source })?;
        let transport = InterceptedService::new(channel, BearerToken(token));
        Ok(Client {
            inner: LockServiceClient::new(transport.clone()),
            transport,
        })
    }

    /// Whether the server reports SERVING on gRPC health (it can reach its Redis).
    pub async fn serving(&self) -> Result<bool, ClientError> {
        use tonic_health::pb::health_check_response::ServingStatus;
        let mut health = tonic_health::pb::health_client::HealthClient::new(self.transport.clone());
        let request = tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        };
        let status = health.check(request).await?.into_inner().status;
        Ok(status == ServingStatus::Serving as i32)
    }

    /// The no-op echo service of a server started with `--echo`: the transport's own round trip,
    /// on this client's connection (`leasehold bench` measures leases against it).
    pub fn echo(&self) -> crate::pb::bench::echo_service_client::EchoServiceClient<Transport> {
        crate::pb::bench::echo_service_client::EchoServiceClient::new(self.transport.clone())
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
