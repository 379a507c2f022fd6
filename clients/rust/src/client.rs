//! [`Client`]: the connection to a deployment's replicas, how to reach them ([`ConnectOptions`]),
//! and the unary calls.

use std::time::Duration;

use tonic::Status;
use tonic::metadata::{AsciiMetadataValue, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

use crate::pb::lock_service_client::LockServiceClient;
use crate::pb::{self, millis};
use crate::{ClientError, LeaseBuilder, Replicas};

/// How to reach a server: its URL, TLS (for `https://`) and a bearer token.
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    url: String,
    token: Option<String>,
    ca_pem: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl ConnectOptions {
    /// `http://host:port`, or `https://host:port` for TLS (`host:port` is plain HTTP/2); or a
    /// comma-separated list of them, every replica of one deployment; a host name stands for
    /// every address it resolves to.
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

/// A connection to a Leasehold server (one of its replicas). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Client {
    pub(crate) replicas: Replicas,
}

/// Whether a call's failure says its server is unreachable or going away, so another replica
/// should be tried.
pub(crate) fn moves_on(status: &Status) -> bool {
    status.code() == tonic::Code::Unavailable
}

impl Client {
    /// Connects to `url`, e.g. `http://127.0.0.1:50051`.
    pub async fn connect(url: impl Into<String>) -> Result<Self, ClientError> {
        Client::connect_with(ConnectOptions::new(url)).await
    }

    /// Connects with TLS settings and a token.
    pub async fn connect_with(options: ConnectOptions) -> Result<Self, ClientError> {
        let url = options.url.clone();
        let tls =
            if url.contains("https://") || options.ca_pem.is_some() || options.identity.is_some() {
                let mut tls = ClientTlsConfig::new().with_enabled_roots();
                if let Some(ca) = options.ca_pem {
                    tls = tls.ca_certificate(Certificate::from_pem(ca));
                }
                if let Some((cert, key)) = options.identity {
                    tls = tls.identity(Identity::from_pem(cert, key));
                }
                Some(tls)
            } else {
                None
            };
        let token = match options.token {
            Some(token) => Some(
                MetadataValue::try_from(format!("Bearer {token}"))
                    .map_err(|_| ClientError::Token)?,
            ),
            None => None,
        };
        let replicas = Replicas::connect(&url, tls, BearerToken(token)).await?;
        Ok(Client { replicas })
    }

    /// The replicas this client uses.
    pub fn replicas(&self) -> &Replicas {
        &self.replicas
    }

    /// Runs a call that may be repeated (it changes nothing, or nothing twice) on the replica
    /// in use, moving on to the next while one is unreachable.
    pub(crate) async fn idempotent<T, F, Fut>(&self, mut call: F) -> Result<T, ClientError>
    where
        F: FnMut(Transport) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let mut tries = self.replicas.len();
        loop {
            let replica = self.replicas.current();
            match call(replica.transport.clone()).await {
                Err(status) if moves_on(&status) && tries > 1 => {
                    self.replicas.failed(&replica);
                    tries -= 1;
                }
                other => return other.map_err(ClientError::from),
            }
        }
    }

    /// Whether the server reports SERVING on gRPC health (it can reach its Redis).
    pub async fn serving(&self) -> Result<bool, ClientError> {
        use tonic_health::pb::health_check_response::ServingStatus;
        use tonic_health::pb::health_client::HealthClient;
        let request = tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        };
        let status = self
            .idempotent(|transport| {
                let request = request.clone();
                async move { HealthClient::new(transport).check(request).await }
            })
            .await?
            .into_inner()
            .status;
        Ok(status == ServingStatus::Serving as i32)
    }

    /// The no-op echo service of a server started with `--echo`: the transport's own round trip,
    /// on this client's connection (`leasehold bench` measures leases against it).
    pub fn echo(&self) -> pb::bench::echo_service_client::EchoServiceClient<Transport> {
        pb::bench::echo_service_client::EchoServiceClient::new(self.replicas.current().transport)
    }

    /// Starts building a lease on `name`.
    pub fn lease(&self, name: impl Into<String>) -> LeaseBuilder {
        LeaseBuilder::new(self.clone(), name.into())
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
        // Not repeated on another replica: the first attempt may have taken the lock.
        let replica = self.replicas.current();
        match LockServiceClient::new(replica.transport.clone())
            .acquire(request)
            .await
        {
            Ok(answer) => Ok(answer.into_inner()),
            Err(status) => {
                if moves_on(&status) {
                    self.replicas.failed(&replica);
                }
                Err(status.into())
            }
        }
    }

    /// Releases a lock taken elsewhere, by its token. `false`: the token no longer held it.
    pub async fn release(
        &self,
        name: impl Into<String>,
        token: impl Into<String>,
    ) -> Result<bool, ClientError> {
        self.release_all([name.into()], token).await
    }

    /// Releases every name of an acquisition of several names (the first, then its more names,
    /// as acquired) by its token: each the token still holds. `false`: it held none of them.
    pub async fn release_all<S: Into<String>>(
        &self,
        names: impl IntoIterator<Item = S>,
        token: impl Into<String>,
    ) -> Result<bool, ClientError> {
        let mut names = names.into_iter().map(Into::into);
        let request = pb::ReleaseRequest {
            name: names.next().unwrap_or_default(),
            more_names: names.collect(),
            token: token.into(),
        };
        let answer = self
            .idempotent(|transport| {
                let request = request.clone();
                async move { LockServiceClient::new(transport).release(request).await }
            })
            .await?;
        Ok(answer.into_inner().released)
    }

    /// The locks held now, at most `limit` (0: the server's maximum, 1,000); `truncated` says
    /// whether more are held.
    pub async fn list(&self, limit: u32) -> Result<pb::ListResponse, ClientError> {
        let request = pb::ListRequest { limit };
        let answer = self
            .idempotent(
                |transport| async move { LockServiceClient::new(transport).list(request).await },
            )
            .await?;
        Ok(answer.into_inner())
    }

    /// Ends holdings of `name` by force (an operator's call; needs the `admin` role): every
    /// holder, or only the one with `fencing_token` (a permit, a shared hold). Each holder is
    /// told it is lost ([`crate::LostReason::Revoked`]) and the next waiter is granted with a
    /// larger fencing token. Returns what was ended; empty if nothing was held. (A retry on
    /// another replica after a lost answer reports nothing: the first call ended it.)
    pub async fn revoke(
        &self,
        name: impl Into<String>,
        fencing_token: Option<u64>,
    ) -> Result<Vec<pb::Holder>, ClientError> {
        let request = pb::RevokeRequest {
            name: name.into(),
            fencing_token: fencing_token.unwrap_or(0),
        };
        let answer = self
            .idempotent(|transport| {
                let request = request.clone();
                async move { LockServiceClient::new(transport).revoke(request).await }
            })
            .await?;
        Ok(answer.into_inner().revoked)
    }

    /// Who holds `name`, without changing anything.
    pub async fn describe(
        &self,
        name: impl Into<String>,
    ) -> Result<pb::DescribeResponse, ClientError> {
        let request = pb::DescribeRequest { name: name.into() };
        let answer = self
            .idempotent(|transport| {
                let request = request.clone();
                async move { LockServiceClient::new(transport).describe(request).await }
            })
            .await?;
        Ok(answer.into_inner())
    }
}
