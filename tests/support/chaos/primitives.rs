//! Every other primitive beside the chaos lock, in the same run and under the same fault: a
//! semaphore (limit 2), a read-write lock (readers shared, writers exclusive, the writers doing
//! fenced increments of a counter of their own) and an election (candidates and an observer).
//! Each primitive has one worker on a Lease (or Campaign) stream and one on a session on each
//! server, and a history of its own, checked by its model in `tests/checker`: so every fault
//! case covers every primitive, on streams and on sessions, without a case per primitive.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_client::fence::{Fenced, FencedKey};
use leasehold_client::{Client, ClientError, Session};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

use super::revoke::{self, Pins};
use super::{ELECTION, Guard, TTL, lock};
use crate::support::RedisServer;
use crate::support::history::{History, Kind, Outcome};

pub const SEMAPHORE: &str = "chaos-semaphore";
pub const SEMAPHORE_LIMIT: u32 = 2;
pub const RWLOCK: &str = "chaos-rwlock";
/// The fenced counter the read-write lock's writers increment.
const RW_COUNTER: &str = "rw-counter";
/// How long a worker keeps a permit, a shared or exclusive hold, or a leadership per turn.
const TURN: Duration = Duration::from_millis(300);
const WAIT: Duration = Duration::from_secs(3);
const OP_GAP: Duration = Duration::from_millis(10);
/// An acquisition's value in a read-write lock's history: a shared hold (the checker's
/// `Shared`); every other acquisition is exclusive.
const SHARED: u64 = 1;
/// An exclusive hold's weight in the figures' sweep: more than every shared hold together.
pub(super) const EXCLUSIVE_WEIGHT: usize = 1_000;
/// The fewest holds (or leaderships) of each primitive a run must see to judge it.
const ENOUGH: usize = 3;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    Permit,
    Shared,
    Exclusive,
}

/// One belief (a hold or a leadership), from the instant it was granted to the instant the
/// client stopped believing, for the figures.
#[derive(Clone, Copy)]
struct Belief {
    start: Instant,
    end: Instant,
    weight: usize,
}

/// One primitive's recorded history and beliefs.
#[derive(Default)]
pub(super) struct Record {
    history: Arc<History>,
    beliefs: Mutex<Vec<Belief>>,
    /// How many beliefs have ended, to await enough work to judge.
    ended: tokio::sync::watch::Sender<usize>,
    /// How many increments the read-write lock's writers made, likewise.
    written: tokio::sync::watch::Sender<usize>,
    /// The read-write lock's accepted increments: (token, value written).
    writes: Mutex<Vec<(u64, u64)>>,
    refused: Mutex<usize>,
    /// Its holdings on now, for the operator's revoke ([`revoke`]).
    pub(super) pins: Pins,
}

impl Record {
    fn believed(&self, start: Instant, end: Instant, weight: usize) {
        lock(&self.beliefs).push(Belief { start, end, weight });
        self.ended.send_modify(|n| *n += 1);
    }

    /// Waits (at most 15 s) until `count` beliefs have ended in all.
    async fn ended(&self, count: usize, primitive: &str) {
        let mut ended = self.ended.subscribe();
        tokio::time::timeout(Duration::from_secs(15), ended.wait_for(|n| *n >= count))
            .await
            .unwrap_or_else(|_| panic!("{primitive}: fewer than {count} holds within 15 s"))
            .expect("the record is here");
    }

    /// Waits (at most 15 s) until the writers made `count` increments in all.
    async fn written(&self, count: usize) {
        let mut written = self.written.subscribe();
        tokio::time::timeout(Duration::from_secs(15), written.wait_for(|n| *n >= count))
            .await
            .unwrap_or_else(|_| panic!("rwlock: fewer than {count} writes within 15 s"))
            .expect("the record is here");
    }

    /// The longest time nobody held (or led) between two beliefs, and the longest time more
    /// than `capacity` weight was believed at once.
    pub(super) fn figures(&self, capacity: usize) -> (usize, Duration, Duration) {
        let mut beliefs = lock(&self.beliefs).clone();
        beliefs.sort_by_key(|b| b.start);
        let mut idle = Duration::ZERO;
        let mut held_until: Option<Instant> = None;
        for b in &beliefs {
            if let Some(until) = held_until {
                idle = idle.max(b.start.saturating_duration_since(until));
            }
            held_until = Some(held_until.map_or(b.end, |u| u.max(b.end)));
        }
        let mut edges: Vec<(Instant, i64)> = Vec::new();
        for b in beliefs.iter().filter(|b| b.end > b.start) {
            let weight = i64::try_from(b.weight).unwrap_or(i64::MAX);
            edges.push((b.start, weight));
            edges.push((b.end, -weight));
        }
        edges.sort_by_key(|&(at, delta)| (at, delta));
        let capacity = i64::try_from(capacity).unwrap_or(i64::MAX);
        let (mut active, mut since, mut overlap) = (0, None, Duration::ZERO);
        for (at, delta) in edges {
            let before = active;
            active += delta;
            if before <= capacity && active > capacity {
                since = Some(at);
            } else if before > capacity && active <= capacity {
                overlap = overlap.max(since.map_or(Duration::ZERO, |s| at - s));
            }
        }
        (beliefs.len(), idle, overlap)
    }
}

/// The other primitives' workers in a chaos run (spawned among its workers, stopped with them).
pub struct Primitives {
    pub(super) semaphore: Option<Arc<Record>>,
    pub(super) rwlock: Arc<Record>,
    pub(super) election: Option<Arc<Record>>,
    /// Every state the observer was shown: the leader's term, if any.
    observed: Arc<Mutex<Vec<Option<u64>>>>,
    /// The observer's last error, for the verdict.
    observer_error: Arc<Mutex<Option<String>>>,
}

impl Primitives {
    /// Starts the workers on `servers` (a stream worker and a session worker of each primitive
    /// on each). `redlock`: no semaphore and no election, which the server refuses there.
    pub async fn start(
        servers: &[String],
        resource: &RedisServer,
        redlock: bool,
        stop: &CancellationToken,
        handles: &mut Vec<JoinHandle<()>>,
    ) -> Self {
        let primitives = Primitives {
            semaphore: (!redlock).then(Arc::default),
            rwlock: Arc::default(),
            election: (!redlock).then(Arc::default),
            observed: Arc::default(),
            observer_error: Arc::default(),
        };
        // Where each worker runs: (its server, on a session). Every primitive has a worker on a
        // stream and one on a session, and each server has both; few workers (2 cores).
        let mut placements = vec![
            (Shape::Shared, 0, false),
            (Shape::Shared, 1, true),
            (Shape::Exclusive, 0, true),
            (Shape::Exclusive, 1, false),
        ];
        if !redlock {
            placements.extend([
                (Shape::Permit, 0, false),
                (Shape::Permit, 1, true),
                (Shape::Permit, 1, false),
            ]);
        }
        // Each client knows every server, its own first, as a resuming client does: a session
        // resumes on another, and a release in flight then is carried out there.
        let url = |server: usize| {
            let n = servers.len();
            let urls: Vec<&str> = (0..n).map(|i| servers[(server + i) % n].as_str()).collect();
            urls.join(",")
        };
        for (id, (shape, server, on_session)) in placements.into_iter().enumerate() {
            let record = match (shape, &primitives.semaphore) {
                (Shape::Permit, Some(record)) => record.clone(),
                _ => primitives.rwlock.clone(),
            };
            let counter = match shape {
                Shape::Exclusive => Some(
                    FencedKey::new(resource.client().await, RW_COUNTER)
                        .await
                        .expect("fenced counter"),
                ),
                _ => None,
            };
            let worker = Holder {
                id,
                server,
                shape,
                client: Client::connect(url(server)).await.expect("connect worker"),
                session: on_session.then_some(None),
                record,
                counter,
                stop: stop.clone(),
            };
            handles.push(tokio::spawn(worker.run()));
        }
        let Some(election) = &primitives.election else {
            return primitives;
        };
        let candidate = StreamCandidate {
            id: 0,
            client: Client::connect(url(0)).await.expect("connect candidate"),
            record: election.clone(),
            stop: stop.clone(),
        };
        handles.push(tokio::spawn(candidate.run()));
        let candidate = SessionCandidate {
            id: 1,
            client: Client::connect(url(1)).await.expect("connect candidate"),
            record: election.clone(),
            stop: stop.clone(),
        };
        handles.push(tokio::spawn(candidate.run()));
        // The observer knows every server, so it follows the election on another when its own
        // fails.
        let client = Client::connect(servers.join(","))
            .await
            .expect("connect observer");
        let observer = Observer {
            client,
            observed: primitives.observed.clone(),
            error: primitives.observer_error.clone(),
            stop: stop.clone(),
        };
        handles.push(tokio::spawn(observer.run()));
        primitives
    }

    /// Waits until each primitive changed hands a few times in all (bounded): enough to judge.
    pub async fn enough(&self) {
        if let Some(semaphore) = &self.semaphore {
            semaphore.ended(ENOUGH, "semaphore").await;
        }
        self.rwlock.ended(ENOUGH, "rwlock").await;
        // Readers alone can make the holds: the writers must have written too.
        self.rwlock.written(ENOUGH).await;
        if let Some(election) = &self.election {
            election.ended(ENOUGH, "election").await;
        }
    }

    /// Checks each primitive's history by its model (as run `<run>/<primitive>`), the read-write
    /// lock's fenced counter and the observer's view, and prints a `FIGURE` line for each.
    pub async fn check(&self, run: &str, resource: &RedisServer, data_loss: Option<Duration>) {
        let fault = run;
        self.assert_revoked(fault);
        if let Some(semaphore) = &self.semaphore {
            semaphore
                .history
                .check(&format!("{run}/semaphore"), SEMAPHORE_LIMIT, data_loss);
            figure(fault, "semaphore", semaphore, SEMAPHORE_LIMIT as usize);
        }
        self.rwlock
            .history
            .check(&format!("{run}/rwlock"), 1, data_loss);
        figure(fault, "rwlock", &self.rwlock, EXCLUSIVE_WEIGHT);
        self.check_rw_counter(fault, resource).await;
        let Some(election) = &self.election else {
            return;
        };
        election
            .history
            .check(&format!("{run}/election"), 1, data_loss);
        figure(fault, "election", election, 1);
        let observed = lock(&self.observed).clone();
        let terms: Vec<u64> = observed.iter().flatten().copied().collect();
        println!(
            "FIGURE run={fault} primitive=observer states={} leaders={}",
            observed.len(),
            terms.len()
        );
        assert!(
            terms.len() >= 2,
            "{fault}: the observer saw {} leaders: {observed:?} (last error: {:?})",
            terms.len(),
            lock(&self.observer_error)
        );
        assert!(
            terms.windows(2).all(|w| w[0] <= w[1]),
            "{fault}: the observer saw terms go back: {observed:?}"
        );
    }

    /// The read-write lock's writers' counter: no stale write accepted, no increment lost.
    async fn check_rw_counter(&self, fault: &str, resource: &RedisServer) {
        let counter = FencedKey::new(resource.client().await, RW_COUNTER)
            .await
            .expect("fenced counter");
        let last = match counter.get(u64::MAX >> 12).await.expect("read counter") {
            Fenced::Accepted(value) => value.map_or(0, |v| v.parse().expect("counter")),
            Fenced::Stale { .. } => panic!("checker token refused"),
        };
        let mut writes = lock(&self.rwlock.writes).clone();
        writes.sort_by_key(|&(_, value)| value);
        let refused = *lock(&self.rwlock.refused);
        println!(
            "FIGURE run={fault} primitive=rwlock-writes writes={} stale_refused={refused}",
            writes.len()
        );
        assert!(
            writes.len() >= ENOUGH,
            "{fault}: too few writes: {}",
            writes.len()
        );
        let values: Vec<u64> = writes.iter().map(|&(_, value)| value).collect();
        let expected: Vec<u64> = (1..=writes.len() as u64).collect();
        assert_eq!(values, expected, "{fault}: rw-counter increments lost");
        assert_eq!(last, writes.len() as u64, "{fault}: rw-counter final value");
        assert!(
            writes.windows(2).all(|w| w[0].0 <= w[1].0),
            "{fault}: a stale writer's increment was accepted: {writes:?}"
        );
    }
}

/// Prints one primitive's figures, and fails a run in which it hardly changed hands.
fn figure(fault: &str, primitive: &str, record: &Record, capacity: usize) {
    let (beliefs, idle, overlap) = record.figures(capacity);
    println!(
        "FIGURE run={fault} primitive={primitive} beliefs={beliefs} longest_idle_ms={} overlap_ms={}",
        idle.as_millis(),
        overlap.as_millis()
    );
    assert!(
        beliefs >= ENOUGH,
        "{fault}: {primitive} held only {beliefs} times: too little to judge"
    );
}

/// A worker of the semaphore or the read-write lock.
struct Holder {
    /// Its client number in its primitive's history.
    id: usize,
    /// The server its client tries first.
    server: usize,
    shape: Shape,
    client: Client,
    /// On a session: the session open, if any (opened again once it ends).
    session: Option<Option<Session>>,
    record: Arc<Record>,
    /// The writers' fenced counter.
    counter: Option<FencedKey>,
    stop: CancellationToken,
}

impl Holder {
    async fn run(mut self) {
        let history = self.record.history.clone();
        let value = if self.shape == Shape::Shared {
            SHARED
        } else {
            0
        };
        while !self.stop.is_cancelled() {
            let called = Instant::now();
            let stop = self.stop.clone();
            let guard = tokio::select! {
                guard = self.acquire() => guard,
                () = stop.cancelled() => {
                    history.record(self.id, Kind::Acquire, called, None, Outcome::Unknown, 0, value);
                    return;
                }
            };
            let start = Instant::now();
            let (returned, outcome, token) = match &guard {
                Ok(guard) => (Some(start), Outcome::Ok, guard.fencing_token()),
                Err(error) if error.refusal().is_some() => (Some(start), Outcome::Refused, 0),
                Err(_) => (None, Outcome::Unknown, 0),
            };
            history.record(
                self.id,
                Kind::Acquire,
                called,
                returned,
                outcome,
                token,
                value,
            );
            let Ok(guard) = guard else {
                sleep(Duration::from_millis(20)).await;
                continue;
            };
            let pins = &self.record.pins;
            let (lost, code) = match &self.counter {
                Some(counter) => (self.turn(counter, &guard, token, start).await, None),
                None => {
                    // A permit or a shared hold: the operator's revoke may pin it.
                    pins.held(token, self.server);
                    let loss = guard.loss();
                    let lost = revoke::turn(pins, token, start, TURN, &self.stop, loss).await;
                    let code = lost.as_ref().map(|(_, loss)| loss.code);
                    (lost.map(|(at, _)| at), code)
                }
            };
            let end = lost.unwrap_or_else(Instant::now);
            let believed_until = end.min(guard.valid_until());
            // A revoked holding's history ends at the revoke; its belief (the figures) when told.
            let recorded_until = pins.ended(token, believed_until, code, end);
            let weight = match self.shape {
                Shape::Exclusive => EXCLUSIVE_WEIGHT,
                _ => 1,
            };
            self.record.believed(start, believed_until, weight);
            let kind = if lost.is_some() {
                Kind::Lost
            } else {
                Kind::Release
            };
            let what = format!(
                "release of {:?} {} on a session: {}",
                self.shape,
                self.id,
                self.session.is_some()
            );
            settled(&what, guard.release()).await;
            history.record_end(self.id, kind, recorded_until, Instant::now(), token);
        }
    }

    async fn acquire(&mut self) -> Result<Guard, ClientError> {
        let holder = format!("{:?}-{}", self.shape, self.id);
        let name = self.name();
        let Some(slot) = &mut self.session else {
            let mut lease = self.client.lease(name).ttl(TTL).wait(WAIT);
            lease = match self.shape {
                Shape::Permit => lease.limit(SEMAPHORE_LIMIT),
                Shape::Shared => lease.shared(),
                Shape::Exclusive => lease,
            };
            return lease.holder(holder).acquire().await.map(Guard::Stream);
        };
        let session = match slot {
            Some(session) if !session.is_ended() => session,
            slot => slot.insert(self.client.session().ttl(TTL).holder(holder).open().await?),
        };
        let mut lease = session.lock(name).wait(WAIT);
        lease = match self.shape {
            Shape::Permit => lease.limit(SEMAPHORE_LIMIT),
            Shape::Shared => lease.shared(),
            Shape::Exclusive => lease,
        };
        lease.acquire().await.map(Guard::Session)
    }

    fn name(&self) -> &'static str {
        match self.shape {
            Shape::Permit => SEMAPHORE,
            Shape::Shared | Shape::Exclusive => RWLOCK,
        }
    }

    /// A writer's turn: it increments its counter; returns when the lease was lost (or a stale
    /// write refused), if it was.
    async fn turn(
        &self,
        counter: &FencedKey,
        guard: &Guard,
        token: u64,
        start: Instant,
    ) -> Option<Instant> {
        let history = &self.record.history;
        while start.elapsed() < TURN {
            if guard.is_lost() {
                return Some(Instant::now());
            }
            let called = Instant::now();
            let value = match counter.get(token).await.expect("resource get") {
                Fenced::Accepted(value) => {
                    let value = value.map_or(0, |v| v.parse::<u64>().expect("counter"));
                    let returned = Some(Instant::now());
                    history.record(
                        self.id,
                        Kind::Read,
                        called,
                        returned,
                        Outcome::Ok,
                        token,
                        value,
                    );
                    value
                }
                Fenced::Stale { .. } => {
                    let returned = Some(Instant::now());
                    let refused = Outcome::Refused;
                    history.record(self.id, Kind::Read, called, returned, refused, token, 0);
                    *lock(&self.record.refused) += 1;
                    return Some(Instant::now());
                }
            };
            if guard.is_lost() {
                return Some(Instant::now());
            }
            let called = Instant::now();
            let written = counter
                .set(token, &(value + 1).to_string())
                .await
                .expect("resource set");
            let returned = Some(Instant::now());
            let outcome = match written {
                Fenced::Accepted(()) => Outcome::Ok,
                Fenced::Stale { .. } => Outcome::Refused,
            };
            history.record(
                self.id,
                Kind::Write,
                called,
                returned,
                outcome,
                token,
                value + 1,
            );
            if outcome == Outcome::Refused {
                *lock(&self.record.refused) += 1;
                return Some(Instant::now());
            }
            lock(&self.record.writes).push((token, value + 1));
            self.record.written.send_modify(|n| *n += 1);
            tokio::select! {
                () = sleep(OP_GAP) => {}
                _ = guard.lost() => return Some(Instant::now()),
            }
        }
        None
    }
}

/// A candidate on a Campaign stream of its own: it campaigns, leads for a turn (or until told
/// it lost), resigns, and campaigns again; every step goes into the history.
struct StreamCandidate {
    id: usize,
    client: Client,
    record: Arc<Record>,
    stop: CancellationToken,
}

impl StreamCandidate {
    async fn run(self) {
        let history = &self.record.history;
        while !self.stop.is_cancelled() {
            let called = Instant::now();
            let elected = async {
                let value = format!("candidate-{}", self.id);
                let mut candidate = self.client.campaign(ELECTION, value, TTL).await?;
                let term = candidate.elected().await?;
                Ok::<_, ClientError>((candidate, term))
            };
            let elected = tokio::select! {
                elected = elected => elected,
                () = self.stop.cancelled() => break,
            };
            let Ok((mut candidate, term)) = elected else {
                // The server is down or unreachable: it may have elected this candidate and
                // lost it again, which nobody here can know.
                history.record(
                    self.id,
                    Kind::Campaign,
                    called,
                    None,
                    Outcome::Unknown,
                    0,
                    0,
                );
                sleep(Duration::from_millis(20)).await;
                continue;
            };
            let since = Instant::now();
            history.record(
                self.id,
                Kind::Campaign,
                called,
                Some(since),
                Outcome::Ok,
                term,
                0,
            );
            let pins = &self.record.pins;
            pins.held(term, 0);
            let loss = candidate.loss();
            let lost = revoke::turn(pins, term, since, TURN, &self.stop, loss).await;
            let ended = Instant::now();
            self.record.believed(since, ended, 1);
            let code = lost.as_ref().map(|(_, loss)| loss.code);
            let recorded_until = pins.ended(term, ended, code, ended);
            if lost.is_none() {
                settled("resign", candidate.resign()).await;
            }
            history.record_end(self.id, Kind::Resign, recorded_until, Instant::now(), term);
        }
    }
}

/// A candidate on a session: it campaigns, leads for a turn (or until told it lost), resigns,
/// and campaigns again, on one session (opened again once it ends).
struct SessionCandidate {
    id: usize,
    client: Client,
    record: Arc<Record>,
    stop: CancellationToken,
}

impl SessionCandidate {
    async fn run(self) {
        let history = &self.record.history;
        let mut session: Option<Session> = None;
        while !self.stop.is_cancelled() {
            let called = Instant::now();
            let elected = async {
                let session = match &mut session {
                    Some(session) if !session.is_ended() => session,
                    slot => {
                        let holder = format!("session-candidate-{}", self.id);
                        let opened = self.client.session().ttl(TTL).holder(holder).open();
                        slot.insert(opened.await?)
                    }
                };
                session
                    .campaign(ELECTION, format!("candidate-{}", self.id))
                    .await
            };
            let elected = tokio::select! {
                elected = elected => elected,
                () = self.stop.cancelled() => break,
            };
            let Ok(leader) = elected else {
                // Unknown: it may have been elected and lost it again, unheard.
                history.record(
                    self.id,
                    Kind::Campaign,
                    called,
                    None,
                    Outcome::Unknown,
                    0,
                    0,
                );
                sleep(Duration::from_millis(20)).await;
                continue;
            };
            let since = Instant::now();
            let term = leader.term();
            history.record(
                self.id,
                Kind::Campaign,
                called,
                Some(since),
                Outcome::Ok,
                term,
                0,
            );
            let pins = &self.record.pins;
            pins.held(term, 1);
            let loss = leader.loss();
            let lost = revoke::turn(pins, term, since, TURN, &self.stop, loss).await;
            let ended = Instant::now();
            self.record.believed(since, ended, 1);
            let code = lost.as_ref().map(|(_, loss)| loss.code);
            let recorded_until = pins.ended(term, ended, code, ended);
            if lost.is_none() {
                settled("session resign", leader.resign()).await;
            }
            history.record_end(self.id, Kind::Resign, recorded_until, Instant::now(), term);
        }
    }
}

/// Follows the election until stopped, keeping every state shown.
struct Observer {
    client: Client,
    observed: Arc<Mutex<Vec<Option<u64>>>>,
    error: Arc<Mutex<Option<String>>>,
    stop: CancellationToken,
}

impl Observer {
    async fn run(self) {
        while !self.stop.is_cancelled() {
            let observation = tokio::select! {
                observation = self.client.observe(ELECTION) => observation,
                () = self.stop.cancelled() => return,
            };
            let mut observation = match observation {
                Ok(observation) => observation,
                Err(error) => {
                    *lock(&self.error) = Some(error.to_string());
                    sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            loop {
                let next = tokio::select! {
                    next = observation.next() => next,
                    () = self.stop.cancelled() => return,
                };
                match next {
                    Ok(state) => lock(&self.observed).push(state.map(|leader| leader.term)),
                    Err(error) => {
                        *lock(&self.error) = Some(error.to_string());
                        break;
                    }
                }
            }
        }
    }
}

/// Awaits a release or resignation, whose answer the history does not need (the belief ended
/// before it was sent), for at most 5 s: one that hangs is reported, not waited for (a session's
/// ends with the lease's validity, a TTL here, so `HUNG` is a bug).
async fn settled<T>(what: &str, call: impl std::future::Future<Output = T>) {
    if tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .is_err()
    {
        eprintln!("HUNG {what}: no answer within 5 s");
    }
}
