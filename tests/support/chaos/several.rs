//! Several names at once under faults: workers on two servers hold overlapping sets of three
//! names, each asked in an order of its own, while a fault strikes (a server killed, Redis
//! paused). Each name keeps a history of its own, checked by the lock model in `tests/checker`
//! (at most one holder of a name at any instant); and no holder ever believes in part of its
//! set: every acquisition answers a fencing token for each name asked, and a hold ends for all
//! of its names at once (a lost name ends the belief in every other).
//!
//! With [`Limits`] (issue 41's lock-delay and max-hold, under the same faults), every worker
//! holds until its lease is lost, which the max-hold ceiling ends, and two more rules are
//! checked from the fencing tokens: no holder was ever vouched for past its grant plus the
//! max-hold, and after a lease lost (by the ceiling, a server killed, Redis paused) the next
//! holder of each of its names, the one with the next fencing token, was granted no earlier than
//! the lost holder's validity end plus the lock-delay.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::pb::lease_request::Action;
use leasehold::pb::lease_response::Event;
use leasehold::pb::lock_service_client::LockServiceClient;
use leasehold::pb::{LeaseAcquire, LeaseRelease, LeaseRequest, LeaseResponse};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::Streaming;

use super::SERVER_FLAGS;
use crate::support::history::{History, Kind, Outcome};
use crate::support::{RedisServer, ServerProcess};

/// The names every worker's sets are drawn from.
pub const NAMES: [&str; 3] = ["several-a", "several-b", "several-c"];
const TTL_MS: u32 = 500;
const WAIT_MS: u32 = 3_000;
/// How long a worker believes in its set per turn: well inside its validity.
const TURN: Duration = Duration::from_millis(60);
/// The longest any one step of a worker may take before it counts as unknown.
const STEP: Duration = Duration::from_secs(5);

/// A lock-delay and a max-hold asked by every worker (`None`: neither, and a worker holds its
/// set for a turn, then releases).
#[derive(Clone, Copy)]
pub struct Limits {
    pub lock_delay: Duration,
    /// At least the TTL (shorter is refused).
    pub max_hold: Duration,
}

/// One holding as the client saw it: what the limits are checked against.
struct Holding {
    name: &'static str,
    fencing_token: u64,
    /// When the answer arrived (Redis granted it before).
    granted: Instant,
    /// The latest instant the server vouched for, counted from before the stream opened.
    valid_to: Instant,
    end: End,
    /// When the holder stopped believing.
    ended: Instant,
}

/// How a holding ended, as its holder saw it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum End {
    /// Its turn ended; released by the holder (no lock-delay).
    Turn,
    /// Told `lost` (the max-hold ceiling, Redis unreachable).
    Told,
    /// Its stream broke: cut off, it could only have believed until its validity end.
    CutOff,
}

/// The run: a Redis, two servers, the workers and one history per name.
pub struct Several {
    pub redis: RedisServer,
    pub servers: Vec<ServerProcess>,
    histories: Arc<HashMap<&'static str, History>>,
    limits: Option<Limits>,
    holdings: Arc<Mutex<Vec<Holding>>>,
    /// How many workers hold their set through each server now.
    holding_through: Arc<[AtomicUsize; 2]>,
    stop: CancellationToken,
    workers: Vec<JoinHandle<usize>>,
}

impl Several {
    /// Starts the processes and `workers` workers, half on each server.
    pub async fn start(workers: usize) -> Self {
        Self::start_with(workers, None).await
    }

    /// The same, every worker asking for `limits`.
    pub async fn start_with(workers: usize, limits: Option<Limits>) -> Self {
        let redis = RedisServer::start();
        let servers: Vec<ServerProcess> = (0..2)
            .map(|_| ServerProcess::start(&redis, SERVER_FLAGS))
            .collect();
        let urls: Vec<String> = servers.iter().map(ServerProcess::url).collect();
        let histories: Arc<HashMap<&'static str, History>> =
            Arc::new(NAMES.iter().map(|&n| (n, History::default())).collect());
        let stop = CancellationToken::new();
        let holdings = Arc::new(Mutex::new(Vec::new()));
        let holding_through = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let workers = (0..workers)
            .map(|w| {
                let run = Run {
                    urls: urls.clone(),
                    histories: histories.clone(),
                    limits,
                    holdings: holdings.clone(),
                    holding_through: holding_through.clone(),
                    stop: stop.clone(),
                };
                tokio::spawn(work(w, run))
            })
            .collect();
        Several {
            redis,
            servers,
            histories,
            limits,
            holdings,
            holding_through,
            stop,
            workers,
        }
    }

    /// Kills server `i` (no chance to release anything) and starts it again.
    pub fn kill_server(&mut self, i: usize) {
        self.servers[i].kill();
        self.servers[i] =
            self.servers[i].start_again(&["--redis", &self.redis.url()], SERVER_FLAGS);
    }

    /// Waits (at most 5 s) until a worker holds its set through server `i`.
    pub async fn until_held_through(&self, i: usize) {
        timeout(STEP, async {
            while self.holding_through[i].load(Ordering::SeqCst) == 0 {
                sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("nobody held a set through the server within 5 s");
    }

    /// Stops the workers, then checks each name's history: one holder at a time. Returns how
    /// many sets were held in all.
    pub async fn finish(self, run: &str) -> usize {
        self.finish_counted(run).await.0
    }

    /// As [`Several::finish`], also checking the [`Limits`]: returns how many sets were held,
    /// and how many holders cut off by a fault were followed by another (checked against the
    /// lock-delay).
    pub async fn finish_counted(self, run: &str) -> (usize, usize) {
        self.stop.cancel();
        let mut held = 0;
        for worker in self.workers {
            held += timeout(Duration::from_secs(20), worker)
                .await
                .expect("a worker did not stop")
                .expect("a worker saw part of its set, or panicked");
        }
        for name in NAMES {
            self.histories[name].check(&format!("single/{run}/{name}"), 1, None);
        }
        let checked = self.limits.map_or(0, |limits| {
            let holdings = self.holdings.lock().unwrap_or_else(|e| e.into_inner());
            check_limits(&holdings, limits)
        });
        (held, checked)
    }
}

/// The limits' rules over every holding seen: never vouched for past the ceiling; after a loss
/// the next holder of a name (the next fencing token any worker was answered) granted only once
/// the lost holder stopped believing, and, for a holder cut off (its server killed: it was never
/// told, and could believe until its validity end), no earlier than that end plus the
/// lock-delay. Returns how many cut-off holders had a next holder (and so were checked against
/// the delay).
fn check_limits(holdings: &[Holding], limits: Limits) -> usize {
    let mut cut_off_checked = 0;
    for held in holdings {
        assert!(
            held.valid_to <= held.granted + limits.max_hold,
            "{} (fencing token {}) vouched for {:?} past its grant, above its max-hold {:?}",
            held.name,
            held.fencing_token,
            held.valid_to - held.granted,
            limits.max_hold
        );
        let next = holdings
            .iter()
            .filter(|h| h.name == held.name && h.fencing_token > held.fencing_token)
            .min_by_key(|h| h.fencing_token);
        let Some(next) = next else { continue };
        let free_from = match held.end {
            End::Turn => continue,
            End::Told => held.ended,
            End::CutOff => {
                cut_off_checked += 1;
                held.valid_to + limits.lock_delay
            }
        };
        assert!(
            next.granted >= free_from,
            "{}: fencing token {} granted {:?} too early after {} ended ({:?})",
            held.name,
            next.fencing_token,
            free_from - next.granted,
            held.fencing_token,
            held.end
        );
    }
    cut_off_checked
}

/// The set a worker asks for on its `round`: two or three names, in an order of its own.
fn set(worker: usize, round: usize) -> Vec<&'static str> {
    let mut names = NAMES.to_vec();
    names.rotate_left((worker + round) % 3);
    if (worker + round / 3) % 2 == 1 {
        names.reverse();
    }
    names.truncate(2 + (worker * 5 + round) % 2);
    names
}

/// What every worker shares.
struct Run {
    urls: Vec<String>,
    histories: Arc<HashMap<&'static str, History>>,
    limits: Option<Limits>,
    holdings: Arc<Mutex<Vec<Holding>>>,
    holding_through: Arc<[AtomicUsize; 2]>,
    stop: CancellationToken,
}

/// One worker: a stream per turn on its server (the other one when that fails), holding its
/// set for a turn (with limits: until lost), recording every name's acquisition and end.
/// Returns how many sets it held.
async fn work(worker: usize, run: Run) -> usize {
    let Run {
        urls,
        histories,
        limits,
        holdings,
        holding_through,
        stop,
    } = run;
    let mut held = 0;
    let mut round = 0;
    while !stop.is_cancelled() {
        round += 1;
        let names = set(worker, round);
        let through = (worker + round / 7) % urls.len();
        let url = &urls[through];
        let record = |kind, call, returned, outcome, token, name: &str| {
            histories[name].record(worker, kind, call, returned, outcome, token, 0);
        };
        let called = Instant::now();
        let Some((requests, mut events)) = open(url, &names, limits).await else {
            sleep(Duration::from_millis(20)).await;
            continue;
        };
        let answer = timeout(STEP, first_answer(&mut events)).await;
        let acquired = match answer {
            Ok(Ok(Some(Event::Acquired(acquired)))) => acquired,
            // Refused (its wait ran out, ABORTED): nothing taken.
            Ok(Err(status)) if status.code() == tonic::Code::Aborted => {
                for name in &names {
                    record(
                        Kind::Acquire,
                        called,
                        Some(Instant::now()),
                        Outcome::Refused,
                        0,
                        name,
                    );
                }
                continue;
            }
            // Unknown: it may have been granted to nobody who heard.
            _ => {
                for name in &names {
                    record(Kind::Acquire, called, None, Outcome::Unknown, 0, name);
                }
                sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let granted = Instant::now();
        // The whole set, a token for each name, or the server broke its promise.
        let fenced: Vec<&str> = acquired.fences.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(fenced, names, "worker {worker} was given part of its set");
        for fence in &acquired.fences {
            let name = fence.name.as_str();
            record(
                Kind::Acquire,
                called,
                Some(granted),
                Outcome::Ok,
                fence.fencing_token,
                name,
            );
        }
        held += 1;
        holding_through[through].fetch_add(1, Ordering::SeqCst);
        // Believed until the turn ends (with limits: until lost), the validity runs out, or the
        // lease is lost, for every name at once.
        let mut valid_to = called + Duration::from_millis(acquired.valid_to_ms);
        let turn = if limits.is_some() { STEP } else { TURN };
        let end = loop {
            let believe = turn
                .saturating_sub(granted.elapsed())
                .min(valid_to.saturating_duration_since(Instant::now()))
                .saturating_sub(Duration::from_millis(50));
            match timeout(believe, events.next()).await {
                Ok(Some(Ok(LeaseResponse {
                    event: Some(Event::Extended(extended)),
                }))) => valid_to = called + Duration::from_millis(extended.valid_to_ms),
                Ok(Some(Ok(LeaseResponse {
                    event: Some(Event::Lost(_)),
                }))) => break End::Told,
                // The stream broke (its server killed): cut off, never told.
                Ok(_) => break End::CutOff,
                Err(_) => break End::Turn,
            }
        };
        holding_through[through].fetch_sub(1, Ordering::SeqCst);
        let lost = end != End::Turn;
        let ended = Instant::now();
        let kind = if lost { Kind::Lost } else { Kind::Release };
        if limits.is_some() {
            let mut seen = holdings.lock().unwrap_or_else(|e| e.into_inner());
            for fence in &acquired.fences {
                let name = NAMES
                    .into_iter()
                    .find(|&n| n == fence.name)
                    .expect("a fence for a name never asked");
                seen.push(Holding {
                    name,
                    fencing_token: fence.fencing_token,
                    granted,
                    valid_to,
                    end,
                    ended,
                });
            }
        }
        if !lost {
            let release = LeaseRequest {
                action: Some(Action::Release(LeaseRelease {})),
            };
            let _ = requests.send(release).await;
            let _ = timeout(STEP, until_lost(&mut events)).await;
        }
        let returned = Instant::now();
        for fence in &acquired.fences {
            histories[fence.name.as_str()].record_end(
                worker,
                kind,
                ended,
                returned,
                fence.fencing_token,
            );
        }
    }
    held
}

type Opened = (mpsc::Sender<LeaseRequest>, Streaming<LeaseResponse>);

/// A `Lease` stream to `url` asking for `names` (with `limits`), or `None` if the server cannot
/// be reached.
async fn open(url: &str, names: &[&str], limits: Option<Limits>) -> Option<Opened> {
    let channel = timeout(
        STEP,
        tonic::transport::Endpoint::from_shared(url.to_owned())
            .ok()?
            .connect(),
    )
    .await
    .ok()?
    .ok()?;
    let (requests, outbox) = mpsc::channel(4);
    let acquire = LeaseAcquire {
        name: names[0].to_owned(),
        more_names: names[1..].iter().map(|&n| n.to_owned()).collect(),
        ttl_ms: TTL_MS,
        wait_ms: WAIT_MS,
        holder: "several".into(),
        lock_delay_ms: limits.map_or(0, |l| l.lock_delay.as_millis() as u32),
        max_hold_ms: limits.map_or(0, |l| l.max_hold.as_millis() as u32),
        ..Default::default()
    };
    let first = LeaseRequest {
        action: Some(Action::Acquire(acquire)),
    };
    requests.send(first).await.ok()?;
    let mut client = LockServiceClient::new(channel);
    let call = client.lease(ReceiverStream::new(outbox));
    let events = timeout(STEP, call).await.ok()?.ok()?.into_inner();
    Some((requests, events))
}

/// The first answer that is not `waiting`.
async fn first_answer(
    events: &mut Streaming<LeaseResponse>,
) -> Result<Option<Event>, tonic::Status> {
    loop {
        match events.next().await {
            None => return Ok(None),
            Some(Err(status)) => return Err(status),
            Some(Ok(LeaseResponse {
                event: Some(Event::Waiting(_)),
            })) => continue,
            Some(Ok(response)) => return Ok(response.event),
        }
    }
}

/// Completes when the lease ends: lost, released, or its stream gone.
async fn until_lost(events: &mut Streaming<LeaseResponse>) {
    loop {
        match events.next().await {
            Some(Ok(LeaseResponse {
                event: Some(Event::Extended(_)),
            })) => continue,
            _ => return,
        }
    }
}
