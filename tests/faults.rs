//! What happens when Redis loses data or goes away, against real processes.

use crate::support;
use tonic_types::StatusExt;

use std::time::Duration;

use fred::prelude::ClientLike;
use leasehold::pb::lease_response::Event;
use support::*;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_keep_growing_after_redis_forgets_everything() {
    let (_redis, _server, direct, mut client) = setup().await;

    let mut first = LeaseStream::acquire(&mut client, "job", 5_000, 0, "").await;
    let before = first.acquired().await.fencing_token;
    first.release().await;

    let _: () = direct.flushall(false).await.unwrap();
    let mut second = LeaseStream::acquire(&mut client, "job", 5_000, 0, "").await;
    let after = second.acquired().await.fencing_token;
    assert!(
        after > before,
        "token went back from {before} to {after} after FLUSHALL"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restarted_empty_is_noticed_at_once_and_tokens_still_grow() {
    let mut redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let mut client = server.client().await;

    // A long TTL: the next scheduled renewal is 10 s away, so only the reconnect check can be
    // this fast.
    let mut lease = LeaseStream::acquire(&mut client, "job", 30_000, 0, "").await;
    let before = lease.acquired().await.fencing_token;
    redis.restart_empty();
    let restarted_at = Instant::now();
    match lease.next_significant().await {
        Ok(Some(Event::Lost(lost))) => {
            assert!(lost.reason.contains("reconnected"), "{}", lost.reason)
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    let noticed_after = restarted_at.elapsed();
    assert!(
        noticed_after < Duration::from_secs(5),
        "Lost only after {noticed_after:?}"
    );

    // The holder may still believe for up to its TTL (cut off from its server, it would not
    // hear Lost): this server grants nothing on the emptied Redis meanwhile, and says for how
    // long (the longest TTL it vouched for, less Redis's uptime).
    let mut refused = LeaseStream::acquire(&mut client, "job", 30_000, 0, "").await;
    let status = refused.status().await;
    let info = status.get_details_error_info().expect("ErrorInfo");
    assert_eq!(info.reason, "REDIS_RESTARTED_EMPTY", "{status:?}");
    let hold: u64 = info.metadata["hold_ms"].parse().unwrap();
    assert!((25_000..=30_000).contains(&hold), "held back {hold} ms");

    // A server that never vouched for a lease on it has nothing to hold back: tokens still grow.
    let fresh = TestServer::start(&redis).await;
    let mut next = LeaseStream::acquire(&mut fresh.client().await, "job", 30_000, 0, "").await;
    let after = next.acquired().await.fencing_token;
    assert!(
        after > before,
        "token went back from {before} to {after} after a restart"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_down_for_a_while_ends_leases_as_lost_and_serves_again_after() {
    let mut redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let mut client = server.client().await;

    let mut lease = LeaseStream::acquire(&mut client, "job", 500, 0, "").await;
    lease.acquired().await;
    redis.kill();
    match lease.next_significant().await {
        Ok(Some(Event::Lost(lost))) => assert!(lost.reason.contains("Redis"), "{}", lost.reason),
        other => panic!("expected Lost, got {other:?}"),
    }
    // While Redis is down, new requests fail with UNAVAILABLE rather than hanging.
    let mut refused = LeaseStream::acquire(&mut client, "other", 500, 0, "").await;
    assert_eq!(refused.status().await.code(), tonic::Code::Unavailable);

    redis.restart_empty();
    let direct = redis.client().await;
    let _: () = direct.ping(None).await.unwrap();
    // Served again once the connection is back (the client reconnects by itself).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut lease = LeaseStream::acquire(&mut client, "job", 500, 0, "").await;
        match lease.next_significant().await {
            Ok(Some(Event::Acquired(_))) => break,
            Err(status)
                if status.code() == tonic::Code::Unavailable && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("expected Acquired, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_rides_out_a_redis_that_stops_answering_and_takes_the_lock_after() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let mut client = server.client().await;

    let mut holder = LeaseStream::acquire(&mut client, "job", 500, 0, "holder").await;
    holder.acquired().await;
    let mut waiter = LeaseStream::acquire(&mut client, "job", 500, 30_000, "waiter").await;
    waiter.waiting().await;
    // Frozen, not gone: every command times out, and nothing in Redis is lost.
    signal(redis.pid(), "STOP");
    match holder.next_significant().await {
        Ok(Some(Event::Lost(_))) => {}
        other => panic!("expected Lost, got {other:?}"),
    }
    // The holder's TTL has run out: the waiter tries to take the lock during these three
    // seconds (six holder TTLs), and every try times out. It keeps waiting all the same: its
    // deadline is 30 s away, and a Redis that answers again is worth waiting for.
    let quiet = tokio::time::timeout(Duration::from_secs(3), waiter.next_significant()).await;
    signal(redis.pid(), "CONT");
    assert!(
        quiet.is_err(),
        "the waiter heard {:?} while Redis was frozen",
        quiet.ok()
    );
    waiter.acquired().await;
    assert!(waiter.release().await);
}
