//! The unary calls (`Acquire`, `Extend`, `Release`, `Describe`) and script reloading, against a
//! real Redis.

use crate::support;

use std::time::Duration;

use fred::prelude::{KeysInterface, LuaInterface};
use leasehold::pb::lease_response::Event;
use leasehold::pb::{DescribeRequest, ExtendRequest, ListRequest};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_acquire_extend_describe_release() {
    let (_redis, _server, direct, mut client) = setup().await;

    let got = client
        .acquire(unary_acquire("cron", 1_000, 0, "cron@host"))
        .await
        .unwrap()
        .into_inner();
    assert!(got.acquired);
    assert!(got.fencing_token > 0);
    assert_eq!(got.ttl_ms, 1_000);
    assert!(got.valid_for_ms > 0 && got.valid_for_ms < 1_000);

    let described = client
        .describe(DescribeRequest {
            name: "cron".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(described.held);
    assert_eq!(described.holder, "cron@host");
    assert_eq!(described.fencing_token, got.fencing_token);
    assert!(described.ttl_remaining_ms > 0 && described.ttl_remaining_ms <= 1_000);

    // A second caller is told who holds it; that is an answer, not an error.
    let refused = client
        .acquire(unary_acquire("cron", 1_000, 0, "other"))
        .await
        .unwrap()
        .into_inner();
    assert!(!refused.acquired);
    assert_eq!(refused.holder, "cron@host");
    assert!(refused.token.is_empty());

    let extended = client
        .extend(ExtendRequest {
            name: "cron".into(),
            token: got.token.clone(),
            ttl_ms: 60_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(extended.extended);
    let pttl: i64 = direct.pttl(lock_key("cron")).await.unwrap();
    assert!(pttl > 1_000, "extend did not reset the TTL: {pttl}");

    let released = client
        .release(unary_release("cron", &got.token))
        .await
        .unwrap()
        .into_inner();
    assert!(released.released);
    assert_eq!(get(&direct, &lock_key("cron")).await, None);
    let described = client
        .describe(DescribeRequest {
            name: "cron".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!described.held);

    // Too late: a released lock cannot be extended or released again.
    let extended = client
        .extend(ExtendRequest {
            name: "cron".into(),
            token: got.token.clone(),
            ttl_ms: 1_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!extended.extended);
    let released = client
        .release(unary_release("cron", &got.token))
        .await
        .unwrap()
        .into_inner();
    assert!(!released.released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_acquire_waits_for_a_release() {
    let (_redis, server, _, mut client) = setup().await;
    let mut other = server.client().await;

    let first = client
        .acquire(unary_acquire("w", 30_000, 0, "first"))
        .await
        .unwrap()
        .into_inner();
    let first_fencing = first.fencing_token;
    let waiting = tokio::spawn(async move {
        other
            .acquire(unary_acquire("w", 30_000, 10_000, "second"))
            .await
            .unwrap()
            .into_inner()
    });
    // The waiter has not got it while the first holds it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished());
    client
        .release(unary_release("w", &first.token))
        .await
        .unwrap();
    let second = tokio::time::timeout(EVENT_TIMEOUT, waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(second.acquired);
    assert!(second.fencing_token > first_fencing);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_answers_false_and_leaves_the_lock_alone() {
    let (_redis, _server, direct, mut client) = setup().await;

    let mut lease = LeaseStream::acquire(&mut client, "mine", 30_000, 0, "").await;
    let acquired = lease.acquired().await;
    let wrong = "0".repeat(32);
    let extended = client
        .extend(ExtendRequest {
            name: "mine".into(),
            token: wrong.clone(),
            ttl_ms: 100,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!extended.extended);
    let released = client
        .release(unary_release("mine", &wrong))
        .await
        .unwrap()
        .into_inner();
    assert!(!released.released);
    assert_eq!(get(&direct, &lock_key("mine")).await, Some(acquired.token));
    let pttl: i64 = direct.pttl(lock_key("mine")).await.unwrap();
    assert!(pttl > 20_000, "a wrong token changed the TTL: {pttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_are_reloaded_when_redis_forgets_them() {
    let (_redis, _server, direct, mut client) = setup().await;
    let _: () = direct.script_flush(false).await.unwrap();
    let mut lease = LeaseStream::acquire(&mut client, "job", 300, 0, "").await;
    lease.acquired().await;
    let _: () = direct.script_flush(false).await.unwrap();
    // Renewal (extend script) survives the flush too.
    assert!(matches!(lease.next().await, Ok(Some(Event::Extended(_)))));

    // A flush between unary calls: each call reloads what it runs (its arguments built again
    // for the second EVALSHA), the refusal both take.lua and acquire.lua.
    let _: () = direct.script_flush(false).await.unwrap();
    let taken = client
        .acquire(unary_acquire("cron", 30_000, 0, "first"))
        .await
        .unwrap()
        .into_inner();
    assert!(taken.acquired);
    assert_eq!(
        get(&direct, &lock_key("cron")).await,
        Some(taken.token.clone())
    );
    let _: () = direct.script_flush(false).await.unwrap();
    let refused = client
        .acquire(unary_acquire("cron", 30_000, 0, "second"))
        .await
        .unwrap()
        .into_inner();
    assert!(!refused.acquired);
    assert_eq!(refused.holder, "first");
    let _: () = direct.script_flush(false).await.unwrap();
    let released = client
        .release(unary_release("cron", &taken.token))
        .await
        .unwrap()
        .into_inner();
    assert!(released.released);
    assert_eq!(get(&direct, &lock_key("cron")).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_reports_held_locks_only_and_says_when_it_stops_short() {
    let (_redis, _server, direct, mut client) = setup().await;
    for name in ["a", "b", "c"] {
        let taken = client
            .acquire(unary_acquire(name, 30_000, 0, "lister"))
            .await
            .unwrap()
            .into_inner();
        assert!(taken.acquired);
    }
    // Neither an election's lease nor a foreign key under the prefix is a lock.
    let _candidate = leasehold_client::Client::connect(_server.url())
        .await
        .unwrap()
        .campaign("a", "x", Duration::from_secs(30))
        .await
        .unwrap();
    let _: () = direct
        .set("leasehold:other", "x", None, None, false)
        .await
        .unwrap();

    let all = client
        .list(ListRequest { limit: 0 })
        .await
        .unwrap()
        .into_inner();
    let mut names: Vec<_> = all.locks.iter().map(|lock| lock.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["a", "b", "c"]);
    assert!(!all.truncated);
    assert!(all.locks.iter().all(|lock| lock.holder == "lister"
        && lock.fencing_token > 0
        && lock.ttl_remaining_ms > 0));

    let two = client
        .list(ListRequest { limit: 2 })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(two.locks.len(), 2);
    assert!(two.truncated);
}
