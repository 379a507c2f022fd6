//! Nothing is vouched for until Redis has it where a failover will find it: a grant, a renewal
//! and a resume are answered only once the primary's replicas acknowledged them (`WAIT`). A
//! replica held back (SIGSTOP: it keeps its connection and answers nothing) makes a grant come
//! back REDIS_NOT_REPLICATED with the lock given back, and a renewal extend nothing, so the
//! holder hears Lost before the copy a failover would promote runs out. Real `redis-server`
//! primaries and replicas throughout.

use crate::eviction::{reason, serve, started, stderr_of};
use crate::support;

use std::time::Duration;

use leasehold::pb::lease_response::Event;
use support::*;
use tonic::Code;

/// A primary and one replica of it, linked and in sync.
struct Replicated {
    primary: RedisServer,
    replica: RedisServer,
}

impl Replicated {
    fn start() -> Self {
        Self::start_with(&[])
    }

    fn start_with(primary_flags: &[&str]) -> Self {
        let primary = RedisServer::start_with(primary_flags);
        let port = primary.port().to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
        until_redis_cli(primary.port(), &["info", "replication"], |out| {
            out.contains("state=online")
        });
        Replicated { primary, replica }
    }

    /// Whether the replica has `key` now (read while it runs).
    fn replica_has(&self, key: &str) -> bool {
        redis_cli(self.replica.port(), &["exists", key]).trim() == "1"
    }
}

/// A unary acquisition refused: its status.
async fn refused(server: &TestServer, name: &str) -> tonic::Status {
    let mut client = server.client().await;
    match client.acquire(unary_acquire(name, 5_000, 0, "b")).await {
        Err(status) => status,
        Ok(answer) => panic!("granted without the replica's acknowledgement: {answer:?}"),
    }
}

/// Waits (bounded) until `key` is gone from `redis`.
async fn until_gone(redis: &RedisServer, key: &str) {
    within(EVENT_TIMEOUT, "the unacknowledged lock given back", async {
        while redis_cli(redis.port(), &["exists", key]).trim() != "0" {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_is_answered_once_the_replica_has_it_and_refused_and_given_back_when_it_does_not() {
    let redis = Replicated::start();
    let server = TestServer::start(&redis.primary).await;
    let mut client = server.client().await;
    let granted = client
        .acquire(unary_acquire("acked", 5_000, 0, "a"))
        .await
        .expect("granted")
        .into_inner();
    assert!(granted.acquired);
    // Answered only after WAIT: the replica has it the moment the holder hears of it.
    assert!(redis.replica_has(&lock_key("acked")));

    redis.replica.pause();
    let status = refused(&server, "held-back").await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(reason(&status), "REDIS_NOT_REPLICATED", "{status:?}");
    assert!(status.message().contains("replica"), "{}", status.message());
    // The write a failover would lose is not left behind to block the name.
    until_gone(&redis.primary, &lock_key("held-back")).await;

    // A stream's grant likewise: it hears the refusal, not Acquired.
    let mut stream = LeaseStream::acquire(&mut client, "held-back-stream", 5_000, 0, "c").await;
    match stream.next_significant().await {
        Err(status) => assert_eq!(reason(&status), "REDIS_NOT_REPLICATED", "{status:?}"),
        other => panic!("expected REDIS_NOT_REPLICATED, got {other:?}"),
    }
    until_gone(&redis.primary, &lock_key("held-back-stream")).await;

    // A waiter rides it out inside its wait, and is granted once the replica is back.
    let mut waiter = server.client().await;
    let waiting = tokio::spawn(async move {
        waiter
            .acquire(unary_acquire("held-back", 5_000, 10_000, "d"))
            .await
    });
    // Its first attempt wrote the lock on the primary, unacknowledged: it keeps it while it
    // waits, and is told of it only once the replica has it.
    within(EVENT_TIMEOUT, "the waiter's first attempt", async {
        while redis_cli(redis.primary.port(), &["exists", &lock_key("held-back")]).trim() != "1" {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    redis.replica.resume();
    let granted = within(EVENT_TIMEOUT, "the waiter granted", waiting)
        .await
        .expect("task")
        .expect("granted once the replica is back")
        .into_inner();
    assert!(granted.acquired);
    assert!(redis.replica_has(&lock_key("held-back")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_the_replica_did_not_acknowledge_extends_nothing_and_the_holder_hears_lost() {
    let redis = Replicated::start();
    let server = TestServer::start(&redis.primary).await;
    let mut client = server.client().await;
    let ttl = Duration::from_millis(1_000);
    let mut stream = LeaseStream::acquire(&mut client, "renewed", 1_000, 0, "a").await;
    stream.acquired().await;
    // The replica's copy now expires at most a TTL from here: the holder must stop believing
    // before then, however well the primary itself renews.
    let held_back = tokio::time::Instant::now();
    redis.replica.pause();
    match stream.next_significant().await {
        Ok(Some(Event::Lost(_))) => {}
        other => panic!("expected Lost, got {other:?}"),
    }
    let told = held_back.elapsed();
    assert!(
        told < ttl,
        "the holder believed for {told:?} after the replica stopped, past the TTL its copy keeps"
    );
    redis.replica.resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_n_refuses_grants_while_fewer_are_connected_and_0_never_waits() {
    let redis = Replicated::start();
    let url = redis.primary.url();
    // Two required, one connected: refused at once, and said at start.
    let mut two = serve(&["--redis", &url], &["--redis-replicas", "2"]);
    let (addr, _) = started(&mut two, false).await;
    let mut client = connect(&addr).await;
    let status = client
        .acquire(unary_acquire("two", 5_000, 0, "a"))
        .await
        .expect_err("granted with one replica of two");
    assert_eq!(reason(&status), "REDIS_NOT_REPLICATED", "{status:?}");
    let info = tonic_types::StatusExt::get_details_error_info(&status).expect("ErrorInfo");
    assert_eq!(info.metadata.get("needed").map(String::as_str), Some("2"));
    let log = stderr_of(two).await;
    assert!(
        log.contains("--redis-replicas 2 needs more: no new lease on it"),
        "{log}"
    );

    // 0: never waits, so a held-back replica does not stop a grant (and the start says what
    // that costs).
    redis.replica.pause();
    let mut off = serve(&["--redis", &url], &["--redis-replicas", "0"]);
    let (addr, _) = started(&mut off, false).await;
    let mut client = connect(&addr).await;
    let granted = within(
        EVENT_TIMEOUT,
        "a grant without waiting",
        client.acquire(unary_acquire("off", 5_000, 0, "a")),
    )
    .await
    .expect("granted")
    .into_inner();
    assert!(granted.acquired);
    let log = stderr_of(off).await;
    assert!(log.contains("a failover may lose a lease"), "{log}");
    redis.replica.resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_is_refused_at_start_where_redis_can_keep_no_disk_promise() {
    // Redis 7.0 (no WAITAOF) with the default appendfsync everysec: refused in one sentence.
    let redis = RedisServer::start_with(&["--appendonly", "yes"]);
    let child = serve(&["--redis", &redis.url()], &["--redis-durable"]);
    let output = within(EVENT_TIMEOUT, "serve exits", child.wait_with_output())
        .await
        .expect("serve's output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !stderr.contains("WAITAOF") || output.status.code() != Some(78) {
        // A Redis 7.2+ has WAITAOF: then durable starts. Only the refusal is checked here.
        let version = redis_cli(redis.port(), &["info", "server"]);
        assert!(
            version.contains("redis_version:7.2") || version.contains("redis_version:8"),
            "not refused: {stderr}"
        );
        return;
    }
    assert_eq!(
        stderr.trim_end(),
        format!(
            "leasehold: --redis-durable needs appendonly yes and either Redis 7.2+ (WAITAOF) or appendfsync always, and redis 127.0.0.1:{} has neither WAITAOF nor appendfsync always: set them, upgrade, or drop --redis-durable",
            redis.port()
        )
    );
    // appendfsync always: the reply comes after the fsync, so durable serves.
    let always = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut child = serve(&["--redis", &always.url()], &["--redis-durable"]);
    let (addr, _) = started(&mut child, false).await;
    let mut client = connect(&addr).await;
    assert!(
        client
            .acquire(unary_acquire("durable", 5_000, 0, "a"))
            .await
            .expect("granted")
            .into_inner()
            .acquired
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restarted_empty_grants_nothing_until_the_leases_it_lost_have_expired() {
    let mut redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let mut client = server.client().await;
    let ttl = Duration::from_millis(2_000);
    let mut holder = LeaseStream::acquire(&mut client, "kept", 2_000, 0, "a").await;
    holder.acquired().await;
    let restarted = tokio::time::Instant::now();
    redis.restart_empty();
    // The server noticed (its re-check after the reconnection tells the holder at once)...
    match holder.next_significant().await {
        Ok(Some(Event::Lost(_))) => {}
        other => panic!("expected Lost, got {other:?}"),
    }
    // ...and another caller, on the same name, is refused while the first may still believe
    // (a holder cut off from its server would), then granted once a TTL has passed since the
    // restart.
    let mut other = server.client().await;
    let granted = within(EVENT_TIMEOUT, "a grant after the hold", async {
        loop {
            match other.acquire(unary_acquire("kept", 2_000, 0, "b")).await {
                Ok(answer) => return answer.into_inner(),
                Err(status) => {
                    let why = reason(&status);
                    assert!(
                        why == "REDIS_RESTARTED_EMPTY" || why == "REDIS_UNAVAILABLE",
                        "{status:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    })
    .await;
    assert!(granted.acquired);
    let after = restarted.elapsed();
    assert!(
        after >= ttl - Duration::from_millis(100),
        "granted {after:?} after Redis came back empty, while the old holder could still believe for {ttl:?}"
    );
}

/// Every primitive's grant waits for the replica: a permit, a shared hold, a lease over several
/// names, a session's lease, and an election (its lease and its announcement). While the replica
/// is held back none is granted (the no-wait ones are refused REDIS_NOT_REPLICATED; the
/// candidate, which waits, is not elected); once it is back, all are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_s_grant_waits_for_the_replica() {
    let redis = Replicated::start();
    let server = TestServer::start(&redis.primary).await;
    let client = leasehold_client::Client::connect(server.url())
        .await
        .unwrap();
    let ttl = Duration::from_secs(5);
    let session = client.session().ttl(ttl).open().await.unwrap();
    redis.replica.pause();
    let refused = |result: Result<_, leasehold_client::ClientError>, what: &str| match result {
        Err(error) => assert_eq!(
            error.refusal().map(|r| r.reason).as_deref(),
            Some("REDIS_NOT_REPLICATED"),
            "{what}: {error}"
        ),
        Ok(_) => panic!("{what} granted without the replica"),
    };
    refused(
        client
            .lease("permit")
            .limit(2)
            .ttl(ttl)
            .acquire()
            .await
            .map(drop),
        "a permit",
    );
    refused(
        client
            .lease("shared")
            .shared()
            .ttl(ttl)
            .acquire()
            .await
            .map(drop),
        "a shared hold",
    );
    refused(
        client
            .lease("first")
            .more_names(["second"])
            .ttl(ttl)
            .acquire()
            .await
            .map(drop),
        "a lease over two names",
    );
    refused(
        session.lock("member").acquire().await.map(drop),
        "a session's lease",
    );
    let mut candidate = client.campaign("leader", "a", ttl).await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(1_500), candidate.elected())
            .await
            .is_err(),
        "elected without the replica"
    );
    redis.replica.resume();
    within(
        EVENT_TIMEOUT,
        "elected once the replica is back",
        candidate.elected(),
    )
    .await
    .unwrap();
    client
        .lease("permit")
        .limit(2)
        .ttl(ttl)
        .acquire()
        .await
        .unwrap();
    client
        .lease("shared")
        .shared()
        .ttl(ttl)
        .acquire()
        .await
        .unwrap();
    let both = client.lease("first").more_names(["second"]);
    both.ttl(ttl).acquire().await.unwrap();
    // Held (the guard kept), and on the replica the moment it was answered.
    let _member = session.lock("member").acquire().await.unwrap();
    assert!(redis.replica_has(&lock_key("member")));
}

/// On a Cluster each primary waits for its own replicas: with one primary's replica held back,
/// a grant in that primary's slots is refused REDIS_NOT_REPLICATED, while grants on the other
/// primaries go on (their `WAIT`s go to their own nodes) and are on their replicas when answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_each_primary_waits_for_its_own_replica() {
    use support::cluster::RedisCluster;
    let cluster = RedisCluster::start(3, 1);
    let server = TestServer::start_at(&cluster.url(), "leasehold:", fast_keepalive()).await;
    let mut client = server.client().await;
    let (held_back, _) = cluster.slot_of(&lock_key("held-back"));
    let replica = cluster.replica_of(held_back);
    // A name on another primary, and that primary's replica (asked before one is paused: a
    // paused node answers no redis-cli).
    let elsewhere = (0..100)
        .map(|i| format!("elsewhere-{i}"))
        .find(|name| cluster.slot_of(&lock_key(name)).0 != held_back)
        .expect("a name on another primary");
    let (primary, _) = cluster.slot_of(&lock_key(&elsewhere));
    let its_replica = cluster.replica_of(primary);
    cluster.signal(replica, "STOP");
    let asked = client.acquire(unary_acquire("held-back", 5_000, 0, "a"));
    let status = within(EVENT_TIMEOUT, "the refusal", asked)
        .await
        .expect_err("granted without its primary's replica");
    assert_eq!(reason(&status), "REDIS_NOT_REPLICATED", "{status:?}");
    let asked = client.acquire(unary_acquire(&elsewhere, 5_000, 0, "a"));
    let granted = within(EVENT_TIMEOUT, "the grant elsewhere", asked)
        .await
        .expect("granted on another primary")
        .into_inner();
    assert!(granted.acquired);
    // KEYS (keyless, so a replica answers it without READONLY): the replica has it already.
    let on_replica = cluster.run(its_replica, &["keys", "*"]);
    assert!(on_replica.contains(&lock_key(&elsewhere)), "{on_replica}");
    cluster.signal(replica, "CONT");
}
