//! More than one holder per name, against real Redis and several servers: counting semaphores
//! (`limit`), read-write locks (`mode`), and leases resumed after a broken stream.

use crate::support;

use std::time::Duration;

use leasehold::pb::lease_request::Action;
use leasehold::pb::lease_response::Event;
use leasehold::pb::{self, LeaseAcquire, LeaseRequest};
use leasehold_client::pb::LeaseMode;
use leasehold_client::{Client, ClientError, LeaseGuard};
use support::permits::Churn;
use support::proxy::Proxy;
use support::*;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, sleep};
use tonic::Code;

const SEMAPHORE: &str = "encoders";
const RW_LOCK: &str = "catalog";

fn lease_request(acquire: LeaseAcquire) -> LeaseRequest {
    LeaseRequest {
        action: Some(Action::Acquire(acquire)),
    }
}

/// The status a refused acquisition ended with.
fn refused(result: Result<LeaseGuard, ClientError>) -> tonic::Status {
    match result {
        Err(ClientError::Status(status)) => status,
        Err(other) => panic!("expected a status, got {other}"),
        Ok(_) => panic!("expected a refusal, got a lease"),
    }
}

async fn client(url: String) -> Client {
    Client::connect(url).await.expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_limit_holders_under_churn_from_three_servers() {
    let redis = RedisServer::start();
    let servers: Vec<ServerProcess> = (0..3).map(|_| ServerProcess::start(&redis, &[])).collect();
    let urls: Vec<String> = servers.iter().map(ServerProcess::url).collect();
    let ttl = Duration::from_secs(5);
    let churn = Churn::start(&urls, 4, SEMAPHORE, 3, ttl, Duration::from_millis(20)).await;
    churn.progress(300).await;
    let report = churn.finish("single/semaphore-churn").await;
    println!(
        "FIGURE semaphore churn: {} acquisitions, most at once {}",
        report.acquisitions, report.most_at_once
    );

    assert!(
        report.most_at_once <= 3,
        "{} workers held a permit of 3 at once",
        report.most_at_once
    );
    // Twelve workers always want one of three permits: all three were in use together.
    assert_eq!(
        report.most_at_once, 3,
        "the permits were never used together"
    );
    assert_eq!(
        report.distinct_tokens(),
        report.acquisitions,
        "a fencing token was issued twice"
    );
    assert_eq!(report.lost, 0, "leases lost without any fault");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_holders_permit_frees_after_its_ttl() {
    let redis = RedisServer::start();
    let mut doomed = ServerProcess::start(&redis, &[]);
    let survivor = TestServer::start(&redis).await;
    let ttl = Duration::from_millis(1_500);
    let on_doomed = client(doomed.url()).await;
    let on_survivor = client(survivor.url()).await;
    let permit = |client: &Client| client.lease(SEMAPHORE).limit(2).ttl(ttl);
    let _crashed = permit(&on_doomed).acquire().await.expect("first permit");
    let kept = permit(&on_survivor).acquire().await.expect("second permit");

    let (in_line, waiting) = oneshot::channel();
    let mut in_line = Some(in_line);
    let third = permit(&on_survivor)
        .wait(Duration::from_secs(10))
        .acquire_with_progress(move |_| {
            if let Some(in_line) = in_line.take() {
                let _ = in_line.send(());
            }
        });
    let third = tokio::spawn(async move {
        let guard = third.await.expect("third permit");
        (guard, Instant::now())
    });
    within(EVENT_TIMEOUT, "the third waiter in line", waiting)
        .await
        .expect("waiting");
    doomed.kill();
    let killed_at = Instant::now();
    let (_third, acquired_at) = within(EVENT_TIMEOUT, "the crashed permit freed", third)
        .await
        .expect("waiter task");
    let after = acquired_at - killed_at;

    // Nobody released it: it was last renewed at most a third of the TTL (and a grid step)
    // before the crash, so it freed by expiry, between about two thirds of the TTL and the TTL.
    assert!(after >= ttl / 2, "freed after only {after:?}");
    assert!(
        after <= ttl + Duration::from_secs(1),
        "freed after {after:?}"
    );
    assert!(!kept.is_lost(), "the other permit was disturbed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_different_limit_is_refused_naming_both_numbers() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let client = client(server.url()).await;
    let held = client
        .lease(SEMAPHORE)
        .limit(3)
        .acquire()
        .await
        .expect("permit");

    for limit in [5, 1] {
        let status = refused(client.lease(SEMAPHORE).limit(limit).acquire().await);
        assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
        let message = status.message();
        assert!(
            message.contains("limit 3") && message.contains(&format!("limit {limit}")),
            "{message}"
        );
    }
    let status = refused(client.lease(SEMAPHORE).shared().acquire().await);
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(status.message().contains("limit 3") && status.message().contains("shared"));
    let unary = server
        .client()
        .await
        .acquire(pb::AcquireRequest {
            name: SEMAPHORE.into(),
            ttl_ms: 1_000,
            limit: 4,
            ..Default::default()
        })
        .await
        .expect_err("a unary acquire with another limit");
    assert_eq!(unary.code(), Code::FailedPrecondition, "{unary:?}");
    assert!(unary.message().contains("limit 4"), "{}", unary.message());

    // The holder was not disturbed, and the same limit still gets a permit.
    assert!(!held.is_lost());
    let _second = client
        .lease(SEMAPHORE)
        .limit(3)
        .acquire()
        .await
        .expect("second permit");
    let described = client.describe(SEMAPHORE).await.expect("describe");
    assert_eq!(described.holders.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_and_list_show_every_holder() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let client = client(server.url()).await;
    let mut permits = Vec::new();
    for holder in ["a", "b", "c"] {
        let guard = client
            .lease(SEMAPHORE)
            .limit(3)
            .holder(holder)
            .acquire()
            .await
            .expect("permit");
        permits.push(guard);
    }
    let readers = [
        client.lease(RW_LOCK).shared().holder("r1").acquire().await,
        client.lease(RW_LOCK).shared().holder("r2").acquire().await,
    ];

    let described = client.describe(SEMAPHORE).await.expect("describe");
    assert!(described.held);
    assert_eq!(described.limit, 3);
    assert_eq!(described.mode(), LeaseMode::Exclusive);
    let holders: Vec<&str> = described
        .holders
        .iter()
        .map(|h| h.holder.as_str())
        .collect();
    assert_eq!(holders, ["a", "b", "c"], "oldest fencing token first");
    let fences: Vec<u64> = permits.iter().map(LeaseGuard::fencing_token).collect();
    let described_fences: Vec<u64> = described.holders.iter().map(|h| h.fencing_token).collect();
    assert_eq!(described_fences, fences);
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    assert_eq!(described.holder, "a");
    assert_eq!(described.fencing_token, fences[0]);
    assert!(described.holders.iter().all(|h| h.ttl_remaining_ms > 0));

    let shared = client.describe(RW_LOCK).await.expect("describe");
    assert_eq!(shared.mode(), LeaseMode::Shared);
    assert_eq!(shared.holders.len(), 2);

    let listed = client.list(0).await.expect("list");
    let counts: Vec<(&str, usize)> = {
        let mut counts: Vec<_> = listed
            .locks
            .iter()
            .map(|lock| (lock.name.as_str(), lock.holders.len()))
            .collect();
        counts.sort_unstable();
        counts
    };
    assert_eq!(counts, [(RW_LOCK, 2), (SEMAPHORE, 3)]);

    // A released permit leaves the list at once.
    let first = permits.remove(0);
    assert!(first.release().await.expect("release"));
    let described = client.describe(SEMAPHORE).await.expect("describe");
    let holders: Vec<&str> = described
        .holders
        .iter()
        .map(|h| h.holder.as_str())
        .collect();
    assert_eq!(holders, ["b", "c"]);
    drop(readers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_writer_excludes_them() {
    let (_redis, server, _direct, mut raw) = setup().await;
    let client = client(server.url()).await;
    let reader = || client.lease(RW_LOCK).shared();
    let first = reader().acquire().await.expect("first reader");
    let second = reader().acquire().await.expect("second reader");

    let mut writer = LeaseStream::acquire(&mut raw, RW_LOCK, 30_000, 10_000, "writer").await;
    writer.waiting().await;
    // Once a writer waits, a new reader does not pass it.
    let status = refused(reader().acquire().await);
    assert_eq!(status.code(), Code::Aborted, "{status:?}");

    assert!(first.release().await.expect("release"));
    assert!(second.release().await.expect("release"));
    let acquired = writer.acquired().await;
    let status = refused(reader().acquire().await);
    assert_eq!(
        status.code(),
        Code::Aborted,
        "a reader got in beside the writer"
    );
    assert!(writer.release().await);

    let after = reader().acquire().await.expect("reader after the writer");
    assert!(after.fencing_token() > acquired.fencing_token);
}

/// One reader of the steady flow: when it asked, got in and let go.
struct ReaderTurn {
    asked: Instant,
    acquired: Instant,
    released: Instant,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_gets_in_despite_a_steady_flow_of_readers() {
    let redis = RedisServer::start();
    let servers = [
        TestServer::start(&redis).await,
        TestServer::start(&redis).await,
    ];
    let clients = [
        client(servers[0].url()).await,
        client(servers[1].url()).await,
    ];
    // A new reader every 50 ms, each holding for 200 ms: readers always overlap, so without
    // writer preference a writer would wait for ever.
    let (turns, mut finished) = mpsc::unbounded_channel::<ReaderTurn>();
    let flow = {
        let clients = clients.clone();
        tokio::spawn(async move {
            for i in 0.. {
                let (client, turns) = (clients[i % 2].clone(), turns.clone());
                tokio::spawn(async move {
                    let asked = Instant::now();
                    let lease = client.lease(RW_LOCK).shared().wait(Duration::from_secs(10));
                    let guard = lease.acquire().await.expect("reader");
                    let acquired = Instant::now();
                    sleep(Duration::from_millis(200)).await;
                    let released = Instant::now();
                    guard.release().await.expect("release reader");
                    let _ = turns.send(ReaderTurn {
                        asked,
                        acquired,
                        released,
                    });
                });
                sleep(Duration::from_millis(50)).await;
            }
        })
    };
    for _ in 0..4 {
        within(EVENT_TIMEOUT, "readers flowing", finished.recv()).await;
    }

    let mut raw = servers[0].client().await;
    let mut writer = LeaseStream::acquire(&mut raw, RW_LOCK, 30_000, 10_000, "writer").await;
    writer.waiting().await;
    let in_line = Instant::now();
    writer.acquired().await;
    let writer_in = Instant::now();
    sleep(Duration::from_millis(300)).await; // The writer's work, while readers keep asking.
    let writer_out = Instant::now();
    assert!(writer.release().await);
    let waited = writer_in - in_line;

    // Readers that asked after the writer was in line got in only after it left.
    let mut behind = 0;
    let deadline = writer_out + Duration::from_millis(200);
    loop {
        let turn = within(EVENT_TIMEOUT, "readers after the writer", finished.recv())
            .await
            .expect("reader flow");
        if turn.asked > in_line {
            behind += 1;
            assert!(
                turn.acquired > writer_in,
                "a reader that came after the waiting writer got in first"
            );
        }
        assert!(
            turn.released <= writer_in || turn.acquired >= writer_out,
            "a reader held the lock beside the writer"
        );
        if turn.asked > deadline {
            break;
        }
    }
    flow.abort();
    println!("FIGURE writer waited {waited:?} behind readers; {behind} readers queued behind it");
    // It waited only for the readers already holding when it arrived (200 ms each).
    assert!(waited < Duration::from_secs(2), "writer waited {waited:?}");
    assert!(behind >= 2, "the readers did not keep coming ({behind})");
}

/// A lease on `lock` (one of `limit` permits) whose stream goes through `proxy`, so that it can
/// be cut, kept for `grace_ms` after that.
async fn resumable(
    proxy: &Proxy,
    lock: &str,
    limit: u32,
    grace_ms: u32,
) -> (LeaseStream, pb::Acquired) {
    let mut via_proxy = connect(&proxy.url()).await;
    let request = lease_request(LeaseAcquire {
        name: lock.into(),
        ttl_ms: 3_000,
        resume_grace_ms: grace_ms,
        limit,
        ..Default::default()
    });
    let mut stream = LeaseStream::open(&mut via_proxy, request).await;
    let acquired = stream.acquired().await;
    (stream, acquired)
}

fn resume_request(lock: &str, ttl_ms: u32, token: &str) -> LeaseRequest {
    lease_request(LeaseAcquire {
        name: lock.into(),
        ttl_ms,
        resume_token: token.into(),
        ..Default::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_permit_keeps_its_fencing_token_and_place() {
    let redis = RedisServer::start();
    let (first, second) = (
        TestServer::start(&redis).await,
        TestServer::start(&redis).await,
    );
    let client = client(second.url()).await;
    let proxy = Proxy::start(first.addr).await;
    let (_cut, acquired) = resumable(&proxy, SEMAPHORE, 2, 2_000).await;
    let _other = client
        .lease(SEMAPHORE)
        .limit(2)
        .acquire()
        .await
        .expect("permit");
    let mut raw = second.client().await;
    let waiter_request = lease_request(LeaseAcquire {
        name: SEMAPHORE.into(),
        ttl_ms: 3_000,
        wait_ms: 20_000,
        limit: 2,
        ..Default::default()
    });
    let mut waiter = LeaseStream::open(&mut raw, waiter_request).await;
    waiter.waiting().await;

    proxy.cut();
    // The stream broke: the permit now lives for the grace (2 s), not a whole TTL.
    within(EVENT_TIMEOUT, "the permit shortened to its grace", async {
        loop {
            let described = client.describe(SEMAPHORE).await.expect("describe");
            let ours = described
                .holders
                .iter()
                .find(|h| h.fencing_token == acquired.fencing_token)
                .expect("the broken stream's permit is kept");
            if ours.ttl_remaining_ms <= 2_000 {
                break;
            }
            sleep(Duration::from_millis(10)).await;
        }
    })
    .await;

    let mut resumed =
        LeaseStream::open(&mut raw, resume_request(SEMAPHORE, 3_000, &acquired.token)).await;
    let again = resumed.acquired().await;
    assert_eq!(again.token, acquired.token);
    assert_eq!(again.fencing_token, acquired.fencing_token);
    // Renewed past the grace, still holding its permit: the waiter never got it.
    for _ in 0..3 {
        match resumed.next().await {
            Ok(Some(Event::Extended(_))) => {}
            other => panic!("expected Extended, got {other:?}"),
        }
    }
    let described = client.describe(SEMAPHORE).await.expect("describe");
    let fences: Vec<u64> = described.holders.iter().map(|h| h.fencing_token).collect();
    assert_eq!(fences.len(), 2);
    assert!(fences.contains(&acquired.fencing_token), "{fences:?}");

    assert!(resumed.release().await);
    let next = waiter.acquired().await;
    assert!(next.fencing_token > acquired.fencing_token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_with_a_wrong_or_expired_token_is_refused() {
    let (_redis, server, direct, mut raw) = setup().await;
    let proxy = Proxy::start(server.addr).await;
    let lock = "job";
    let (_cut, acquired) = resumable(&proxy, lock, 1, 300).await;
    let key = lock_key(lock);
    proxy.cut();
    let cut_at = Instant::now();

    let wrong = "0".repeat(32);
    let mut refused = LeaseStream::open(&mut raw, resume_request(lock, 3_000, &wrong)).await;
    let status = refused.status().await;
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    assert!(
        status.message().contains("resume token"),
        "{}",
        status.message()
    );

    assert_eq!(get(&direct, &key).await, Some(acquired.token.clone()));

    // Not resumed: the lock ends after its grace (300 ms), long before its TTL (renewed at most
    // a second before the cut, so at least 2 s left) would end it.
    wait_until_gone(&direct, &key, Duration::from_secs(3)).await;
    let gone_after = cut_at.elapsed();
    assert!(
        gone_after < Duration::from_millis(1_500),
        "gone after {gone_after:?}"
    );
    let mut late = LeaseStream::open(&mut raw, resume_request(lock, 3_000, &acquired.token)).await;
    let status = late.status().await;
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    assert_eq!(
        get(&direct, &key).await,
        None,
        "a refused resume took the lock"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_calls_take_extend_and_release_permits() {
    let (_redis, _server, _direct, mut raw) = setup().await;
    let permit = || pb::AcquireRequest {
        name: SEMAPHORE.into(),
        ttl_ms: 5_000,
        limit: 2,
        ..Default::default()
    };
    let mut tokens = Vec::new();
    for _ in 0..2 {
        let acquired = raw.acquire(permit()).await.expect("acquire").into_inner();
        assert!(acquired.acquired);
        tokens.push(acquired.token);
    }
    let full = raw.acquire(permit()).await.expect("acquire").into_inner();
    assert!(!full.acquired, "a third permit of two");

    let extend = |token: &str| pb::ExtendRequest {
        name: SEMAPHORE.into(),
        token: token.into(),
        ttl_ms: 60_000,
        ..Default::default()
    };
    let extended = raw
        .extend(extend(&tokens[0]))
        .await
        .expect("extend")
        .into_inner();
    assert!(extended.extended && extended.valid_for_ms > 5_000);
    let wrong = raw
        .extend(extend(&"0".repeat(32)))
        .await
        .expect("extend")
        .into_inner();
    assert!(!wrong.extended);
    let described = raw
        .describe(pb::DescribeRequest {
            name: SEMAPHORE.into(),
        })
        .await
        .expect("describe")
        .into_inner();
    let ttls: Vec<u32> = described
        .holders
        .iter()
        .map(|h| h.ttl_remaining_ms)
        .collect();
    assert!(ttls.iter().any(|&ttl| ttl > 5_000), "{ttls:?}");

    for token in &tokens {
        let release = pb::ReleaseRequest {
            name: SEMAPHORE.into(),
            token: token.clone(),
            ..Default::default()
        };
        assert!(
            raw.release(release.clone())
                .await
                .expect("release")
                .into_inner()
                .released
        );
        assert!(
            !raw.release(release)
                .await
                .expect("release")
                .into_inner()
                .released
        );
    }
    let again = raw.acquire(permit()).await.expect("acquire").into_inner();
    assert!(again.acquired, "the released permits are free");
}
