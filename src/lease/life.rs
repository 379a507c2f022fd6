//! The life of one lease, as one state machine: waiting -> held -> released, lost, kept for its
//! grace, or handed over.
//!
//! A transport (a `Lease` or `Campaign` stream, a member of a `Session`) only reads what its
//! client and its server did as an [`End`] and tells its client what the [`Life`] answers (a
//! [`Told`]); it decides nothing about the lease itself. How each end comes out is [`fate`]'s,
//! in one place, and above all the grace rule: a lease its holder may still believe in, and that
//! asked for a resume grace, outlives its stream by that grace instead of being released under
//! the holder, who resumes it elsewhere. So a new kind of stream is a new translator, never a
//! new set of exits (etcd's v3lock is a thin transport over `concurrency.Mutex` the same way).

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use super::acquire::{Acquisition, WaitingState, acquire, resume};
use super::group::RenewalGroup;
use super::held::{HeldLease, Holding};
use super::renewal::RenewalClock;
pub use super::scheduler::LostCode;
use super::scheduler::{Lost, OnRenewed, Scheduled, Scheduler};
use super::spec::LeaseSpec;
use super::waiting::WaitRoom;
use crate::error::{Error, Result};
use crate::metrics::{Metrics, Outcome};
use crate::store::Token;

/// Where a lease is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Asked for, not taken yet: in line, or an attempt in flight.
    Waiting,
    /// Asked to resume a lease its holder already believes in, the answer not in yet. A resume
    /// creates nothing: the key is the one the holder's earlier stream vouched for, so however
    /// the resume ends (given up, its stream gone, the server stopping, its answer lost) it
    /// never lets go of that key unless the holder asks to.
    Resuming,
    /// Taken, its holder not told yet: only a resumed lease's holder already believes in it,
    /// from what its earlier stream vouched for.
    Granted { resumed: bool },
    /// Taken, and its holder told so.
    Held,
}

impl Phase {
    /// Whether the holder may believe it holds the lease: what a grace protects.
    fn believed(self) -> bool {
        matches!(
            self,
            Phase::Held | Phase::Resuming | Phase::Granted { resumed: true }
        )
    }
}

/// What ends a lease, as its transport saw it.
#[derive(Clone, Debug)]
pub enum End {
    /// The holder asked to let go (`release`, `resign`, a session's `close`).
    ReleaseAsked,
    /// The holder's stream ended without a release. tonic reports a request stream cut off by a
    /// dead connection (a keepalive timeout, a reset) this way too, so only an explicit release
    /// lets a resumable lease go at once; every client of the project sends one. (Found by the
    /// robustness checker: a frozen client's lock was taken over while its last confirmed
    /// validity still ran; then with real processes, a frozen leader replaced 9.8 s before its
    /// validity ended, issue 38.)
    HalfClosed,
    /// The stream broke (a transport failure, an unreadable message), its client stopped
    /// listening, or a step of the holder's own failed with an unknown outcome (Redis slow):
    /// the holder may still believe in the lease.
    Broken,
    /// The client broke the stream's protocol (a second start, a message without an action).
    Refused,
    /// The server stops.
    Shutdown,
    /// Its renewals found it lost (or revoked); `cause` is a metric's label.
    Lost {
        cause: &'static str,
        reason: String,
        code: LostCode,
    },
    /// Someone else holds it now (an announcement was refused).
    Superseded(String),
}

/// What becomes of a lease: [`fate`]'s decision, which [`Life::end`] carries out.
#[derive(Debug, PartialEq, Eq)]
pub enum Fate {
    /// Released now, and its holder told whether it was still held.
    Release,
    /// Given up while waiting: nothing of the holder's to release (an attempt in flight is let
    /// go in the background).
    GiveUp,
    /// Let go in the background when the lease drops: the stream's end says why, if anyone
    /// still listens.
    LetGo,
    /// Kept for its grace, for its holder to resume elsewhere.
    Keep,
    /// The server stops under a resumable lease: its holder is told to move at once, and the
    /// lease is kept for its grace.
    HandOver,
    /// The server stops under a lease that cannot be resumed: released, its holder told Lost.
    ShutDown,
    /// Lost: never released (its holder believes in it until it reads the news or its
    /// validity runs out; see [`HeldLease::lost`]); its holder told why.
    Lose {
        cause: &'static str,
        reason: String,
        code: LostCode,
    },
    /// Someone else holds it: its holder told, and what is left of ours let go.
    Supersede(String),
}

/// How `end` comes out for a lease in `phase`, `resumable` if it asked for a resume grace. The
/// one place of the grace rule.
pub fn fate(phase: Phase, end: End, resumable: bool) -> Fate {
    match (phase, end) {
        (
            _,
            End::Lost {
                cause,
                reason,
                code,
            },
        ) => Fate::Lose {
            cause,
            reason,
            code,
        },
        (_, End::Superseded(reason)) => Fate::Supersede(reason),
        // A resume creates nothing: the key is what another stream (perhaps on another replica)
        // keeps for its grace, or what the resume renewed unanswered. Letting it go would let
        // the next holder in while the holder still believes in it, and may resume it again:
        // only the holder's release lets it go. (Found in review: a session that ended with a
        // resume in flight released the key, and the next waiter took it at once.)
        (Phase::Resuming, End::ReleaseAsked) => Fate::Release,
        (Phase::Resuming, End::Shutdown) => Fate::HandOver,
        (Phase::Resuming, _) => Fate::Keep,
        (Phase::Waiting, End::ReleaseAsked | End::HalfClosed) => Fate::GiveUp,
        (Phase::Waiting, _) | (_, End::Refused) => Fate::LetGo,
        (_, End::ReleaseAsked) => Fate::Release,
        (_, End::Shutdown) if resumable => Fate::HandOver,
        (_, End::Shutdown) => Fate::ShutDown,
        (phase, End::HalfClosed | End::Broken) if resumable && phase.believed() => Fate::Keep,
        (_, End::HalfClosed) => Fate::Release,
        (_, End::Broken) => Fate::LetGo,
    }
}

/// What the holder must be told of its lease's end.
#[derive(Debug)]
pub enum Told {
    /// Nothing: kept for its grace after its stream ended, or let go after it broke.
    Nothing,
    /// Let go at its request; `false` if it was not held (any more).
    Released { was_held: bool },
    /// Gone, for this reason (someone else holds it now: [`LostCode::Taken`]).
    Lost(String, LostCode),
    /// The server stops: resume elsewhere at once, within `grace`.
    HandedOver { grace: Duration },
    /// The server stops and released the lease (`Ok(was_held)`), or could not, and it expires
    /// by its TTL.
    ShutDown(Result<bool>),
}

/// How long the server vouches for a held lease, said two ways: `valid_for` from the moment the
/// message is built, and `valid_to` after the stream opened, which a client can trust even when
/// the message is held up on its way (a healed partition delivers old messages late; see
/// `Acquired.valid_to_ms`).
#[derive(Clone, Copy, Debug)]
pub struct Vouched {
    pub valid_for: Duration,
    pub valid_to: Duration,
}

impl Vouched {
    /// Vouched for `valid_for` from now, on a stream opened at `opened`.
    pub fn now(valid_for: Duration, opened: Instant) -> Self {
        let valid_to = (Instant::now() + valid_for).saturating_duration_since(opened);
        Vouched {
            valid_for,
            valid_to,
        }
    }
}

/// Who renews a held lease.
enum Renewals {
    /// Not held yet.
    None,
    /// The server's scheduler, as an entry of its own.
    Own(Scheduled),
    /// A session's group, under the member's key.
    Group(Arc<RenewalGroup>, u64),
}

/// One lease through its life: its claim in Redis, where it is, and who renews it.
pub struct Life<H: Holding> {
    lease: HeldLease<H>,
    phase: Phase,
    ttl: Duration,
    grace: Option<Duration>,
    /// Which attachment of the lease this is (a resumed lease's is above 0).
    attachment: u64,
    renewals: Renewals,
}

impl<H: Holding> Life<H> {
    /// The lease `spec` asks for, claimed before the first attempt (dropped, it is let go). A
    /// resumed lease is the one its token already holds: [`Phase::Resuming`], it is let go on
    /// drop only once granted, as [`fate`] keeps a resume that ends before.
    pub fn claim(holding: H, spec: &LeaseSpec) -> Self {
        let (lease, phase) = match &spec.resume {
            Some(secret) => {
                let token = Token::from_client(secret.clone());
                (HeldLease::claim_held(holding, token), Phase::Resuming)
            }
            None => (HeldLease::claim(holding, Token::random()), Phase::Waiting),
        };
        Life {
            lease,
            phase,
            ttl: spec.ttl,
            grace: spec.resume_grace,
            attachment: 0,
            renewals: Renewals::None,
        }
    }

    pub fn lease(&self) -> &HeldLease<H> {
        &self.lease
    }

    pub fn token(&self) -> &Token {
        self.lease.token()
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    fn metrics(&self) -> &Metrics {
        self.lease.holding().lock().locks.connection().metrics()
    }

    /// Takes the lease as `spec` asks (or resumes it by its token), counting each attempt in
    /// the metrics; `on_waiting` hears the waiter's state. A candidate (`waits_again`) waits
    /// again after each longest wait, as long as it lives. A refusal (Redis said someone else
    /// holds it) disarms the lease: nothing of ours to let go. Any other error leaves it armed:
    /// an attempt whose outcome is unknown may have landed, and is let go on drop. A resume is
    /// never armed before it is granted: not ours, or unknown if no answer came, a lease this
    /// stream did not get back is never released by it (one that landed unanswered expires by
    /// its TTL, or is resumed again).
    pub async fn take(
        &mut self,
        spec: &LeaseSpec,
        room: Option<&WaitRoom>,
        waits_again: bool,
        mut on_waiting: impl FnMut(&WaitingState),
    ) -> Result<Acquisition> {
        if self.phase == Phase::Resuming {
            return resume(&self.lease, spec).await;
        }
        loop {
            let metrics = self.metrics().clone();
            let asked = Instant::now();
            let mut counted = None;
            let attempt = acquire(&self.lease, spec, room, |state| {
                counted.get_or_insert_with(|| metrics.waiting());
                on_waiting(state);
            })
            .await;
            metrics.acquisition(spec.name.as_str(), Outcome::of(&attempt), asked.elapsed());
            match attempt {
                Err(Error::WaitExpired { .. }) if waits_again => continue,
                Err(
                    Error::LockHeld { .. } | Error::WaitExpired { .. } | Error::ModeMismatch { .. },
                ) => self.lease.disarm(),
                _ => {}
            }
            return attempt;
        }
    }

    /// Taken: from now on, its holder may be told, and a resumed lease is this stream's to let
    /// go as [`fate`] says. Returns its renewal clock, counted from before the command that took
    /// it was sent.
    pub fn granted(&mut self, acquisition: &Acquisition) -> RenewalClock {
        let resumed = self.phase == Phase::Resuming;
        self.phase = Phase::Granted { resumed };
        self.attachment = acquisition.attachment;
        if resumed {
            self.lease.arm();
            self.metrics().moved("resumed");
        }
        if acquisition.delayed {
            self.lease.keep_lock_delay();
        }
        RenewalClock::resumable(self.ttl, self.grace, acquisition.sent_at)
            .with_ceiling(acquisition.ceiling, acquisition.sent_at)
    }

    /// Its holder was told: renewed by `scheduler` on `clock` from now on, `on_renewed`
    /// hearing each confirmed renewal.
    pub fn hold(&mut self, scheduler: &Scheduler, clock: RenewalClock, on_renewed: OnRenewed) {
        let renewable = self.lease.renewable();
        let scheduled = scheduler.schedule(renewable, self.ttl, clock, on_renewed);
        self.phase = Phase::Held;
        self.renewals = Renewals::Own(scheduled);
    }

    /// Its holder is told: renewed with the rest of `group` as its member `key`, valid until
    /// `clock` says.
    pub fn join(&mut self, group: &Arc<RenewalGroup>, key: u64, clock: &RenewalClock) {
        let lease = self.lease.renewable();
        group.join(key, lease, clock.valid_until(), clock.ceiling());
        self.phase = Phase::Held;
        self.renewals = Renewals::Group(group.clone(), key);
    }

    /// Completes when its own renewals find it lost (never for a group's member: the group
    /// reports those). Cancel-safe.
    pub async fn lost(&mut self) -> Lost {
        std::future::poll_fn(|cx| self.poll_lost(cx)).await
    }

    /// [`Life::lost`] as a poll, for a holder polled by hand: `cx` is woken when it is lost.
    pub fn poll_lost(&mut self, cx: &mut Context<'_>) -> Poll<Lost> {
        match &mut self.renewals {
            Renewals::Own(scheduled) => scheduled.poll_lost(cx).map(|lost| {
                let reason = self.lease.holding().lock().lost_reason(lost.reason);
                Lost { reason, ..lost }
            }),
            Renewals::None | Renewals::Group(..) => Poll::Pending,
        }
    }

    /// Ends the lease as [`fate`] says, telling the holder through `tell` (a handed-over
    /// holder before its lease is kept, so it moves at once). `Err` only if a release the
    /// holder asked for failed: the lease, still armed, is then let go in the background.
    pub async fn end(&mut self, end: End, tell: impl FnOnce(&Told)) -> Result<Told> {
        // Only the holder's own release frees a name at once; any other end starts its
        // lock-delay.
        let clean = matches!(end, End::ReleaseAsked);
        let fate = fate(self.phase, end, self.grace.is_some());
        self.stop_renewing();
        let held = self.phase == Phase::Held;
        let told = match fate {
            Fate::Release => {
                let was_held = self.lease.release(clean).await?;
                info!(was_held, "released");
                Told::Released { was_held }
            }
            Fate::GiveUp => Told::Released { was_held: false },
            Fate::LetGo => Told::Nothing,
            Fate::Keep => {
                info!("stream ended without a release; kept for its grace");
                self.keep().await;
                Told::Nothing
            }
            Fate::HandOver => {
                let told = Told::HandedOver {
                    grace: self.grace.unwrap_or(self.ttl),
                };
                tell(&told);
                self.keep().await;
                info!("kept for its client to resume elsewhere");
                return Ok(told);
            }
            Fate::ShutDown => {
                let released = self.lease.release(false).await;
                info!("released for shutdown");
                self.metrics().lost("shutdown");
                Told::ShutDown(released)
            }
            Fate::Lose {
                cause,
                reason,
                code,
            } => {
                warn!(%reason, ?code, "lease lost");
                self.lease.lost();
                if held {
                    self.metrics().lost(cause);
                }
                Told::Lost(reason, code)
            }
            Fate::Supersede(reason) => {
                warn!(%reason, "lease lost");
                if held {
                    self.metrics().lost("superseded");
                }
                Told::Lost(reason, LostCode::Taken)
            }
        };
        tell(&told);
        Ok(told)
    }

    fn stop_renewing(&mut self) {
        match std::mem::replace(&mut self.renewals, Renewals::None) {
            Renewals::None => {}
            Renewals::Own(mut scheduled) => scheduled.stop(),
            Renewals::Group(group, key) => group.leave(key),
        }
    }

    /// Keeps a resumable lease for its grace instead of releasing it. A grace of the whole TTL
    /// needs no command: renewed at most a TTL ago, the key already ends within the grace, and
    /// its client was never told more (the attachment check is moot: nothing is shortened).
    /// Only a shorter grace shortens the key, so a deploy of a replica costs Redis nothing per
    /// lease with the clients' default grace. A resume not answered yet shortens nothing: the
    /// stream that kept the lease before did, and one that landed counts an attachment this
    /// stream never heard of; the key ends by its TTL at the latest.
    async fn keep(&mut self) {
        if self.phase == Phase::Resuming {
            self.lease.disarm();
            info!("resume not answered; the lease is left to its grace or TTL");
            return;
        }
        let Some(grace) = self.grace else {
            return;
        };
        if grace >= self.ttl {
            self.lease.disarm();
            info!("kept until its TTL runs out, for its client to resume");
        } else {
            self.lease.detach(grace, self.attachment).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lost() -> End {
        End::Lost {
            cause: "expired",
            reason: "gone".into(),
            code: LostCode::Unreachable,
        }
    }

    #[test]
    fn a_resumable_lease_its_holder_believes_in_is_kept_when_its_stream_ends() {
        for phase in [Phase::Held, Phase::Granted { resumed: true }] {
            assert_eq!(fate(phase, End::HalfClosed, true), Fate::Keep);
            assert_eq!(fate(phase, End::Broken, true), Fate::Keep);
            assert_eq!(fate(phase, End::Shutdown, true), Fate::HandOver);
        }
        // Never told it holds (a fresh lease whose holder left at once): let go.
        let told_nothing = Phase::Granted { resumed: false };
        assert_eq!(fate(told_nothing, End::Broken, true), Fate::LetGo);
        // An explicit release, or a client breaking the protocol, lets go whatever the grace.
        assert_eq!(fate(Phase::Held, End::ReleaseAsked, true), Fate::Release);
        assert_eq!(fate(Phase::Held, End::Refused, true), Fate::LetGo);
    }

    #[test]
    fn a_resume_not_answered_yet_is_let_go_only_at_its_holders_request() {
        for resumable in [false, true] {
            let fate = |end| fate(Phase::Resuming, end, resumable);
            for end in [End::HalfClosed, End::Broken, End::Refused] {
                assert_eq!(fate(end), Fate::Keep);
            }
            assert_eq!(fate(End::Shutdown), Fate::HandOver);
            assert_eq!(fate(End::ReleaseAsked), Fate::Release);
        }
    }

    #[test]
    fn a_lease_without_grace_is_released_on_every_way_out_but_a_loss() {
        assert_eq!(fate(Phase::Held, End::HalfClosed, false), Fate::Release);
        assert_eq!(fate(Phase::Held, End::ReleaseAsked, false), Fate::Release);
        assert_eq!(fate(Phase::Held, End::Broken, false), Fate::LetGo);
        assert_eq!(fate(Phase::Held, End::Shutdown, false), Fate::ShutDown);
        for resumable in [false, true] {
            assert!(matches!(
                fate(Phase::Held, lost(), resumable),
                Fate::Lose { .. }
            ));
            assert!(matches!(
                fate(Phase::Held, End::Superseded("x".into()), resumable),
                Fate::Supersede(_)
            ));
        }
    }

    #[test]
    fn a_waiter_gives_up_or_is_let_go() {
        for resumable in [false, true] {
            assert_eq!(
                fate(Phase::Waiting, End::ReleaseAsked, resumable),
                Fate::GiveUp
            );
            assert_eq!(
                fate(Phase::Waiting, End::HalfClosed, resumable),
                Fate::GiveUp
            );
            assert_eq!(fate(Phase::Waiting, End::Broken, resumable), Fate::LetGo);
            assert_eq!(fate(Phase::Waiting, End::Shutdown, resumable), Fate::LetGo);
        }
    }
}
