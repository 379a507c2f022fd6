//! Behind Sentinel (one primary, one replica, three Sentinels): the server follows a failover,
//! a lease whose key the replica never received is told Lost, and fencing tokens after the
//! failover are above every token before it; and the chaos workload, its history checked, while
//! the primary is paused, killed (the replica promoted), and then the new primary partitioned.

use crate::support;

use std::time::Duration;

use leasehold_client::Client;
use support::sentinel::RedisSentinel;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_follows_a_failover_and_a_grant_the_replica_missed_is_refused() {
    let mut redis = RedisSentinel::start();
    let server = TestServer::start_at(&redis.url(), "leasehold:", fast_keepalive()).await;
    let client = Client::connect(server.url()).await.unwrap();
    // Longer than the failover (1 s down-after, then the Sentinels' election and promotion).
    let ttl = Duration::from_secs(10);

    let replicated = client.lease("replicated").ttl(ttl).acquire().await.unwrap();
    within(Duration::from_secs(5), "the key on the replica", async {
        while !redis.holds(redis.replica, &lock_key("replicated")) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;

    // The replica frozen and its replication link cut (a frozen process still receives into its
    // socket): this lease's key would reach only the primary, which then dies. The replica did
    // not acknowledge it, so it is not granted (and was given back), not granted and then lost.
    redis.signal(redis.replica, "STOP");
    redis.cut_replication();
    let refused = client
        .lease("missed")
        .ttl(ttl)
        .acquire()
        .await
        .expect_err("granted without the replica's acknowledgement");
    assert_eq!(
        refused.refusal().map(|r| r.reason).as_deref(),
        Some("REDIS_NOT_REPLICATED"),
        "{refused}"
    );
    let before = replicated.fencing_token();
    let primary = redis.primary;
    redis.kill(primary);
    redis.signal(redis.replica, "CONT");
    redis.until_promoted();

    // New acquisitions work on the new primary, with fencing tokens above every earlier one.
    let started = tokio::time::Instant::now();
    let after = loop {
        match client.lease("missed").ttl(ttl).acquire().await {
            Ok(guard) => break guard,
            Err(error) => {
                assert!(
                    started.elapsed() < Duration::from_secs(15),
                    "no acquisition after the failover: {error}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert!(after.fencing_token() > before);
    // The replicated lease went on through it, unless told otherwise; never both.
    if !replicated.is_lost() {
        assert!(redis.holds(redis.replica, &lock_key("replicated")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_moves_to_another_server_when_its_server_stops() {
    let redis = RedisSentinel::start();
    let a = TestServer::start_at(&redis.url(), "leasehold:", fast_keepalive()).await;
    let b = TestServer::start_at(&redis.url(), "leasehold:", fast_keepalive()).await;
    a_lease_moves_when_its_server_stops(a, &b).await;
}

/// The chaos workload (four workers on two servers, a fenced counter, an election beside the
/// lock, every operation recorded) while the primary is paused (past the TTL, short of the
/// Sentinels' down-after), then killed and Sentinel promotes the replica, then while the new primary is partitioned from everyone (servers and Sentinels,
/// with no replica left to promote): each time the holder is told by the end of its validity,
/// the lock goes on once the servers reach a primary, and the checker passes the history. Redis
/// replicates asynchronously, but the failover (down-after 1 s) is longer than the TTL, so every
/// lease has run out before the replica is promoted: nothing it missed can let two holders
/// overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_primary_paused_then_killed_then_the_new_one_partitioned() {
    use support::chaos::{Chaos, Cluster, FAULT_FOR, TTL};
    use support::netns::Side;
    use tokio::time::Instant;
    let mut chaos = Chaos::start(Cluster::start_sentinel(2).await, 4).await;
    chaos.progress(10).await;
    // The primary paused 700 ms: past the TTL, short of the Sentinels' down-after (1 s).
    let paused = chaos.fresh_holder().await;
    chaos.cluster.lock_redis.pause();
    let paused_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(700)).await;
    chaos.cluster.lock_redis.resume();
    chaos.progress(10).await;

    let holder = chaos.fresh_holder().await;
    chaos.cluster.lock_redis.kill();
    let fault_at = Instant::now();
    chaos.handed_over(&holder).await;
    chaos.cluster.until_replica_promoted();
    chaos.progress(10).await;

    let second = chaos.fresh_holder().await;
    let host = &chaos.cluster.primary_hosts[0];
    host.cut(Side::Redis);
    let cut_at = Instant::now();
    tokio::time::sleep(FAULT_FOR).await;
    host.heal(Side::Redis);
    chaos.progress(10).await;
    let report = chaos.finish("primary-paused-killed-then-cut").await;

    let told_within = TTL + Duration::from_millis(200);
    report.assert_holder_told(&paused, paused_at, told_within);
    report.assert_holder_told(&holder, fault_at, told_within);
    report.assert_holder_told(&second, cut_at, told_within);
    let (_, usable_again) = report.next_hold_after(fault_at);
    report.assert_safe(usable_again);
}

/// The faults that strike servers and clients (a server paused, a client frozen, a server cut
/// off from its clients, a server's clocks jumping back, a server killed), one after another,
/// behind Sentinel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_servers_and_clients_struck_one_after_another() {
    support::chaos::Chaos::run_servers_and_clients_struck("sentinel").await;
}

/// The lock key's TTL cut to 1 ms under its holder on the primary (a forward clock jump on Redis,
/// by a nemesis): Redis lost the lock, so a second holder may overlap the first until its server's
/// next renewal tells it (permitted as data loss, and reported), while fencing refuses the older
/// holder's writes; the history is checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_the_lock_key_expires_early_under_the_holder() {
    use support::chaos::{Chaos, Cluster, TTL};
    let chaos = Chaos::start(Cluster::start_sentinel(2).await, 4).await;
    chaos
        .run_key_expired_early(TTL + Duration::from_millis(200))
        .await;
}

/// A semaphore's permits churned through three servers behind Sentinel while one server, with a
/// holder, is paused past the TTL: never more than the limit at once, history checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_a_semaphore_holders_server_paused() {
    let cluster = support::chaos::Cluster::start_sentinel(3).await;
    support::permits::churn_through_a_paused_server(&cluster.servers, cluster.mode).await;
}

/// The replica's link held back (the primary still counts it as connected) while a fresh holder
/// renews and the workers ask for grants, then the primary killed and the replica promoted by
/// the Sentinels without what was held back: the holder is told lost within its TTL, nothing is
/// granted meanwhile (REDIS_NOT_REPLICATED, retried), and no two holders overlap, the history
/// checked without the data-loss allowance. The struck holder is on a Lease stream, then on a
/// session; every other primitive (election, semaphore, read-write lock) runs beside it in both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_the_replica_held_back_then_the_primary_killed() {
    use support::chaos::{Chaos, Cluster};
    let chaos = Chaos::start(Cluster::start_sentinel(2).await, 4).await;
    chaos
        .run_replica_held_back_then_primary_killed("replica-held-back-then-primary-killed")
        .await;
}

/// As above, the struck holder on a session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_the_replica_held_back_then_the_primary_killed_on_sessions() {
    use support::chaos::{Chaos, Cluster};
    let chaos = Chaos::start_on_sessions(Cluster::start_sentinel(2).await, 4).await;
    chaos
        .run_replica_held_back_then_primary_killed("replica-held-back-then-primary-killed-sessions")
        .await;
}

/// The old primary and the holder's server partitioned (iptables in each namespace) from the
/// replica, the Sentinels and the other server for longer than a TTL while the Sentinels promote
/// the replica: the holder on the minority side stops believing (its renewals go
/// unacknowledged), and no two holders overlap, the history checked without the data-loss
/// allowance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_the_old_primary_and_a_server_partitioned_past_a_ttl() {
    use support::chaos::{Chaos, Cluster};
    let chaos = Chaos::start(Cluster::start_sentinel(2).await, 4).await;
    chaos.run_old_primary_and_a_server_partitioned().await;
}
