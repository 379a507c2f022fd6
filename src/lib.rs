//! Leasehold: a distributed lock held for the life of one gRPC stream.
//!
//! The server takes a lock in Redis (`SET NX PX` plus a fencing token, atomically), renews it
//! while the client's stream lives, and releases it the moment the stream ends.
//!
//! Modules, one job each:
//! - [`service`]: the gRPC layer (decode, validate, answer).
//! - [`lease`]: one task per lease stream, Waiting -> Held -> Released | Lost.
//! - [`acquire`]: waiting for a taken lock until a deadline.
//! - [`waiting`]: wake-ups by pub/sub and the fair line of waiters.
//! - [`renew`]: when to renew, and how long a lease is valid.
//! - [`store`]: Redis keys and Lua scripts.
//! - [`subscriptions`]: the sharded pub/sub channels a server listens to.
//! - [`server`]: running and shutting down the server.
//! - [`admission`]: how many leases one client connection may hold open.
//! - [`fence`]: the protected resource's side: a Redis value that refuses stale fencing tokens.
//! - [`bench`]: the `bench` command: what a lease costs against direct Redis.
//! - [`commands`]: the `run`, `status` and `release` commands of the binary.
//! - [`client`]: a Rust client whose guard knows when the lock is lost.
//! - [`election`]: leader election on the same leases (`ElectionService`).

pub mod acquire;
pub mod admission;
pub mod bench;
pub mod client;
pub mod codec;
pub mod commands;
pub mod election;
pub mod error;
pub mod fence;
pub mod lease;
pub mod renew;
pub mod server;
pub mod service;
pub mod store;
pub mod subscriptions;
pub mod token;
pub mod validate;
pub mod waiting;

/// Code generated from `proto/leasehold/v1/lock.proto` and `election.proto`.
pub mod pb {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("leasehold.v1");
}
