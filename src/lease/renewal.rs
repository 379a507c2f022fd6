//! When to renew a held lease, and until when the server can vouch for it.
//!
//! Validity is measured from *before* a command was sent (Redlock's rule): Redis started the
//! TTL at some moment after `sent_at`, so `sent_at + ttl - drift` is a time by which the key has
//! certainly not expired yet, however slow the reply was.
//!
//! A resumable lease (one with a resume grace) is vouched for to its client for at most the
//! grace from each message: its server may shorten the key to the grace the moment it sees the
//! stream break or shuts down, and a client that kept believing the full TTL could outlive the
//! key. Its renewals come every third of the smaller of TTL and grace, so the client hears one
//! well within each grace.
//!
//! Renewals fall due on a grid shared by every lease of the server: a lease renews at the last
//! grid point at or before `window/3` after its last confirmed send (the window being the TTL,
//! or the grace if shorter), the grid's step being `window/30`. Leases of one TTL thus fall due
//! together and are renewed in one batch per node (`store::renewals`), at most one step early.

use std::sync::OnceLock;
use std::time::Duration;

use tokio::time::Instant;

pub use crate::store::quorum::drift;

/// Grid steps per TTL: a renewal is at most `ttl/30` early.
const GRID_STEPS: u32 = 30;
/// The smallest grid step: below it, batching gains nothing.
const MIN_STEP: Duration = Duration::from_millis(5);

/// The last point of the server's renewal grid of step `step` at or before `at`.
fn on_grid(at: Instant, step: Duration) -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    let step = step.max(MIN_STEP).as_nanos();
    let since = at.saturating_duration_since(origin).as_nanos();
    let early = u64::try_from(since % step).unwrap_or(0);
    at - Duration::from_nanos(early)
}

/// The renewal schedule and validity of one held lease.
#[derive(Debug, Clone)]
pub struct RenewalClock {
    ttl: Duration,
    /// What the server may vouch for to the client from any moment: the resume grace (less the
    /// drift allowance) of a resumable lease.
    vouch: Option<Duration>,
    valid_until: Instant,
    next_renewal: Instant,
    /// Its max-hold ceiling, by this server's clock (from before the command that took it was
    /// sent, so never later than Redis's): not renewed, and never vouched for, past it.
    ceiling: Option<Instant>,
}

impl RenewalClock {
    /// A lease whose acquire command left at `sent_at`.
    pub fn new(ttl: Duration, sent_at: Instant) -> Self {
        RenewalClock::resumable(ttl, None, sent_at)
    }

    /// A lease kept for `grace` after its stream breaks (`None`: released at once), whose
    /// acquire command left at `sent_at`.
    pub fn resumable(ttl: Duration, grace: Option<Duration>, sent_at: Instant) -> Self {
        let mut clock = RenewalClock {
            ttl,
            vouch: grace.map(|grace| grace.saturating_sub(drift(grace))),
            valid_until: sent_at,
            next_renewal: sent_at,
            ceiling: None,
        };
        clock.confirmed(sent_at);
        clock
    }

    /// Held to a max-hold ceiling `left` after `sent_at` (the command that took it left then).
    pub fn with_ceiling(mut self, left: Option<Duration>, sent_at: Instant) -> Self {
        self.ceiling = left.map(|left| sent_at + left);
        if let Some(ceiling) = self.ceiling {
            self.next_renewal = self.next_renewal.min(ceiling);
        }
        self
    }

    /// Whether its max-hold ceiling is reached: no more renewals, and its holder is told.
    pub fn at_ceiling(&self, now: Instant) -> bool {
        self.ceiling.is_some_and(|ceiling| now >= ceiling)
    }

    /// Its max-hold ceiling, if it has one.
    pub fn ceiling(&self) -> Option<Instant> {
        self.ceiling
    }

    /// Due by `at` at the latest (a group's member reaching its ceiling then).
    pub fn due_by(&mut self, at: Instant) {
        self.next_renewal = self.next_renewal.min(at);
    }

    /// The renewal period's base: the TTL, or the grace if shorter.
    fn window(&self) -> Duration {
        match self.vouch {
            Some(vouch) => self.ttl.min(vouch),
            None => self.ttl,
        }
    }

    /// A renewal sent at `sent_at` succeeded.
    pub fn confirmed(&mut self, sent_at: Instant) {
        self.valid_until = sent_at + self.ttl - drift(self.ttl);
        // Every window/3: two renewals may fail before the lease (or the client's belief in it)
        // is in danger.
        let window = self.window();
        self.next_renewal = on_grid(sent_at + window / 3, window / GRID_STEPS).max(sent_at);
        self.due_by_ceiling();
    }

    /// Due at the ceiling at the latest, so its holder hears of it then.
    fn due_by_ceiling(&mut self) {
        if let Some(ceiling) = self.ceiling {
            self.next_renewal = self.next_renewal.min(ceiling);
        }
    }

    /// A renewal failed without an answer (Redis unreachable or slow): try again soon, but never
    /// later than the end of validity, when the lease must be declared lost.
    pub fn failed(&mut self, now: Instant) {
        // A tenth of the window: a short grace's client must hear a renewal within it.
        let retry =
            (self.window() / 10).clamp(Duration::from_millis(10), Duration::from_millis(500));
        self.next_renewal = (now + retry).min(self.valid_until);
        self.due_by_ceiling();
    }

    /// Due at once: Redis reconnected and may have lost the key.
    pub fn due_now(&mut self, now: Instant) {
        self.next_renewal = now.min(self.valid_until);
    }

    pub fn next_renewal(&self) -> Instant {
        self.next_renewal
    }

    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// How long from `now` the server can vouch for the lease without another renewal: until
    /// its validity ends, and never more than the TTL less its drift (for a resumable lease,
    /// its grace less its drift). The cap matters when this host's clock jumped back between
    /// the send and `now` (a VM restored, a clock stepped): the validity would then look longer
    /// than the key in Redis can live, and the client would believe past it.
    pub fn valid_for(&self, now: Instant) -> Duration {
        let valid_for = self.valid_until.saturating_duration_since(now);
        let most = self.vouch.unwrap_or(self.ttl - drift(self.ttl));
        let before_ceiling = self.ceiling.map_or(Duration::MAX, |ceiling| {
            ceiling.saturating_duration_since(now)
        });
        valid_for.min(most).min(before_ceiling)
    }

    pub fn expired(&self, now: Instant) -> bool {
        now >= self.valid_until
    }
}

/// Why a renewal is due now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewalDue {
    /// The clock's schedule.
    Scheduled,
    /// Redis came back after a dropped connection: it may have lost the key, so check now
    /// rather than at the next scheduled renewal.
    Reconnected,
}

impl RenewalDue {
    /// A lost lease's reason, saying how the loss was found.
    pub fn explain(self, reason: String) -> String {
        match self {
            RenewalDue::Scheduled => reason,
            RenewalDue::Reconnected => format!("{reason} (found after Redis reconnected)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_counts_from_the_send_not_the_reply() {
        let ttl = Duration::from_millis(3000);
        let sent_at = Instant::now();
        let clock = RenewalClock::new(ttl, sent_at);
        assert_eq!(
            clock.valid_until(),
            sent_at + Duration::from_millis(3000 - 32)
        );
        // On the grid (step ttl/30 = 100 ms), at most one step early.
        let due = sent_at + Duration::from_millis(1000);
        assert!(clock.next_renewal() <= due);
        assert!(clock.next_renewal() > due - Duration::from_millis(100));
    }

    #[test]
    fn a_resumable_lease_is_vouched_for_at_most_its_grace_and_renewed_within_it() {
        let ttl = Duration::from_millis(9000);
        let grace = Duration::from_millis(1500);
        let sent_at = Instant::now();
        let clock = RenewalClock::resumable(ttl, Some(grace), sent_at);
        // Vouched for the grace less its drift allowance (1500/100 + 2 ms), not the TTL...
        assert_eq!(clock.valid_for(sent_at), Duration::from_millis(1483));
        // ...while the server's own validity still counts the TTL.
        assert_eq!(clock.valid_until(), sent_at + ttl - drift(ttl));
        // Renewed within a third of the grace, so the client hears one well within it.
        assert!(clock.next_renewal() <= sent_at + Duration::from_millis(1483) / 3);
        // A grace of the whole TTL changes nothing but the drift it allows.
        let full = RenewalClock::resumable(ttl, Some(ttl), sent_at);
        assert_eq!(full.valid_for(sent_at), ttl - drift(ttl));
    }

    #[test]
    fn a_clock_that_jumped_back_never_vouches_for_more_than_the_ttl() {
        let ttl = Duration::from_millis(3000);
        let now = Instant::now();
        // Sent "in the future": this host's clock stepped back 5 s after the send.
        let clock = RenewalClock::new(ttl, now + Duration::from_secs(5));
        assert_eq!(clock.valid_for(now), ttl - drift(ttl));
        let resumable = RenewalClock::resumable(ttl, Some(ttl / 2), now + Duration::from_secs(5));
        assert_eq!(resumable.valid_for(now), ttl / 2 - drift(ttl / 2));
    }

    #[test]
    fn leases_of_one_ttl_fall_due_together() {
        let ttl = Duration::from_secs(30);
        let start = Instant::now();
        let due: Vec<Instant> = (0..50)
            .map(|i| RenewalClock::new(ttl, start + Duration::from_millis(i * 7)).next_renewal())
            .collect();
        // 350 ms of acquisitions fall on at most two points of a 1 s grid.
        let mut points = due.clone();
        points.dedup();
        assert!(points.len() <= 2, "{} points", points.len());
    }

    #[test]
    fn failed_renewals_retry_soon_but_not_past_validity() {
        let ttl = Duration::from_millis(300);
        let sent_at = Instant::now();
        let mut clock = RenewalClock::new(ttl, sent_at);
        clock.failed(sent_at + Duration::from_millis(100));
        assert_eq!(clock.next_renewal(), sent_at + Duration::from_millis(130));
        clock.failed(sent_at + Duration::from_millis(290));
        assert_eq!(clock.next_renewal(), clock.valid_until());
        assert!(clock.expired(clock.valid_until()));
    }
}
