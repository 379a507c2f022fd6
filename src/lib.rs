//! Leasehold: a distributed lock held for the life of one gRPC stream.
//!
//! The server takes a lock in Redis (`SET NX PX` plus a fencing token, atomically), renews it
//! while the client's stream lives, and lets it go the moment the stream ends.
//!
//! The folders are the layers of the data path; each imports only the ones below it:
//! - [`server`]: the thin gRPC layer: serve, admission, one driver for every held-lease stream,
//!   the lock and election services.
//! - [`lease`]: the semantic layer: a held lease, renewal, acquiring and waiting, observers.
//! - [`store`]: Redis: the connection, one module per key space with its own Lua scripts.
//!
//! Beside them, for every layer: [`error`] (one error type, one mapping to gRPC statuses),
//! [`tasks`] (every background task and the shutdown signal), [`metrics`] (Prometheus, per
//! server), [`TRACES`] (the target of the spans only traces need), [`tls`] (TLS configurations from PEM files) and [`pb`] (the contract).
//! The `leasehold` binary's commands live in `src/cli/`, outside the library; they use the Rust
//! client, its own crate in `clients/rust` (`leasehold-client`).

pub mod error;
pub mod lease;
pub mod metrics;
pub mod mode;
pub mod pb;
pub mod server;
pub mod store;
pub mod tasks;
pub mod tls;

/// The tracing target of the spans only traces need (each gRPC call's, each Redis command's):
/// they are at TRACE level, below the log's, so without `serve --otlp-endpoint` (which lets
/// them through to OpenTelemetry only) they are never even created.
pub const TRACES: &str = "leasehold::otel";
