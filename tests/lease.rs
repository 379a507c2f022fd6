//! The `Lease` stream against a real Redis: acquire, renew, release on every way out, wait.

use crate::support;

use std::time::Duration;

use fred::prelude::KeysInterface;
use leasehold::pb::lease_response::Event;
use support::*;
use tokio::time::Instant;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_sets_the_key_with_our_token_and_ttl() {
    let (_redis, _server, direct, mut client) = setup().await;

    let mut lease = LeaseStream::acquire(&mut client, "job-1", 5_000, 0, "host-a pid 1").await;
    let acquired = lease.acquired().await;

    assert_eq!(acquired.token.len(), 32);
    assert!(acquired.token.chars().all(|c| c.is_ascii_hexdigit()));
    assert!(acquired.fencing_token > 0);
    assert_eq!(acquired.ttl_ms, 5_000);
    assert!(acquired.valid_for_ms > 0 && acquired.valid_for_ms < 5_000);
    assert_eq!(get(&direct, &lock_key("job-1")).await, Some(acquired.token));
    let pttl: i64 = direct.pttl(lock_key("job-1")).await.unwrap();
    assert!(pttl > 0 && pttl <= 5_000, "pttl {pttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_streams_racing_for_one_name_exactly_one_wins() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    for round in 0..10 {
        let name = format!("race-{round}");
        let (mut a, mut b) = (server.client().await, server.client().await);
        let (mut first, mut second) = tokio::join!(
            LeaseStream::acquire(&mut a, &name, 5_000, 0, "a"),
            LeaseStream::acquire(&mut b, &name, 5_000, 0, "b"),
        );
        let (one, other) = tokio::join!(first.next_significant(), second.next_significant());
        let outcomes = [one, other];
        let winners: Vec<_> = outcomes
            .iter()
            .filter(|o| matches!(o, Ok(Some(Event::Acquired(_)))))
            .collect();
        let losers: Vec<_> = outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
        assert_eq!(winners.len(), 1, "round {round}: {outcomes:?}");
        assert_eq!(losers.len(), 1, "round {round}: {outcomes:?}");
        assert_eq!(losers[0].code(), Code::Aborted);
        assert!(
            losers[0].message().contains("held by \"a\"")
                || losers[0].message().contains("held by \"b\""),
            "{}",
            losers[0].message()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_the_lock_past_many_ttls_and_reports_extended() {
    let (_redis, _server, direct, mut client) = setup().await;

    let mut lease = LeaseStream::acquire(&mut client, "long-job", 300, 0, "").await;
    let acquired = lease.acquired().await;
    let started = Instant::now();
    let mut extended = 0;
    while started.elapsed() < Duration::from_millis(1_500) {
        match lease.next().await {
            Ok(Some(Event::Extended(e))) => {
                assert_eq!(e.ttl_ms, 300);
                assert!(e.valid_for_ms > 0 && e.valid_for_ms < 300);
                extended += 1;
            }
            other => panic!("expected Extended, got {other:?}"),
        }
    }
    // Renewals every ttl/3 over five TTLs.
    assert!(extended >= 10, "only {extended} renewals in 1.5 s");
    assert_eq!(
        get(&direct, &lock_key("long-job")).await,
        Some(acquired.token)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_stops_reading_keeps_the_lock() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let direct = redis.client().await;
    // A tiny HTTP/2 window: once a few events are unread, the server cannot send any more and
    // its event buffer fills. Renewal must go on regardless.
    let channel = tonic::transport::Endpoint::from_shared(server.url())
        .unwrap()
        .initial_stream_window_size(Some(64))
        .connect()
        .await
        .unwrap();
    let mut client = leasehold::pb::lock_service_client::LockServiceClient::new(channel);

    let mut lease = LeaseStream::acquire(&mut client, "slow-reader", 150, 0, "").await;
    let acquired = lease.acquired().await;
    // Not reading for 20 TTLs (renewals every 50 ms: far more than the buffer holds).
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    assert_eq!(
        get(&direct, &lock_key("slow-reader")).await,
        Some(acquired.token.clone()),
        "the lock must survive a client that does not read"
    );
    // Nothing but Extended is waiting for us, and the lease ends cleanly on release.
    assert!(lease.release().await);
    assert_eq!(get(&direct, &lock_key("slow-reader")).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_message_frees_the_lock_and_ends_the_stream() {
    let (_redis, _server, direct, mut client) = setup().await;

    let mut lease = LeaseStream::acquire(&mut client, "job", 30_000, 0, "").await;
    lease.acquired().await;
    assert!(lease.release().await);
    assert!(matches!(lease.next().await, Ok(None)), "stream must end");
    assert_eq!(get(&direct, &lock_key("job")).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_close_releases_the_lock() {
    let (_redis, _server, direct, mut client) = setup().await;

    let mut lease = LeaseStream::acquire(&mut client, "job", 30_000, 0, "").await;
    lease.acquired().await;
    lease.half_close();
    match lease.next_significant().await {
        Ok(Some(Event::Released(r))) => assert!(r.was_held),
        other => panic!("expected Released, got {other:?}"),
    }
    assert_eq!(get(&direct, &lock_key("job")).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_stream_frees_the_lock_long_before_its_ttl() {
    let (_redis, _server, direct, mut client) = setup().await;

    let mut lease = LeaseStream::acquire(&mut client, "job", 30_000, 0, "").await;
    lease.acquired().await;
    drop(lease); // The call is cancelled (RST_STREAM), as when a client crashes mid-call.
    let took = wait_until_gone(&direct, &lock_key("job"), Duration::from_secs(3)).await;
    assert!(took < Duration::from_secs(3), "freed after {took:?}");
}

/// The hold has no task of its own: its response stream drives it, so a dropped stream (the
/// call cancelled) ends the lease from a task started at the drop, as a stream gone: a
/// resumable lease is kept for its grace (here shortened to it), never released, and resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_stream_keeps_a_resumable_lease_for_its_grace_and_it_resumes() {
    let (_redis, _server, direct, mut client) = setup().await;
    let acquire = |resume_token: String| {
        let mut request = acquire_request("job", 30_000, 0, "");
        if let Some(leasehold::pb::lease_request::Action::Acquire(acquire)) = &mut request.action {
            acquire.resume_grace_ms = 2_000;
            acquire.resume_token = resume_token;
        }
        request
    };
    let mut lease = LeaseStream::open(&mut client, acquire(String::new())).await;
    let held = lease.acquired().await;
    drop(lease); // RST_STREAM: hyper drops the response stream, which held the lease.
    within(EVENT_TIMEOUT, "the lease shortened to its grace", async {
        loop {
            let pttl: i64 = direct.pttl(lock_key("job")).await.unwrap();
            if (0..=2_000).contains(&pttl) {
                break;
            }
            assert!(pttl > 0, "released, not kept (pttl {pttl})");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let mut resumed = LeaseStream::open(&mut client, acquire(held.token.clone())).await;
    let again = resumed.acquired().await;
    assert_eq!(again.fencing_token, held.fencing_token);
    assert_eq!(get(&direct, &lock_key("job")).await, Some(held.token));
    assert!(resumed.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_connection_frees_the_lock_long_before_its_ttl() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let direct = redis.client().await;
    let proxy = proxy::Proxy::start(server.addr).await;
    let mut client = connect(&proxy.url()).await;

    let mut lease = LeaseStream::acquire(&mut client, "job", 30_000, 0, "").await;
    lease.acquired().await;
    proxy.cut(); // The TCP connection closes under both ends.
    let took = wait_until_gone(&direct, &lock_key("job"), Duration::from_secs(3)).await;
    assert!(took < Duration::from_secs(3), "freed after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_client_loses_the_lock_within_the_keepalive_bound() {
    let redis = RedisServer::start();
    let config = fast_keepalive();
    let bound = config.keepalive_interval + config.keepalive_timeout;
    let server = TestServer::start_with(&redis, "leasehold:", config).await;
    let direct = redis.client().await;
    let proxy = proxy::Proxy::start(server.addr).await;
    let mut client = connect(&proxy.url()).await;

    let mut lease = LeaseStream::acquire(&mut client, "job", 30_000, 0, "").await;
    let acquired = lease.acquired().await;
    // Nothing flows any more, yet no FIN or RST arrives: a frozen process or a vanished network.
    proxy.freeze();
    let frozen_at = Instant::now();
    let took = wait_until_gone(&direct, &lock_key("job"), Duration::from_secs(10)).await;
    let took = took.max(frozen_at.elapsed());
    // Within one ping interval plus the ping timeout, with room for a busy machine.
    assert!(
        took <= bound + Duration::from_millis(1_500),
        "frozen client kept the lock {took:?} (bound {bound:?})"
    );
    // Freed by the keepalive, not by the TTL running out.
    assert!(took < Duration::from_millis(acquired.ttl_ms.into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_lock_with_no_wait_is_aborted_naming_the_holder() {
    let (_redis, _server, _, mut client) = setup().await;

    let mut holder = LeaseStream::acquire(&mut client, "job", 30_000, 0, "host-a pid 7").await;
    holder.acquired().await;
    let mut second = LeaseStream::acquire(&mut client, "job", 30_000, 0, "host-b").await;
    let status = second.status().await;
    assert_eq!(status.code(), Code::Aborted);
    assert!(
        status.message().contains("host-a pid 7"),
        "{}",
        status.message()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gets_the_lock_when_the_holder_releases() {
    let (_redis, _server, _, mut client) = setup().await;

    let mut holder = LeaseStream::acquire(&mut client, "job", 30_000, 0, "first").await;
    let first = holder.acquired().await;
    let mut waiter = LeaseStream::acquire(&mut client, "job", 30_000, 10_000, "second").await;
    match waiter.next().await {
        Ok(Some(Event::Waiting(w))) => {
            assert_eq!(w.holder, "first");
            assert!(w.holder_ttl_remaining_ms > 0 && w.holder_ttl_remaining_ms <= 30_000);
        }
        other => panic!("expected Waiting, got {other:?}"),
    }
    holder.send(release_request()).await;
    let second = waiter.acquired().await;
    assert!(second.fencing_token > first.fencing_token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gives_up_with_aborted_when_wait_passes() {
    let (_redis, _server, _, mut client) = setup().await;

    let mut holder = LeaseStream::acquire(&mut client, "job", 30_000, 0, "first").await;
    holder.acquired().await;
    let started = Instant::now();
    let mut waiter = LeaseStream::acquire(&mut client, "job", 30_000, 300, "second").await;
    assert!(matches!(waiter.next().await, Ok(Some(Event::Waiting(_)))));
    let status = waiter.status().await;
    assert_eq!(status.code(), Code::Aborted);
    assert!(status.message().contains("first"), "{}", status.message());
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_gets_a_crashed_holders_lock_when_its_ttl_runs_out() {
    let (_redis, _server, direct, mut client) = setup().await;
    // A holder that vanished without releasing: the key just sits there until it expires.
    let _: () = direct
        .set(
            lock_key("job"),
            "someone-elses-token",
            Some(fred::types::Expiration::PX(400)),
            None,
            false,
        )
        .await
        .unwrap();
    let started = Instant::now();
    let mut waiter = LeaseStream::acquire(&mut client, "job", 30_000, 5_000, "").await;
    assert!(matches!(waiter.next().await, Ok(Some(Event::Waiting(_)))));
    waiter.acquired().await;
    let waited = started.elapsed();
    // Backoff is capped by the holder's remaining TTL, so the waiter is not far behind it.
    assert!(
        waited >= Duration::from_millis(350),
        "acquired early: {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(1_400),
        "acquired late: {waited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_leaves_never_takes_the_lock() {
    let (_redis, _server, direct, mut client) = setup().await;

    let mut holder = LeaseStream::acquire(&mut client, "job", 30_000, 0, "first").await;
    holder.acquired().await;
    let mut waiter = LeaseStream::acquire(&mut client, "job", 30_000, 60_000, "second").await;
    assert!(matches!(waiter.next().await, Ok(Some(Event::Waiting(_)))));
    drop(waiter);
    holder.release().await;
    // Give a still-running waiter every chance to grab it: it must not.
    let took = wait_until_gone(&direct, &lock_key("job"), Duration::from_secs(2)).await;
    assert!(took < Duration::from_secs(2));
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(get(&direct, &lock_key("job")).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_strictly_increase_across_holders() {
    let (_redis, _server, _, mut client) = setup().await;
    let mut last = 0;
    for _ in 0..5 {
        let mut lease = LeaseStream::acquire(&mut client, "fenced", 5_000, 0, "").await;
        let fencing = lease.acquired().await.fencing_token;
        assert!(fencing > last, "{fencing} after {last}");
        last = fencing;
        lease.release().await;
        // Unary acquisitions draw from the same counter.
        let unary = client
            .acquire(leasehold::pb::AcquireRequest {
                name: "fenced".into(),
                ttl_ms: 5_000,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(unary.fencing_token > last);
        last = unary.fencing_token;
        client
            .release(leasehold::pb::ReleaseRequest {
                name: "fenced".into(),
                token: unary.token,
                ..Default::default()
            })
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_deleted_behind_the_servers_back_is_reported_lost() {
    let (_redis, _server, direct, mut client) = setup().await;

    let mut lease = LeaseStream::acquire(&mut client, "job", 300, 0, "").await;
    lease.acquired().await;
    let _: i64 = direct.del(lock_key("job")).await.unwrap();
    match lease.next_significant().await {
        Ok(Some(Event::Lost(lost))) => {
            assert!(lost.reason.contains("deleted or taken"), "{}", lost.reason)
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    assert!(
        matches!(lease.next().await, Ok(None)),
        "stream must end after Lost"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_over_behind_the_servers_back_is_lost_and_left_alone() {
    let (_redis, _server, direct, mut client) = setup().await;

    let mut lease = LeaseStream::acquire(&mut client, "job", 300, 0, "").await;
    lease.acquired().await;
    let _: () = direct
        .set(
            lock_key("job"),
            "intruder",
            Some(fred::types::Expiration::PX(30_000)),
            None,
            false,
        )
        .await
        .unwrap();
    // Found at the next renewal (every 100 ms): a build that renews the intruder's key instead
    // fails here, not after a renewal at a time for ever.
    let next = within(
        Duration::from_secs(2),
        "Lost after the key was taken over",
        lease.next_significant(),
    )
    .await;
    assert!(matches!(next, Ok(Some(Event::Lost(_)))), "{next:?}");
    assert!(matches!(lease.next().await, Ok(None)));
    // Our release path must not delete what is no longer ours.
    assert_eq!(
        get(&direct, &lock_key("job")).await.as_deref(),
        Some("intruder")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_redis_ends_in_lost_before_the_lease_runs_out() {
    let (redis, _server, _, mut client) = setup().await;

    let ttl = Duration::from_millis(600);
    let mut lease = LeaseStream::acquire(&mut client, "job", 600, 0, "").await;
    lease.acquired().await;
    // The last confirmation the client heard, and how long it was good for.
    let mut vouched_until = Instant::now() + ttl;
    redis.pause();
    let lost_at = within(EVENT_TIMEOUT, "Lost while Redis is paused", async {
        loop {
            match lease.next().await {
                Ok(Some(Event::Extended(e))) => {
                    vouched_until = Instant::now() + Duration::from_millis(e.valid_for_ms.into());
                }
                Ok(Some(Event::Lost(lost))) => {
                    assert!(lost.reason.contains("Redis"), "{}", lost.reason);
                    return Instant::now();
                }
                other => panic!("expected Lost, got {other:?}"),
            }
        }
    })
    .await;
    redis.resume();
    // Lost comes no later than the end of the validity the server last claimed (plus delivery).
    assert!(
        lost_at <= vouched_until + Duration::from_millis(250),
        "Lost came {:?} after the lease ran out",
        lost_at - vouched_until
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_shutdown_releases_every_lease_and_says_lost() {
    let (_redis, server, direct, mut client) = setup().await;

    let mut lease = LeaseStream::acquire(&mut client, "job", 30_000, 0, "").await;
    lease.acquired().await;
    let stopping = tokio::spawn(server.stop());
    match lease.next_significant().await {
        Ok(Some(Event::Lost(lost))) => {
            assert!(lost.reason.contains("shutting down"), "{}", lost.reason)
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    stopping.await.unwrap();
    assert_eq!(get(&direct, &lock_key("job")).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_servers_lock_frees_after_its_ttl() {
    let redis = RedisServer::start();
    let direct = redis.client().await;
    let mut doomed = ServerProcess::start(&redis, &[]);
    let mut client = connect(&doomed.url()).await;

    let mut lease = LeaseStream::acquire(&mut client, "job", 1_000, 0, "").await;
    let killed_token = lease.acquired().await.fencing_token;
    doomed.kill();
    let killed_at = Instant::now();
    // Nobody released it: it is still there, and it goes only when the TTL runs out.
    assert!(get(&direct, &lock_key("job")).await.is_some());
    wait_until_gone(&direct, &lock_key("job"), Duration::from_secs(3)).await;
    let freed_after = killed_at.elapsed();
    assert!(
        freed_after <= Duration::from_millis(1_100),
        "freed after {freed_after:?}"
    );

    // Another server hands it to a waiter.
    let survivor = TestServer::start(&redis).await;
    let mut client = survivor.client().await;
    let mut next = LeaseStream::acquire(&mut client, "job", 1_000, 2_000, "").await;
    assert!(next.acquired().await.fencing_token > killed_token);
}

/// Scripts Redis has run by SHA (every renewal script is one).
async fn evalsha_calls(direct: &fred::prelude::Client) -> u64 {
    use fred::interfaces::ClientLike;
    let info: String = direct
        .info(Some(fred::types::InfoKind::CommandStats))
        .await
        .unwrap();
    info.lines()
        .find_map(|line| line.trim().strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_share_scripts_and_a_lost_lease_does_not_hurt_its_batch() {
    let (_redis, _server, direct, mut client) = setup().await;
    let mut leases = Vec::new();
    for i in 0..100 {
        let mut lease =
            LeaseStream::acquire(&mut client, &format!("batch-{i}"), 3_000, 0, "").await;
        lease.acquired().await;
        leases.push(lease);
    }
    let before = evalsha_calls(&direct).await;
    // One lease of the batch loses its key behind the server's back.
    let _: i64 = direct.del(lock_key("batch-50")).await.unwrap();
    match leases[50].next_significant().await {
        Ok(Some(Event::Lost(lost))) => {
            assert!(lost.reason.contains("deleted or taken"), "{}", lost.reason)
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    // The 99 others go on: two more renewals each.
    for (i, lease) in leases.iter_mut().enumerate().filter(|(i, _)| *i != 50) {
        for _ in 0..2 {
            match lease.next().await {
                Ok(Some(Event::Extended(_))) => {}
                other => panic!("lease {i}: expected Extended, got {other:?}"),
            }
        }
    }
    // Renewed together on a shared grid: far fewer scripts than the 198 renewals (at least)
    // they carried.
    let scripts = evalsha_calls(&direct).await - before;
    assert!(scripts < 50, "{scripts} scripts for 198 renewals");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_errors_is_lost_in_time_and_spares_the_rest_of_its_batch() {
    let (_redis, _server, direct, mut client) = setup().await;
    let mut leases = Vec::new();
    for i in 0..100 {
        let mut lease = LeaseStream::acquire(&mut client, &format!("err-{i}"), 1_000, 0, "").await;
        lease.acquired().await;
        leases.push(lease);
    }
    // One lock key becomes a list behind the server's back: every script that reads it fails
    // (WRONGTYPE), the batch script included.
    let _: i64 = direct.del(lock_key("err-7")).await.unwrap();
    let _: i64 = fred::interfaces::ClientLike::custom(
        &direct,
        fred::cmd!("RPUSH"),
        vec![lock_key("err-7"), "x".to_owned()],
    )
    .await
    .unwrap();
    let broken_at = Instant::now();
    match leases[7].next_significant().await {
        Ok(Some(Event::Lost(lost))) => {
            assert!(lost.reason.contains("before"), "{}", lost.reason)
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    // Told by the end of its validity (one TTL from its last confirmed renewal at the latest).
    assert!(broken_at.elapsed() < Duration::from_millis(1_100));
    // Its 99 batch mates were renewed meanwhile and go on.
    for (i, lease) in leases.iter_mut().enumerate().filter(|(i, _)| *i != 7) {
        for _ in 0..2 {
            match lease.next().await {
                Ok(Some(Event::Extended(_))) => {}
                other => panic!("lease {i}: expected Extended, got {other:?}"),
            }
        }
    }
}
