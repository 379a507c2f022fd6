//! The permit checker: workers hold the permits of one semaphore through several servers, each
//! for a short random turn, and the checker counts who believes it holds a permit at every
//! moment. A worker counts itself in after `acquired` and out before it sends `release` (or the
//! moment it learns the lease is lost), so the count can only under-state the true overlap,
//! never invent one: any count above the limit is a real violation.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_client::{Client, LeaseGuard};
use tokio::sync::watch;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

use super::history::{History, Kind, Outcome};

/// How long a worker waits for a permit per try.
const WAIT: Duration = Duration::from_secs(10);

/// Who holds a permit now, the most at once, and every fencing token issued.
struct Occupancy {
    now: AtomicUsize,
    /// Holders now, by the index of their server.
    by_server: watch::Sender<Vec<usize>>,
    most: AtomicUsize,
    tokens: Mutex<Vec<u64>>,
    /// Turns that ended in `Lost` rather than a release.
    lost: AtomicUsize,
    /// Workers of this server (index + 1; 0: none) keep their turn until the lease is lost (at
    /// most `LONGEST_KEPT_TURN`), so that a fault injected on the server lands on a holder.
    keep_turns_on: AtomicUsize,
    /// Every acquisition and end of a hold, for the checker.
    history: Arc<History>,
}

/// The longest turn of a worker told to keep its turn until the lease is lost.
const LONGEST_KEPT_TURN: Duration = Duration::from_secs(5);

impl Occupancy {
    fn enter(&self, server: usize, fencing_token: u64) {
        self.by_server.send_modify(|held| held[server] += 1);
        let inside = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(inside, Ordering::SeqCst);
        self.tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(fencing_token);
    }

    fn leave(&self, server: usize) {
        self.now.fetch_sub(1, Ordering::SeqCst);
        self.by_server.send_modify(|held| held[server] -= 1);
    }
}

/// What a churn run did.
pub struct Report {
    /// The most workers that believed they held a permit at one moment.
    pub most_at_once: usize,
    pub acquisitions: usize,
    /// Every fencing token, in the order the workers counted themselves in.
    pub tokens: Vec<u64>,
    pub lost: usize,
}

impl Report {
    /// Fencing tokens are unique per name: each permit gets its own.
    pub fn distinct_tokens(&self) -> usize {
        let mut tokens = self.tokens.clone();
        tokens.sort_unstable();
        tokens.dedup();
        tokens.len()
    }
}

/// Workers churning through one semaphore's permits.
pub struct Churn {
    occupancy: Arc<Occupancy>,
    limit: u32,
    acquisitions: watch::Sender<usize>,
    stop: CancellationToken,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

impl Churn {
    /// `per_server` workers on each server at `urls`, on semaphore `name` with `limit`, each
    /// holding for a random turn of up to `longest_turn`.
    pub async fn start(
        urls: &[String],
        per_server: usize,
        name: &str,
        limit: u32,
        ttl: Duration,
        longest_turn: Duration,
    ) -> Self {
        let occupancy = Arc::new(Occupancy {
            now: AtomicUsize::default(),
            by_server: watch::channel(vec![0; urls.len()]).0,
            most: AtomicUsize::default(),
            tokens: Mutex::default(),
            lost: AtomicUsize::default(),
            keep_turns_on: AtomicUsize::default(),
            history: Arc::default(),
        });
        let (acquisitions, _) = watch::channel(0);
        let stop = CancellationToken::new();
        let mut workers = Vec::new();
        for (server, url) in urls.iter().enumerate() {
            for id in 0..per_server {
                let client = Client::connect(url.clone()).await.expect("connect worker");
                let worker = Worker {
                    id: workers.len(),
                    client,
                    server,
                    name: name.to_owned(),
                    holder: format!("{url} worker {id}"),
                    limit,
                    ttl,
                    longest_turn,
                    occupancy: occupancy.clone(),
                    acquisitions: acquisitions.clone(),
                    stop: stop.clone(),
                };
                workers.push(tokio::spawn(worker.run()));
            }
        }
        Churn {
            occupancy,
            limit,
            acquisitions,
            stop,
            workers,
        }
    }

    /// Waits until `count` more permits have been taken after now.
    pub async fn progress(&self, count: usize) {
        let mut taken = self.acquisitions.subscribe();
        let target = *taken.borrow_and_update() + count;
        tokio::time::timeout(Duration::from_secs(30), taken.wait_for(|n| *n >= target))
            .await
            .unwrap_or_else(|_| panic!("fewer than {count} permits taken within 30 s"))
            .expect("workers gone");
    }

    /// From now on, the workers of server `server` (`None`: of no server) keep each turn until
    /// the lease is lost.
    pub fn keep_turns_on(&self, server: Option<usize>) {
        let server = server.map_or(0, |server| server + 1);
        self.occupancy.keep_turns_on.store(server, Ordering::SeqCst);
    }

    /// Waits until a worker on server `server` (its index in `urls`) holds a permit.
    pub async fn held_on(&self, server: usize) {
        let mut held = self.occupancy.by_server.subscribe();
        tokio::time::timeout(Duration::from_secs(30), held.wait_for(|h| h[server] > 0))
            .await
            .unwrap_or_else(|_| panic!("no worker of server {server} got a permit within 30 s"))
            .expect("workers gone");
    }

    /// Stops the workers and returns what they did, once the checker has passed the recorded
    /// history as run `run` (`<mode>/<fault>`): Porcupine's semaphore and token models, and the
    /// interval check at the limit.
    pub async fn finish(self, run: &str) -> Report {
        super::stop_workers(&self.stop, self.workers).await;
        let tokens = std::mem::take(
            &mut *self
                .occupancy
                .tokens
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        self.occupancy.history.check(run, self.limit, None);
        Report {
            most_at_once: self.occupancy.most.load(Ordering::SeqCst),
            acquisitions: tokens.len(),
            tokens,
            lost: self.occupancy.lost.load(Ordering::SeqCst),
        }
    }
}

struct Worker {
    /// Its client number in the history.
    id: usize,
    client: Client,
    server: usize,
    name: String,
    holder: String,
    limit: u32,
    ttl: Duration,
    longest_turn: Duration,
    occupancy: Arc<Occupancy>,
    acquisitions: watch::Sender<usize>,
    stop: CancellationToken,
}

impl Worker {
    async fn run(self) {
        while !self.stop.is_cancelled() {
            let acquire = self
                .client
                .lease(self.name.clone())
                .limit(self.limit)
                .ttl(self.ttl)
                .wait(WAIT)
                .holder(self.holder.clone())
                .acquire();
            let called = Instant::now();
            let history = &self.occupancy.history;
            let guard = tokio::select! {
                guard = acquire => guard,
                () = self.stop.cancelled() => {
                    history.record(self.id, Kind::Acquire, called, None, Outcome::Unknown, 0, 0);
                    return;
                }
            };
            let answer = guard.as_ref().map(LeaseGuard::fencing_token);
            history.record_acquire(self.id, called, answer);
            let Ok(guard) = guard else {
                // The wait ran out, or the server is paused or gone: try again shortly.
                sleep(Duration::from_millis(20)).await;
                continue;
            };
            let token = guard.fencing_token();
            self.occupancy.enter(self.server, token);
            self.acquisitions.send_modify(|n| *n += 1);
            let turn = self.longest_turn.mul_f64(rand::random::<f64>());
            let mut lost = tokio::select! {
                () = sleep(turn) => false,
                _ = guard.lost() => true,
            };
            if !lost && self.occupancy.keep_turns_on.load(Ordering::SeqCst) == self.server + 1 {
                lost = tokio::select! {
                    _ = guard.lost() => true,
                    () = sleep(LONGEST_KEPT_TURN) => false,
                    () = self.stop.cancelled() => false,
                };
            }
            self.occupancy.leave(self.server);
            // The belief ends when the worker lets go or is told, or when the validity last
            // confirmed to it runs out by its own clock, whichever comes first.
            let believed_until = Instant::now().min(guard.valid_until());
            if lost {
                self.occupancy.lost.fetch_add(1, Ordering::SeqCst);
            }
            let kind = if lost { Kind::Lost } else { Kind::Release };
            let _ = guard.release().await;
            history.record_end(self.id, kind, believed_until, Instant::now(), token);
        }
    }
}

/// A semaphore (limit 2, TTL 1 s) churned by three workers on each of `servers` while the first
/// server, with a holder, is paused past the TTL (the chaos fault; `mode` names the run): never
/// more than 2 at once, the frozen holder told, every token unique, and the history checked.
pub async fn churn_through_a_paused_server(servers: &[super::ServerProcess], mode: &str) {
    use super::chaos::FAULT_FOR;
    const LIMIT: u32 = 2;
    let ttl = Duration::from_secs(1);
    let urls: Vec<String> = servers.iter().map(super::ServerProcess::url).collect();
    let churn = Churn::start(&urls, 3, "pool", LIMIT, ttl, Duration::from_millis(150)).await;
    churn.progress(10).await;
    churn.keep_turns_on(Some(0));
    churn.held_on(0).await;
    super::signal(servers[0].pid(), "STOP");
    let fault_at = Instant::now();
    // The other servers' workers keep taking permits, the frozen ones' included once expired.
    churn.progress(10).await;
    sleep(FAULT_FOR.saturating_sub(fault_at.elapsed())).await; // The whole fault.
    churn.keep_turns_on(None);
    super::signal(servers[0].pid(), "CONT");
    churn.progress(10).await;
    let report = churn
        .finish(&format!("{mode}/semaphore-server-paused"))
        .await;
    println!(
        "FIGURE fault=semaphore-server-paused mode={mode} acquisitions={} most_at_once={} lost={}",
        report.acquisitions, report.most_at_once, report.lost
    );
    assert!(
        report.most_at_once <= LIMIT as usize,
        "{} held a permit of {LIMIT} at once",
        report.most_at_once
    );
    assert!(
        report.lost >= 1,
        "the frozen server's holder was never told"
    );
    assert_eq!(report.distinct_tokens(), report.acquisitions);
}
