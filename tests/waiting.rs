//! Waiting at scale: wake-ups by pub/sub, the fair line across servers, abandoned waiters and
//! lost wake-ups, against a real Redis and several servers.

use crate::support;

use std::time::Duration;

use fred::prelude::{ClientLike, SortedSetsInterface};
use leasehold::lease::waiting::WaitConfig;
use leasehold::pb::lease_response::Event;
use leasehold::pb::{LeaseAcquire, LeaseRequest, lease_request::Action};
use leasehold::server::ServerConfig;
use support::*;
use tokio::time::Instant;
use tonic::Code;

fn config(waiter_ttl: Duration, max_waiters: usize) -> ServerConfig {
    ServerConfig {
        wait: WaitConfig {
            waiter_ttl,
            max_waiters,
            ..WaitConfig::default()
        },
        ..fast_keepalive()
    }
}

fn line_key(name: &str) -> String {
    format!("leasehold:{{{name}}}:line")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_next_waiter_at_once() {
    let redis = RedisServer::start();
    // Long TTLs everywhere: no timer can explain a fast hand-over, only the wake-up.
    let server =
        TestServer::start_with(&redis, "leasehold:", config(Duration::from_secs(30), 100)).await;
    let mut client = server.client().await;
    let mut holder = LeaseStream::acquire(&mut client, "job", 30_000, 0, "first").await;
    holder.acquired().await;
    let mut waiter = LeaseStream::acquire(&mut client, "job", 30_000, 20_000, "second").await;
    assert_eq!(waiter.waiting().await.position, 1);
    // Long enough for a polling waiter's backoff to have grown to its one-second cap.
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    for round in 0..3 {
        holder.send(release_request()).await;
        let released_at = Instant::now();
        waiter.acquired().await;
        let handed_over = released_at.elapsed();
        assert!(
            handed_over < Duration::from_millis(150),
            "round {round}: hand-over took {handed_over:?}"
        );
        // Swap roles and go again.
        std::mem::swap(&mut holder, &mut waiter);
        waiter = LeaseStream::acquire(&mut client, "job", 30_000, 20_000, "next").await;
        assert_eq!(waiter.waiting().await.position, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_waiters_on_three_servers_acquire_in_arrival_order() {
    let redis = RedisServer::start();
    let mut servers = Vec::new();
    for _ in 0..3 {
        servers.push(
            TestServer::start_with(&redis, "leasehold:", config(Duration::from_secs(30), 100))
                .await,
        );
    }
    let mut holder_client = servers[0].client().await;
    let mut holder = LeaseStream::acquire(&mut holder_client, "queue", 30_000, 0, "holder").await;
    holder.acquired().await;

    let mut waiters = Vec::new();
    for i in 0..20 {
        let mut client = servers[i % 3].client().await;
        let mut lease =
            LeaseStream::acquire(&mut client, "queue", 30_000, 30_000, &format!("w{i}")).await;
        // Arrival order is when Redis put the waiter in line; wait for it before the next one.
        assert_eq!(lease.waiting().await.position, i as u32 + 1, "waiter {i}");
        waiters.push((i, lease));
    }

    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    for (i, mut lease) in waiters {
        let done = done_tx.clone();
        tokio::spawn(async move {
            let fencing = lease.acquired().await.fencing_token;
            done.send((i, fencing)).unwrap();
            lease.release().await;
        });
    }
    holder.send(release_request()).await;
    let mut order = Vec::new();
    while order.len() < 20 {
        let (i, fencing) = tokio::time::timeout(EVENT_TIMEOUT, done_rx.recv())
            .await
            .unwrap()
            .unwrap();
        order.push((i, fencing));
    }
    let arrival: Vec<usize> = (0..20).collect();
    let served: Vec<usize> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(served, arrival);
    assert!(
        order.windows(2).all(|w| w[0].1 < w[1].1),
        "fencing tokens out of order: {order:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_disconnects_leaves_the_line_at_once() {
    let redis = RedisServer::start();
    let server =
        TestServer::start_with(&redis, "leasehold:", config(Duration::from_secs(30), 100)).await;
    let direct = redis.client().await;
    let mut client = server.client().await;
    let mut holder = LeaseStream::acquire(&mut client, "job", 30_000, 0, "holder").await;
    holder.acquired().await;
    let mut first = LeaseStream::acquire(&mut client, "job", 30_000, 30_000, "first").await;
    assert_eq!(first.waiting().await.position, 1);
    let mut second = LeaseStream::acquire(&mut client, "job", 30_000, 30_000, "second").await;
    assert_eq!(second.waiting().await.position, 2);

    drop(first);
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let in_line: i64 = direct.zcard(line_key("job")).await.unwrap();
        if in_line == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the gone waiter is still in line"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    holder.send(release_request()).await;
    second.acquired().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_server_drops_its_waiters_and_the_rest_go_on() {
    let redis = RedisServer::start();
    let direct = redis.client().await;
    let flags = ["--waiter-ttl", "900ms"];
    let mut doomed = ServerProcess::start(&redis, &flags);
    let survivor = ServerProcess::start(&redis, &flags);
    let mut on_survivor = connect(&survivor.url()).await;
    let mut on_doomed = connect(&doomed.url()).await;

    let mut holder = LeaseStream::acquire(&mut on_survivor, "job", 30_000, 0, "holder").await;
    holder.acquired().await;
    let mut first = LeaseStream::acquire(&mut on_doomed, "job", 30_000, 30_000, "first").await;
    assert_eq!(first.waiting().await.position, 1);
    let mut second = LeaseStream::acquire(&mut on_survivor, "job", 30_000, 30_000, "second").await;
    assert_eq!(second.waiting().await.position, 2);

    doomed.kill(); // Its waiter cannot leave the line by itself: nobody is left to say so.
    let killed_at = Instant::now();
    holder.send(release_request()).await;
    second.acquired().await;
    let took = killed_at.elapsed();
    // The dead waiter is dropped once nobody vouched for it for a waiter TTL; then the next goes.
    assert!(
        took < Duration::from_secs(3),
        "the line was blocked {took:?}"
    );
    let in_line: i64 = direct.zcard(line_key("job")).await.unwrap();
    assert_eq!(in_line, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_wake_up_still_ends_in_a_hand_over() {
    let redis = RedisServer::start();
    let server =
        TestServer::start_with(&redis, "leasehold:", config(Duration::from_secs(30), 100)).await;
    let direct = redis.client().await;
    let mut client = server.client().await;
    let mut holder = LeaseStream::acquire(&mut client, "job", 30_000, 0, "holder").await;
    holder.acquired().await;
    let mut waiter = LeaseStream::acquire(&mut client, "job", 30_000, 20_000, "waiter").await;
    assert_eq!(waiter.waiting().await.position, 1);

    // Kill the server's subscriber connection, then release while it is down: the release's
    // message reaches nobody.
    let killed: i64 = direct
        .custom(fred::cmd!("CLIENT"), vec!["KILL", "TYPE", "pubsub"])
        .await
        .unwrap();
    // The waiting room's, and the revocations' subscriber (which reconnects as well).
    assert_eq!(killed, 2);
    holder.send(release_request()).await;
    let released_at = Instant::now();
    waiter.acquired().await;
    let took = released_at.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "hand-over after a lost wake-up took {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_line_is_respected_unless_a_caller_opts_out() {
    let redis = RedisServer::start();
    let server =
        TestServer::start_with(&redis, "leasehold:", config(Duration::from_secs(30), 100)).await;
    let direct = redis.client().await;
    let mut client = server.client().await;
    // A waiter of another server, in line and vouched for, that has not taken the free lock yet.
    let far_future = 4_000_000_000_000.0;
    let _: i64 = direct
        .zadd(
            line_key("job"),
            None,
            None,
            false,
            false,
            (1.0, "elsewhere"),
        )
        .await
        .unwrap();
    let _: i64 = direct
        .zadd(
            "leasehold:{job}:deadlines",
            None,
            None,
            false,
            false,
            (far_future, "elsewhere"),
        )
        .await
        .unwrap();

    // A fair caller does not jump the line, even with the lock free.
    let mut fair = LeaseStream::acquire(&mut client, "job", 30_000, 0, "fair").await;
    assert_eq!(fair.status().await.code(), Code::Aborted);
    // An unfair caller races and wins.
    let mut unfair = LeaseStream::open(
        &mut client,
        LeaseRequest {
            action: Some(Action::Acquire(LeaseAcquire {
                name: "job".into(),
                ttl_ms: 30_000,
                wait_ms: 0,
                holder: "racer".into(),
                fair: Some(false),
                ..Default::default()
            })),
        },
    )
    .await;
    unfair.acquired().await;
    assert!(get(&direct, &lock_key("job")).await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_waiters_get_resource_exhausted() {
    let redis = RedisServer::start();
    let server =
        TestServer::start_with(&redis, "leasehold:", config(Duration::from_secs(30), 2)).await;
    let mut client = server.client().await;
    let mut holder = LeaseStream::acquire(&mut client, "job", 30_000, 0, "holder").await;
    holder.acquired().await;
    let mut first = LeaseStream::acquire(&mut client, "job", 30_000, 30_000, "").await;
    assert_eq!(first.waiting().await.position, 1);
    let mut second = LeaseStream::acquire(&mut client, "other", 30_000, 30_000, "").await;
    assert!(matches!(
        second.next_significant().await,
        Ok(Some(Event::Acquired(_)))
    ));
    let mut third = LeaseStream::acquire(&mut client, "job", 30_000, 30_000, "").await;
    assert_eq!(third.waiting().await.position, 2);
    let mut fourth = LeaseStream::acquire(&mut client, "job", 30_000, 30_000, "").await;
    let status = fourth.status().await;
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(
        status.message().contains("2 waiters"),
        "{}",
        status.message()
    );
    // Callers that do not wait are not waiters.
    let mut no_wait = LeaseStream::acquire(&mut client, "job", 30_000, 0, "").await;
    assert_eq!(no_wait.status().await.code(), Code::Aborted);
    // A waiter leaving frees its place.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let mut again = LeaseStream::acquire(&mut client, "job", 30_000, 30_000, "").await;
        match again.next_significant().await {
            Ok(Some(Event::Waiting(_))) => break,
            Err(status)
                if status.code() == Code::ResourceExhausted && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            other => panic!("expected Waiting, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn living_waiters_keep_their_place_past_many_waiter_ttls() {
    let redis = RedisServer::start();
    let waiter_ttl = Duration::from_millis(300);
    let server = TestServer::start_with(&redis, "leasehold:", config(waiter_ttl, 100)).await;
    let direct = redis.client().await;
    let mut client = server.client().await;
    let mut holder = LeaseStream::acquire(&mut client, "job", 30_000, 0, "holder").await;
    holder.acquired().await;
    let mut first = LeaseStream::acquire(&mut client, "job", 30_000, 30_000, "first").await;
    assert_eq!(first.waiting().await.position, 1);
    let mut second = LeaseStream::acquire(&mut client, "job", 30_000, 30_000, "second").await;
    assert_eq!(second.waiting().await.position, 2);

    // Idle for four waiter TTLs: only the server's refresh keeps them in line.
    tokio::time::sleep(waiter_ttl * 4).await;
    let in_line: i64 = direct.zcard(line_key("job")).await.unwrap();
    assert_eq!(in_line, 2);
    holder.release().await;
    first.acquired().await;
}
