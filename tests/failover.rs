//! Following a failover whose old primary went silent: cut off by a real partition (a black
//! hole, not a kill), so the server's connection to it neither answers nor breaks. A server
//! that was running on the majority side before the cut must move to the promoted primary
//! within a few seconds of the switch, and the figures (switch -> SERVING, switch -> first
//! grant) are printed for docs/faults.md.

use crate::support;

use std::time::Duration;

use leasehold_client::Client;
use support::netns::{Net, Side};
use support::sentinel::SentinelsIn;
use support::*;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;
use tonic_health::pb::health_check_response::ServingStatus;

/// What "within a few seconds of the switch" means here: the Sentinels' `+switch-master` is
/// heard at once, and the health check runs every second.
const FOLLOW_WITHIN: Duration = Duration::from_secs(5);

/// Every status the server's health reports, with when it was heard, kept by a task as a load
/// balancer watching it would see them.
type Statuses = watch::Receiver<Vec<(Instant, ServingStatus)>>;

/// The task ends with the returned handle (before the server: the watch panics when the
/// stream breaks).
fn watch_health(mut health: HealthWatch) -> (Statuses, AbortOnDropHandle<()>) {
    let (tx, rx) = watch::channel(Vec::new());
    let task = tokio::spawn(async move {
        // Ends when the test drops the receiver (or the server, the stream).
        loop {
            let status = health.next(Duration::from_secs(3_600)).await;
            tx.send_modify(|heard| heard.push((Instant::now(), status)));
            if tx.is_closed() {
                return;
            }
        }
    });
    (rx, AbortOnDropHandle::new(task))
}

/// When the server last turned SERVING, once it is SERVING now (bounded by `limit`).
async fn serving_since(health: &mut Statuses, limit: Duration) -> Instant {
    let heard = within(limit, "health SERVING", async {
        let serving = |heard: &Vec<(Instant, ServingStatus)>| {
            heard
                .last()
                .is_some_and(|(_, s)| *s == ServingStatus::Serving)
        };
        health.wait_for(serving).await.map(|heard| heard.clone())
    })
    .await
    .expect("the health watch ended");
    heard.last().map(|(at, _)| *at).unwrap_or_else(Instant::now)
}

/// Polls the Sentinels (bounded, `limit`) until they name `replica` as the primary; returns
/// when they first did (no event reaches the test process: the Sentinels' own pub/sub is
/// what the server is supposed to use).
async fn until_switched(
    sentinels: &SentinelsIn,
    replica: &RedisServer,
    limit: Duration,
) -> Instant {
    let replica_ip = replica.ip().to_string();
    within(limit, "the Sentinels' switch to the replica", async {
        loop {
            if sentinels.current_primary().as_deref() == Some(replica_ip.as_str()) {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// The first lock granted through `client` (bounded per try and in all by `limit`).
async fn first_grant(client: &Client, name: &str, limit: Duration) -> leasehold_client::LeaseGuard {
    within(limit, "a lock granted", async {
        loop {
            let lease = client.lease(name).ttl(Duration::from_secs(10)).acquire();
            match tokio::time::timeout(Duration::from_secs(3), lease).await {
                Ok(Ok(guard)) => return guard,
                Ok(Err(_)) | Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    })
    .await
}

/// A primary, one replica, three Sentinels, and a server (default Redis timeout of 2 s, as a
/// user runs it), each in a network namespace of its own. The primary's link is cut and stays
/// cut: the Sentinels promote the replica, and the server, which never saw its connection
/// break, must be SERVING and grant a lock on the new primary within a few seconds of the
/// switch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_a_running_server_follows_the_switch_away_from_a_silent_primary() {
    let mut net = Net::create();
    let primary_host = net.host(&[Side::Redis]);
    let replica_host = net.host(&[Side::Redis]);
    let sentinel_host = net.host(&[Side::Redis]);
    let server_host = net.host(&[Side::Clients, Side::Redis]);
    let primary = RedisServer::start_in(&primary_host);
    let replica_of = vec![
        "--replicaof".to_owned(),
        primary.ip().to_string(),
        primary.port().to_string(),
    ];
    let replica = RedisServer::start_in_with(&replica_host, replica_of);
    let sentinels = SentinelsIn::start(&sentinel_host, &primary, &replica);
    let url = sentinels.url();
    let server = ServerProcess::start_in(&server_host, &["--redis", &url], &[]);
    let client = Client::connect(server.url()).await.expect("connect");
    let before = first_grant(&client, "before", Duration::from_secs(10)).await;
    before.release().await.expect("release");
    let (mut health, watching) = watch_health(HealthWatch::open(&server.url(), "").await);
    serving_since(&mut health, Duration::from_secs(5)).await;
    // A lease held across the cut keeps the server writing to the old primary (renewals), as
    // a busy server does.
    let held = client
        .lease("held")
        .ttl(Duration::from_secs(3))
        .acquire()
        .await
        .expect("held");

    primary_host.cut(Side::Redis);
    let cut_at = Instant::now();
    let switched_at = until_switched(&sentinels, &replica, Duration::from_secs(30)).await;
    eprintln!("switch {:?} after the cut", switched_at - cut_at);

    let guard = first_grant(&client, "after", FOLLOW_WITHIN).await;
    let granted_at = Instant::now();
    let serving_at = serving_since(&mut health, FOLLOW_WITHIN).await;
    assert!(
        serving_at > cut_at,
        "health never left SERVING while its Redis was silent"
    );
    let (to_serving, to_grant) = (
        serving_at.saturating_duration_since(switched_at),
        granted_at - switched_at,
    );
    eprintln!(
        "cut -> switch {:?}; switch -> SERVING {to_serving:?}, switch -> first grant {to_grant:?}",
        switched_at - cut_at
    );
    assert!(to_serving < FOLLOW_WITHIN && to_grant < FOLLOW_WITHIN);
    // The grant landed on the new primary, not on the silent old one.
    let on_new = redis_cli_at(
        replica.ip(),
        replica.port(),
        &["exists", &lock_key("after")],
    );
    assert_eq!(on_new, "1", "the grant is not on the promoted replica");
    drop(watching);
    drop(guard);
    drop(held);
}

/// Cluster: the primary serving a lock's slot frozen (SIGSTOP: its connections neither answer
/// nor break, the kernel still acknowledges) and kept frozen while its replica is promoted
/// (node timeout 2 s). A server running before the freeze must grant that lock on the slot's new
/// owner within a few seconds of the promotion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_running_server_follows_the_slot_away_from_a_frozen_primary() {
    use support::cluster::RedisCluster;
    let cluster = RedisCluster::start(3, 1);
    let server = TestServer::start_at(&cluster.url(), "leasehold:", fast_keepalive()).await;
    let client = Client::connect(server.url()).await.expect("connect");
    let name = "frozen";
    let (victim, _) = cluster.slot_of(&lock_key(name));
    let before = first_grant(&client, name, Duration::from_secs(10)).await;
    before.release().await.expect("release");
    let others: Vec<u16> = cluster
        .ports()
        .into_iter()
        .filter(|port| *port != victim)
        .collect();

    cluster.signal(victim, "STOP");
    let frozen_at = Instant::now();
    // Promoted once three of the nodes still answering are primaries (the frozen one is not
    // asked: `redis-cli` would wait on it for ever).
    let promoted_at = within(Duration::from_secs(30), "the replica's promotion", async {
        loop {
            let primaries = others
                .iter()
                .filter(|port| cluster.run(**port, &["role"]).starts_with("master"))
                .count();
            if primaries == 3 {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let guard = first_grant(&client, name, FOLLOW_WITHIN).await;
    let granted_at = Instant::now();
    eprintln!(
        "freeze -> promotion {:?}; promotion -> first grant {:?}",
        promoted_at - frozen_at,
        granted_at - promoted_at
    );
    drop(guard);
    cluster.signal(victim, "CONT");
}
