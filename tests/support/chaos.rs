//! The chaos checker. Workers contend for one lock; each holder does read-modify-write increments
//! on a counter in a separate Redis that refuses stale fencing tokens. Afterwards the checker
//! proves that no stale write was accepted and no increment was lost, whatever fault was injected.
//! Every operation is also recorded ([`History`]) and the history checked by Porcupine's models.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_client::fence::{Fenced, FencedKey};
use leasehold_client::{Client, LeaseGuard, Loss, LostReason, Session, SessionLease};
use tokio::sync::watch;
use tokio::time::{Instant, sleep};
use tokio_util::sync::CancellationToken;

use super::cluster::RedisCluster;
use super::faketime::FakeClock;
use super::history::{History, Kind, Outcome};
use super::netns::{Host, Net, Side};
use super::proxy::Proxy;
use super::sentinel::SentinelsIn;
use super::{RedisServer, ServerProcess};

mod primitives;
pub mod replication;
pub mod revoke;
pub mod several;
use primitives::Primitives;

pub const LOCK: &str = "chaos";
/// The election the candidates contend in, beside the lock ([`primitives`]).
pub const ELECTION: &str = "chaos-election";
/// A lock the workers never take, to probe the servers' connections.
const PROBE: &str = "chaos-probe";
/// Lock TTL: short, so faults play out in a few seconds.
pub const TTL: Duration = Duration::from_millis(500);
/// How long a worker keeps the lock per turn.
pub const HOLD_FOR: Duration = Duration::from_millis(150);
/// The longest turn of a worker told to hold until the lease is lost.
const MAX_TURN: Duration = Duration::from_secs(5);
/// Pause between two increments.
const OP_GAP: Duration = Duration::from_millis(10);
/// Four renewal periods (`history::renewal_period`): in a run whose fault may lose data, how
/// long the fault's victim thinks between a read and its write, and how long every other turn
/// lasts. The victim's server hears of the loss at its next renewal, and the victim stops
/// believing then; one that went on believing in a key it no longer has (its server renewing
/// the next holder's key) overlaps that holder's whole long turn, far beyond what the checker
/// permits, instead of being cut short by the fence at its next access or by the next
/// holder's release.
const LONG: Duration = Duration::from_millis(TTL.as_millis() as u64 * 4 / 3);
/// How long a worker waits for the lock per try.
const WAIT: Duration = Duration::from_secs(3);
/// Longer than the TTL: what "paused" and "cut" mean in these tests.
pub const FAULT_FOR: Duration = Duration::from_millis(1_500);

/// How long the line keeps a waiter whose server is frozen or dead.
pub const WAITER_TTL: Duration = Duration::from_millis(600);

/// Server flags that make faults show quickly: keepalive 200 ms + 300 ms, Redis calls 300 ms,
/// waiters of a frozen or dead server out of line after 600 ms.
pub const SERVER_FLAGS: &[&str] = &[
    "--waiter-ttl",
    "600ms",
    "--keepalive-interval",
    "200ms",
    "--keepalive-timeout",
    "300ms",
    "--redis-timeout",
    "300ms",
];

/// The processes, each in a network namespace of its own ([`Net`]) so that real partitions
/// can cut any of them off: a lock Redis, servers, and in Redlock mode more primaries (the lock
/// Redis is the first); a resource Redis on the test's loopback, never faulted.
pub struct Cluster {
    /// How the servers use Redis: `single`, `redlock`, `sentinel`, `cluster`; the first part of
    /// a run's name.
    pub mode: &'static str,
    pub lock_redis: RedisServer,
    /// Redlock's other primaries, or Sentinel's replica (none for a single Redis).
    pub primaries: Vec<RedisServer>,
    /// Sentinel's three Sentinels, in a namespace of their own.
    pub sentinels: Option<SentinelsIn>,
    /// Cluster mode's nodes (three primaries, a replica each), in a namespace of their own.
    /// (The lock Redis is then unused.)
    pub redis_cluster: Option<RedisCluster>,
    pub resource_redis: RedisServer,
    pub servers: Vec<ServerProcess>,
    /// The servers' `--redis URL` or `--redlock URLS`.
    redis_args: Vec<String>,
    /// The servers' flags: [`SERVER_FLAGS`], and any the run adds (`--redis-durable`).
    server_flags: Vec<String>,
    /// The namespaces, in the order of the processes above: the lock Redis's, the other
    /// primaries' (or the replica's), the servers'. Dropped after the processes.
    pub lock_host: Host,
    pub primary_hosts: Vec<Host>,
    /// The namespace of Redis's own engine: the Sentinels, or the cluster's nodes.
    engine_host: Option<Host>,
    pub server_hosts: Vec<Host>,
    /// Each server's clock, if they run on fake ones ([`Cluster::start_on_fake_clocks`]).
    pub clocks: Vec<FakeClock>,
    net: Net,
}

impl Cluster {
    /// Stops server `i` (SIGTERM, as a deploy does) and starts it again where it was.
    pub async fn restart(&mut self, i: usize) {
        self.servers[i].stop().await;
        self.kill_and_restart(i);
    }

    /// Kills server `i` (SIGKILL: nothing handed over) and starts it again where it was.
    pub fn kill_and_restart(&mut self, i: usize) {
        self.servers[i].kill();
        let redis: Vec<&str> = self.redis_args.iter().map(String::as_str).collect();
        let flags: Vec<&str> = self.server_flags.iter().map(String::as_str).collect();
        self.servers[i] = self.servers[i].start_again(&redis, &flags);
    }

    pub async fn start(servers: usize) -> Self {
        Self::start_mode("single", servers, 1, false)
    }

    /// One Redis keeping an append-only file it fsyncs before every reply (`appendonly yes`,
    /// `appendfsync always`), and servers that vouch for a lease only once it is on that disk
    /// (`--redis-durable`): a Redis killed and started again keeps every lease.
    pub async fn start_durable(servers: usize) -> Self {
        Self::start_mode("durable", servers, 1, false)
    }

    /// One Redis, each server on a fake clock of its own that the test can jump.
    pub async fn start_on_fake_clocks(servers: usize) -> Self {
        Self::start_mode("single", servers, 1, true)
    }

    /// Servers in `mode` (`redlock` on five primaries, `sentinel`, `cluster`), each on a fake
    /// clock of its own that the test can jump.
    pub async fn start_mode_on_fake_clocks(mode: &'static str, servers: usize) -> Self {
        let primaries = if mode == "redlock" {
            5
        } else if mode == "sentinel" {
            2
        } else {
            1
        };
        Self::start_mode(mode, servers, primaries, true)
    }

    /// Waits (bounded) until every server writes to every Redis again after a heal or a restart:
    /// a probe lock taken through each server must show up on each primary. What the next
    /// fault's arithmetic of majorities needs, since a client reconnects after a backoff.
    pub async fn until_every_server_reaches_every_redis(&self) {
        use fred::prelude::KeysInterface;
        let mut direct = vec![self.lock_redis.client().await];
        for primary in &self.primaries {
            direct.push(primary.client().await);
        }
        let key = super::lock_key(PROBE);
        for server in &self.servers {
            let client = Client::connect(server.url()).await.expect("connect probe");
            let reached = tokio::time::timeout(Duration::from_secs(10), async {
                loop {
                    let lease = client.lease(PROBE).ttl(Duration::from_secs(5)).acquire();
                    if let Ok(guard) = lease.await {
                        let mut everywhere = true;
                        for redis in &direct {
                            let found: i64 = redis.exists(&key).await.unwrap_or(0);
                            everywhere &= found == 1;
                        }
                        let _ = guard.release().await;
                        if everywhere {
                            return;
                        }
                    }
                    sleep(Duration::from_millis(50)).await;
                }
            })
            .await;
            reached.expect("a server did not reach every Redis within 10 s");
        }
    }

    /// Servers on Redlock over `primaries` independent Redis (the lock Redis and
    /// `primaries - 1` more).
    pub async fn start_redlock(servers: usize, primaries: usize) -> Self {
        Self::start_mode("redlock", servers, primaries, false)
    }

    /// Servers on Sentinel: the lock Redis is the primary, with one replica and three
    /// Sentinels, each in a namespace of its own.
    pub async fn start_sentinel(servers: usize) -> Self {
        Self::start_mode("sentinel", servers, 2, false)
    }

    /// Servers on a Redis Cluster of three primaries with a replica each, in a namespace of
    /// its own.
    pub async fn start_cluster(servers: usize) -> Self {
        Self::start_mode("cluster", servers, 1, false)
    }

    /// Waits (at most 30 s) until the Sentinels name the replica as the primary.
    pub fn until_replica_promoted(&self) {
        let (Some(sentinels), [replica]) = (&self.sentinels, self.primaries.as_slice()) else {
            panic!("not a Sentinel run");
        };
        let replica_ip = replica.ip().to_string();
        let started = std::time::Instant::now();
        while sentinels.current_primary().as_deref() != Some(replica_ip.as_str()) {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the Sentinels did not promote the replica"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn start_mode(mode: &'static str, servers: usize, primaries: usize, faked: bool) -> Self {
        let mut net = Net::create();
        let lock_host = net.host(&[Side::Redis]);
        let durable = mode == "durable";
        let aof = ["--appendonly", "yes", "--appendfsync", "always"];
        let aof = aof.iter().filter(|_| durable).map(|arg| arg.to_string());
        // A replica's first sync at once (not after diskless sync's 5 s delay): until it is
        // online, `--redis-replicas auto` counts no replica and waits for none.
        let sync_now = ["--repl-diskless-sync-delay", "0"].map(str::to_owned);
        let sync_now = sync_now.into_iter().filter(|_| mode == "sentinel");
        let lock_redis = RedisServer::start_in_with(&lock_host, aof.chain(sync_now).collect());
        let primary_hosts: Vec<Host> = (1..primaries).map(|_| net.host(&[Side::Redis])).collect();
        let others: Vec<RedisServer> = if mode == "sentinel" {
            let primary = vec![
                "--replicaof".to_owned(),
                lock_redis.ip().to_string(),
                lock_redis.port().to_string(),
            ];
            let replica = RedisServer::start_in_with(&primary_hosts[0], primary);
            until_online(&replica);
            vec![replica]
        } else {
            primary_hosts.iter().map(RedisServer::start_in).collect()
        };
        let engine_host = matches!(mode, "sentinel" | "cluster").then(|| net.host(&[Side::Redis]));
        let sentinels = engine_host
            .as_ref()
            .filter(|_| mode == "sentinel")
            .map(|host| SentinelsIn::start(host, &lock_redis, &others[0]));
        let redis_cluster = engine_host
            .as_ref()
            .filter(|_| mode == "cluster")
            .map(|host| RedisCluster::start_in(host, 3, 1));
        let redis_args = match (mode, &sentinels, &redis_cluster) {
            ("redlock", _, _) => {
                let mut urls = vec![lock_redis.url()];
                urls.extend(others.iter().map(RedisServer::url));
                vec!["--redlock".to_owned(), urls.join(",")]
            }
            (_, Some(sentinels), _) => vec!["--redis".to_owned(), sentinels.url()],
            (_, _, Some(cluster)) => vec!["--redis".to_owned(), cluster.url()],
            _ => vec!["--redis".to_owned(), lock_redis.url()],
        };
        let redis: Vec<&str> = redis_args.iter().map(String::as_str).collect();
        let mut server_flags: Vec<String> = SERVER_FLAGS.iter().map(|f| f.to_string()).collect();
        if durable {
            server_flags.push("--redis-durable".to_owned());
        }
        let flags: Vec<&str> = server_flags.iter().map(String::as_str).collect();
        let server_hosts: Vec<Host> = (0..servers)
            .map(|_| net.host(&[Side::Clients, Side::Redis]))
            .collect();
        let clocks: Vec<FakeClock> = if faked {
            server_hosts.iter().map(|_| FakeClock::new()).collect()
        } else {
            Vec::new()
        };
        let servers = server_hosts
            .iter()
            .enumerate()
            .map(|(i, host)| {
                let env = clocks.get(i).map(FakeClock::env).unwrap_or_default();
                ServerProcess::start_in_with_env(host, &redis, &flags, env)
            })
            .collect();
        Cluster {
            mode,
            lock_redis,
            primaries: others,
            sentinels,
            redis_cluster,
            resource_redis: RedisServer::start(),
            servers,
            redis_args,
            server_flags,
            lock_host,
            primary_hosts,
            engine_host,
            server_hosts,
            clocks,
            net,
        }
    }
}

/// Waits (at most 20 s) until `replica` has synced with its primary and follows it.
fn until_online(replica: &RedisServer) {
    let started = std::time::Instant::now();
    let info = || super::redis_cli_at(replica.ip(), replica.port(), &["info", "replication"]);
    while !info().contains("master_link_status:up") {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the replica never synced with its primary"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One turn of one worker with the lock.
#[derive(Clone, Debug)]
pub struct Hold {
    pub worker: usize,
    pub server: usize,
    pub token: u64,
    pub start: Instant,
    /// When the worker stopped believing it held the lock (was told, or let go).
    pub end: Instant,
    /// The end of the validity last confirmed to it: the belief ends at the earlier of this
    /// and `end` (by its own clock: what a loaded machine's late timer cannot push back).
    pub valid_until: Instant,
    /// Why, if the lease was lost rather than released.
    pub lost: Option<String>,
    /// If lost: the loss's code as its server told it (`Unspecified` for a refusal by the
    /// fence), and when the worker heard it.
    pub told: Option<(LostReason, Instant)>,
}

/// An increment the resource accepted.
#[derive(Clone, Debug)]
pub struct Write {
    pub worker: usize,
    pub token: u64,
    pub value: u64,
}

/// An access the resource refused for a stale token.
#[derive(Clone, Debug)]
pub struct Refused {
    pub worker: usize,
    pub token: u64,
}

/// The lock as seen by the worker that just took it.
#[derive(Clone, Copy, Debug)]
pub struct Current {
    pub worker: usize,
    pub server: usize,
    pub token: u64,
    pub since: Instant,
    /// Held on a session rather than a Lease stream of its own.
    pub on_session: bool,
}

impl Current {
    /// By when a holder whose server was killed is told: at once on a Lease stream (it
    /// breaks); on a session, by the end of its validity (the session client tries to resume
    /// the whole session first), up to a TTL.
    pub fn told_when_its_server_dies(&self) -> Duration {
        if self.on_session {
            TTL + Duration::from_millis(200)
        } else {
            Duration::from_millis(500)
        }
    }
}

#[derive(Default)]
struct Journal {
    holds: Vec<Hold>,
    writes: Vec<Write>,
    refused: Vec<Refused>,
    /// Acquisitions that failed, each when its answer came and why (a refusal for want of a
    /// replica's acknowledgement, Redis unreachable, ...).
    failed: Vec<(Instant, String)>,
}

struct Shared {
    journal: Mutex<Journal>,
    current: watch::Sender<Option<Current>>,
    /// Accepted writes so far, to await progress.
    writes: watch::Sender<usize>,
    /// A worker told to pause like a frozen process while holding (between read and write).
    pause: Mutex<Option<usize>>,
    /// A worker told to keep its turn until the lease is lost, so a fault's victim is known.
    hold_until_lost: Mutex<Option<usize>>,
    /// The fault may lose data: its victim thinks (`LONG`) between each read and write, and
    /// every other turn lasts `LONG`.
    losing_data: AtomicBool,
    history: Arc<History>,
    /// The holder an operator revoked, if any ([`revoke`]).
    revokes: revoke::Pins,
}

impl Shared {
    fn journal(&self) -> std::sync::MutexGuard<'_, Journal> {
        lock(&self.journal)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// A chaos run in progress.
pub struct Chaos {
    pub cluster: Cluster,
    shared: Arc<Shared>,
    stop: CancellationToken,
    workers: Vec<tokio::task::JoinHandle<()>>,
    /// Every other primitive's workers, beside the lock's.
    primitives: Option<Primitives>,
    /// The fault strikes a lock holder on a session (else on a Lease stream): see
    /// [`Chaos::fresh_holder`].
    strike_sessions: bool,
    data_loss: bool,
}

/// Which of the lock's workers hold their turns on sessions rather than Lease streams.
#[derive(Clone, Copy, PartialEq, Eq)]
enum OnSessions {
    None,
    /// The second half of the workers (one per server with four workers on two).
    Half,
    All,
}

impl Chaos {
    /// Workers on the lock (the first half on Lease streams, the second on sessions), and
    /// beside them every other primitive ([`primitives`]) on its own names.
    pub async fn start(cluster: Cluster, workers: usize) -> Self {
        Chaos::start_with(cluster, workers, false, true, OnSessions::Half).await
    }

    /// The lock alone, on Lease streams. (With an election beside it, killing the servers'
    /// pub/sub connections left the lock unused for 2.5 s: fred failed to resubscribe, "wrong
    /// number of arguments for 'subscribe'"; a known issue, not yet fixed.)
    pub async fn start_lock_only(cluster: Cluster, workers: usize) -> Self {
        Chaos::start_with(cluster, workers, false, false, OnSessions::None).await
    }

    /// As [`Chaos::start`], the lock's workers on Lease streams, each worker's client given
    /// every server (through its own proxies, its own first), so a lease resumes on another
    /// server when its server stops or dies.
    pub async fn start_resuming(cluster: Cluster, workers: usize) -> Self {
        Chaos::start_with(cluster, workers, true, true, OnSessions::None).await
    }

    /// As [`Chaos::start`], every lock worker holding its turns on a session (one per server
    /// it uses, opened again once it ends) rather than a Lease stream of its own.
    pub async fn start_on_sessions(cluster: Cluster, workers: usize) -> Self {
        Chaos::start_with(cluster, workers, false, true, OnSessions::All).await
    }

    async fn start_with(
        cluster: Cluster,
        workers: usize,
        every_server: bool,
        others: bool,
        on_sessions: OnSessions,
    ) -> Self {
        let (current, _) = watch::channel(None);
        let (writes, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            journal: Mutex::default(),
            current,
            writes,
            pause: Mutex::new(None),
            hold_until_lost: Mutex::new(None),
            losing_data: AtomicBool::new(false),
            history: Arc::default(),
            revokes: revoke::Pins::default(),
        });
        let stop = CancellationToken::new();
        let mut handles = Vec::new();
        for id in 0..workers {
            let mut proxies = Vec::new();
            for server in &cluster.servers {
                proxies.push(Proxy::start(server.addr).await);
            }
            let mut routes = Vec::new();
            for (first, proxy) in proxies.into_iter().enumerate() {
                let url = if every_server {
                    let n = cluster.servers.len();
                    let urls: Vec<String> = (0..n)
                        .map(|i| format!("http://{}", cluster.servers[(first + i) % n].addr))
                        .collect();
                    urls.join(",")
                } else {
                    proxy.url()
                };
                let client = Client::connect(url).await.expect("connect worker");
                routes.push((proxy, client));
            }
            let counter = FencedKey::new(cluster.resource_redis.client().await, "counter")
                .await
                .expect("fenced counter");
            let worker = Worker {
                id,
                server: id % routes.len(),
                sessions: match on_sessions {
                    OnSessions::None => false,
                    OnSessions::Half => id >= workers / 2,
                    OnSessions::All => true,
                }
                .then(|| routes.iter().map(|_| None).collect()),
                routes,
                counter,
                shared: shared.clone(),
                stop: stop.clone(),
            };
            handles.push(tokio::spawn(worker.run()));
        }
        let primitives = if others {
            // On the first two servers: enough to strike one and keep the other (2 cores).
            let servers = cluster.servers.iter().take(2);
            let urls: Vec<String> = servers.map(ServerProcess::url).collect();
            let redlock = cluster.mode == "redlock";
            let resource = &cluster.resource_redis;
            // Their clients know every server, their sessions resuming on the others too; an
            // observer follows the election in every run, the rolling restart included.
            Some(Primitives::start(&urls, resource, redlock, &stop, &mut handles).await)
        } else {
            None
        };
        Chaos {
            cluster,
            shared,
            stop,
            workers: handles,
            primitives,
            strike_sessions: on_sessions == OnSessions::All,
            data_loss: false,
        }
    }

    /// The fault may make Redis forget locks (restarted empty, keys expiring early, a failover
    /// that loses writes): two holders may then overlap until the first hears of it, and the
    /// checker permits (and reports) that, while fencing must still refuse the older.
    pub fn may_lose_data(&mut self) {
        self.data_loss = true;
        self.shared.losing_data.store(true, Ordering::SeqCst);
    }

    /// Waits for a worker to take the lock afresh (on a Lease stream; on a session in a run
    /// started with [`Chaos::start_on_sessions`]), and returns it. That worker keeps its turn
    /// until it is told the lease is lost (at most `MAX_TURN`), so the fault injected next lands
    /// on it.
    pub async fn fresh_holder(&self) -> Current {
        let mut current = self.shared.current.subscribe();
        current.borrow_and_update();
        let found = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                current.changed().await.expect("workers gone");
                let holder = *current.borrow_and_update();
                if let Some(holder) = holder.filter(|h| h.on_session == self.strike_sessions) {
                    return holder;
                }
            }
        })
        .await;
        let holder = found.expect("no worker took the lock within 10 s");
        *lock(&self.shared.hold_until_lost) = Some(holder.worker);
        holder
    }

    /// Waits until a turn newer than `previous` holds the lock (bounded): another worker, or the
    /// same one again (whatever tokens say: a broken build may repeat them).
    pub async fn handed_over(&self, previous: &Current) -> Current {
        let mut current = self.shared.current.subscribe();
        let next = tokio::time::timeout(
            Duration::from_secs(10),
            current.wait_for(|c| c.is_some_and(|c| c.since > previous.since)),
        )
        .await
        .expect("the lock was not handed over within 10 s")
        .expect("workers gone");
        next.expect("checked above")
    }

    /// Waits until `count` more increments have been accepted after now.
    pub async fn progress(&self, count: usize) {
        let mut writes = self.shared.writes.subscribe();
        let target = *writes.borrow_and_update() + count;
        tokio::time::timeout(Duration::from_secs(15), writes.wait_for(|n| *n >= target))
            .await
            .expect("no progress within 15 s")
            .expect("workers gone");
    }

    /// The faults that strike a server or a client rather than Redis, one after another on one
    /// run, each under a fresh holder: what every Redis mode must survive alike (tests/chaos.rs
    /// has each alone, on one Redis). Servers on fake clocks also have theirs jump back. Returns each holder hit, when, and by when it must have
    /// been told (`None`: a frozen client is told nothing; the fence stops it).
    pub async fn strike_servers_and_clients(
        &mut self,
    ) -> Vec<(Current, Instant, Option<Duration>)> {
        let mut struck = Vec::new();
        // Its server paused (SIGSTOP) past the TTL: the client's own clock ends its belief.
        let holder = self.fresh_holder().await;
        let paused = self.cluster.servers[holder.server].pid();
        super::signal(paused, "STOP");
        let at = Instant::now();
        self.handed_over(&holder).await;
        sleep(FAULT_FOR.saturating_sub(at.elapsed())).await;
        super::signal(paused, "CONT");
        struck.push((holder, at, Some(TTL)));
        self.progress(5).await;
        // The client frozen between a read and its write: its late write is refused.
        let holder = self.fresh_holder().await;
        self.pause_worker(holder.worker);
        let at = Instant::now();
        self.handed_over(&holder).await;
        sleep(FAULT_FOR).await;
        struck.push((holder, at, None));
        self.progress(5).await;
        // Its server cut off from its clients (packets vanish).
        let holder = self.fresh_holder().await;
        let host = &self.cluster.server_hosts[holder.server];
        host.cut(Side::Clients);
        let at = Instant::now();
        self.handed_over(&holder).await;
        sleep(FAULT_FOR.saturating_sub(at.elapsed())).await;
        self.cluster.server_hosts[holder.server].heal(Side::Clients);
        struck.push((holder, at, Some(TTL + Duration::from_millis(200))));
        self.progress(5).await;
        // Its server's clocks (on fake clocks only) jump back: time stands still there, its
        // renewals stop, and its client's own clock ends the belief; then forward again.
        if !self.cluster.clocks.is_empty() {
            let holder = self.fresh_holder().await;
            let clock = &self.cluster.clocks[holder.server];
            clock.jump(false, Duration::from_secs(2));
            let at = Instant::now();
            self.handed_over(&holder).await;
            sleep(Duration::from_secs(2).saturating_sub(at.elapsed())).await;
            self.cluster.clocks[holder.server].jump(true, Duration::ZERO);
            struck.push((holder, at, Some(TTL)));
            self.progress(5).await;
        }
        // Its server killed (SIGKILL), then started again where it was once the lock moved on
        // (sooner, the holder could resume its lease there: not a loss).
        let holder = self.fresh_holder().await;
        self.cluster.servers[holder.server].kill();
        let at = Instant::now();
        self.handed_over(&holder).await;
        self.cluster.kill_and_restart(holder.server);
        struck.push((holder, at, Some(holder.told_when_its_server_dies())));
        self.progress(5).await;
        struck
    }

    /// The nemesis for a forward clock jump on Redis (Kleppmann's case against Redlock): the
    /// lock key's remaining TTL cut to 1 ms where it lives (and every other key with a TTL, the
    /// other primitives', outside a cluster) (on every Redlock primary: a jump on
    /// a majority of them; on the slot's primary of a cluster). Returns how many keys it cut.
    pub async fn expire_lock_key_early(&self) -> usize {
        use fred::prelude::ClientLike;
        let key = super::lock_key(LOCK);
        let mut direct = Vec::new();
        if let Some(cluster) = &self.cluster.redis_cluster {
            direct.push(cluster.client().await);
        } else {
            direct.push(self.cluster.lock_redis.client().await);
            if self.cluster.mode == "redlock" {
                for primary in &self.cluster.primaries {
                    direct.push(primary.client().await);
                }
            }
        }
        let mut cut = 0;
        for redis in &direct {
            let expired: i64 = redis
                .custom(fred::cmd!("PEXPIRE"), vec![key.clone(), "1".into()])
                .await
                .unwrap_or(0);
            cut += usize::try_from(expired).unwrap_or(0);
        }
        // The other primitives' keys that expire (holds, permits, sessions, the leadership)
        // go too, as a jump of Redis's clock would take them; their fencing counters never
        // expire and stay. Not on a cluster: its keys live on three primaries.
        if self.primitives.is_some() && self.cluster.redis_cluster.is_none() {
            for redis in &direct {
                let keys: Vec<String> = redis
                    .custom(fred::cmd!("KEYS"), vec!["leasehold:*".to_owned()])
                    .await
                    .unwrap_or_default();
                for other in keys.into_iter().filter(|k| *k != key) {
                    let ttl: i64 = redis
                        .custom(fred::cmd!("PTTL"), vec![other.clone()])
                        .await
                        .unwrap_or(-1);
                    if ttl > 0 {
                        let _: Result<i64, _> = redis
                            .custom(fred::cmd!("PEXPIRE"), vec![other, "1".to_owned()])
                            .await;
                    }
                }
            }
        }
        // Once Redis has let the key go (a read after its 1 ms expires it), what a server that
        // saw it expire announces (an empty wake-up: every waiter tries at once), so the lock
        // is taken before the holder's server renews again: the schedule that shows whether
        // that renewal checks whose key it renews. (Else a waiter's timer and that renewal
        // race, and a renewal first finds the key merely gone.) No event tells of an expiry.
        for redis in &direct {
            super::within(super::EVENT_TIMEOUT, "the lock key expiring", async {
                loop {
                    let left: i64 = redis
                        .custom(fred::cmd!("PTTL"), vec![key.clone()])
                        .await
                        .unwrap_or(-2);
                    if !(0..=1).contains(&left) {
                        return;
                    }
                    sleep(Duration::from_millis(1)).await;
                }
            })
            .await;
        }
        let channel = leasehold::store::keys::lock_keys("leasehold:", LOCK).channel();
        for redis in &direct {
            let _: Result<i64, _> = redis
                .custom(fred::cmd!("SPUBLISH"), vec![channel.clone(), String::new()])
                .await;
        }
        cut
    }

    /// A whole run of [`Chaos::strike_servers_and_clients`] in `mode` (`redlock`, `sentinel`,
    /// `cluster`), four workers on two servers on fake clocks.
    pub async fn run_servers_and_clients_struck(mode: &'static str) {
        let cluster = Cluster::start_mode_on_fake_clocks(mode, 2).await;
        let mut chaos = Chaos::start(cluster, 4).await;
        chaos.progress(10).await;
        let struck = chaos.strike_servers_and_clients().await;
        let report = chaos.finish("servers-and-clients").await;
        report.assert_struck(&struck);
    }

    /// A whole run of the nemesis [`Chaos::expire_lock_key_early`] under a fresh holder, in any
    /// mode: Redis lost the lock, so a second holder may overlap the first until its server's next
    /// renewal tells it (permitted as data loss, reported, and shorter than a TTL), while fencing
    /// refuses the older holder's writes; the holder is told within `told_within`.
    pub async fn run_key_expired_early(mut self, told_within: Duration) {
        self.may_lose_data();
        self.progress(10).await;
        let holder = self.fresh_holder().await;
        // Taken first: the nemesis wakes the line, and the lock may be taken before it returns.
        let fault_at = Instant::now();
        let cut = self.expire_lock_key_early().await;
        assert!(cut >= 1, "the holder's key was not there to expire");
        self.handed_over(&holder).await;
        self.progress(10).await;
        let report = self.finish("key-expired-early").await;

        report.assert_holder_told(&holder, fault_at, told_within);
        assert!(
            report.max_overlap() < TTL,
            "overlap {:?}",
            report.max_overlap()
        );
        let (_, usable_again) = report.next_hold_after(fault_at);
        report.assert_safe(usable_again);
    }

    /// Tells `worker` to pause (like SIGSTOP) between its next read and write, with its
    /// connections frozen, for `FAULT_FOR`.
    pub fn pause_worker(&self, worker: usize) {
        *lock(&self.shared.pause) = Some(worker);
    }

    /// Stops the workers and returns what they did, once the checker has passed the recorded
    /// history of run `<mode>/<fault>` (its verdict comes first: it is the one that names a bug).
    pub async fn finish(self, fault: &'static str) -> Report {
        if let Some(primitives) = &self.primitives {
            primitives.enough().await;
        }
        super::stop_workers(&self.stop, self.workers).await;
        let counter = FencedKey::new(self.cluster.resource_redis.client().await, "counter")
            .await
            .expect("fenced counter");
        let final_value = match counter.get(u64::MAX >> 12).await.expect("read counter") {
            Fenced::Accepted(value) => value.map_or(0, |v| v.parse().expect("counter")),
            Fenced::Stale { .. } => panic!("checker token refused"),
        };
        let journal = std::mem::take(&mut *self.shared.journal());
        let report = Report {
            holds: journal.holds,
            writes: journal.writes,
            refused: journal.refused,
            failed: journal.failed,
            final_value,
            history: self.shared.history.clone(),
            mode: self.cluster.mode,
            fault,
        };
        let run = format!("{}/{fault}", report.mode);
        let data_loss = self
            .data_loss
            .then_some(super::history::renewal_period(TTL));
        report.history.check(&run, 1, data_loss);
        if let Some(primitives) = &self.primitives {
            let resource = &self.cluster.resource_redis;
            primitives.check(&run, resource, data_loss).await;
        }
        report
    }
}

struct Worker {
    id: usize,
    server: usize,
    /// With sessions: the session open through each route, if any.
    sessions: Option<Vec<Option<Session>>>,
    routes: Vec<(Proxy, Client)>,
    counter: FencedKey,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl Worker {
    async fn run(mut self) {
        while !self.stop.is_cancelled() {
            let called = Instant::now();
            let stop = self.stop.clone();
            let guard = tokio::select! {
                guard = self.acquire() => guard,
                () = stop.cancelled() => {
                    self.history().record(self.id, Kind::Acquire, called, None, Outcome::Unknown, 0, 0);
                    return;
                }
            };
            let answer = guard.as_ref().map(Guard::fencing_token);
            let start = self.history().record_acquire(self.id, called, answer);
            if let Err(error) = &guard {
                let failed = (start, error.to_string());
                self.shared.journal().failed.push(failed);
            }
            let Ok(guard) = guard else {
                // Server down or unreachable, or the wait ran out: try the next server.
                self.server = (self.server + 1) % self.routes.len();
                sleep(Duration::from_millis(20)).await;
                continue;
            };
            let token = guard.fencing_token();
            self.shared.current.send_replace(Some(Current {
                worker: self.id,
                server: self.server,
                token,
                since: start,
                on_session: self.sessions.is_some(),
            }));
            let lost = self.turn(&guard, token, start).await;
            let end = lost.as_ref().map_or_else(Instant::now, |(at, _)| *at);
            let kind = if lost.is_some() {
                Kind::Lost
            } else {
                Kind::Release
            };
            // The belief ends when the worker stops or is told, or when the validity last
            // confirmed to it runs out by its own clock, whichever comes first.
            let valid_until = guard.valid_until();
            let believed_until = end.min(valid_until);
            self.shared.current.send_replace(None);
            // A revoked holding's history ends at the revoke (its key deleted then).
            let revokes = &self.shared.revokes;
            let told = revoke::told(revokes, token, lost.as_ref(), guard.loss()).await;
            let (code, told_at) = (told.map(|(code, _)| code), told.map_or(end, |(_, at)| at));
            let recorded = revokes.ended(token, believed_until, code, told_at);
            if revokes.is_revoked(token) {
                // Struck: its next turns are ordinary ones, so the run ends soon.
                *lock(&self.shared.hold_until_lost) = None;
            }
            self.shared.journal().holds.push(Hold {
                worker: self.id,
                server: self.server,
                token,
                start,
                end,
                valid_until,
                lost: lost.map(|(_, loss)| loss.reason),
                told,
            });
            let _ = guard.release().await;
            self.history()
                .record_end(self.id, kind, recorded, Instant::now(), token);
        }
    }

    fn history(&self) -> &History {
        &self.shared.history
    }

    /// Takes the lock through the server in use: on a Lease stream of its own, or on that
    /// server's session (opened again once it ended).
    async fn acquire(&mut self) -> Result<Guard, leasehold_client::ClientError> {
        let client = &self.routes[self.server].1;
        let holder = format!("worker-{}", self.id);
        let Some(sessions) = &mut self.sessions else {
            let lease = client.lease(LOCK).ttl(TTL).wait(WAIT).holder(holder);
            return lease.acquire().await.map(Guard::Stream);
        };
        let session = match &mut sessions[self.server] {
            Some(session) if !session.is_ended() => session,
            slot => slot.insert(client.session().ttl(TTL).holder(holder).open().await?),
        };
        let lease = session.lock(LOCK).wait(WAIT).acquire().await;
        lease.map(Guard::Session)
    }

    /// Increments until the turn is over; returns when and why the lease was lost, if it was.
    /// Never abandons an access midway, so the journal matches what the resource saw.
    async fn turn(&self, guard: &Guard, token: u64, start: Instant) -> Option<(Instant, Loss)> {
        loop {
            let turn = if *lock(&self.shared.hold_until_lost) == Some(self.id) {
                MAX_TURN
            } else if self.shared.losing_data.load(Ordering::SeqCst) {
                LONG
            } else {
                HOLD_FOR
            };
            if start.elapsed() >= turn {
                break;
            }
            if guard.is_lost() {
                return Some((Instant::now(), guard.loss().await));
            }
            let called = Instant::now();
            let value = match self.counter.get(token).await.expect("resource get") {
                Fenced::Accepted(value) => {
                    let value = value.map_or(0, |v| v.parse::<u64>().expect("counter"));
                    let kind = Kind::Read;
                    self.history().record(
                        self.id,
                        kind,
                        called,
                        Some(Instant::now()),
                        Outcome::Ok,
                        token,
                        value,
                    );
                    value
                }
                Fenced::Stale { .. } => {
                    let returned = Some(Instant::now());
                    self.history().record(
                        self.id,
                        Kind::Read,
                        called,
                        returned,
                        Outcome::Refused,
                        token,
                        0,
                    );
                    return self.refused(token);
                }
            };
            let paused = {
                let mut pause = lock(&self.shared.pause);
                let mine = *pause == Some(self.id);
                if mine {
                    *pause = None;
                }
                mine
            };
            if paused {
                // A frozen process: no reads of lost(), no traffic, then it carries on with the
                // write it was about to make.
                let proxy = &self.routes[self.server].0;
                proxy.freeze();
                sleep(FAULT_FOR).await;
                proxy.resume();
            } else if guard.is_lost() {
                return Some((Instant::now(), guard.loss().await));
            }
            let victim = *lock(&self.shared.hold_until_lost) == Some(self.id);
            if victim && self.shared.losing_data.load(Ordering::SeqCst) {
                tokio::select! {
                    () = sleep(LONG) => {}
                    loss = guard.loss() => return Some((Instant::now(), loss)),
                }
            }
            let called = Instant::now();
            let written = self
                .counter
                .set(token, &(value + 1).to_string())
                .await
                .expect("resource set");
            let outcome = match written {
                Fenced::Accepted(()) => Outcome::Ok,
                Fenced::Stale { .. } => Outcome::Refused,
            };
            let returned = Some(Instant::now());
            self.history().record(
                self.id,
                Kind::Write,
                called,
                returned,
                outcome,
                token,
                value + 1,
            );
            match written {
                Fenced::Accepted(()) => {
                    self.shared.journal().writes.push(Write {
                        worker: self.id,
                        token,
                        value: value + 1,
                    });
                    self.shared.writes.send_modify(|n| *n += 1);
                }
                Fenced::Stale { .. } => return self.refused(token),
            }
            tokio::select! {
                () = sleep(OP_GAP) => {}
                loss = guard.loss() => return Some((Instant::now(), loss)),
            }
        }
        None
    }

    fn refused(&self, token: u64) -> Option<(Instant, Loss)> {
        self.shared.journal().refused.push(Refused {
            worker: self.id,
            token,
        });
        let reason = "the resource refused a stale fencing token";
        Some((Instant::now(), revoke::refusal(reason)))
    }
}

/// A worker's hold on the lock: on a Lease stream, or on a session.
enum Guard {
    Stream(LeaseGuard),
    Session(SessionLease),
}

impl Guard {
    fn fencing_token(&self) -> u64 {
        match self {
            Guard::Stream(guard) => guard.fencing_token(),
            Guard::Session(lease) => lease.fencing_token(),
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            Guard::Stream(guard) => guard.is_lost(),
            Guard::Session(lease) => lease.is_lost(),
        }
    }

    async fn lost(&self) -> String {
        self.loss().await.reason
    }

    async fn loss(&self) -> Loss {
        match self {
            Guard::Stream(guard) => guard.loss().await,
            Guard::Session(lease) => lease.loss().await,
        }
    }

    fn valid_until(&self) -> Instant {
        match self {
            Guard::Stream(guard) => guard.valid_until(),
            Guard::Session(lease) => lease.valid_until(),
        }
    }

    async fn release(self) -> Result<bool, leasehold_client::ClientError> {
        match self {
            Guard::Stream(guard) => guard.release().await,
            Guard::Session(lease) => lease.release().await,
        }
    }
}

/// What the workers did, and the checker's verdicts on it.
pub struct Report {
    pub holds: Vec<Hold>,
    pub writes: Vec<Write>,
    pub refused: Vec<Refused>,
    /// The lock's acquisitions that failed: when, and the error.
    pub failed: Vec<(Instant, String)>,
    pub final_value: u64,
    history: Arc<History>,
    mode: &'static str,
    /// The run's name after its mode, e.g. `server-killed`.
    fault: &'static str,
}

impl Report {
    /// Accepted writes whose token is older than one accepted before them.
    pub fn stale_writes_accepted(&self) -> usize {
        let mut by_value = self.writes.clone();
        by_value.sort_by_key(|w| w.value);
        let mut newest = 0;
        let mut stale = 0;
        for write in by_value {
            if write.token < newest {
                stale += 1;
            }
            newest = newest.max(write.token);
        }
        stale
    }

    /// Increments that went missing: the accepted values must be exactly 1..=n, and the counter n.
    pub fn lost_increments(&self) -> usize {
        let mut values: Vec<u64> = self.writes.iter().map(|w| w.value).collect();
        values.sort_unstable();
        let duplicates = values.windows(2).filter(|w| w[0] == w[1]).count();
        let expected = self.writes.len() as u64;
        duplicates + self.final_value.abs_diff(expected) as usize
    }

    /// The longest time two workers both believed they held the lock.
    pub fn max_overlap(&self) -> Duration {
        let mut longest = Duration::ZERO;
        for (i, a) in self.holds.iter().enumerate() {
            for b in &self.holds[i + 1..] {
                let start = a.start.max(b.start);
                let end = a.end.min(b.end);
                if end > start {
                    longest = longest.max(end - start);
                }
            }
        }
        longest
    }

    /// The hold that began at `current`.
    pub fn hold_of(&self, current: &Current) -> &Hold {
        self.holds
            .iter()
            .find(|h| h.worker == current.worker && h.token == current.token)
            .expect("the holder's turn was recorded")
    }

    /// The turn that began at `holder` ended with `Lost`, its belief over no later than `bound`
    /// after the fault: told by then, or its confirmed validity over by then by its own clock
    /// (on a loaded machine the task that tells it may run a few ms later).
    pub fn assert_holder_told(&self, holder: &Current, fault_at: Instant, bound: Duration) {
        let hold = self.hold_of(holder);
        let reason = hold
            .lost
            .as_deref()
            .expect("the holder was not told it lost the lock");
        let told = hold.end.saturating_duration_since(fault_at);
        let after = hold.end.min(hold.valid_until);
        let after = after.saturating_duration_since(fault_at);
        let on = if holder.on_session {
            "a session"
        } else {
            "a Lease stream"
        };
        assert!(
            after <= bound,
            "believed until {after:?} after the fault (bound {bound:?}; told after {told:?}), on {on}: {reason}"
        );
    }

    /// After [`Chaos::strike_servers_and_clients`]: each holder struck was told in time, and
    /// the checker's verdict and the fenced counter hold (`usable_again` figures the first).
    pub fn assert_struck(&self, struck: &[(Current, Instant, Option<Duration>)]) {
        for (i, (holder, at, bound)) in struck.iter().enumerate() {
            if let Some(bound) = bound {
                println!("struck {i}: {:?}", self.hold_of(holder).lost);
                self.assert_holder_told(holder, *at, *bound);
            }
        }
        let (_, usable_again) = self.next_hold_after(struck[0].1);
        self.assert_safe(usable_again);
    }

    /// The first turn that started after `instant` (excluding `current`'s), and how long after.
    pub fn next_hold_after(&self, instant: Instant) -> (&Hold, Duration) {
        let hold = self
            .holds
            .iter()
            .filter(|h| h.start > instant)
            .min_by_key(|h| h.start)
            .expect("no one took the lock after the fault");
        (hold, hold.start - instant)
    }

    /// After `holder`'s server froze, died or was cut off at `fault_at`: the next turn is on
    /// another server, within the key's TTL (nobody released it) plus, if the head of the line
    /// was a waiter on that server, the waiter TTL it takes to drop it. Returns how long after.
    pub fn taken_over_elsewhere(&self, holder: &Current, fault_at: Instant) -> Duration {
        let (next, usable_again) = self.next_hold_after(fault_at);
        assert_ne!(next.server, holder.server);
        assert!(
            usable_again <= TTL + WAITER_TTL + Duration::from_millis(300),
            "usable again after {usable_again:?}"
        );
        usable_again
    }

    /// The longest time the lock sat unused between two turns that started after `instant`.
    pub fn longest_gap_after(&self, instant: Instant) -> Duration {
        let mut holds: Vec<&Hold> = self.holds.iter().filter(|h| h.end > instant).collect();
        holds.sort_by_key(|h| h.start);
        holds
            .windows(2)
            .map(|w| w[1].start.saturating_duration_since(w[0].end))
            .max()
            .unwrap_or_default()
    }

    /// The safety verdict every fault must pass, and a line of figures for the record.
    pub fn assert_safe(&self, usable_again: Duration) {
        let fault = self.fault;
        let stale = self.stale_writes_accepted();
        let lost = self.lost_increments();
        println!(
            "FIGURE fault={fault} usable_again_ms={} overlap_ms={} writes={} stale_refused={} stale_accepted={stale} lost_increments={lost}",
            usable_again.as_millis(),
            self.max_overlap().as_millis(),
            self.writes.len(),
            self.refused.len(),
        );
        assert!(
            self.writes.len() >= 10,
            "too little work to judge: {}",
            self.writes.len()
        );
        assert_eq!(stale, 0, "{fault}: accepted writes from a stale holder");
        assert_eq!(
            lost,
            0,
            "{fault}: increments lost (final {}, {} writes)",
            self.final_value,
            self.writes.len()
        );
    }
}
