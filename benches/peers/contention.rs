//! Contention for the peers bench (`benches/peers.rs`): N clients on one lock, each taking it
//! and giving it back at once, over and over, each blocked in its lock call while another holds
//! it (or holding it `hold` first). Two figures come out of one run: how long an acquire takes (its wait included), and the
//! hand-off, from the holder's release being sent to the next waiter holding. Leasehold's
//! waiters wait in the server's fair line and are woken by the release's pub/sub; etcd's lock
//! API waits inside etcd on a watch of the key before its own (as `concurrency.Mutex` does).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_client::Client;
use tokio::sync::Barrier;
use tokio::time::Instant;

use crate::etcd::EtcdLock;
use crate::figures::Figures;
use crate::paths::{BenchError, unexpected};

/// One contended run of one path: every acquire's latency and every hand-off's.
pub struct Contended {
    pub acquire: Figures,
    pub handoff: Figures,
}

/// What every contender shares: the grants counted so far and when the last release was sent.
struct Line {
    grants: AtomicUsize,
    released_at: Mutex<Option<Instant>>,
    barrier: Barrier,
}

/// One contender of a path: acquire (waiting as long as it takes), then release.
trait Contender: Send + 'static {
    type Held: Send;
    fn acquire(&mut self) -> impl Future<Output = Result<Self::Held, BenchError>> + Send;
    fn release(&mut self, held: Self::Held) -> impl Future<Output = Result<(), BenchError>> + Send;
}

/// A Leasehold client of its own, taking the lock through the `Lease` stream.
pub struct LeaseholdContender {
    client: Client,
    name: String,
}

impl LeaseholdContender {
    pub async fn connect(url: String, name: String) -> Result<Self, BenchError> {
        Ok(LeaseholdContender {
            client: Client::connect(url).await?,
            name,
        })
    }
}

impl Contender for LeaseholdContender {
    type Held = leasehold_client::LeaseGuard;

    async fn acquire(&mut self) -> Result<Self::Held, BenchError> {
        let lease = self.client.lease(self.name.clone());
        let lease = lease
            .ttl(Duration::from_secs(30))
            .wait(Duration::from_secs(60));
        Ok(lease.acquire().await?)
    }

    async fn release(&mut self, held: Self::Held) -> Result<(), BenchError> {
        match held.release().await? {
            true => Ok(()),
            false => Err(unexpected("contended release found the lease gone")),
        }
    }
}

impl Contender for EtcdLock {
    type Held = Vec<u8>;

    async fn acquire(&mut self) -> Result<Self::Held, BenchError> {
        self.lock().await
    }

    async fn release(&mut self, held: Self::Held) -> Result<(), BenchError> {
        self.unlock(held).await
    }
}

/// Leasehold with `clients` contenders (each its own connection) until `grants` acquires.
pub async fn leasehold(
    url: &str,
    clients: usize,
    grants: usize,
    hold: Duration,
) -> Result<Contended, BenchError> {
    let connect = |name| LeaseholdContender::connect(url.to_owned(), name);
    connect_and_run("Leasehold, Lease stream", clients, grants, hold, connect).await
}

/// etcd's lock API with `clients` contenders (each its own connection and lease).
pub async fn etcd(
    port: u16,
    clients: usize,
    grants: usize,
    hold: Duration,
) -> Result<Contended, BenchError> {
    let connect = |name: String| async move { EtcdLock::connect(port, &name).await };
    connect_and_run("etcd v3lock", clients, grants, hold, connect).await
}

/// Connects `clients` contenders on one fresh lock name, then runs them.
async fn connect_and_run<C, F, Fut>(
    path: &str,
    clients: usize,
    grants: usize,
    hold: Duration,
    connect: F,
) -> Result<Contended, BenchError>
where
    C: Contender,
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<C, BenchError>>,
{
    let name = format!(
        "bench-contended-{}",
        leasehold::store::Token::random().lease_id()
    );
    let mut contenders = Vec::with_capacity(clients);
    for _ in 0..clients {
        contenders.push(connect(name.clone()).await?);
    }
    run(path, contenders, grants, hold).await
}

async fn run<C: Contender>(
    path: &str,
    contenders: Vec<C>,
    grants: usize,
    hold: Duration,
) -> Result<Contended, BenchError> {
    let line = Arc::new(Line {
        grants: AtomicUsize::new(0),
        released_at: Mutex::new(None),
        barrier: Barrier::new(contenders.len() + 1),
    });
    let tasks: Vec<_> = contenders
        .into_iter()
        .map(|contender| tokio::spawn(contend(contender, line.clone(), grants, hold)))
        .collect();
    line.barrier.wait().await;
    let started = Instant::now();
    let (mut acquires, mut handoffs) = (Vec::new(), Vec::new());
    for task in tasks {
        let (a, h) = task
            .await
            .map_err(|e| unexpected(format!("contender panicked: {e}")))??;
        acquires.extend(a);
        handoffs.extend(h);
    }
    let elapsed = started.elapsed();
    Ok(Contended {
        acquire: Figures::from_samples(path, acquires, elapsed),
        handoff: Figures::from_samples(path, handoffs, elapsed),
    })
}

type Samples = (Vec<Duration>, Vec<Duration>);

/// One contender's loop: its acquires' latencies and the hand-offs it received.
async fn contend<C: Contender>(
    mut contender: C,
    line: Arc<Line>,
    grants: usize,
    hold: Duration,
) -> Result<Samples, BenchError> {
    let (mut acquires, mut handoffs) = (Vec::new(), Vec::new());
    line.barrier.wait().await;
    loop {
        let asked = Instant::now();
        let held = contender.acquire().await?;
        let holding = Instant::now();
        // Grants and releases alternate (one holder at a time), so the release taken here is
        // the one this grant followed.
        let released = line.released_at.lock().ok().and_then(|mut at| at.take());
        let counted = line.grants.fetch_add(1, Ordering::SeqCst);
        if counted < grants {
            acquires.push(holding - asked);
            if let Some(released) = released {
                handoffs.push(holding - released);
            }
        }
        if !hold.is_zero() {
            tokio::time::sleep(hold).await;
        }
        if let Ok(mut at) = line.released_at.lock() {
            *at = Some(Instant::now());
        }
        contender.release(held).await?;
        if counted + 1 >= grants {
            return Ok((acquires, handoffs));
        }
    }
}
