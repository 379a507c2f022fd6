//! The web console (`serve --console ADDR`): one page of the locks held now and the elections
//! led now, updated live, with a Revoke button; off unless asked for.
//!
//! It is a face of the gRPC services, not a second way in: every call it makes goes through the
//! same `Authenticate` interceptor and the same service code as a gRPC call would ([`api`]), with
//! the bearer token the page sends, so the console can never show or do more than that token
//! could through gRPC. It listens with the gRPC port's TLS (the same certificates, reloaded with
//! them) on a port of its own, so it can be kept off a network the gRPC port is on.
//!
//! The page is plain HTML, CSS and JavaScript compiled into the binary: no build step, nothing
//! fetched from elsewhere (its Content-Security-Policy forbids it), so it works with no network.

mod api;
mod state;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::connect_info::Connected;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected as TonicConnected;
use tracing::warn;

use super::listener::{self, ReloadableTls};
use crate::tasks::Tasks;
pub use api::{POLL, Services};

const PAGE: &str = include_str!("console.html");
const STYLE: &str = include_str!("console.css");
const SCRIPT: &str = include_str!("console.js");

/// What the page may load and where it may connect: only this origin, nothing inline, no
/// frames around it (clickjacking a Revoke button).
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

/// Serves the console on `listener` until the server's shutdown; a task of the server. With
/// `tls`, each connection's handshake uses the gRPC listener's current certificates.
pub fn start(
    listener: TcpListener,
    services: Services,
    tls: Option<Arc<ReloadableTls>>,
    tasks: &Tasks,
) {
    let app = router(services);
    let local = listener.local_addr().ok();
    match tls {
        Some(tls) => {
            let incoming = listener::tls_incoming(listener, tls, tasks);
            run(Incoming { incoming, local }, app, tasks);
        }
        None => {
            let incoming = listener::plain_incoming(listener, tasks);
            run(Incoming { incoming, local }, app, tasks);
        }
    }
}

fn router(services: Services) -> Router {
    let api = Arc::new(services);
    Router::new()
        .route(
            "/",
            get(|| async { page("text/html; charset=utf-8", PAGE) }),
        )
        .route(
            "/console.css",
            get(|| async { page("text/css; charset=utf-8", STYLE) }),
        )
        .route(
            "/console.js",
            get(|| async { page("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .route("/api/state", get(api::state))
        .route("/api/events", get(api::events))
        .route("/api/revoke", post(api::revoke))
        .with_state(api)
}

/// One of the page's files, with the headers that keep it to itself.
fn page(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    secured(headers);
    response
}

/// Headers on every answer: no sniffing, no referrer, nothing cached (answers name locks).
fn secured(headers: &mut axum::http::HeaderMap) {
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

fn run<S>(listener: Incoming<S>, app: Router, tasks: &Tasks)
where
    S: TonicConnected + AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let stopping = tasks.clone();
    let service = app.into_make_service_with_connect_info::<Peer>();
    tasks.spawn(async move {
        let shutdown = async move { stopping.stopping().await };
        if let Err(error) = axum::serve(listener, service)
            .with_graceful_shutdown(shutdown)
            .await
        {
            warn!(%error, "console failed");
        }
    });
}

/// The connections the gRPC listener's code accepts (and, with TLS, handshakes), as axum takes
/// them. Ends with the server: then it waits for ever, and axum's graceful shutdown ends it.
struct Incoming<S> {
    incoming: ReceiverStream<io::Result<S>>,
    local: Option<SocketAddr>,
}

impl<S> Listener for Incoming<S>
where
    S: TonicConnected + AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Io = S;
    type Addr = Peer;

    async fn accept(&mut self) -> (S, Peer) {
        loop {
            match self.incoming.next().await {
                Some(Ok(io)) => {
                    // What tonic puts in each gRPC request's extensions: the peer's address,
                    // and with TLS its certificates, which the interceptor reads (mTLS grants).
                    let mut extensions = http::Extensions::new();
                    extensions.insert(io.connect_info());
                    return (io, Peer(extensions));
                }
                Some(Err(_)) => continue,
                None => std::future::pending().await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<Peer> {
        let mut extensions = http::Extensions::new();
        extensions.insert(self.local);
        Ok(Peer(extensions))
    }
}

/// A connection's peer as tonic describes it (`TcpConnectInfo`, or `TlsConnectInfo` with the
/// client's certificates), carried to each of the console's in-process calls.
#[derive(Clone)]
struct Peer(http::Extensions);

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Peer")
    }
}

impl<S> Connected<IncomingStream<'_, Incoming<S>>> for Peer
where
    S: TonicConnected + AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    fn connect_info(stream: IncomingStream<'_, Incoming<S>>) -> Self {
        stream.remote_addr().clone()
    }
}
