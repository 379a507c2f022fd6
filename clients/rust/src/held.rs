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
    /// It reached the max hold it was asked with ([`crate::LeaseBuilder::max_hold`]): the
    /// server stopped renewing it (its key may hold until its TTL runs out), or this process's
    /// clock reached the ceiling first. Final: never resumed.
    MaxHold,
}

impl LostReason {
    /// The protocol's `LostReason` code, read.
    pub fn from_code(code: i32) -> Self {
        match crate::pb::LostReason::try_from(code) {
            Ok(crate::pb::LostReason::Taken) => LostReason::Taken,
            Ok(crate::pb::LostReason::Unreachable) => LostReason::Unreachable,
            Ok(crate::pb::LostReason::Shutdown) => LostReason::Shutdown,
            Ok(crate::pb::LostReason::Revoked) => LostReason::Revoked,
            Ok(crate::pb::LostReason::MaxHold) => LostReason::MaxHold,
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
    /// The max hold's end by this process's clock: no vouch moves the validity past it.
    ceiling: Option<Instant>,
    valid: watch::Sender<Instant>,
    state: watch::Sender<LeaseState>,
}

impl Keeper {
    /// A belief held until `valid_until`, never past `ceiling` (a max hold), and its holder's
    /// side.
    pub(crate) fn new(valid_until: Instant, ceiling: Option<Instant>) -> (Keeper, Belief) {
        let valid_until = capped(valid_until, ceiling);
        let (state, state_rx) = watch::channel(LeaseState::Held);
        let (valid, valid_rx) = watch::channel(valid_until);
        let keeper = Keeper {
            valid_until,
            ceiling,
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

    /// The server now vouches for it until `valid_until` (never past the ceiling), as the
    /// holder reads it too.
    pub(crate) fn vouch(&mut self, valid_until: Instant) {
        let valid_until = capped(valid_until, self.ceiling);
        self.valid_until = valid_until;
        self.valid.send_replace(valid_until);
    }

    /// Why the belief ends when its validity runs out unconfirmed: the max hold, when that is
    /// what it reached (the server's own `lost` with MAX_HOLD is then on its way, or lost);
    /// else `silent`, nothing vouches for it any more.
    pub(crate) fn ran_out(&self, silent: String) -> Loss {
        match self.ceiling {
            Some(ceiling) if self.valid_until >= ceiling => Loss {
                code: LostReason::MaxHold,
                reason: "the max hold was reached".to_owned(),
            },
            _ => Loss::from(silent),
        }
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

/// `valid_until`, or the ceiling if that comes first.
fn capped(valid_until: Instant, ceiling: Option<Instant>) -> Instant {
    ceiling.map_or(valid_until, |ceiling| valid_until.min(ceiling))
}

/// A max hold asked for, and the TTL of the lease it bounds: enough to place its end on this
/// process's clock once the lease is held (see [`MaxHold::ceiling`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MaxHold {
    pub(crate) ttl: Duration,
    pub(crate) max_hold: Duration,
}

impl MaxHold {
    /// Both read from a request's milliseconds; `None` without a max hold.
    pub(crate) fn of(ttl_ms: u32, max_hold_ms: u32) -> Option<Self> {
        (max_hold_ms > 0).then(|| MaxHold {
            ttl: Duration::from_millis(ttl_ms.into()),
            max_hold: Duration::from_millis(max_hold_ms.into()),
        })
    }

    /// The max hold's end by this process's clock, for a lease whose acquire was sent at
    /// `sent`, on a stream opened at `opened`, and held with `valid_to_ms`: the max hold
    /// counted from the earliest instant the server can have taken it. That is when the
    /// acquire was sent, or later for one that waited in line: the server vouches for at most
    /// the TTL from the moment it took the lease, `valid_to_ms` after its stream reached it
    /// (which is after `opened`), so it took it no sooner than `opened + valid_to_ms - ttl`.
    /// Never past the server's own ceiling, which counts from that moment too.
    pub(crate) fn ceiling(&self, sent: Instant, opened: Instant, valid_to_ms: u64) -> Instant {
        let vouched = Duration::from_millis(valid_to_ms);
        let taken = sent.max(opened + vouched.saturating_sub(self.ttl));
        taken + self.max_hold
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_hold_is_read_from_the_protocol() {
        let code = crate::pb::LostReason::MaxHold as i32;
        assert_eq!(LostReason::from_code(code), LostReason::MaxHold);
        assert_eq!(LostReason::from_code(99), LostReason::Unspecified);
    }

    #[test]
    fn no_vouch_reaches_past_the_max_hold() {
        let opened = Instant::now();
        let max_hold = MaxHold::of(3_000, 1_000).expect("a max hold");
        assert_eq!(MaxHold::of(3_000, 0), None);
        // Taken at once (vouched for its TTL from the stream's opening): counted from the send.
        let ceiling = max_hold.ceiling(opened, opened, 3_000);
        assert_eq!(ceiling, opened + Duration::from_secs(1));
        // Taken after waiting 5 s in line: counted from then at the earliest.
        let waited = max_hold.ceiling(opened, opened, 8_000);
        assert_eq!(waited, opened + Duration::from_secs(6));
        // Asked for 2 s after its (session's) stream opened, vouched for less than a TTL since:
        // counted from the ask.
        let asked = opened + Duration::from_secs(2);
        let session = max_hold.ceiling(asked, opened, 4_000);
        assert_eq!(session, asked + Duration::from_secs(1));

        let (mut keeper, belief) = Keeper::new(opened + Duration::from_secs(3), Some(ceiling));
        assert_eq!(belief.valid_until(), ceiling);
        keeper.vouch(opened + Duration::from_millis(500));
        assert_eq!(belief.valid_until(), opened + Duration::from_millis(500));
        assert_eq!(
            keeper.ran_out("silent".into()).code,
            LostReason::Unreachable
        );
        keeper.vouch(opened + Duration::from_secs(10));
        assert_eq!(belief.valid_until(), ceiling);
        let loss = keeper.ran_out("silent".into());
        assert_eq!(loss.code, LostReason::MaxHold, "{loss:?}");

        let (keeper, belief) = Keeper::new(opened + Duration::from_secs(3), None);
        assert_eq!(belief.valid_until(), opened + Duration::from_secs(3));
        assert_eq!(
            keeper.ran_out("silent".into()).code,
            LostReason::Unreachable
        );
    }
}
