//! The Rust client's guard against a real server and Redis (losing it: tests/conformance.rs).

use crate::support;

use std::time::Duration;

use leasehold::client::{Client, ClientError};
use support::*;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_holds_releases_and_reports_fencing() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let direct = redis.client().await;
    let client = Client::connect(server.url()).await.unwrap();

    let guard = client
        .lease("job")
        .ttl(Duration::from_secs(5))
        .holder("me")
        .acquire()
        .await
        .unwrap();
    assert!(guard.fencing_token() > 0);
    assert_eq!(
        get(&direct, &lock_key("job")).await.as_deref(),
        Some(guard.token())
    );
    let described = client.describe("job").await.unwrap();
    assert!(described.held);
    assert_eq!(described.holder, "me");

    // Taken: refused at once with ABORTED.
    match client.lease("job").acquire().await {
        Err(ClientError::Status(status)) => assert_eq!(status.code(), Code::Aborted),
        other => panic!("expected ABORTED, got {other:?}"),
    }
    assert!(guard.release().await.unwrap());
    assert_eq!(get(&direct, &lock_key("job")).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_guard_releases() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let direct = redis.client().await;
    let client = Client::connect(server.url()).await.unwrap();

    let guard = client
        .lease("job")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let first = guard.fencing_token();
    drop(guard);
    wait_until_gone(&direct, &lock_key("job"), Duration::from_secs(3)).await;
    let again = client
        .lease("job")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    assert!(again.fencing_token() > first);
}
