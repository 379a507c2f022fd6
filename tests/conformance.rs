//! The conformance scenarios (`clients/conformance/scenarios.txt`) for the Rust client, against
//! the real binary and a real redis-server: the Go, Python and Java clients run the same list.

mod support;

use std::time::Duration;

use fred::prelude::KeysInterface;
use leasehold::client::{Client, ClientError};
use support::*;
use tokio::time::Instant;
use tonic::Code;

/// A redis-server, the real binary on it, a client of that binary and a direct Redis client.
async fn start() -> (RedisServer, ServerProcess, Client, fred::prelude::Client) {
    let redis = RedisServer::start();
    let server = ServerProcess::start(&redis, &[]);
    let client = Client::connect(server.url()).await.expect("connect");
    let direct = redis.client().await;
    (redis, server, client, direct)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_acquire_release() {
    let (_redis, _server, client, direct) = start().await;
    let guard = client.lease("job").acquire().await.unwrap();
    assert_eq!(
        get(&direct, &lock_key("job")).await.as_deref(),
        Some(guard.token())
    );
    assert!(guard.release().await.unwrap());
    assert_eq!(get(&direct, &lock_key("job")).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_fail_fast_names_holder() {
    let (_redis, _server, client, _direct) = start().await;
    let _held = client
        .lease("job")
        .holder("holder-a")
        .acquire()
        .await
        .unwrap();
    match client.lease("job").acquire().await {
        Err(ClientError::Status(status)) => {
            assert_eq!(status.code(), Code::Aborted);
            assert!(
                status.message().contains("holder-a"),
                "{}",
                status.message()
            );
        }
        other => panic!("expected ABORTED naming the holder, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_wait_then_handoff() {
    let (_redis, _server, client, direct) = start().await;
    let first = client.lease("job").acquire().await.unwrap();
    let first_token = first.fencing_token();
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .lease("job")
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        })
    };
    wait_for_line(&direct, "leasehold:{job}:line", 1).await;
    assert!(first.release().await.unwrap());
    let second = within(EVENT_TIMEOUT, "the hand-off", waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(second.fencing_token() > first_token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_fencing_tokens_grow() {
    let (_redis, _server, client, _direct) = start().await;
    let mut last = 0;
    for _ in 0..5 {
        let guard = client.lease("job").acquire().await.unwrap();
        assert!(guard.fencing_token() > last);
        last = guard.fencing_token();
        assert!(guard.release().await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_lost_when_key_deleted() {
    let (_redis, _server, client, direct) = start().await;
    let guard = client
        .lease("job")
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    let _: i64 = direct.del(lock_key("job")).await.unwrap();
    let reason = within(EVENT_TIMEOUT, "lost()", guard.lost()).await;
    assert!(reason.contains("deleted or taken"), "{reason}");
    assert!(guard.is_lost());
    assert!(!guard.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_lost_by_client_clock() {
    let (_redis, server, client, _direct) = start().await;
    let ttl = Duration::from_millis(600);
    let guard = client.lease("job").ttl(ttl).acquire().await.unwrap();
    signal(server.pid(), "STOP");
    let frozen_at = Instant::now();
    let reason = within(EVENT_TIMEOUT, "lost()", guard.lost()).await;
    let after = frozen_at.elapsed();
    signal(server.pid(), "CONT");
    assert!(reason.contains("server silent"), "{reason}");
    // The guard gives up no later than one TTL after the freeze.
    assert!(after <= ttl, "lost() fired {after:?} after the freeze");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_bad_input_refused() {
    let (_redis, _server, client, _direct) = start().await;
    match client.lease("").acquire().await {
        Err(ClientError::Status(status)) => {
            assert_eq!(status.code(), Code::InvalidArgument);
            assert!(
                status.message().contains("lock name is empty"),
                "{}",
                status.message()
            );
        }
        other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_election_handover() {
    let (_redis, _server, client, direct) = start().await;
    let mut a = client
        .campaign("vote", "a", Duration::from_secs(2))
        .await
        .unwrap();
    let term_a = a.elected().await.unwrap();
    let mut b = client
        .campaign("vote", "b", Duration::from_secs(2))
        .await
        .unwrap();
    wait_for_line(&direct, "leasehold:election:{vote}:line", 1).await;
    assert!(a.resign().await.unwrap());
    let term_b = within(EVENT_TIMEOUT, "b elected", b.elected())
        .await
        .unwrap();
    assert!(term_b > term_a);
    let leader = client.leader("vote").await.unwrap().expect("a leader");
    assert_eq!(
        (leader.term, leader.value.as_slice()),
        (term_b, b"b".as_slice())
    );
}
