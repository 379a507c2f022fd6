//! Where the process's log lines and spans go: the log on stderr (text or JSON, `RUST_LOG`
//! sets the levels) and, with `serve --otlp-endpoint`, the server's spans to an OpenTelemetry
//! (OTLP/gRPC) receiver.
//!
//! What is sent: each gRPC call (continuing the caller's W3C trace context), a lease's life
//! under the call that holds it (`lease`, `acquire`, `session`, `release`, …), and each Redis
//! command under the call or lease that sent it; log events at INFO and above inside them become
//! span events. The spans only traces need are at TRACE level under their own target
//! (`leasehold::TRACES`), let through to OpenTelemetry alone, so the log is what it was. Without
//! the flag nothing here is set up and those spans are never created.
//!
//! The exporter is the SDK's batch processor (its own thread, `OTEL_BSP_*` settings); the
//! sampler follows the caller's sampled flag and samples every root (`OTEL_TRACES_SAMPLER` to
//! change it); `service.name` is `leasehold` unless `OTEL_SERVICE_NAME` says otherwise.

use std::io::IsTerminal;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracerProvider, Tracer};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;

use super::LogFormat;

/// Installs the process's subscriber: the log, and the OTLP exporter when `otlp` names a
/// receiver (returned, to be [`Traces::finish`]ed at exit).
///
/// Without traces the subscriber is the log alone, as it always was (its filter global, its
/// layer not boxed): nothing of OpenTelemetry, and no per-layer filtering (whose bookkeeping
/// every span and event would pay), is in it.
pub fn init(format: LogFormat, otlp: Option<&str>) -> Result<Option<Traces>, String> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "leasehold=info".into());
    let Some(endpoint) = otlp else {
        let logs = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr);
        match format {
            LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
            LogFormat::Json => logs.json().with_current_span(true).init(),
        }
        return Ok(None);
    };
    let (traces, tracer) = Traces::start(endpoint)?;
    let otel = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(Traces::filter());
    tracing_subscriber::registry()
        .with(log_lines(format).with_filter(filter))
        .with(otel)
        .init();
    Ok(Some(traces))
}

/// The log on stderr, as text or JSON (as in [`init`]'s subscriber without traces).
fn log_lines<S>(format: LogFormat) -> Box<dyn Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match format {
        // Colour only for a person at a terminal: no escape codes in files and log collectors.
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).boxed(),
        // One JSON object per line, with the lease's span (lock name, lease id) in it.
        LogFormat::Json => logs.json().with_current_span(true).boxed(),
    }
}

/// The pipeline, kept to be flushed when the process ends.
pub struct Traces(SdkTracerProvider);

impl Traces {
    /// Starts the exporter towards `endpoint` (`http://host:4317`; `https://` for TLS). It
    /// connects on first export, so a receiver that is down delays nothing here: its spans are
    /// dropped (and said so in the log) while it is away.
    pub fn start(endpoint: &str) -> Result<(Self, Tracer), String> {
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(format!(
                "--otlp-endpoint {endpoint:?} must be an http:// or https:// URL (an OTLP/gRPC receiver, as http://localhost:4317)"
            ));
        }
        let exporter = SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .build()
            .map_err(|error| format!("--otlp-endpoint {endpoint}: {error}"))?;
        let mut resource = Resource::builder().with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ));
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("leasehold");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        let tracer = provider.tracer("leasehold");
        Ok((Traces(provider), tracer))
    }

    /// What reaches OpenTelemetry: the server's own spans and events at INFO and above, and the
    /// spans only traces need.
    pub fn filter() -> Targets {
        Targets::new()
            .with_target("leasehold", tracing::Level::INFO)
            .with_target(leasehold::TRACES, tracing::Level::TRACE)
    }

    /// Sends what is still buffered and stops the exporter (on its own thread: the SDK's
    /// shutdown blocks until the last batch is sent or its timeout passes).
    pub async fn finish(self) {
        let provider = self.0;
        let finished = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(error)) = finished {
            eprintln!("leasehold: the last spans may not have reached the OTLP receiver: {error}");
        }
    }
}
