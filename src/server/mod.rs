//! The gRPC layer: a thin face over the lease layer.
//!
//! - [`serve`] (here): run the server until a shutdown signal, then let every lease go.
//! - [`admission`]: how many leases one client connection may hold open.
//! - [`events`]: the non-blocking sending side of a response stream.
//! - [`driver`]: the one driver of every stream that holds a lease.
//! - [`lock_stream`], [`campaign`]: the two kinds of held-lease stream, declared for the driver.
//! - [`lock`], [`election`]: the `LockService` and `ElectionService`.
//!
//! Errors become gRPC statuses in one place: `From<Error> for Status` in [`crate::error`].

pub mod admission;
pub mod campaign;
pub mod driver;
pub mod election;
pub mod events;
pub mod lock;
pub mod lock_stream;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tracing::{info, warn};

use crate::error::{Error, Result};
use crate::lease::spec::MAX_ELECTION_VALUE_BYTES;
use crate::lease::waiting::{WaitConfig, WaitRoom};
use crate::pb::election_service_server::ElectionServiceServer;
use crate::pb::lock_service_server::LockServiceServer;
use crate::store::Store;
use admission::{ConnectionLimits, DEFAULT_MAX_LEASES_PER_CONNECTION};
use driver::Streams;
use election::ElectionServer;
use lock::LockServer;

/// Largest request message: a lock request is a few hundred bytes, an election's value at most
/// 64 KiB; anything bigger is refused early.
pub const MAX_REQUEST_BYTES: usize = MAX_ELECTION_VALUE_BYTES + 1024;
/// HTTP/2 streams per connection beyond the lease limit, for unary calls and refusals.
const STREAM_HEADROOM: u32 = 256;
/// How long shutdown waits for leases to let go before giving up (they then expire by TTL).
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

/// Serves on `listener` until `shutdown` completes. On shutdown every lease lets go and tells
/// its client `Lost`; the server waits (bounded) for every task it started, then closes its
/// Redis connections, so nothing of it is left running when this returns.
pub async fn serve(
    listener: TcpListener,
    store: Store,
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<()> {
    let tasks = store.connection().tasks().clone();
    let room = if config.wakeups {
        Some(WaitRoom::start(&store.locks, config.wait.clone()).await?)
    } else {
        None
    };
    let streams = Arc::new(Streams {
        store: store.clone(),
        room,
        limits: ConnectionLimits::new(config.max_leases_per_connection),
    });
    let elections = ElectionServer::start(streams.clone()).await?;
    let locks = LockServer::new(streams);
    // HTTP/2 must let the streams through for our own limit to answer them with a status
    // (hyper would otherwise cap a connection at 200 and make clients queue silently). The
    // headroom carries unary calls and the refusals themselves.
    let max_streams = u32::try_from(config.max_leases_per_connection)
        .unwrap_or(u32::MAX)
        .saturating_add(STREAM_HEADROOM);
    let signal = {
        let tasks = tasks.clone();
        async move {
            tokio::select! {
                () = shutdown => info!("shutting down: releasing every lease"),
                () = tasks.stopping() => {}
            }
            tasks.stop();
        }
    };
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let served = Server::builder()
        .http2_keepalive_interval(Some(config.keepalive_interval))
        .http2_keepalive_timeout(Some(config.keepalive_timeout))
        .max_concurrent_streams(max_streams)
        .add_service(LockServiceServer::new(locks).max_decoding_message_size(MAX_REQUEST_BYTES))
        .add_service(
            ElectionServiceServer::new(elections).max_decoding_message_size(MAX_REQUEST_BYTES),
        )
        .serve_with_incoming_shutdown(incoming, signal)
        .await
        .map_err(Error::Serve);
    tasks.stop();
    let remaining = tasks.finish(SHUTDOWN_GRACE).await;
    if remaining > 0 {
        warn!(
            remaining,
            "tasks still running after the shutdown grace; their leases expire by TTL"
        );
    }
    store.connection().close().await;
    served
}
