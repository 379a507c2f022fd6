//! The contract, as a client sees it: client stubs and messages generated from
//! `proto/leasehold/v1/*.proto` by this crate's build.rs, the codec they use, and the one
//! conversion between durations and the proto's millisecond fields.
//!
//! These are this crate's own types (the server crate generates its own from the same files):
//! what the client's calls return ([`AcquireResponse`], [`ListResponse`], ...) and what a
//! program needs to speak the protocol itself.

pub mod codec;

#[allow(clippy::all, missing_docs)]
mod generated {
    tonic::include_proto!("leasehold.v1");
}
pub use generated::*;

/// The no-op echo service (`proto/leasehold/bench/v1`) of a server started with `--echo`: the
/// transport's own cost, which `leasehold bench` measures a lease against.
pub mod bench {
    #[allow(clippy::all, missing_docs)]
    mod generated {
        tonic::include_proto!("leasehold.bench.v1");
    }
    pub use generated::*;
}

/// The domain of every `google.rpc.ErrorInfo` the server sends: part of the contract, beside
/// the reasons listed in docs/errors.md.
pub const ERROR_DOMAIN: &str = "leasehold";

use std::time::Duration;

/// A duration as the proto's `uint32` milliseconds, saturating (the request limits keep real
/// values far below `u32::MAX`).
pub fn millis(duration: Duration) -> u32 {
    u32::try_from(duration.as_millis()).unwrap_or(u32::MAX)
}
