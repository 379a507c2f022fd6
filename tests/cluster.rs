//! On a Redis Cluster (three primaries, a replica each): every lock's keys in one slot, locks
//! spread over every primary, hand-overs through sharded pub/sub wake-ups, elections; and the chaos
//! workload, its history checked, while the lock's primary is paused, then killed and its
//! replica promoted.

use crate::support;

use std::time::Duration;

use leasehold_client::Client;
use support::cluster::RedisCluster;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_locks_spread_over_every_primary_and_hand_over_by_wake_ups() {
    let cluster = RedisCluster::start(3, 1);
    let server = TestServer::start_at(&cluster.url(), "leasehold:", fast_keepalive()).await;
    let holders = Client::connect(server.url()).await.unwrap();
    let names: Vec<String> = (0..1_000).map(|i| format!("job-{i}")).collect();

    // Every acquire script, renewal and release touches only its lock's slot: a cross-slot
    // script would fail here with CROSSSLOT.
    let mut held = Vec::new();
    for name in &names {
        held.push(
            holders
                .lease(name.as_str())
                .ttl(Duration::from_secs(30))
                .acquire()
                .await
                .unwrap(),
        );
    }
    let primaries = cluster.primaries_settled(3);
    for port in &primaries {
        assert!(
            cluster.keys_on(*port) > 100,
            "primary {port} holds {} keys: the locks did not spread",
            cluster.keys_on(*port)
        );
    }

    // Listing scans every primary, each holding only its own slots' keys.
    let listed = holders.list(0).await.unwrap();
    assert_eq!(listed.locks.len(), 1_000);
    assert!(!listed.truncated);

    // A waiter on every tenth lock. The holders' TTL (30 s) is far longer than the waiters'
    // wait (10 s): only a wake-up can hand a lock over in time.
    let waiters = Client::connect(server.url()).await.unwrap();
    let mut waiting = Vec::new();
    for name in names.iter().step_by(10) {
        let waiters = waiters.clone();
        let name = name.clone();
        waiting.push(tokio::spawn(async move {
            waiters
                .lease(name)
                .ttl(Duration::from_secs(30))
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        }));
    }
    let tokens: Vec<u64> = held.iter().map(|guard| guard.fencing_token()).collect();
    // Give every waiter time to join its line before the holders let go; a waiter that joins
    // late finds the lock free and takes it at once, which proves nothing but breaks nothing.
    let direct = cluster.client().await;
    for name in names.iter().step_by(10) {
        let key = format!("leasehold:{{{name}}}:line");
        within(Duration::from_secs(10), "a waiter in line", async {
            loop {
                let length: i64 = fred::prelude::SortedSetsInterface::zcard(&direct, &key)
                    .await
                    .unwrap();
                if length == 1 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
    }
    for guard in held {
        assert!(guard.release().await.unwrap());
    }
    for (waiter, (index, _)) in waiting
        .into_iter()
        .zip(names.iter().enumerate().step_by(10))
    {
        let guard = within(Duration::from_secs(15), "a hand-over", waiter)
            .await
            .unwrap()
            .expect("woken and handed the lock");
        assert!(guard.fencing_token() > tokens[index]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elections_hand_over_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let server = TestServer::start_at(&cluster.url(), "leasehold:", fast_keepalive()).await;
    let client = Client::connect(server.url()).await.unwrap();
    let mut first = client
        .campaign("leader", "a", Duration::from_secs(30))
        .await
        .unwrap();
    let term = first.elected().await.unwrap();
    let mut second = client
        .campaign("leader", "b", Duration::from_secs(30))
        .await
        .unwrap();
    let mut observer = client.observe("leader").await.unwrap();
    let seen = observer.next().await.unwrap().unwrap();
    assert_eq!(seen.value, b"a");
    assert!(first.resign().await.unwrap());
    let next_term = within(Duration::from_secs(10), "the hand-over", second.elected())
        .await
        .unwrap();
    assert!(next_term > term);
    let seen = within(Duration::from_secs(10), "the new leader", async {
        loop {
            if let Some(leader) = observer.next().await.unwrap() {
                if leader.value == b"b" {
                    return leader;
                }
            }
        }
    })
    .await;
    assert_eq!(seen.value, b"b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_never_leaves_a_silent_overlap_and_its_replica_takes_over() {
    let mut cluster = RedisCluster::start(3, 1);
    let direct = cluster.client().await;
    let server = TestServer::start_at(&cluster.url(), "leasehold:", fast_keepalive()).await;
    let client = Client::connect(server.url()).await.unwrap();
    // Longer than a failover (node timeout 2 s, then the replica's election): fred holds every
    // command while it reconnects to the cluster, so a shorter TTL would lose leases on the
    // healthy primaries too (see README).
    let ttl = Duration::from_secs(10);
    let mut held = Vec::new();
    for i in 0..60 {
        let name = format!("killed-{i}");
        let guard = client
            .lease(name.as_str())
            .ttl(ttl)
            .acquire()
            .await
            .unwrap();
        held.push((name, guard));
    }
    let victim = cluster.primaries()[0];
    let (on_victim, elsewhere): (Vec<_>, Vec<_>) = held
        .into_iter()
        .partition(|(name, _)| cluster.holds(victim, &lock_key(name)));
    assert!(!on_victim.is_empty() && !elsewhere.is_empty());
    let tokens: Vec<Option<String>> = {
        let mut tokens = Vec::new();
        for (name, _) in &on_victim {
            tokens.push(get(&direct, &lock_key(name)).await);
        }
        tokens
    };

    cluster.kill(victim);
    cluster.until_failed_over(3);
    // The promoted replica serves new acquisitions in the dead primary's slots, once the server
    // has learnt the new topology.
    for i in 0..30 {
        let name = format!("after-{i}");
        let started = tokio::time::Instant::now();
        loop {
            match client.lease(name.as_str()).ttl(ttl).acquire().await {
                Ok(guard) => {
                    guard.release().await.unwrap();
                    break;
                }
                Err(error) => {
                    assert!(
                        started.elapsed() < Duration::from_secs(15),
                        "{name} still refused after the failover: {error}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
    // Leases on the dead primary either live on (the replica had their key, with their token)
    // or were told Lost; never held in the client's eyes while the key says otherwise.
    for ((name, guard), token) in on_victim.iter().zip(&tokens) {
        if !guard.is_lost() {
            let now = get(&direct, &lock_key(name)).await;
            if now.as_ref() != token.as_ref() {
                let reason = within(ttl, "Lost", guard.lost()).await;
                assert!(!reason.is_empty(), "{name}");
            }
        }
    }
    // The others went on through it.
    for (name, guard) in &elsewhere {
        assert!(!guard.is_lost(), "{name} was lost: {}", guard.lost().await);
        assert!(get(&direct, &lock_key(name)).await.is_some(), "{name}");
    }
}

/// Each lock's slot moved to another primary under its holder and two waiters: every holder
/// keeps renewing through the move, each renewal confirmed before the lease ran out (the least
/// validity left is printed), and the waiters are handed the lock on the new owner by wake-ups. Under load (CI's two cores, or four busy loops beside it),
/// fred 10.1.0's cluster client failed this in every run: see vendor/README.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrated_under_held_leases_and_waiters_loses_no_waiter_and_no_holder() {
    use leasehold::pb::lease_response::Event;
    const TTL_MS: u32 = 3_000;
    let cluster = RedisCluster::start(3, 0);
    let direct = cluster.client().await;
    let server = TestServer::start_at(&cluster.url(), "leasehold:", fast_keepalive()).await;
    let mut client = server.client().await;
    let names = ["moved-a", "moved-b", "moved-c"];
    let mut holders = Vec::new();
    let mut heads = Vec::new();
    let mut followers = Vec::new();
    for name in names {
        // A TTL of 3 s renews every second, so renewals run through the move.
        let mut holder = LeaseStream::acquire(&mut client, name, TTL_MS, 0, "holder").await;
        let token = holder.acquired().await.token;
        holders.push((holder, token));
        // The waiters' waits are long; the one behind the head can only be woken.
        for line in [&mut heads, &mut followers] {
            let mut waiter = LeaseStream::acquire(&mut client, name, TTL_MS, 30_000, "w").await;
            waiter.waiting().await;
            line.push(waiter);
        }
    }

    // The slots move (redis-cli, on a thread of its own) while every holder's renewals are read
    // as they come: the least validity left when each renewal was confirmed, until two renewals
    // have come after the move.
    let (moved, moved_at) = tokio::sync::watch::channel(None);
    let moving = tokio::task::spawn_blocking(move || {
        for name in names {
            let (from, slot) = cluster.slot_of(&lock_key(name));
            let to = cluster
                .primaries()
                .into_iter()
                .find(|port| *port != from)
                .expect("another primary");
            cluster.migrate_slot(slot, from, to);
            assert_eq!(cluster.slot_of(&lock_key(name)).0, to, "{name} moved");
        }
        moved.send_replace(Some(tokio::time::Instant::now()));
        cluster
    });
    let renewals = holders.iter_mut().zip(names).map(|((holder, _), name)| {
        let moved_at = moved_at.clone();
        async move {
            let mut previous: Option<leasehold::pb::Extended> = None;
            let mut least_left = i64::MAX;
            let mut after_the_move = 0;
            while after_the_move < 2 {
                match holder.next().await {
                    Ok(Some(Event::Extended(extended))) => {
                        // Server times, from the stream's start: the new validity's end less
                        // how long it runs is when this renewal was confirmed.
                        let confirmed = extended.valid_to_ms as i64 - extended.valid_for_ms as i64;
                        if let Some(previous) = &previous {
                            least_left = least_left.min(previous.valid_to_ms as i64 - confirmed);
                        }
                        previous = Some(extended);
                        if moved_at.borrow().is_some() {
                            after_the_move += 1;
                        }
                    }
                    other => panic!("{name}: expected renewals, got {other:?}"),
                }
            }
            least_left
        }
    });
    let least_left = within(
        Duration::from_secs(60),
        "renewals through the move",
        futures_util::future::join_all(renewals),
    )
    .await;
    let _cluster = within(Duration::from_secs(30), "the slot moves", moving)
        .await
        .expect("slots moved");
    // Nominally two thirds of the TTL (2 s). With four busy loops beside the test the least
    // seen was 1.9 s; with builds running too (load average 12 on two cores) 280 ms. fred
    // 10.1.0 stalled or lost leases here in every run under load.
    println!("least validity left at a renewal, per lease (ms): {least_left:?}");
    for (left, name) in least_left.iter().zip(names) {
        assert!(
            *left > 0,
            "{name}: a renewal was confirmed {} ms after the lease ran out",
            -left
        );
    }
    for ((_, token), name) in holders.iter().zip(names) {
        assert_eq!(get(&direct, &lock_key(name)).await.as_ref(), Some(token));
    }

    // Hand-overs on the new owner: holder -> head -> the one behind, by wake-ups.
    for ((mut holder, _), (mut head, mut follower)) in
        holders.into_iter().zip(heads.into_iter().zip(followers))
    {
        assert!(holder.release().await);
        head.acquired().await;
        let released_at = tokio::time::Instant::now();
        assert!(head.release().await);
        follower.acquired().await;
        assert!(
            released_at.elapsed() < Duration::from_secs(2),
            "the waiter behind was handed the lock by a wake-up, not its deadline"
        );
        assert!(follower.release().await);
    }
}

/// A command redirected by `ASK` (its slot in migration) is sent to the target node behind
/// `ASKING`, queued after the commands already in flight on that connection: each of them gets
/// its own reply. fred 10.1.0 read the `ASKING` reply straight off the socket, which was the
/// reply of the command in flight there, gave the `+OK` to that command, and sent the
/// redirected one back to the migrating node (see vendor/README.md); a blocked `BZPOPMIN` on
/// the target keeps a command in flight there for as long as the test needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_in_flight_on_the_ask_target_gets_its_own_reply() {
    use fred::prelude::*;
    let cluster = RedisCluster::start(3, 0);
    let redis = cluster.client().await;
    // Longer than the client's own 2 s: the pop waits while the test sets up the redirection.
    let patient = redis.with_options(&Options {
        timeout: Some(Duration::from_secs(20)),
        ..Default::default()
    });
    let moved = "{asked}:key";
    let (from, slot) = cluster.slot_of(moved);
    let to = cluster
        .primaries()
        .into_iter()
        .find(|port| *port != from)
        .expect("another primary");
    let waiting = (0..)
        .map(|i| format!("{{waiting-{i}}}:set"))
        .find(|key| cluster.slot_of(key).0 == to)
        .expect("a key on the target");
    let () = redis
        .set(moved, "moved value", None, None, false)
        .await
        .unwrap();
    cluster.start_migration(slot, from, to);

    let popper = {
        let patient = patient.clone();
        let waiting = waiting.clone();
        tokio::spawn(async move {
            patient
                .bzpopmin::<Option<(String, String, f64)>, _>(waiting, 15.0)
                .await
        })
    };
    let blocked = |port| {
        cluster
            .run(port, &["info", "clients"])
            .lines()
            .find_map(|line| line.trim().strip_prefix("blocked_clients:")?.parse().ok())
            .unwrap_or(0u32)
    };
    within(
        Duration::from_secs(10),
        "the pop blocked on the target",
        async {
            while blocked(to) == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        },
    )
    .await;
    let getter = {
        let patient = patient.clone();
        tokio::spawn(async move { patient.get::<Option<String>, _>(moved).await })
    };
    // The migrating node answers ASK; what follows it waits on the target behind the pop, unread.
    within(
        Duration::from_secs(10),
        "ASKING queued on the target",
        async {
            loop {
                let clients = cluster.run(to, &["client", "list"]);
                let queued = clients.lines().any(|line| {
                    line.contains("cmd=bzpopmin")
                        && !line.split_whitespace().any(|field| field == "qbuf=0")
                });
                if queued {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        },
    )
    .await;
    assert_eq!(
        cluster.run(to, &["zadd", &waiting, "1", "member"]),
        "1",
        "pushed"
    );

    let popped = within(Duration::from_secs(10), "the pop", popper)
        .await
        .unwrap();
    assert_eq!(
        popped.map_err(|error| error.to_string()),
        Ok(Some((waiting.clone(), "member".to_owned(), 1.0))),
        "the pop's own reply"
    );
    let got = within(Duration::from_secs(10), "the redirected GET", getter)
        .await
        .unwrap();
    assert_eq!(
        got.map_err(|error| error.to_string()),
        Ok(Some("moved value".to_owned())),
        "the GET's own reply, from the target"
    );
    // The client goes on once the slot has moved.
    cluster.finish_migration(slot, to);
    let after: Option<String> = redis.get(moved).await.unwrap();
    assert_eq!(after.as_deref(), Some("moved value"));
}

/// Scripts run by SHA on the primary at `port` so far.
fn evalsha_calls(port: u16) -> u64 {
    redis_cli(port, &["info", "commandstats"])
        .lines()
        .find_map(|line| line.trim().strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_go_to_each_primary_in_batches() {
    let cluster = RedisCluster::start(3, 0);
    let server = TestServer::start_at(&cluster.url(), "leasehold:", fast_keepalive()).await;
    let mut client = server.client().await;
    let mut held = Vec::new();
    for i in 0..300 {
        let name = format!("batched-{i}");
        let mut lease = LeaseStream::acquire(&mut client, &name, 3_000, 0, "").await;
        lease.acquired().await;
        held.push(lease);
    }
    // Every lease renewed once more (a renewal per second each).
    let scripts = scripts_while_renewed(&cluster, &mut held, 1).await;
    // 300 renewals or more, of names spread over every primary: one script per lease would be
    // 300 or more.
    assert!(scripts < 100, "{scripts} scripts for 300 renewals or more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_and_readers_renew_in_batches_on_a_cluster() {
    use leasehold::pb::lease_request::Action;
    use leasehold::pb::{LeaseAcquire, LeaseMode, LeaseRequest};

    let cluster = RedisCluster::start(3, 0);
    let server = TestServer::start_at(&cluster.url(), "leasehold:", fast_keepalive()).await;
    let mut client = server.client().await;
    let mut held = Vec::new();
    for i in 0..50 {
        // Two permits of a semaphore of 2, and two readers, per pair of names.
        for (name, limit, mode) in [
            (format!("pool-{i}"), 2, LeaseMode::Exclusive),
            (format!("catalog-{i}"), 0, LeaseMode::Shared),
        ] {
            for _ in 0..2 {
                let request = LeaseRequest {
                    action: Some(Action::Acquire(LeaseAcquire {
                        name: name.clone(),
                        ttl_ms: 3_000,
                        limit,
                        mode: mode.into(),
                        ..Default::default()
                    })),
                };
                let mut lease = LeaseStream::open(&mut client, request).await;
                lease.acquired().await;
                held.push(lease);
            }
        }
    }
    // Every permit renewed twice more.
    let scripts = scripts_while_renewed(&cluster, &mut held, 2).await;
    // 400 renewals or more of permits on every primary, in batches: far fewer scripts.
    assert!(scripts < 200, "{scripts} scripts for 400 renewals or more");
    let client = Client::connect(server.url()).await.expect("connect");
    let pool = client.describe("pool-7").await.expect("describe");
    assert_eq!((pool.limit, pool.holders.len()), (2, 2));
}

/// The scripts the cluster's primaries ran while every lease of `held` was renewed `times` more.
async fn scripts_while_renewed(
    cluster: &RedisCluster,
    held: &mut [LeaseStream],
    times: usize,
) -> u64 {
    let primaries = cluster.primaries();
    let before: u64 = primaries.iter().map(|port| evalsha_calls(*port)).sum();
    for _ in 0..times {
        for (i, lease) in held.iter_mut().enumerate() {
            match lease.next().await {
                Ok(Some(leasehold::pb::lease_response::Event::Extended(_))) => {}
                other => panic!("lease {i}: expected Extended, got {other:?}"),
            }
        }
    }
    let after: u64 = primaries.iter().map(|port| evalsha_calls(*port)).sum();
    after - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_moves_to_another_server_when_its_server_stops() {
    let cluster = RedisCluster::start(3, 0);
    let a = TestServer::start_at(&cluster.url(), "leasehold:", fast_keepalive()).await;
    let b = TestServer::start_at(&cluster.url(), "leasehold:", fast_keepalive()).await;
    a_lease_moves_when_its_server_stops(a, &b).await;
}

/// The chaos workload (four workers on two servers, a fenced counter, an election beside the
/// lock, every operation recorded) while the primary serving the lock's slot is paused (1 s:
/// past the TTL, short of the node timeout), then killed, its replica taking over: each time the
/// holder is told by the end of its validity, the lock goes on once the primary answers again
/// or the servers follow the new one, and the checker passes the history. Replication is
/// asynchronous, but the failover (node timeout 2 s) is longer than the TTL, so every lease on
/// that slot has run out before the replica is promoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_the_locks_primary_paused_then_killed_and_its_replica_promoted() {
    use support::chaos::{Chaos, Cluster, LOCK, TTL};
    use tokio::time::Instant;
    let mut chaos = Chaos::start(Cluster::start_cluster(2).await, 4).await;
    chaos.progress(10).await;
    let paused = chaos.fresh_holder().await;
    let redis = chaos.cluster.redis_cluster.as_mut().expect("a cluster run");
    let (owner, _) = redis.slot_of(&lock_key(LOCK));
    redis.signal(owner, "STOP");
    let paused_at = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    redis.signal(owner, "CONT");
    chaos.progress(10).await;

    let holder = chaos.fresh_holder().await;
    let redis = chaos.cluster.redis_cluster.as_mut().expect("a cluster run");
    redis.kill(owner);
    let fault_at = Instant::now();
    chaos.handed_over(&holder).await;
    let redis = chaos.cluster.redis_cluster.as_ref().expect("a cluster run");
    redis.until_failed_over(3);
    chaos.progress(10).await;
    let report = chaos.finish("locks-primary-paused-then-killed").await;

    report.assert_holder_told(&paused, paused_at, TTL + Duration::from_millis(200));
    report.assert_holder_told(&holder, fault_at, TTL + Duration::from_millis(200));
    let (_, usable_again) = report.next_hold_after(fault_at);
    report.assert_safe(usable_again);
}

/// The faults that strike servers and clients (a server paused, a client frozen, a server cut
/// off from its clients, a server's clocks jumping back, a server killed), one after another,
/// on a Redis Cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_servers_and_clients_struck_one_after_another() {
    support::chaos::Chaos::run_servers_and_clients_struck("cluster").await;
}

/// The chaos workload, its history checked, while the lock's slot moves to another primary and
/// back (resharding, as `redis-cli --cluster reshard` does it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_the_locks_slot_moved_to_another_primary_and_back() {
    use support::chaos::{Chaos, Cluster, LOCK};
    use tokio::time::Instant;
    let chaos = Chaos::start(Cluster::start_cluster(2).await, 4).await;
    chaos.progress(10).await;
    let redis = chaos.cluster.redis_cluster.as_ref().expect("a cluster run");
    let (from, slot) = redis.slot_of(&lock_key(LOCK));
    let to = redis
        .primaries()
        .into_iter()
        .find(|port| *port != from)
        .expect("another primary");
    let moved_at = Instant::now();
    redis.migrate_slot(slot, from, to);
    chaos.progress(10).await;
    redis.migrate_slot(slot, to, from);
    chaos.progress(10).await;
    let report = chaos.finish("locks-slot-moved-and-back").await;
    report.assert_safe(report.longest_gap_after(moved_at));
}

/// The lock key's TTL cut to 1 ms under its holder on the slot's primary (a forward clock jump on
/// Redis, by a nemesis): Redis lost the lock, so a second holder may overlap the first until its
/// server's next renewal tells it (permitted as data loss, and reported), while fencing refuses the
/// older holder's writes; the history is checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_the_lock_key_expires_early_under_the_holder() {
    use support::chaos::{Chaos, Cluster, TTL};
    let chaos = Chaos::start(Cluster::start_cluster(2).await, 4).await;
    chaos
        .run_key_expired_early(TTL + Duration::from_millis(200))
        .await;
}

/// A semaphore's permits churned through three servers on a Redis Cluster while one server, with a
/// holder, is paused past the TTL: never more than the limit at once, history checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_a_semaphore_holders_server_paused() {
    let cluster = support::chaos::Cluster::start_cluster(3).await;
    support::permits::churn_through_a_paused_server(&cluster.servers, cluster.mode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_on_any_primary_reaches_the_holders_server() {
    use leasehold_client::LostReason;
    let cluster = RedisCluster::start(3, 0);
    let holders = TestServer::start_at(&cluster.url(), "leasehold:", fast_keepalive()).await;
    let operators = TestServer::start_at(&cluster.url(), "leasehold:", fast_keepalive()).await;
    let a = Client::connect(holders.url()).await.unwrap();
    let b = Client::connect(operators.url()).await.unwrap();
    // Names whose keys live on every primary: the message is published where the key is.
    let names: Vec<String> = (0..12).map(|i| format!("revoked-{i}")).collect();
    let mut guards = Vec::new();
    for name in &names {
        let guard = a.lease(name.as_str()).ttl(Duration::from_secs(30));
        guards.push(guard.acquire().await.unwrap());
    }
    for (name, guard) in names.iter().zip(&guards) {
        let revoked_at = tokio::time::Instant::now();
        assert_eq!(b.revoke(name.as_str(), None).await.unwrap().len(), 1);
        let loss = within(Duration::from_secs(10), "the loss", guard.loss()).await;
        assert_eq!(loss.code, LostReason::Revoked, "{name}: {loss:?}");
        let after = revoked_at.elapsed();
        assert!(
            after < Duration::from_secs(1),
            "{name}: told {after:?} after"
        );
    }
}

/// The link from the lock's slot's primary to its replica held back (its packets dropped; the
/// cluster bus still flows) while a fresh holder renews and the workers ask for grants, then the
/// primary killed and the replica taking its slots over at once (`CLUSTER FAILOVER TAKEOVER`,
/// well inside a TTL) without what was held back: the holder is told lost within its TTL,
/// nothing is granted meanwhile, and no two holders overlap, the history checked without the
/// data-loss allowance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_the_locks_replica_held_back_then_its_primary_killed() {
    use support::chaos::{Chaos, Cluster};
    let chaos = Chaos::start(Cluster::start_cluster(2).await, 4).await;
    chaos
        .run_replica_held_back_then_primary_killed("replica-held-back-then-primary-killed")
        .await;
}

/// As above, the struck holder on a session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_the_locks_replica_held_back_then_its_primary_killed_on_sessions() {
    use support::chaos::{Chaos, Cluster};
    let chaos = Chaos::start_on_sessions(Cluster::start_cluster(2).await, 4).await;
    chaos
        .run_replica_held_back_then_primary_killed("replica-held-back-then-primary-killed-sessions")
        .await;
}

/// The lock's slot's primary and one server cut off from its replica, the other primaries and
/// the other server for longer than a TTL, while the cluster promotes the replica (issue 49):
/// the holder on the cut-off side stops believing (its renewals go unacknowledged), nobody
/// overlaps, and every primitive is checked without the data-loss allowance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_the_locks_primary_and_a_server_partitioned_past_a_ttl() {
    use support::chaos::{Chaos, Cluster};
    let chaos = Chaos::start(Cluster::start_cluster(2).await, 4).await;
    chaos.run_old_primary_and_a_server_partitioned().await;
}
