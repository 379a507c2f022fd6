//! The Prometheus endpoint: `GET /metrics` on a listener of its own (`--metrics ADDR`), apart
//! from gRPC, so scraping needs no gRPC and the metrics port can stay inside the cluster.

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tracing::warn;

use crate::metrics::Metrics;
use crate::tasks::Tasks;

/// Serves `/metrics` until the server's shutdown; a task of the server.
pub fn start(listener: TcpListener, metrics: Metrics, tasks: &Tasks) {
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let metrics = metrics.clone();
            async move { scrape(&metrics) }
        }),
    );
    let stopping = tasks.clone();
    tasks.spawn(async move {
        let shutdown = async move { stopping.stopping().await };
        if let Err(error) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            warn!(%error, "metrics endpoint failed");
        }
    });
}

fn scrape(metrics: &Metrics) -> Response {
    let response = match metrics.render() {
        Some(text) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            text,
        ),
        None => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain")],
            "metrics are off".to_owned(),
        ),
    };
    response.into_response()
}
