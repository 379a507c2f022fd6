//! What every held thing shares, a lock's lease, a leadership and a session's lease alike: a
//! belief that it is held, bounded by the validity the server last vouched for, measured on this
//! process's own clock, and ended once (lost, or released).
//!
//! The side that follows the server keeps a [`Keeper`]; the holder's value ([`crate::LeaseGuard`],
//! [`crate::SessionLease`]) reads the matching [`Belief`]. The one held-stream core that a lease
//! and a leadership run on is [`crate::stream`]; a session's leases share a stream of their own
//! ([`crate::session`]) but keep and read their belief the same way.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tonic::{Code, Status};

/// Why a lease, a leadership or a session's lease was lost, for programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// A server that predates the code.
    Unspecified,
    /// Its key was deleted, expired, or holds another holder's token.
    Taken,
    /// No renewal could be confirmed before it ran out (Redis, or the server, unreachable):
    /// also every loss this process finds by itself (its validity ran out, its stream broke
    /// and could not be resumed).
    Unreachable,
    /// The server shut down and it had no resume grace.
    Shutdown,
    /// An operator revoked it (`Client::revoke`, `Client::revoke_leader`): never resumed.
    Revoked,
}

impl LostReason {
    /// The protocol's `LostReason` code, read.
    pub fn from_code(code: i32) -> Self {
        match crate::pb::LostReason::try_from(code) {
            Ok(crate::pb::LostReason::Taken) => LostReason::Taken,
            Ok(crate::pb::LostReason::Unreachable) => LostReason::Unreachable,
            Ok(crate::pb::LostReason::Shutdown) => LostReason::Shutdown,
            Ok(crate::pb::LostReason::Revoked) => LostReason::Revoked,
            _ => LostReason::Unspecified,
        }
    }
}

/// A loss: why, typed, and in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loss {
    pub code: LostReason,
    pub reason: String,
}

impl Loss {
    /// As the server said it.
    pub(crate) fn told(lost: crate::pb::Lost) -> Self {
        Loss {
            code: LostReason::from_code(lost.code),
            reason: lost.reason,
        }
    }
}

/// A loss this process found by itself: nothing vouches for it any more.
impl From<String> for Loss {
    fn from(reason: String) -> Self {
        Loss {
            code: LostReason::Unreachable,
            reason,
        }
    }
}

impl std::fmt::Display for Loss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// How a held thing stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LeaseState {
    Held,
    Lost(Loss),
    Released { was_held: bool },
}

/// The holder's side: whether it is lost, and until when it may be believed.
#[derive(Clone, Debug)]
pub(crate) struct Belief {
    state: watch::Receiver<LeaseState>,
    valid: watch::Receiver<Instant>,
}

/// The side that follows the server: it vouches (moves the validity) and ends the belief.
#[derive(Debug)]
pub(crate) struct Keeper {
    valid_until: Instant,
    valid: watch::Sender<Instant>,
    state: watch::Sender<LeaseState>,
}

impl Keeper {
    /// A belief held until `valid_until`, and its holder's side.
    pub(crate) fn new(valid_until: Instant) -> (Keeper, Belief) {
        let (state, state_rx) = watch::channel(LeaseState::Held);
        let (valid, valid_rx) = watch::channel(valid_until);
        let keeper = Keeper {
            valid_until,
            valid,
            state,
        };
        let belief = Belief {
            state: state_rx,
            valid: valid_rx,
        };
        (keeper, belief)
    }

    /// Until when the server last vouched for it.
    pub(crate) fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// The server now vouches for it until `valid_until`, as the holder reads it too.
    pub(crate) fn vouch(&mut self, valid_until: Instant) {
        self.valid_until = valid_until;
        self.valid.send_replace(valid_until);
    }

    /// The validity as it moves, for a holder that reads it while another task follows the
    /// stream (a leader's `lost` borrows its candidate).
    pub(crate) fn validity(&self) -> watch::Receiver<Instant> {
        self.valid.subscribe()
    }

    /// It ended as `state` says; the holder is told.
    pub(crate) fn end(&self, state: LeaseState) {
        self.state.send_replace(state);
    }
}

impl Belief {
    /// Completes with the reason once it is lost; also when its keeper stopped without a
    /// verdict (nothing vouches for it any more).
    pub(crate) async fn lost(&self) -> String {
        self.loss().await.reason
    }

    /// As [`Belief::lost`], with the reason typed.
    pub(crate) async fn loss(&self) -> Loss {
        let mut state = self.state.clone();
        let loss = match state.wait_for(|s| matches!(s, LeaseState::Lost(_))).await {
            Ok(lost) => match &*lost {
                LeaseState::Lost(loss) => Some(loss.clone()),
                _ => None,
            },
            Err(_) => None,
        };
        loss.unwrap_or_else(|| Loss::from("lease watcher stopped".to_owned()))
    }

    /// Whether it is known to be lost already.
    pub(crate) fn is_lost(&self) -> bool {
        matches!(&*self.state.borrow(), LeaseState::Lost(_))
    }

    /// Until when the server last vouched for it, by this process's clock.
    pub(crate) fn valid_until(&self) -> Instant {
        *self.valid.borrow()
    }

    /// The validity as it moves (a session's release waits no longer than it).
    pub(crate) fn validity(&self) -> watch::Receiver<Instant> {
        self.valid.clone()
    }

    /// Waits for its end; `None` when its keeper stopped without one.
    pub(crate) async fn ended(&self) -> Option<LeaseState> {
        let mut state = self.state.clone();
        state
            .wait_for(|s| !matches!(s, LeaseState::Held))
            .await
            .map(|s| s.clone())
            .ok()
    }
}

/// Until when a message vouches for a lease (or a leadership): `valid_for_ms` from its receipt,
/// and never past `valid_to_ms` after the client opened the stream (the server counts it from
/// when the stream reached it, which is later), which still holds when the message was held up
/// on its way: a healed partition delivers old messages late, and one read as fresh would keep
/// its client believing past the key. (`valid_to_ms` 0: a server that predates it.)
pub(crate) fn vouched_until(opened: Instant, valid_for_ms: u32, valid_to_ms: u64) -> Instant {
    let from_receipt = Instant::now() + Duration::from_millis(valid_for_ms.into());
    if valid_to_ms == 0 {
        return from_receipt;
    }
    from_receipt.min(opened + Duration::from_millis(valid_to_ms))
}

/// Whether a broken stream may be resumed: the transport failed or the server went away, rather
/// than the server saying no.
pub(crate) fn resumable(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable
            | Code::Unknown
            | Code::Internal
            | Code::Cancelled
            | Code::DeadlineExceeded
    )
}
