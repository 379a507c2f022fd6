//! The permit checker: workers hold the permits of one semaphore through several servers, each
//! for a short random turn, and the checker counts who believes it holds a permit at every
//! moment. A worker counts itself in after `acquired` and out before it sends `release` (or the
//! moment it learns the lease is lost), so the count can only under-state the true overlap,
//! never invent one: any count above the limit is a real violation.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::client::Client;
use tokio::sync::watch;
use tokio::time::sleep;
use tokio_util::sync::CancellationToken;

/// How long a worker waits for a permit per try.
const WAIT: Duration = Duration::from_secs(10);

/// Who holds a permit now, the most at once, and every fencing token issued.
#[derive(Default)]
struct Occupancy {
    now: AtomicUsize,
    most: AtomicUsize,
    tokens: Mutex<Vec<u64>>,
    /// Turns that ended in `Lost` rather than a release.
    lost: AtomicUsize,
}

impl Occupancy {
    fn enter(&self, fencing_token: u64) {
        let inside = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(inside, Ordering::SeqCst);
        self.tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(fencing_token);
    }

    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a churn run did.
#[derive(Debug)]
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
        let occupancy = Arc::new(Occupancy::default());
        let (acquisitions, _) = watch::channel(0);
        let stop = CancellationToken::new();
        let mut workers = Vec::new();
        for url in urls {
            for id in 0..per_server {
                let client = Client::connect(url.clone()).await.expect("connect worker");
                let worker = Worker {
                    client,
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

    /// Stops the workers and returns what they did.
    pub async fn finish(self) -> Report {
        self.stop.cancel();
        for worker in self.workers {
            tokio::time::timeout(Duration::from_secs(15), worker)
                .await
                .expect("worker did not stop")
                .expect("worker panicked");
        }
        let tokens = std::mem::take(
            &mut *self
                .occupancy
                .tokens
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        Report {
            most_at_once: self.occupancy.most.load(Ordering::SeqCst),
            acquisitions: tokens.len(),
            tokens,
            lost: self.occupancy.lost.load(Ordering::SeqCst),
        }
    }
}

struct Worker {
    client: Client,
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
            let guard = tokio::select! {
                guard = acquire => guard,
                () = self.stop.cancelled() => return,
            };
            let Ok(guard) = guard else {
                // The wait ran out, or the server is paused or gone: try again shortly.
                sleep(Duration::from_millis(20)).await;
                continue;
            };
            self.occupancy.enter(guard.fencing_token());
            self.acquisitions.send_modify(|n| *n += 1);
            let turn = self.longest_turn.mul_f64(rand::random::<f64>());
            tokio::select! {
                () = sleep(turn) => self.occupancy.leave(),
                _ = guard.lost() => {
                    self.occupancy.leave();
                    self.occupancy.lost.fetch_add(1, Ordering::SeqCst);
                }
            }
            let _ = guard.release().await;
        }
    }
}
