//! Where client connections come from: plain TCP, or TLS (optionally mutual) whose certificates
//! are re-read on SIGHUP or when their files change, without touching open connections.
//!
//! Both close the listening socket the moment shutdown begins: tonic keeps its incoming stream
//! until every connection has closed, and a socket still listening would let a client connect
//! into a backlog nobody accepts from, and wait there, instead of being refused at once and
//! moving to another replica with its leases.
//!
//! tonic's own TLS reads its certificates once; rotating them would mean a restart, and a restart
//! drops every held lease. So the TLS handshake happens here, with the configuration current at
//! that moment, and tonic receives finished `TlsStream`s (which still carry the peer's
//! certificates to the request, for authorisation).

use std::io;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tracing::{debug, info, warn};

use crate::error::Result;
use crate::tasks::Tasks;
use crate::tls::TlsFiles;

/// Longest TLS handshake: a client that connects and says nothing holds a socket no longer.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often certificate files are checked for changes (SIGHUP reloads at once).
const WATCH_INTERVAL: Duration = Duration::from_secs(2);
/// Finished handshakes not yet taken by the server.
const HANDSHAKES_QUEUED: usize = 128;

/// The listener's TLS configuration, swapped whole on reload.
pub struct ReloadableTls {
    files: TlsFiles,
    current: RwLock<Arc<ServerConfig>>,
}

impl ReloadableTls {
    /// Reads the files once; fails (and the server refuses to start) if they are unusable.
    pub fn load(files: TlsFiles) -> Result<Arc<Self>> {
        let current = RwLock::new(files.server_config()?);
        Ok(Arc::new(ReloadableTls { files, current }))
    }

    /// Re-reads the files. A broken new set is refused and the old one stays in use.
    pub fn reload(&self) -> Result<()> {
        let config = self.files.server_config()?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = config;
        Ok(())
    }

    fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }

    /// When any of the files last changed, to notice a rotation.
    fn changed_at(&self) -> Vec<Option<SystemTime>> {
        self.files
            .paths()
            .map(|path| std::fs::metadata(path).and_then(|m| m.modified()).ok())
            .collect()
    }

    /// Reloads on SIGHUP and when a file changes, until the server stops.
    pub async fn watch(self: Arc<Self>, tasks: Tasks) {
        let mut hangups = hangups();
        let mut seen = self.changed_at();
        let mut ticks = tokio::time::interval(WATCH_INTERVAL);
        loop {
            let why = tokio::select! {
                () = tasks.stopping() => return,
                _ = recv(&mut hangups) => "SIGHUP",
                _ = ticks.tick() => {
                    let now = self.changed_at();
                    if now == seen {
                        continue;
                    }
                    seen = now;
                    "a certificate file changed"
                }
            };
            match self.reload() {
                Ok(()) => info!(why, "TLS certificates reloaded; new connections use them"),
                Err(error) => {
                    warn!(why, %error, "TLS reload refused; the previous certificates stay in use")
                }
            }
        }
    }
}

#[cfg(unix)]
fn hangups() -> Option<tokio::signal::unix::Signal> {
    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok()
}

#[cfg(not(unix))]
fn hangups() -> Option<()> {
    None
}

#[cfg(unix)]
async fn recv(hangups: &mut Option<tokio::signal::unix::Signal>) {
    match hangups {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending().await,
    }
}

#[cfg(not(unix))]
async fn recv(_: &mut Option<()>) {
    std::future::pending().await
}

/// Plain TCP connections, accepted until shutdown begins.
pub fn plain_incoming(
    listener: TcpListener,
    tasks: &Tasks,
) -> ReceiverStream<io::Result<TcpStream>> {
    let (accepted, incoming) = mpsc::channel(HANDSHAKES_QUEUED);
    accept_until_stopped(listener, tasks, move |socket| {
        let accepted = accepted.clone();
        async move { accepted.send(Ok(socket)).await.is_ok() }
    });
    ReceiverStream::new(incoming)
}

/// Accepts connections (no delay) and gives each to `handle` until shutdown begins (or `handle`
/// says stop); then the listener is dropped, which closes its socket. Accept failures (out of
/// file descriptors and the like) pause rather than spin.
fn accept_until_stopped<F, Fut>(listener: TcpListener, tasks: &Tasks, mut handle: F)
where
    F: FnMut(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = bool> + Send,
{
    let accepting = tasks.clone();
    tasks.spawn(async move {
        loop {
            let accepted = tokio::select! {
                biased;
                () = accepting.stopping() => return,
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok((socket, _)) => {
                    let _ = socket.set_nodelay(true);
                    if !handle(socket).await {
                        return;
                    }
                }
                Err(error) => {
                    warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    });
}

/// Accepts TCP connections and hands tonic TLS streams, each handshake in a task of its own so
/// one slow client never holds up the next. Ends when the server stops.
pub fn tls_incoming(
    listener: TcpListener,
    tls: Arc<ReloadableTls>,
    tasks: &Tasks,
) -> ReceiverStream<io::Result<TlsStream<TcpStream>>> {
    let (handshaken, incoming) = mpsc::channel(HANDSHAKES_QUEUED);
    let handshakes = tasks.clone();
    accept_until_stopped(listener, tasks, move |socket| {
        let peer = socket.peer_addr().ok();
        let (acceptor, handshaken) = (tls.acceptor(), handshaken.clone());
        handshakes.spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(socket)).await {
                Ok(Ok(stream)) => {
                    let _ = handshaken.send(Ok(stream)).await;
                }
                Ok(Err(error)) => debug!(?peer, %error, "TLS handshake failed"),
                Err(_) => debug!(?peer, "TLS handshake timed out"),
            }
        });
        std::future::ready(true)
    });
    ReceiverStream::new(incoming)
}
