//! One renewal scheduler per server: a held lease is an entry in a queue of deadlines, not a
//! task with a timer of its own.
//!
//! Leases fall due on the shared grid of [`super::renewal`], so the queue holds a few instants
//! per TTL, each with the leases due then. One task sleeps until the earliest, sends every lease
//! due then to the store (which batches them per node, `store::renewals`), and settles each
//! answer on its own: a confirmed renewal moves the lease's clock and tells its client through
//! the stream's sender directly, without waking the lease's task; only a loss wakes it.
//!
//! Each lease keeps its own rules: its validity counts from before its own command was sent,
//! its wait for an answer ends at its own validity, and a `0` from Redis loses that lease alone.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{Notify, oneshot, watch};
use tokio::time::{Instant, sleep_until, timeout_at};
use tracing::debug;

use super::renewal::{RenewalClock, RenewalDue};
use crate::metrics::Metrics;
use crate::store::{LockKeys, Locks, Store, Token};
use crate::tasks::Tasks;

/// What the scheduler renews: one lease (its lock and token, shared with the lease's holder, so
/// a scheduled lease costs a pointer rather than a copy of its keys), or a session's leases
/// together ([`super::group::RenewalGroup`]).
pub trait Renewable: Send + Sync + 'static {
    /// Renews for `ttl`: `Ok(true)` renewed, `Ok(false)` no longer ours (never retried into
    /// success: someone else may hold it now), `Err` unknown.
    fn renew(self: Arc<Self>, ttl: Duration) -> BoxFuture<'static, crate::error::Result<bool>>;
    /// A renewal found it no longer ours: an expiry this server saw, so wake the line if the lock
    /// is free.
    fn not_held(&self);
    /// One lease's key space, keys and token, so a group can renew its members in one request
    /// (`None`: a group, or anything else renewed on its own).
    fn claim(&self) -> Option<(&Locks, &LockKeys, &Token)> {
        None
    }
    /// Every lock key this lease holds, with its key space and token: its claim's, or each
    /// name's of a lease over several (for the revocation record read on the loss path).
    fn lock_claims(&self) -> Vec<(&Locks, &LockKeys, &Token)> {
        self.claim().into_iter().collect()
    }
    /// An operator revoked holdings of the lock whose key is `lock`: whether this holds one
    /// (a group also remembers which member, so the loss its next round finds is told as
    /// [`LostCode::Revoked`]).
    fn revoked(&self, lock: &str) -> bool {
        self.claim().is_some_and(|(_, keys, _)| keys.lock() == lock)
    }
    /// The earliest max-hold ceiling among a group's members still renewed (`None`: none, or
    /// not a group; a lease's own ceiling is its clock's): the group's next round comes by
    /// then, so that member is let go and told on time.
    fn next_ceiling(&self) -> Option<Instant> {
        None
    }
}

/// Why a lease was lost, for programs (the protocol's `LostReason`): decided here and in the
/// lease's life, only translated above.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostCode {
    /// The key was deleted, expired, or holds another holder's token.
    Taken,
    /// No renewal could be confirmed before the lease ran out.
    Unreachable,
    /// The server stops and the lease had no resume grace.
    Shutdown,
    /// An operator revoked it.
    Revoked,
    /// It reached its max-hold: the server stopped renewing it (its key expires by its TTL).
    MaxHold,
}

/// Why a lease whose renewal answered `0` is lost.
pub const NOT_HELD: &str =
    "the lock key was deleted or taken by another holder behind the server's back";

/// Told to a lease's holder when its renewals tell it the lease is gone.
#[derive(Debug)]
pub struct Lost {
    /// A short fixed label (`expired`, `not_held`) for metrics.
    pub cause: &'static str,
    /// The sentence the holder is told.
    pub reason: String,
    /// Why, for programs.
    pub code: LostCode,
    /// Why the renewal that found it was due.
    pub due: RenewalDue,
}

/// Why a lease that reached its max-hold is lost.
pub const MAX_HOLD: &str = "the lease reached its max hold (max_hold_ms from its acquisition): \
     the server stopped renewing it; its key expires by its TTL";

/// Why a lease whose key an operator revoked is lost.
pub const REVOKED: &str =
    "an operator revoked the lease (LockService.Revoke or ElectionService.Revoke); its key is gone";

/// Called with the lease's validity from now after each confirmed renewal. It runs on the
/// scheduler's task, so it must not block (a stream's sender uses `try_send`).
pub type OnRenewed = Box<dyn Fn(Duration) + Send>;

/// The server's renewal scheduler. Cheap to clone.
#[derive(Clone)]
pub struct Scheduler(Arc<Shared>);

struct Shared {
    state: Mutex<State>,
    /// Rings when a lease falls due before the instant the task sleeps towards.
    earlier: Notify,
    metrics: Metrics,
}

struct State {
    leases: HashMap<u64, Entry>,
    /// Instant -> leases due then. An id may be stale (released, or rescheduled): each is
    /// checked against its entry when its instant comes.
    due: BTreeMap<Instant, Vec<u64>>,
    next_id: u64,
}

struct Entry {
    lease: Arc<dyn Renewable>,
    ttl: Duration,
    clock: RenewalClock,
    /// Why the next renewal is due.
    reason: RenewalDue,
    in_flight: bool,
    on_renewed: OnRenewed,
    lost: Option<oneshot::Sender<Lost>>,
    /// When a revocation of its lock was heard: a renewal sent after this that answers `0`
    /// was revoked; one sent before is checked again at once.
    revoked_at: Option<Instant>,
}

/// A lease in the scheduler: renewed until this is dropped or the lease is lost.
pub struct Scheduled {
    id: u64,
    scheduler: Arc<Shared>,
    lost: oneshot::Receiver<Lost>,
}

impl Scheduled {
    /// Completes when the lease is lost. Cancel-safe.
    pub async fn lost(&mut self) -> Lost {
        std::future::poll_fn(|cx| self.poll_lost(cx)).await
    }

    /// [`Scheduled::lost`] as a poll, for a holder polled by hand (a stream's hold keeps no
    /// future of its own while idle): `cx` is woken when the lease is lost.
    pub fn poll_lost(&mut self, cx: &mut Context<'_>) -> Poll<Lost> {
        match Pin::new(&mut self.lost).poll(cx) {
            Poll::Ready(Ok(lost)) => Poll::Ready(lost),
            // The scheduler stopped: the server is shutting down, which its leases hear.
            Poll::Ready(Err(_)) | Poll::Pending => Poll::Pending,
        }
    }
}

impl Scheduled {
    /// Stops renewing: nothing more is told after this (so no `extended` follows a stream's
    /// last message). Dropping the handle does the same.
    pub fn stop(&mut self) {
        self.scheduler.state().leases.remove(&self.id);
    }
}

impl Drop for Scheduled {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One renewal's answer: `Err` if validity ended first.
type Answer = std::result::Result<crate::error::Result<bool>, tokio::time::error::Elapsed>;

/// How long a lease found not held waits, at most, to learn whether it was revoked.
const REVOKED_READ: Duration = Duration::from_millis(200);

/// Whether `lease`, which a renewal just found no longer held, was revoked: read from the
/// store's record of revoked tokens, for a renewal that answered before its server heard the
/// revocation's message (pub/sub and commands travel on different connections). One read, on
/// the loss path only, bounded by [`REVOKED_READ`]: an unknown answer is not a revocation.
pub(super) async fn revoked_lately(lease: &Arc<dyn Renewable>) -> bool {
    let reads = lease.lock_claims().into_iter().map(|(locks, keys, token)| {
        let (locks, keys, token) = (locks.clone(), keys.clone(), token.clone());
        async move {
            let read = tokio::time::timeout(REVOKED_READ, locks.was_revoked(&keys, &token));
            matches!(read.await, Ok(Ok(true)))
        }
    });
    futures_util::future::join_all(reads)
        .await
        .into_iter()
        .any(|revoked| revoked)
}

impl Scheduler {
    /// Starts the scheduler's task; it ends with the server. Leases are checked at once after
    /// every reconnection of the store's home connection (Redis may have lost the keys).
    pub fn start(store: &Store) -> Self {
        let connection = store.connection();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                leases: HashMap::new(),
                due: BTreeMap::new(),
                next_id: 0,
            }),
            earlier: Notify::new(),
            metrics: connection.metrics().clone(),
        });
        let mut reconnects = connection.reconnects();
        reconnects.borrow_and_update();
        let tasks = connection.tasks().clone();
        connection
            .tasks()
            .spawn(shared.clone().run(tasks.clone(), reconnects));
        Scheduler(shared)
    }

    /// Renews `lease` from now on, on `clock`, until the returned handle is dropped.
    pub fn schedule(
        &self,
        lease: Arc<dyn Renewable>,
        ttl: Duration,
        clock: RenewalClock,
        on_renewed: OnRenewed,
    ) -> Scheduled {
        let (tell_lost, lost) = oneshot::channel();
        let due = clock.next_renewal();
        let mut state = self.0.state();
        let id = state.next_id;
        state.next_id += 1;
        state.leases.insert(
            id,
            Entry {
                lease,
                ttl,
                clock,
                reason: RenewalDue::Scheduled,
                in_flight: false,
                on_renewed,
                lost: Some(tell_lost),
                revoked_at: None,
            },
        );
        if state.enqueue(id, due) {
            self.0.earlier.notify_one();
        }
        Scheduled {
            id,
            scheduler: self.0.clone(),
            lost,
        }
    }

    /// Holdings of the lock whose key is `lock` were revoked (the message every server hears,
    /// or a revoke of its own): each local lease of it is renewed at once, so a revoked one
    /// learns it within a round trip and is told [`LostCode::Revoked`]. Nothing is ended on
    /// the message's word alone: a permit of the same name that was not revoked renews and goes
    /// on. A walk over the held leases, paid per revocation (rare), never per lease.
    pub fn revoked(&self, lock: &str) {
        let now = Instant::now();
        let mut state = self.0.state();
        let State { leases, due, .. } = &mut *state;
        let mut found = false;
        for (&id, entry) in leases.iter_mut() {
            if !entry.lease.revoked(lock) {
                continue;
            }
            entry.revoked_at = Some(now);
            if !entry.in_flight {
                entry.clock.due_now(now);
                due.entry(now).or_default().push(id);
                found = true;
            }
        }
        drop(state);
        if found {
            self.0.earlier.notify_one();
        }
    }
}

impl State {
    /// Puts `id` in the queue at `at`; `true` if that is now the earliest instant.
    fn enqueue(&mut self, id: u64, at: Instant) -> bool {
        let earliest = self
            .due
            .first_key_value()
            .is_none_or(|(&first, _)| at < first);
        self.due.entry(at).or_default().push(id);
        earliest
    }

    /// Takes every lease due at `now` out of the queue.
    fn take_due(&mut self, now: Instant) -> Vec<u64> {
        let mut due = Vec::new();
        while let Some(entry) = self.due.first_entry() {
            if *entry.key() > now {
                break;
            }
            due.append(&mut entry.remove());
        }
        due
    }

    /// Removes a lost lease and tells its holder why.
    fn lose(&mut self, id: u64, cause: &'static str, reason: String, code: LostCode) {
        let Some(mut entry) = self.leases.remove(&id) else {
            return;
        };
        if let Some(tell) = entry.lost.take() {
            let due = entry.reason;
            let _ = tell.send(Lost {
                cause,
                reason,
                code,
                due,
            });
        }
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; carry on with it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    async fn run(self: Arc<Self>, tasks: Tasks, mut reconnects: watch::Receiver<u64>) {
        let mut in_flight = FuturesUnordered::new();
        loop {
            let next = self.state().due.first_key_value().map(|(&at, _)| at);
            // Without anything due, an hour stands for "until something is scheduled".
            let wake_at = next.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                () = tasks.stopping() => return,
                Some((id, sent_at, answer, revoked)) = in_flight.next(), if !in_flight.is_empty() => {
                    self.settle(id, sent_at, answer, revoked);
                    continue;
                }
                () = sleep_until(wake_at) => {}
                () = self.earlier.notified() => {}
                Ok(()) = reconnects.changed() => self.all_due_now(),
            }
            let now = Instant::now();
            let mut state = self.state();
            for id in state.take_due(now) {
                let Some(entry) = state.leases.get_mut(&id) else {
                    continue; // Released since.
                };
                if entry.in_flight || entry.clock.next_renewal() > now {
                    continue; // A stale place in the queue.
                }
                if entry.clock.at_ceiling(now) {
                    state.lose(id, "max_hold", MAX_HOLD.into(), LostCode::MaxHold);
                    continue;
                }
                if entry.clock.expired(now) {
                    self.metrics.renewal(false);
                    state.lose(
                        id,
                        "expired",
                        "Redis could not be reached to renew the lock before it ran out".into(),
                        LostCode::Unreachable,
                    );
                    continue;
                }
                entry.in_flight = true;
                let (lease, ttl) = (entry.lease.clone(), entry.ttl);
                let valid_until = entry.clock.valid_until();
                in_flight.push(async move {
                    let answer = timeout_at(valid_until, lease.clone().renew(ttl)).await;
                    let revoked = matches!(answer, Ok(Ok(false))) && revoked_lately(&lease).await;
                    (id, now, answer, revoked)
                });
            }
        }
    }

    /// Applies one renewal's answer to its lease, if it is still held.
    /// `revoked`: the store's record says the lease was revoked (read only when not held).
    fn settle(&self, id: u64, sent_at: Instant, answer: Answer, revoked: bool) {
        let mut state = self.state();
        let Some(entry) = state.leases.get_mut(&id) else {
            return;
        };
        entry.in_flight = false;
        let now = Instant::now();
        let confirmed = matches!(answer, Ok(Ok(true)));
        self.metrics.renewal(confirmed);
        match answer {
            Ok(Ok(true)) => {
                entry.clock.confirmed(sent_at);
                entry.reason = RenewalDue::Scheduled;
                (entry.on_renewed)(entry.clock.valid_for(now));
                // Sent before a revocation was heard: checked again at once.
                let due = match entry.revoked_at.take() {
                    Some(heard) if sent_at < heard => {
                        entry.revoked_at = Some(heard);
                        entry.clock.due_now(now);
                        now
                    }
                    _ => {
                        if let Some(ceiling) = entry.lease.next_ceiling() {
                            entry.clock.due_by(ceiling.max(now));
                        }
                        entry.clock.next_renewal()
                    }
                };
                state.enqueue(id, due);
            }
            // Never retried into success: someone else may hold the lock now.
            Ok(Ok(false)) => {
                entry.lease.not_held();
                if entry.revoked_at.is_some() || revoked {
                    state.lose(id, "revoked", REVOKED.into(), LostCode::Revoked);
                } else {
                    state.lose(id, "not_held", NOT_HELD.into(), LostCode::Taken);
                }
            }
            Ok(Err(error)) => {
                debug!(%error, "renewal failed; retrying");
                entry.clock.failed(now);
                let due = entry.clock.next_renewal();
                state.enqueue(id, due);
            }
            Err(_) => {
                let ttl = entry.ttl.as_millis();
                state.lose(
                    id,
                    "expired",
                    format!("Redis did not confirm a renewal before the lease ran out ({ttl} ms)"),
                    LostCode::Unreachable,
                );
            }
        }
    }

    /// After a reconnection: every lease not being renewed right now is due now.
    fn all_due_now(&self) {
        let now = Instant::now();
        let mut state = self.state();
        let State { leases, due, .. } = &mut *state;
        let ids = due.entry(now).or_default();
        for (&id, entry) in leases.iter_mut() {
            if !entry.in_flight {
                entry.clock.due_now(now);
                entry.reason = RenewalDue::Reconnected;
                ids.push(id);
            }
        }
    }
}
