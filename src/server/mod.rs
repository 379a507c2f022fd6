//! The gRPC layer: a thin face over the lease layer.
//!
//! - [`serve`] (here): run the server until a shutdown signal, then let every lease go.
//! - [`listener`]: plain TCP, or TLS with certificates reloaded on SIGHUP or change.
//! - [`auth`]: bearer tokens and certificate subjects, granted roles on name prefixes.
//! - [`admission`]: how many leases one client connection, and the server, may hold open.
//! - [`message_size`]: the request size limit, answered as a limit.
//! - [`health`]: `grpc.health.v1` following Redis; [`exporter`]: Prometheus `/metrics`.
//! - [`console`]: the web console (`--console`), a page over the services' own calls.
//! - [`events`]: the non-blocking sending side of a response stream.
//! - [`driver`]: the one driver of every stream that holds a lease: a translator between its
//!   messages and the lease's life ([`crate::lease::life`]), which decides every exit.
//! - [`lease_stream`]: what a kind of held-lease stream declares for the driver.
//! - [`lock_stream`], [`campaign`]: the two kinds of held-lease stream, declared for the driver.
//! - [`lock`], [`election`]: the `LockService` and `ElectionService`.
//! - [`session`]: the `SessionService`: many leases on one stream, a group of lease lives.
//!
//! Errors become gRPC statuses in one place: `From<Error> for Status` in [`crate::error`].

pub mod admission;
pub mod auth;
pub mod campaign;
pub mod console;
pub mod driver;
pub mod echo;
pub mod election;
pub mod events;
pub mod exporter;
pub mod health;
pub mod lease_stream;
pub mod listener;
pub mod lock;
pub mod lock_stream;
pub mod message_size;
pub mod session;
pub mod traces;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::time::Instant;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Server;
use tracing::{info, warn};

use crate::error::{Error, Result};
use crate::lease::scheduler::Scheduler;
use crate::lease::spec::MAX_ELECTION_VALUE_BYTES;
use crate::lease::waiting::{WaitConfig, WaitRoom};
use crate::pb::bench::echo_service_server::EchoServiceServer;
use crate::pb::election_service_server::ElectionServiceServer;
use crate::pb::lock_service_server::LockServiceServer;
use crate::pb::session_service_server::SessionServiceServer;
use crate::store::Store;
use crate::tls::TlsFiles;
use admission::{ConnectionLimits, DEFAULT_MAX_LEASES, DEFAULT_MAX_LEASES_PER_CONNECTION};
use auth::{AuthPolicy, Authenticate};
use driver::Streams;
use election::ElectionServer;
use health::HealthMonitor;
use listener::ReloadableTls;
use lock::LockServer;
use message_size::NameTheLimit;

/// Default largest request message: a lock request is a few hundred bytes, an election's value
/// at most 64 KiB; anything bigger is refused before it is decoded.
pub const MAX_REQUEST_BYTES: usize = MAX_ELECTION_VALUE_BYTES + 1024;
/// HTTP/2 streams per connection beyond the lease limit, for unary calls and refusals.
const STREAM_HEADROOM: u32 = 256;
/// Default for how long shutdown waits for leases to let go (they then expire by TTL).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Where the server listens: gRPC, and Prometheus `/metrics` and the web console if wanted.
pub struct Listeners {
    pub grpc: TcpListener,
    pub metrics: Option<TcpListener>,
    pub console: Option<TcpListener>,
}

impl From<TcpListener> for Listeners {
    fn from(grpc: TcpListener) -> Self {
        Listeners {
            grpc,
            metrics: None,
            console: None,
        }
    }
}

/// Settings of the gRPC side of the server.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// How often the server pings an idle client connection (HTTP/2 PING).
    pub keepalive_interval: Duration,
    /// How long a ping may go unanswered before the connection, and every lease on it, is dropped.
    /// A frozen client or a vanished network loses its locks within interval + timeout.
    pub keepalive_timeout: Duration,
    /// Open `Lease` streams one client connection may have; past it, RESOURCE_EXHAUSTED.
    pub max_leases_per_connection: usize,
    /// Open held-lease streams the whole server may have; past it, RESOURCE_EXHAUSTED.
    pub max_leases: usize,
    /// Largest request message; past it, RESOURCE_EXHAUSTED.
    pub max_message_bytes: usize,
    /// Wake waiters by pub/sub (`true`), or let them poll with backoff.
    pub wakeups: bool,
    /// The fair line and the waiter limits.
    pub wait: WaitConfig,
    /// How long shutdown waits for every lease to let go before the process may exit.
    pub drain: Duration,
    /// TLS on the gRPC listener (mutual when it names a client CA).
    pub tls: Option<TlsFiles>,
    /// Who may call; `None`: everyone may do everything.
    pub auth: Option<Arc<AuthPolicy>>,
    /// Also serve the no-op echo service, the transport baseline of `leasehold bench`.
    pub echo: bool,
    /// A span for each call (see [`traces`]); the process must have an OpenTelemetry layer
    /// for them to go anywhere (`serve --otlp-endpoint` installs one).
    pub traces: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            keepalive_interval: Duration::from_secs(5),
            keepalive_timeout: Duration::from_secs(5),
            max_leases_per_connection: DEFAULT_MAX_LEASES_PER_CONNECTION,
            max_leases: DEFAULT_MAX_LEASES,
            max_message_bytes: MAX_REQUEST_BYTES,
            wakeups: true,
            wait: WaitConfig::default(),
            drain: SHUTDOWN_GRACE,
            tls: None,
            auth: None,
            echo: false,
            traces: false,
        }
    }
}

/// Serves on `listeners` until `shutdown` completes. On shutdown health turns NOT_SERVING, no
/// new connection is accepted, every lease lets go and tells its client `Lost`; the server waits
/// (up to `config.drain`) for every task it started, then closes its Redis connections, so
/// nothing of it is left running when this returns.
pub async fn serve(
    listeners: impl Into<Listeners>,
    store: Store,
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<()> {
    let listeners = listeners.into();
    let tasks = store.connection().tasks().clone();
    // Unusable certificates refuse the start, before anything runs.
    let tls = config.tls.clone().map(ReloadableTls::load).transpose()?;
    let room = if config.wakeups {
        let metrics = store.connection().metrics();
        metrics.limit("waiters", config.wait.max_waiters);
        metrics.limit("waiters_per_lock", config.wait.max_waiters_per_lock);
        Some(WaitRoom::start(&store.locks, config.wait.clone()).await?)
    } else {
        None
    };
    let streams = Arc::new(Streams {
        store: store.clone(),
        room,
        scheduler: Scheduler::start(&store),
        limits: ConnectionLimits::with_server_limit(
            config.max_leases_per_connection,
            config.max_leases,
        )
        .counted_in(store.connection().metrics().clone()),
        max_message_bytes: config.max_message_bytes,
    });
    // Every revocation under the prefix reaches this server's holders at once.
    crate::lease::revoke::listen(&store, &streams.scheduler).await?;
    let elections = ElectionServer::start(streams.clone()).await?;
    let sessions = session::SessionServer::new(streams.clone());
    let locks = LockServer::start(streams).await?;
    let authenticate = Authenticate(config.auth.clone());
    if let Some(listener) = listeners.console {
        let services = console::Services {
            locks: locks.clone(),
            elections: elections.clone(),
            authenticate: authenticate.clone(),
            tasks: tasks.clone(),
        };
        console::start(listener, services, tls.clone(), &tasks);
    }
    // HTTP/2 must let the streams through for our own limit to answer them with a status
    // (hyper would otherwise cap a connection at 200 and make clients queue silently). The
    // headroom carries unary calls and the refusals themselves.
    let max_streams = u32::try_from(config.max_leases_per_connection)
        .unwrap_or(u32::MAX)
        .saturating_add(STREAM_HEADROOM);
    // When shutdown began: the drain is one deadline from then, for everything that follows.
    let stopped_at = std::sync::OnceLock::new();
    let signal = {
        let (tasks, stopped_at) = (tasks.clone(), &stopped_at);
        async move {
            tokio::select! {
                () = shutdown => info!("shutting down: handing resumable leases over, releasing the others"),
                () = tasks.stopping() => {}
            }
            stopped_at.get_or_init(Instant::now);
            tasks.stop();
        }
    };
    let (reporter, health) = tonic_health::server::health_reporter();
    let monitor = HealthMonitor::start(reporter, store.clone()).await;
    tasks.spawn(monitor.run());
    // Reflection in both versions: grpcurl and Postman speak v1, but ghz, Evans, grpc_cli and
    // Python's grpcio-reflection still ask v1alpha only.
    let reflection = || {
        let builder = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(crate::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET);
        if config.echo {
            builder.register_encoded_file_descriptor_set(crate::pb::bench::FILE_DESCRIPTOR_SET)
        } else {
            builder
        }
    };
    let invalid = |error| Error::invalid(format!("reflection: {error}"));
    let reflection_v1 = reflection().build_v1().map_err(invalid)?;
    let reflection_v1alpha = reflection().build_v1alpha().map_err(invalid)?;
    if let Some(listener) = listeners.metrics {
        exporter::start(listener, store.connection().metrics().clone(), &tasks);
    }
    let limit = NameTheLimit {
        limit: config.max_message_bytes,
    };
    let max_bytes = config.max_message_bytes;
    let router = Server::builder()
        .http2_keepalive_interval(Some(config.keepalive_interval))
        .http2_keepalive_timeout(Some(config.keepalive_timeout))
        .max_concurrent_streams(max_streams)
        .layer(tower::util::MapResponseLayer::new(
            move |response: http::Response<tonic::body::Body>| limit.rewrite(response),
        ))
        .layer(tower::util::option_layer(
            config.traces.then_some(traces::TraceCalls),
        ))
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(InterceptedService::new(
            LockServiceServer::new(locks).max_decoding_message_size(max_bytes),
            authenticate.clone(),
        ))
        .add_service(InterceptedService::new(
            ElectionServiceServer::new(elections).max_decoding_message_size(max_bytes),
            authenticate.clone(),
        ))
        .add_service(InterceptedService::new(
            SessionServiceServer::new(sessions).max_decoding_message_size(max_bytes),
            authenticate.clone(),
        ))
        .add_optional_service(config.echo.then(|| {
            InterceptedService::new(
                EchoServiceServer::new(echo::Echo::new(tasks.clone(), store.connection().clone()))
                    .max_decoding_message_size(max_bytes),
                authenticate,
            )
        }));
    let serving = async {
        match tls {
            Some(tls) => {
                tasks.spawn(tls.clone().watch(tasks.clone()));
                let incoming = listener::tls_incoming(listeners.grpc, tls, &tasks);
                router.serve_with_incoming_shutdown(incoming, signal).await
            }
            None => {
                let incoming = listener::plain_incoming(listeners.grpc, &tasks);
                router.serve_with_incoming_shutdown(incoming, signal).await
            }
        }
    };
    // tonic's graceful stop waits for every open call, and some never end by themselves (a
    // health `Watch`, an `Observe`, a hung client): past the drain they are cut, so the
    // process always exits within it.
    let drain_ends = async {
        tasks.stopping().await;
        let since = *stopped_at.get_or_init(Instant::now);
        tokio::time::sleep_until(since + config.drain).await;
    };
    let served = tokio::select! {
        served = serving => served.map_err(Error::Serve),
        () = drain_ends => {
            warn!(drain = ?config.drain, "calls still open at the end of the drain; closing them");
            Ok(())
        }
    };
    tasks.stop();
    let since = *stopped_at.get_or_init(Instant::now);
    let left = config.drain.saturating_sub(since.elapsed());
    let remaining = tasks.finish(left).await;
    if remaining > 0 {
        warn!(
            remaining,
            "tasks still running after the shutdown grace; their leases expire by TTL"
        );
    }
    store.close().await;
    served
}
