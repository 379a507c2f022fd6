//! What a name leaves in Redis once nobody holds or waits for it: nothing but the per-slot
//! fencing counters, within a stated bound; and fencing tokens that keep growing across it.

use crate::support;

use std::time::Duration;

use fred::prelude::*;
use leasehold::lease::waiting::WaitConfig;
use leasehold::server::ServerConfig;
use leasehold::store::keys::lock_keys;
use leasehold_client::Client;
use support::*;

const TTL: Duration = Duration::from_millis(1_000);
const WAITER_TTL: Duration = Duration::from_millis(1_000);
/// Every key of a name is gone this long after its last holder and waiter at the latest: an
/// election's state outlives its leader's lease by two TTLs; everything else lives at most a
/// TTL (or a waiter's deadline) past its last use.
const BOUND: Duration = Duration::from_millis(3 * 1_000);

/// Every key in this Redis, with its remaining time to live in ms (-1: none).
async fn keys_and_ttls(direct: &fred::prelude::Client) -> Vec<(String, i64)> {
    let mut cursor = "0".to_owned();
    let mut found = Vec::new();
    loop {
        let (next, keys): (String, Vec<String>) = direct
            .custom(fred::cmd!("SCAN"), vec![cursor.as_str(), "COUNT", "1000"])
            .await
            .expect("SCAN");
        for key in keys {
            let ttl: i64 = direct.pttl(&key).await.expect("PTTL");
            // -2: gone since the SCAN saw it.
            if ttl != -2 {
                found.push((key, ttl));
            }
        }
        cursor = next;
        if cursor == "0" {
            return found;
        }
    }
}

fn is_counter(key: &str) -> bool {
    key.starts_with("leasehold:fence:{")
}

#[tokio::test]
async fn names_used_once_leave_only_the_slot_counters_behind() {
    let redis = RedisServer::start();
    let config = ServerConfig {
        wait: WaitConfig {
            waiter_ttl: WAITER_TTL,
            ..WaitConfig::default()
        },
        ..fast_keepalive()
    };
    let server = TestServer::start_with(&redis, "leasehold:", config).await;
    let client = Client::connect(server.url()).await.expect("connect");
    let direct = redis.client().await;
    let mut tokens = Vec::new();
    let mut first_tokens = Vec::new();

    // Plain locks, released, and left to run out.
    for i in 0..100 {
        let lease = client
            .lease(format!("job-{i}"))
            .ttl(TTL)
            .acquire()
            .await
            .expect("acquire");
        tokens.push(lease.fencing_token());
        first_tokens.push(lease.fencing_token());
        assert!(lease.release().await.expect("release"));
    }
    for i in 0..100 {
        let taken = client
            .acquire_once(format!("expiring-{i}"), TTL)
            .await
            .expect("acquire once");
        assert!(taken.acquired);
        tokens.push(taken.fencing_token);
    }
    // Waiters, fair and not, that gave up while the lock was held.
    for fair in [true, false] {
        let name = format!("contended-{fair}");
        let holder = client.lease(&name).ttl(TTL).acquire().await.expect("hold");
        let refused = client
            .lease(&name)
            .ttl(TTL)
            .fair(fair)
            .wait(Duration::from_millis(200))
            .acquire()
            .await;
        assert!(refused.is_err(), "the waiter gives up");
        tokens.push(holder.fencing_token());
        holder.release().await.expect("release");
    }
    // A semaphore's permits and a read-write lock's readers.
    for (name, shared) in [("pool", false), ("catalog", true)] {
        let mut held = Vec::new();
        for _ in 0..2 {
            let builder = client.lease(name).ttl(TTL);
            let builder = if shared {
                builder.shared()
            } else {
                builder.limit(3)
            };
            held.push(builder.acquire().await.expect("permit"));
        }
        for lease in held {
            tokens.push(lease.fencing_token());
            lease.release().await.expect("release");
        }
    }
    // A resumable lease whose holder went away without releasing: it ends after its grace.
    let resumable = client
        .lease("resumable")
        .ttl(TTL)
        .resume_grace(TTL)
        .acquire()
        .await
        .expect("resumable");
    tokens.push(resumable.fencing_token());
    drop(resumable);
    // An election: elected, read by an observer, resigned.
    let candidate = client.campaign("vote", "a", TTL).await.expect("campaign");
    let mut candidate = candidate;
    tokens.push(candidate.elected().await.expect("elected"));
    assert!(client.leader("vote").await.expect("leader").is_some());
    assert!(candidate.resign().await.expect("resign"));
    assert!(client.leader("vote").await.expect("leader").is_none());

    // Right away: every key but the counters already has an expiry within the bound.
    let keys = keys_and_ttls(&direct).await;
    assert!(
        keys.len() > 10,
        "the names left keys while in use: {keys:?}"
    );
    for (key, ttl) in &keys {
        if is_counter(key) {
            assert_eq!(*ttl, -1, "{key}: a counter never expires");
        } else {
            assert!(
                *ttl >= 0 && *ttl <= BOUND.as_millis() as i64,
                "{key} expires within {BOUND:?}, not {ttl} ms"
            );
        }
    }
    // And after the bound, nothing but the counters is left.
    within(BOUND + Duration::from_secs(5), "every key expired", async {
        loop {
            let left: Vec<_> = keys_and_ttls(&direct)
                .await
                .into_iter()
                .filter(|(key, _)| !is_counter(key))
                .collect();
            if left.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let counters = keys_and_ttls(&direct).await.len();
    assert!(
        counters <= 16_384 && counters <= tokens.len(),
        "at most one counter per slot: {counters}"
    );

    // A name's tokens after every key of it is gone are above every token it had before.
    for (i, &highest) in first_tokens.iter().enumerate() {
        let lease = client
            .lease(format!("job-{i}"))
            .ttl(TTL)
            .acquire()
            .await
            .expect("acquire again");
        assert!(
            lease.fencing_token() > highest,
            "job-{i}: {} after {highest}",
            lease.fencing_token()
        );
        lease.release().await.expect("release");
    }

    // An election that never had a leader, only read, keeps its state a minute at most.
    assert!(client.leader("unheard").await.expect("leader").is_none());
    let state: i64 = direct
        .pttl("leasehold:election:{unheard}:state")
        .await
        .expect("PTTL");
    assert!((1..=60_000).contains(&state), "{state}");
}

#[tokio::test]
async fn tokens_keep_growing_when_the_redis_clock_is_behind_the_counter() {
    let (_redis, server, direct, _) = setup().await;
    let client = Client::connect(server.url()).await.expect("connect");
    // As after the Redis clock was stepped back a long way: its slot's counter is far ahead of
    // the clock.
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_micros() as u64;
    let ahead = now_us + 1_000_000_000_000;
    let counter = lock_keys("leasehold:", "ledger").fence();
    let _: () = direct
        .set(&counter, ahead, None, None, false)
        .await
        .expect("SET the counter");
    let mut previous = ahead;
    for _ in 0..3 {
        let lease = client
            .lease("ledger")
            .ttl(TTL)
            .acquire()
            .await
            .expect("acquire");
        assert_eq!(lease.fencing_token(), previous + 1);
        previous = lease.fencing_token();
        lease.release().await.expect("release");
    }
    // Every name of that slot shares the counter.
    let other = (0..)
        .map(|i| format!("other-{i}"))
        .find(|name| lock_keys("leasehold:", name).fence() == counter)
        .expect("a name in the same slot");
    let lease = client
        .lease(other)
        .ttl(TTL)
        .acquire()
        .await
        .expect("acquire");
    assert_eq!(lease.fencing_token(), previous + 1);
}

#[tokio::test]
async fn a_leader_keeps_its_election_state_for_as_long_as_it_leads() {
    let (_redis, server, direct, _) = setup().await;
    let client = Client::connect(server.url()).await.expect("connect");
    let mut candidate = client.campaign("steady", "a", TTL).await.expect("campaign");
    let term = candidate.elected().await.expect("elected");
    // The state expires three TTLs after the lease's last renewal: leading well past that (and
    // reading the stream meanwhile, as a leader does), the renewals must keep pushing it on.
    // Time passing is what is tested here, so this waits it out.
    let lost = tokio::time::timeout(TTL * 4, candidate.lost()).await;
    assert!(lost.is_err(), "still leading: {lost:?}");
    let leader = client.leader("steady").await.expect("leader");
    assert_eq!(leader.map(|l| l.term), Some(term), "still the leader");
    let state: i64 = direct
        .pttl("leasehold:election:{steady}:state")
        .await
        .expect("PTTL");
    assert!(
        state > 0 && state <= 3 * TTL.as_millis() as i64,
        "the state lives three TTLs past the lease's last renewal: {state} ms"
    );
    assert!(candidate.resign().await.expect("resign"));
}
