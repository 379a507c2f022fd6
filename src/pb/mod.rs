//! The contract: code generated from `proto/leasehold/v1/*.proto`, the codec it uses, and the
//! one conversion between durations and the proto's millisecond fields.

pub mod codec;

#[allow(clippy::all, missing_docs)]
mod generated {
    tonic::include_proto!("leasehold.v1");
}
pub use generated::*;

/// The no-op echo service (`proto/leasehold/bench/v1`): the transport's own cost, which
/// `leasehold bench` measures a lease against.
pub mod bench {
    #[allow(clippy::all, missing_docs)]
    mod generated {
        tonic::include_proto!("leasehold.bench.v1");
    }
    pub use generated::*;

    /// The echo service, encoded, for gRPC reflection where it is served.
    pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("echo");
}

/// The domain of every `google.rpc.ErrorInfo` the server sends: part of the contract, beside
/// the reasons listed in docs/errors.md.
pub const ERROR_DOMAIN: &str = "leasehold";

/// Every message and service of the contract, encoded, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("leasehold");

use std::time::Duration;

/// A duration as the proto's `uint32` milliseconds, saturating (the request limits keep real
/// values far below `u32::MAX`).
pub fn millis(duration: Duration) -> u32 {
    u32::try_from(duration.as_millis()).unwrap_or(u32::MAX)
}

/// A duration in whole milliseconds, for the `uint64` fields (counted from a stream's start,
/// which may be days ago).
pub fn millis_u64(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
