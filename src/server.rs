//! Runs the gRPC server until a shutdown signal, then lets every lease release before exiting.

use std::future::Future;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tracing::{info, warn};

use crate::admission::{ConnectionLimits, DEFAULT_MAX_LEASES_PER_CONNECTION};
use crate::election::ElectionServer;
use crate::error::{Error, Result};
use crate::pb::election_service_server::ElectionServiceServer;
use crate::pb::lock_service_server::LockServiceServer;
use crate::service::LockServer;
use crate::store::Store;
use crate::waiting::{WaitConfig, WaitRoom};

/// Largest request message: a lock request is a few hundred bytes, an election's value at most
/// 64 KiB; anything bigger is refused early.
pub const MAX_REQUEST_BYTES: usize = crate::validate::MAX_ELECTION_VALUE_BYTES + 1024;
/// HTTP/2 streams per connection beyond the lease limit, for unary calls and refusals.
const STREAM_HEADROOM: u32 = 256;
/// How long shutdown waits for leases to release before giving up (they then expire by TTL).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

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
    /// Wake waiters by pub/sub (`true`), or let them poll with backoff.
    pub wakeups: bool,
    /// The fair line and the waiter limit.
    pub wait: WaitConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            keepalive_interval: Duration::from_secs(5),
            keepalive_timeout: Duration::from_secs(5),
            max_leases_per_connection: DEFAULT_MAX_LEASES_PER_CONNECTION,
            wakeups: true,
            wait: WaitConfig::default(),
        }
    }
}

/// Serves on `listener` until `shutdown` completes. On shutdown every lease releases its lock
/// and tells its client `Lost`, then the server waits (bounded) for those releases.
pub async fn serve(
    listener: TcpListener,
    store: Store,
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<()> {
    let room = if config.wakeups {
        Some(WaitRoom::start(&store, config.wait.clone()).await?)
    } else {
        None
    };
    let leases = TaskTracker::new();
    let stop_leases = CancellationToken::new();
    let limits = ConnectionLimits::new(config.max_leases_per_connection);
    let elections = ElectionServer::start(
        store.clone(),
        room.clone(),
        leases.clone(),
        stop_leases.clone(),
        limits.clone(),
    )
    .await?;
    let service = LockServer::new(store, room, leases.clone(), stop_leases.clone(), limits);
    // HTTP/2 must let the streams through for our own limit to answer them with a status
    // (hyper would otherwise cap a connection at 200 and make clients queue silently). The
    // headroom carries unary calls and the refusals themselves.
    let max_streams = u32::try_from(config.max_leases_per_connection)
        .unwrap_or(u32::MAX)
        .saturating_add(STREAM_HEADROOM);
    let signal = {
        let stop_leases = stop_leases.clone();
        async move {
            shutdown.await;
            info!("shutting down: releasing every lease");
            stop_leases.cancel();
        }
    };
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    Server::builder()
        .http2_keepalive_interval(Some(config.keepalive_interval))
        .http2_keepalive_timeout(Some(config.keepalive_timeout))
        .max_concurrent_streams(max_streams)
        .add_service(LockServiceServer::new(service).max_decoding_message_size(MAX_REQUEST_BYTES))
        .add_service(
            ElectionServiceServer::new(elections).max_decoding_message_size(MAX_REQUEST_BYTES),
        )
        .serve_with_incoming_shutdown(incoming, signal)
        .await
        .map_err(Error::Serve)?;
    stop_leases.cancel();
    leases.close();
    if tokio::time::timeout(SHUTDOWN_GRACE, leases.wait())
        .await
        .is_err()
    {
        warn!(
            remaining = leases.len(),
            "leases still running after the shutdown grace; their locks expire by TTL"
        );
    }
    Ok(())
}
