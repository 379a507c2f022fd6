//! The key space's vocabulary: waiters, and what its calls answer (modes are [`crate::mode`]'s).

use std::time::Duration;

pub use crate::mode::Mode;

/// How one acquire attempt relates to the line of waiters.
#[derive(Clone, Debug)]
pub struct Waiter<'a> {
    /// Identifies the waiter in the line; random, unrelated to the token.
    pub id: &'a str,
    /// Respect the line (`true`) or race for the lock.
    pub fair: bool,
    /// Join the line if the lock is taken (only for callers who will wait): every waiter gets
    /// a deadline, which tells a release that someone waits; a fair one also gets a place.
    pub join_line: bool,
    /// How long the line keeps this waiter without another attempt or refresh.
    pub ttl: Duration,
    /// When the waiter arrived, in microseconds since the Unix epoch by this server's clock.
    /// Used as its place in line on Redlock's primaries, so that every primary orders the same
    /// waiters the same way; one Redis orders them by its own clock.
    pub arrival_us: u64,
    /// What it asks for: a plain lock, a permit, a shared hold.
    pub mode: Mode,
    /// The limits on its holding (lock-delay, max-hold), written with it when it is taken.
    pub limits: HoldLimits,
    /// Its first attempt: a plain lock then tries the common case alone first (`take.lua`: a
    /// script with few arguments). Later attempts follow a wait, so the common case is unlikely.
    pub first_attempt: bool,
}

/// Limits on one holding, kept in Redis with it (a resumed lease keeps them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HoldLimits {
    /// Lock-delay: how long the name stays taken after the holding is lost (not released).
    /// Plain locks only.
    pub lock_delay: Option<Duration>,
    /// Max-hold: the ceiling on the holding, from its acquisition.
    pub max_hold: Option<Duration>,
}

impl HoldLimits {
    pub fn is_none(&self) -> bool {
        self.lock_delay.is_none() && self.max_hold.is_none()
    }
}

/// What an acquire attempt found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireOutcome {
    /// The lock is ours, with this fencing token.
    Acquired { fencing_token: u64 },
    /// Someone else holds it, or earlier waiters are in line.
    Held {
        holder: String,
        /// Zero when the lock is free but others are ahead in line; `None` when the key has no
        /// expiry (set by hand, not by us).
        ttl_remaining: Option<Duration>,
        /// Place in line, 1 being next; 0 when not in line.
        position: u32,
    },
    /// The name is held in another mode (another limit, or shared against a semaphore).
    Mismatch { held: Mode },
    /// Redlock: no holder has a majority, but neither did this attempt (the primaries split
    /// between contenders, or answered too late to leave enough validity). What it took was given
    /// back; retry after a random delay, so that contenders do not split again.
    NoMajority,
}

/// A lock's state as `Describe` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockState {
    Free,
    Held {
        mode: Mode,
        /// Every holder, oldest fencing token first; one for a plain lock.
        holders: Vec<HolderState>,
    },
}

/// A lock's state and its waiters, as one read of `describe.lua` sees them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Described {
    pub state: LockState,
    /// Waiters whose deadline has not passed (in the fair line or not), on any server.
    pub waiting: u32,
    /// When the first of them leaves unless its server vouches for it again.
    pub first_waiter_leaves: Option<Duration>,
}

/// One holder of a lock, a permit or a shared hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderState {
    pub holder: String,
    /// `None` when the key has no expiry (set by hand, not by us).
    pub ttl_remaining: Option<Duration>,
    pub fencing_token: u64,
}

/// A lease reattached by its token (see [`Locks::resume`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resumed {
    pub fencing_token: u64,
    /// Counts the lease's attachments: the server holding the newest one is the only one that
    /// may shorten it to its grace when its stream breaks.
    pub attachment: u64,
    /// What is left before its max-hold ceiling (from before the resume was sent), if it has
    /// one.
    pub ceiling: Option<Duration>,
    /// Whether it has a lock-delay key to keep with it.
    pub delayed: bool,
}

/// What a fencing token is to its name now (`Check`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenState {
    /// A live holding of the name has it.
    Current,
    /// The name is held under other fencing tokens: the oldest holder's.
    Superseded {
        current: u64,
    },
    Free,
}
