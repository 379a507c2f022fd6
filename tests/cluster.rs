//! On a Redis Cluster (three primaries, a replica each): every lock's keys in one slot, locks
//! spread over every primary, hand-overs through sharded pub/sub wake-ups, elections.

mod support;

use std::time::Duration;

use leasehold::client::Client;
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
    let primaries = cluster.primaries();
    assert_eq!(primaries.len(), 3);
    for port in &primaries {
        assert!(
            cluster.keys_on(*port) > 100,
            "primary {port} holds {} keys: the locks did not spread",
            cluster.keys_on(*port)
        );
    }

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
