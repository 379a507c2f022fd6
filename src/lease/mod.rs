//! The lease layer: what it means to hold a lease, independent of gRPC (etcd's `concurrency`).
//!
//! - [`life`]: a lease's whole life as one state machine, free of gRPC: waiting -> held ->
//!   released, lost, kept for its grace or handed over, driven by what its transport saw (an
//!   [`life::End`]) and telling it what the holder must hear. The grace rule lives there alone;
//!   a stream of the server layer, or each lease of a session, is a translator over it.
//! - [`spec`]: what a lease is asked for (name, TTL, wait, holder), checked against the limits.
//! - [`held`]: a lease that is, or may be, held: renewal, and letting go on every way out; what
//!   it holds per key space ([`held::Lock`], [`held::Leadership`]).
//! - [`renewal`]: when to renew, and until when a lease is valid (measured from the send).
//! - [`scheduler`]: the one renewal scheduler of a server: every held lease renewed on time,
//!   in batches, without a task or timer per lease.
//! - [`group`]: a session's leases, renewed together as one entry of the scheduler.
//! - [`acquire`]: taking a lease that may be held, waiting until a deadline.
//! - [`several`]: a lease over several names at once, all or none, without deadlock.
//! - [`waiting`]: the waiting room: wake-ups by pub/sub, and the fair line kept alive.
//! - [`observers`]: every change of an election, in order, to every observer.
//! - [`revoke`]: an operator's revocation, and every server's holders of it told at once.
//! - [`watch`]: a lock's state on every change, read when Redis announces one, to every watcher.
//!
//! It uses the store layer below it and nothing above it.

pub mod acquire;
pub mod group;
pub mod held;
pub mod life;
pub mod observers;
pub mod renewal;
pub mod revoke;
pub mod scheduler;
pub mod several;
pub mod spec;
pub mod waiting;
pub mod watch;
