//! A span for each gRPC call, for `serve --otlp-endpoint`: named as OpenTelemetry's gRPC
//! conventions name a server span (`leasehold.v1.LockService/Acquire`), continuing the W3C trace
//! context (`traceparent`, `tracestate`) the caller sent in its metadata, and ending when the
//! call does: for a stream, when its last message and its status have gone, not when the
//! handler returns. The lease's own spans (`lease`, `acquire`, `session`) and the Redis commands
//! they send are its children.
//!
//! The layer is in the stack only when traces are on: off, a call pays nothing for it.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body as HttpBody, Frame};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tonic::body::Body;
use tower::{Layer, Service};
use tracing::{Instrument, Span, field::Empty};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Wraps each call in a span of its own (see the module's comment).
#[derive(Clone, Copy, Debug, Default)]
pub struct TraceCalls;

impl<S> Layer<S> for TraceCalls {
    type Service = Traced<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Traced(inner)
    }
}

/// [`TraceCalls`]'s service.
#[derive(Clone, Debug)]
pub struct Traced<S>(S);

type Answer<E> = Result<http::Response<Body>, E>;

impl<S, B> Service<http::Request<B>> for Traced<S>
where
    S: Service<http::Request<B>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Answer<S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let span = call_span(&request);
        let answer = span.in_scope(|| self.0.call(request));
        Box::pin(async move {
            let response = answer.instrument(span.clone()).await?;
            // An error answered at once ("trailers only") carries its status in the headers.
            record_status(&span, response.headers());
            Ok(response.map(|body| Body::new(InSpan { body, span })))
        })
    }
}

/// The call's span, its parent the caller's context when it sent one.
fn call_span<B>(request: &http::Request<B>) -> Span {
    // The path is `/package.Service/Method`.
    let path = request.uri().path().trim_start_matches('/');
    let (service, method) = path.split_once('/').unwrap_or((path, ""));
    let span = tracing::trace_span!(
        target: crate::TRACES,
        "grpc",
        otel.name = path,
        otel.kind = "server",
        otel.status_code = Empty,
        rpc.system = "grpc",
        rpc.service = service,
        rpc.method = method,
        rpc.grpc.status_code = Empty,
    );
    let parent = TraceContextPropagator::new().extract(&Metadata(request.headers()));
    // Fails only where no OpenTelemetry layer is installed, and then nobody reads the span.
    let _ = span.set_parent(parent);
    span
}

/// Records the gRPC status on the call's span, marking as errors the codes that say the server
/// failed (as OpenTelemetry's gRPC conventions do), not the answers a client is meant to get.
fn record_status(span: &Span, headers: &http::HeaderMap) {
    let Some(code) = headers
        .get("grpc-status")
        .and_then(|code| code.to_str().ok())
        .and_then(|code| code.parse::<i32>().ok())
    else {
        return;
    };
    span.record("rpc.grpc.status_code", code);
    let server_failed = matches!(
        tonic::Code::from(code),
        tonic::Code::Unknown
            | tonic::Code::DeadlineExceeded
            | tonic::Code::Unimplemented
            | tonic::Code::Internal
            | tonic::Code::Unavailable
            | tonic::Code::DataLoss
    );
    if server_failed {
        span.record("otel.status_code", "ERROR");
    }
}

/// The W3C trace context as the caller sent it, in the call's metadata (HTTP/2 headers).
struct Metadata<'a>(&'a http::HeaderMap);

impl Extractor for Metadata<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// The answer's body, keeping the call's span open (and current while a message is made) until
/// the body ends, and reading the status from the trailers that end it.
struct InSpan {
    body: Body,
    span: Span,
}

impl HttpBody for InSpan {
    type Data = <Body as HttpBody>::Data;
    type Error = <Body as HttpBody>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        let _entered = this.span.enter();
        let frame = Pin::new(&mut this.body).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &frame {
            if let Some(trailers) = frame.trailers_ref() {
                record_status(&this.span, trailers);
            }
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
