//! The Rust client's guard against a real server and Redis (losing it: tests/conformance.rs).

use crate::support;

use std::time::Duration;

use leasehold_client::{Client, ClientError};
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

/// An `acquired` held up on its way (the connection frozen between server and client while the
/// lock was handed to this waiter, for longer than the TTL, as a partition that heals does) is
/// not believed afresh: the server's `valid_to_ms` counts from when the stream opened, so the
/// client sees the news is stale and does not take the lease, rather than believing it for a
/// whole `valid_for_ms` from a receipt that came too late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_heard_after_its_validity_is_not_believed() {
    let redis = RedisServer::start();
    let server = TestServer::start_with(&redis, "leasehold:", Default::default()).await;
    let direct = redis.client().await;
    let proxy = proxy::Proxy::start(server.addr).await;
    let holder = Client::connect(server.url()).await.unwrap();
    let waiter = Client::connect(proxy.url()).await.unwrap();
    let ttl = Duration::from_millis(300);

    let held = holder.lease("job").ttl(ttl).acquire().await.unwrap();
    let waiting = tokio::spawn(async move {
        waiter
            .lease("job")
            .ttl(ttl)
            .wait(Duration::from_secs(10))
            .acquire()
            .await
    });
    wait_for_line(&direct, "leasehold:{job}:line", 1).await;
    proxy.freeze();
    assert!(held.release().await.unwrap());
    // The waiter's server takes the lock for it and says so, into the frozen connection.
    within(EVENT_TIMEOUT, "the hand-over", async {
        while get(&direct, &lock_key("job")).await.is_none() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    tokio::time::sleep(ttl * 2).await;
    proxy.resume();

    let outcome = within(EVENT_TIMEOUT, "the acquisition's end", waiting)
        .await
        .unwrap();
    match outcome {
        Err(ClientError::Protocol(message)) => {
            assert!(message.contains("after its validity"), "{message}");
        }
        Ok(guard) => panic!(
            "believed a stale acquisition until {:?} from now",
            guard.valid_until() - tokio::time::Instant::now()
        ),
        Err(other) => panic!("unexpected {other:?}"),
    }
}

/// A session's lease takes more names and a max hold as a lease does: each name's fencing token
/// in the order asked, both names held, and at the max hold it alone is lost (typed MAX_HOLD),
/// never believed past it, while the session and its other lease go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_lease_holds_several_names_until_its_max_hold() {
    use leasehold_client::LostReason;
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let direct = redis.client().await;
    let client = Client::connect(server.url()).await.unwrap();
    let ttl = Duration::from_secs(1);
    let session = client.session().ttl(ttl).open().await.unwrap();
    let other = session.lock("other").acquire().await.unwrap();
    let sent = tokio::time::Instant::now();
    let pair = session
        .lock("b")
        .more_names(["a"])
        .max_hold(ttl)
        .acquire()
        .await
        .unwrap();
    let ceiling = tokio::time::Instant::now() + ttl;
    let names: Vec<&str> = pair.fences().iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["b", "a"]);
    assert_eq!(pair.fences()[0].1, pair.fencing_token());
    for name in ["a", "b"] {
        assert_eq!(
            get(&direct, &lock_key(name)).await.as_deref(),
            Some(pair.token())
        );
    }
    let loss = crate::conformance::lost_by(
        EVENT_TIMEOUT,
        ceiling,
        || pair.valid_until(),
        || pair.loss(),
    )
    .await;
    assert_eq!(loss.code, LostReason::MaxHold, "{loss:?}");
    assert!(sent.elapsed() >= ttl);
    assert!(!other.is_lost() && !session.is_ended());
    assert!(other.release().await.unwrap());
}
