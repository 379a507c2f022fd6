//! Taking a lock that may be held: try, and if asked to wait, wait until a deadline.
//!
//! A waiter sleeps until the lock's wake-up (published by every release), or until the holder's
//! TTL runs out (a crashed holder publishes nothing), whichever comes first. Fair waiters that
//! are not next in line only need the wake-up: they cannot take the lock before those ahead.
//! Without a waiting room (wake-ups disabled) waiters poll with exponential backoff and jitter,
//! never sleeping past the holder's remaining TTL.

use std::time::Duration;

use tokio::time::{Instant, sleep};

use super::held::{HeldLease, Holding, Lock};
use super::spec::LeaseSpec;
use super::waiting::{WaitRoom, WaitTicket};
use crate::error::{Error, Result};
use crate::store::locks::{AcquireOutcome, Mode, Waiter};
use crate::store::{LockKeys, Locks, Token};

/// First retry delay when polling.
const FIRST_BACKOFF: Duration = Duration::from_millis(10);
/// Longest delay between two polls, whatever the holder's TTL.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// How long the line keeps a waiter between two of its own attempts, when no waiting room
/// vouches for it.
const POLLING_WAITER_TTL: Duration = Duration::from_secs(10);

/// A lock just taken.
#[derive(Debug)]
pub struct Acquisition {
    pub fencing_token: u64,
    /// Taken before the successful command was sent: validity counts from here.
    pub sent_at: Instant,
    /// Which attachment of the lease this is: 0 when just taken, more when resumed.
    pub attachment: u64,
    /// The fencing token of each of `more_names`, in the order asked (empty for one name).
    pub more_fences: Vec<u64>,
    /// What is left of its max-hold from `sent_at` (its whole max-hold when just taken).
    pub ceiling: Option<Duration>,
    /// Whether it has a lock-delay key, renewed with it.
    pub delayed: bool,
}

/// What a waiter knows about the lock it waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitingState {
    pub holder: String,
    pub holder_ttl: Option<Duration>,
    /// 1 is next; 0 when not in line.
    pub position: u32,
}

/// Exponential backoff with jitter, capped by the holder's remaining TTL and the caller's deadline.
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            next: FIRST_BACKOFF,
        }
    }
}

impl Backoff {
    /// The delay before the next try; never zero, so a retry loop cannot spin.
    pub fn delay(&mut self, holder_ttl: Option<Duration>, until_deadline: Duration) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(MAX_BACKOFF);
        // "Equal jitter": between half the base and the base.
        let half = base / 2;
        let jittered = half + half.mul_f64(rand::random::<f64>());
        let mut delay = jittered.min(until_deadline);
        if let Some(ttl) = holder_ttl {
            delay = delay.min(ttl);
        }
        delay.max(Duration::from_millis(1))
    }
}

/// Tries to take `lease` until `spec.wait` has passed. `on_waiting` hears the waiter's state the
/// first time and whenever the holder or the place in line changes. With `room`, wake-ups come by
/// pub/sub; without, the waiter polls. A lease over several names takes them all or none
/// ([`super::several`]).
pub async fn acquire(
    lease: &HeldLease<impl Holding>,
    spec: &LeaseSpec,
    room: Option<&WaitRoom>,
    on_waiting: impl FnMut(&WaitingState),
) -> Result<Acquisition> {
    let lock = lease.holding().lock();
    if lock.more.is_some() {
        return super::several::acquire_all(lock, lease.token(), spec, room, on_waiting).await;
    }
    acquire_one(
        &lock.locks,
        &lock.keys,
        lease.token(),
        spec,
        room,
        on_waiting,
    )
    .await
}

/// Tries to take the one lock of `keys` for `token`, as [`acquire`] says.
pub(super) async fn acquire_one(
    store: &Locks,
    keys: &LockKeys,
    token: &Token,
    spec: &LeaseSpec,
    room: Option<&WaitRoom>,
    mut on_waiting: impl FnMut(&WaitingState),
) -> Result<Acquisition> {
    let started = Instant::now();
    let deadline = started + spec.wait;
    let will_wait = !spec.wait.is_zero();
    let waiter_id = spec.mode.waiter_id();
    let arrival_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        });
    // Out of line again on every way out but success (where the acquire script did it).
    let mut place = will_wait.then(|| LinePlace {
        store: store.clone(),
        keys: keys.clone(),
        waiter_id: waiter_id.clone(),
    });
    let mut ticket: Option<WaitTicket> = match room {
        Some(room) if will_wait => Some(room.join(keys, &waiter_id, spec.fair).await?),
        _ => None,
    };
    let waiter_ttl = room.map_or(POLLING_WAITER_TTL, WaitRoom::waiter_ttl);
    let mut backoff = Backoff::default();
    let mut last_state: Option<WaitingState> = None;
    let mut first_attempt = true;
    loop {
        let sent_at = Instant::now();
        let waiter = Waiter {
            id: &waiter_id,
            fair: spec.fair,
            join_line: will_wait && sent_at < deadline,
            ttl: waiter_ttl,
            arrival_us,
            mode: spec.mode,
            limits: spec.limits,
            first_attempt: std::mem::take(&mut first_attempt),
        };
        let outcome = match store
            .try_acquire(keys, token, spec.ttl, &spec.holder, &waiter)
            .await
        {
            Ok(outcome) => outcome,
            // A waiter rides out a Redis that is briefly unavailable (a failover, a slot being
            // migrated: TRYAGAIN, a command timed out) until its deadline, as it rides out a
            // holder: a wait is a promise to keep trying. Trying again is safe even when the
            // failed try did take the lock: the script finds the key already holds this
            // lease's token and answers Acquired. Past the deadline the caller hears this
            // error, not WaitExpired: Redis, not a holder, kept it out.
            Err(error) if will_wait && error.is_redis_unavailable() => {
                let now = Instant::now();
                if now >= deadline {
                    return Err(error);
                }
                tracing::debug!(%error, "redis unavailable while waiting; trying again");
                sleep(backoff.delay(None, deadline - now)).await;
                continue;
            }
            Err(error) => return Err(error),
        };
        let (holder, holder_ttl, position) = match outcome {
            AcquireOutcome::Acquired { fencing_token } => {
                // An answer back after half the TTL (a Redis that froze with the command in it)
                // leaves too little validity to renew in time: the holder would be told Lost as
                // soon as it is told Acquired. While the wait lasts, take it again: this token
                // finds its own lock and gets a fresh TTL, counted from the new try.
                let now = Instant::now();
                if will_wait && now < deadline && now - sent_at >= spec.ttl / 2 {
                    tracing::debug!(late = ?(now - sent_at), "acquired, but heard late; again");
                    continue;
                }
                if let Some(place) = place.take() {
                    place.disarm();
                }
                return Ok(Acquisition {
                    fencing_token,
                    sent_at,
                    attachment: 0,
                    more_fences: Vec::new(),
                    ceiling: spec.limits.max_hold,
                    delayed: spec.limits.lock_delay.is_some(),
                });
            }
            AcquireOutcome::Held {
                holder,
                ttl_remaining,
                position,
            } => (holder, ttl_remaining, position),
            AcquireOutcome::Mismatch { held } => {
                return Err(Error::ModeMismatch {
                    name: spec.name.to_string(),
                    held,
                    asked: spec.mode,
                });
            }
            AcquireOutcome::NoMajority => {
                let now = Instant::now();
                if !will_wait || now >= deadline {
                    return Err(Error::NoMajority {
                        name: spec.name.to_string(),
                    });
                }
                // Redlock: a random pause, so contenders that split the primaries do not
                // split them again.
                sleep(backoff.delay(None, deadline - now)).await;
                continue;
            }
        };
        let now = Instant::now();
        if !will_wait {
            return Err(Error::LockHeld {
                name: spec.name.to_string(),
                holder,
                retry_after: holder_ttl.filter(|ttl| !ttl.is_zero()),
            });
        }
        if now >= deadline {
            return Err(Error::WaitExpired {
                name: spec.name.to_string(),
                holder,
                waited: now - started,
                retry_after: holder_ttl.filter(|ttl| !ttl.is_zero()),
            });
        }
        let state = WaitingState {
            holder,
            holder_ttl,
            position,
        };
        if last_state
            .as_ref()
            .is_none_or(|last| last.holder != state.holder || last.position != state.position)
        {
            on_waiting(&state);
        }
        // Only the head of the line (or a racer) can take a plain lock when the holder's TTL runs
        // out; any permit or reader may. A zero TTL means the lock is free but others are ahead:
        // no timer helps then.
        let may_take_next = !spec.fair || position <= 1 || spec.mode != Mode::LOCK;
        let holder_ttl = holder_ttl.filter(|ttl| !ttl.is_zero());
        let until_deadline = deadline - now;
        let timer = match (&ticket, may_take_next, holder_ttl) {
            (None, _, ttl) => backoff.delay(ttl, until_deadline),
            (Some(_), true, Some(ttl)) => ttl.min(until_deadline),
            (Some(_), _, _) => until_deadline,
        };
        last_state = Some(state);
        match ticket.as_mut() {
            None => sleep(timer).await,
            Some(ticket) => {
                tokio::select! {
                    () = ticket.woken() => {}
                    () = sleep(timer) => {}
                }
            }
        }
    }
}

/// Reattaches to the lease `spec.resume` names (the lease's token is `lease`'s): renewed for
/// `spec.ttl` again, with its fencing token and place. [`Error::NotResumable`] when the token
/// holds no lease of this name (of any of its names, for a lease over several).
pub async fn resume(lease: &HeldLease<impl Holding>, spec: &LeaseSpec) -> Result<Acquisition> {
    let lock = lease.holding().lock();
    if lock.more.is_some() {
        return super::several::resume_all(lock, lease.token(), spec).await;
    }
    let Lock {
        locks: store, keys, ..
    } = lock;
    let sent_at = Instant::now();
    match store.resume(keys, lease.token(), spec.ttl).await? {
        Some(resumed) => Ok(Acquisition {
            fencing_token: resumed.fencing_token,
            sent_at,
            attachment: resumed.attachment,
            more_fences: Vec::new(),
            ceiling: resumed.ceiling,
            delayed: resumed.delayed,
        }),
        None => Err(Error::NotResumable {
            name: spec.name.to_string(),
        }),
    }
}

/// A waiter's place in the Redis line. Dropping it (the waiter gave up, failed, or its stream
/// went away) takes it out of line at once, so those behind need not wait for its timeout.
struct LinePlace {
    store: Locks,
    keys: LockKeys,
    waiter_id: String,
}

impl LinePlace {
    /// The acquire script already took the waiter out of line.
    fn disarm(mut self) {
        self.waiter_id.clear();
    }
}

impl Drop for LinePlace {
    fn drop(&mut self) {
        if !self.waiter_id.is_empty() {
            self.store
                .leave_in_background(self.keys.clone(), std::mem::take(&mut self.waiter_id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_never_zero() {
        let mut backoff = Backoff::default();
        let long = Duration::from_secs(60);
        let first = backoff.delay(None, long);
        assert!(first >= FIRST_BACKOFF / 2 && first <= FIRST_BACKOFF);
        for _ in 0..20 {
            assert!(backoff.delay(None, long) <= MAX_BACKOFF);
        }
        assert!(backoff.delay(None, long) >= MAX_BACKOFF / 2);
        // Capped by the holder's TTL and by the deadline, but never a busy loop.
        assert_eq!(
            backoff.delay(Some(Duration::from_millis(3)), long),
            Duration::from_millis(3)
        );
        assert_eq!(
            backoff.delay(None, Duration::ZERO),
            Duration::from_millis(1)
        );
    }
}
