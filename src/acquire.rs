//! Taking a lock that may be held: try, and if asked to wait, retry with backoff until a deadline.
//!
//! Retries back off exponentially with jitter (so waiters do not retry in lockstep) and never sleep
//! past the holder's remaining TTL, when the lock frees by itself if the holder died.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::store::{AcquireOutcome, LockKeys, Store};
use crate::token::Token;
use crate::validate::LeaseSpec;

/// First retry delay.
const FIRST_BACKOFF: Duration = Duration::from_millis(10);
/// Longest delay between two tries, whatever the holder's TTL.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// A lock just taken.
#[derive(Debug)]
pub struct Acquisition {
    pub fencing_token: u64,
    /// Taken before the successful command was sent: validity counts from here.
    pub sent_at: Instant,
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

/// Tries to take the lock until `spec.wait` has passed. `on_waiting` hears about each holder seen
/// while waiting (the first time, and whenever it changes).
pub async fn acquire(
    store: &Store,
    keys: &LockKeys,
    token: &Token,
    spec: &LeaseSpec,
    mut on_waiting: impl FnMut(&str, Option<Duration>),
) -> Result<Acquisition> {
    let started = Instant::now();
    let deadline = started + spec.wait;
    let mut backoff = Backoff::default();
    let mut last_holder: Option<String> = None;
    loop {
        let sent_at = Instant::now();
        match store
            .try_acquire(keys, token, spec.ttl, &spec.holder)
            .await?
        {
            AcquireOutcome::Acquired { fencing_token } => {
                return Ok(Acquisition {
                    fencing_token,
                    sent_at,
                });
            }
            AcquireOutcome::Held {
                holder,
                ttl_remaining,
            } => {
                let now = Instant::now();
                if spec.wait.is_zero() {
                    return Err(Error::LockHeld {
                        name: spec.name.to_string(),
                        holder,
                    });
                }
                if now >= deadline {
                    return Err(Error::WaitExpired {
                        name: spec.name.to_string(),
                        holder,
                        waited: now - started,
                    });
                }
                if last_holder.as_deref() != Some(holder.as_str()) {
                    on_waiting(&holder, ttl_remaining);
                    last_holder = Some(holder);
                }
                let delay = backoff.delay(ttl_remaining, deadline - now);
                tokio::time::sleep(delay).await;
            }
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
