//! The Rust client of Leasehold: hold a lock as a guard value that knows when the lock is gone,
//! run for leader, and guard a resource with fencing tokens.
//!
//! - [`Client`] ([`client`]): the connection, and the unary calls.
//! - [`replicas`]: one address or several (a list, a DNS name), and moving to another on failure.
//! - [`lease`]: [`LeaseBuilder`] and [`LeaseGuard`] (`lost()`, `fencing_token()`, `release()`);
//!   a held lease resumes on another server on its own when its stream breaks.
//! - [`election`]: `campaign`, `leader`; [`observation`]: `observe`.
//! - [`watch`]: `watch`, a lock's state on every change as a `Stream`; [`check`]: `check`,
//!   whether a fencing token is the current holding of a name.
//! - [`session`]: many leases and leaderships on one stream.
//!
//! A lease and a leadership run on one held-stream core (`stream.rs`: renewals, this process's
//! clock, resuming on the next replica), and every held thing, a session's leases too, keeps
//! its belief the same way (`held.rs`), as Node's client does in `held.ts`.
//! - `fence` (with the `fence` feature, which brings the fred Redis client): the protected
//!   resource's side, a value that refuses stale fencing tokens.
//!
//! ```no_run
//! # async fn do_work(_fencing_token: u64) {}
//! # async fn example() -> Result<(), leasehold_client::ClientError> {
//! use std::time::Duration;
//! use leasehold_client::Client;
//!
//! let client = Client::connect("http://127.0.0.1:50051").await?;
//! let guard = client
//!     .lease("nightly-report")
//!     .ttl(Duration::from_secs(10))
//!     .wait(Duration::from_secs(30))
//!     .holder("report@host-a")
//!     .acquire()
//!     .await?;
//! tokio::select! {
//!     reason = guard.lost() => eprintln!("lock lost, stopping: {reason}"),
//!     () = do_work(guard.fencing_token()) => {}
//! }
//! guard.release().await?; // Dropping the guard releases too.
//! # Ok(())
//! # }
//! ```

/// The README's examples, compiled as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

pub mod check;
pub mod client;
pub mod election;
mod error;
#[cfg(feature = "fence")]
pub mod fence;
mod held;
pub mod lease;
pub mod observation;
pub mod pb;
pub mod refusal;
pub mod replicas;
pub mod session;
mod stream;
pub mod watch;

pub use check::{TokenCheck, TokenState};
pub use client::{BearerToken, Client, ConnectOptions, Transport};
pub use election::{Candidate, Leader};
pub use error::ClientError;
pub use held::{Loss, LostReason};
pub use lease::{LeaseBuilder, LeaseGuard, Outage};
pub use observation::Observation;
pub use refusal::Refusal;
pub use replicas::Replicas;
pub use session::{Session, SessionBuilder, SessionLeader, SessionLease};
pub use watch::Watch;
