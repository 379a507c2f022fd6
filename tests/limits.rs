//! Issue 41's limits on a holding, against a real Redis: the token check (`Check`), lock-delay
//! and max-hold.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use leasehold::pb::lock_service_client::LockServiceClient;
use leasehold::pb::{CheckRequest, TokenState};
use leasehold::server::ServerConfig;
use leasehold::server::auth::{AuthPolicy, token_digest};
use support::certs::TempDir;
use support::*;
use tonic::Code;
use tonic::transport::Channel;

/// `Check` of `fencing_token` on `name`: its state and the current token it answers.
async fn check(
    client: &mut LockServiceClient<Channel>,
    name: &str,
    fencing_token: u64,
) -> (TokenState, u64) {
    let answer = client
        .check(CheckRequest {
            name: name.into(),
            fencing_token,
        })
        .await
        .expect("check")
        .into_inner();
    (answer.state(), answer.current_fencing_token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_answers_current_superseded_or_free_for_a_lock_and_a_permit() {
    let (_redis, _server, _direct, mut client) = setup().await;

    // A lock: current while held, superseded once another holds it, free once let go.
    let first = client
        .acquire(unary_acquire("check/lock", 200, 0, "first"))
        .await
        .unwrap()
        .into_inner();
    assert!(first.acquired);
    let fence = first.fencing_token;
    assert_eq!(
        check(&mut client, "check/lock", fence).await,
        (TokenState::Current, fence)
    );
    assert_eq!(
        check(&mut client, "check/lock", fence + 1).await,
        (TokenState::Superseded, fence)
    );
    let second = within(Duration::from_secs(5), "the next holder", async {
        loop {
            let got = client
                .acquire(unary_acquire("check/lock", 5_000, 1_000, "second"))
                .await
                .unwrap()
                .into_inner();
            if got.acquired {
                return got;
            }
        }
    })
    .await;
    assert_eq!(
        check(&mut client, "check/lock", fence).await,
        (TokenState::Superseded, second.fencing_token)
    );
    release_unary(&mut client, "check/lock", &second.token).await;
    assert_eq!(
        check(&mut client, "check/lock", fence).await,
        (TokenState::Free, 0)
    );

    // A semaphore's permits: each holder's token is current; another is superseded by the oldest.
    let permit = |holder: &'static str| {
        let mut request = unary_acquire("check/sem", 5_000, 0, holder);
        request.limit = 2;
        request
    };
    let a = client.acquire(permit("a")).await.unwrap().into_inner();
    let b = client.acquire(permit("b")).await.unwrap().into_inner();
    assert!(a.acquired && b.acquired);
    for token in [a.fencing_token, b.fencing_token] {
        assert_eq!(
            check(&mut client, "check/sem", token).await,
            (TokenState::Current, token)
        );
    }
    assert_eq!(
        check(&mut client, "check/sem", fence).await,
        (TokenState::Superseded, a.fencing_token.min(b.fencing_token))
    );
    release_unary(&mut client, "check/sem", &a.token).await;
    release_unary(&mut client, "check/sem", &b.token).await;
    assert_eq!(
        check(&mut client, "check/sem", a.fencing_token).await,
        (TokenState::Free, 0)
    );
}

async fn release_unary(client: &mut LockServiceClient<Channel>, name: &str, token: &str) {
    let released = client
        .release(unary_release(name, token))
        .await
        .unwrap()
        .into_inner();
    assert!(released.released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_refuses_bad_input_and_callers_without_the_observe_role() {
    let redis = RedisServer::start();
    let dir = TempDir::new("auth");
    let grants = dir.write(
        "auth.toml",
        &format!(
            "[[grant]]\nname = \"dashboard\"\ntoken_sha256 = \"{}\"\nrole = \"observe\"\nlocks = [\"billing/\"]\n",
            token_digest("dashboard-secret")
        ),
    );
    let config = ServerConfig {
        auth: Some(Arc::new(AuthPolicy::load(&grants).unwrap())),
        ..fast_keepalive()
    };
    let server = TestServer::start_with(&redis, "leasehold:", config).await;
    let mut client = server.client().await;
    let call = |name: &str, fencing_token: u64, token: Option<&str>| {
        let mut request = tonic::Request::new(CheckRequest {
            name: name.into(),
            fencing_token,
        });
        if let Some(token) = token {
            let value = format!("Bearer {token}").parse().unwrap();
            request.metadata_mut().insert("authorization", value);
        }
        request
    };
    let observer = Some("dashboard-secret");
    let free = client.check(call("billing/x", 7, observer)).await.unwrap();
    assert_eq!(free.into_inner().state(), TokenState::Free);
    for (name, token, code) in [
        ("reports/x", observer, Code::PermissionDenied),
        ("billing/x", None, Code::Unauthenticated),
    ] {
        let refused = client.check(call(name, 7, token)).await.unwrap_err();
        assert_eq!(refused.code(), code, "{name}");
    }
    let empty = client.check(call("", 7, observer)).await.unwrap_err();
    assert_eq!(empty.code(), Code::InvalidArgument);
    let zero = client
        .check(call("billing/x", 0, observer))
        .await
        .unwrap_err();
    assert_eq!(zero.code(), Code::InvalidArgument);
    assert!(
        zero.message().contains("fencing token is 0"),
        "{}",
        zero.message()
    );
}

/// A unary `Acquire` of `name` with a lock-delay and a max-hold (0: none).
fn limited(
    name: &str,
    ttl_ms: u32,
    lock_delay_ms: u32,
    max_hold_ms: u32,
) -> leasehold::pb::AcquireRequest {
    leasehold::pb::AcquireRequest {
        lock_delay_ms,
        max_hold_ms,
        ..unary_acquire(name, ttl_ms, 0, "limited")
    }
}

/// A Lease stream's `acquire` with a lock-delay, a max-hold and a resume grace.
fn limited_stream(
    name: &str,
    ttl_ms: u32,
    lock_delay_ms: u32,
    max_hold_ms: u32,
    resume_grace_ms: u32,
) -> leasehold::pb::LeaseRequest {
    let mut request = acquire_request(name, ttl_ms, 0, "limited");
    if let Some(leasehold::pb::lease_request::Action::Acquire(acquire)) = request.action.as_mut() {
        acquire.lock_delay_ms = lock_delay_ms;
        acquire.max_hold_ms = max_hold_ms;
        acquire.resume_grace_ms = resume_grace_ms;
    }
    request
}

/// Whether a unary `Acquire` of `name` (no wait) gets it now; released at once if it does.
async fn free_now(client: &mut LockServiceClient<Channel>, name: &str) -> bool {
    let got = client
        .acquire(unary_acquire(name, 1_000, 0, "prober"))
        .await
        .unwrap()
        .into_inner();
    if got.acquired {
        release_unary(client, name, &got.token).await;
    }
    got.acquired
}

/// Every key of `name` but the fence counters, as Redis has them now.
async fn keys_of(direct: &fred::prelude::Client, name: &str) -> Vec<String> {
    use fred::prelude::ClientLike;
    direct
        .custom(fred::cmd!("KEYS"), vec![format!("leasehold:{{{name}}}:*")])
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_delay_follows_a_loss_never_a_clean_release_and_a_waiter_gets_the_name_just_after() {
    use fred::prelude::KeysInterface;
    let (_redis, _server, direct, mut client) = setup().await;

    // A clean release frees the name at once.
    let got = client
        .acquire(limited("delay/clean", 5_000, 5_000, 0))
        .await
        .unwrap()
        .into_inner();
    assert!(got.acquired);
    release_unary(&mut client, "delay/clean", &got.token).await;
    assert!(free_now(&mut client, "delay/clean").await);
    assert!(keys_of(&direct, "delay/clean").await.is_empty());

    // Expiry: a unary lease never extended expires after its TTL; a waiter in line gets the
    // name only once the delay has run after that, and promptly then.
    let taken = std::time::Instant::now();
    let got = client
        .acquire(limited("delay/expired", 200, 600, 0))
        .await
        .unwrap()
        .into_inner();
    assert!(got.acquired);
    let mut waiter =
        LeaseStream::acquire(&mut client, "delay/expired", 5_000, 5_000, "waiter").await;
    let waiting = waiter.waiting().await;
    assert_eq!(waiting.holder, "limited");
    let acquired = waiter.acquired().await;
    let after = taken.elapsed();
    assert!(acquired.fencing_token > got.fencing_token);
    assert!(
        after >= Duration::from_millis(780),
        "taken {after:?} after: the delay was ignored"
    );
    assert!(
        after < Duration::from_millis(800 + 300),
        "taken {after:?} after: not promptly"
    );
    assert!(waiter.release().await);
    assert!(
        keys_of(&direct, "delay/expired").await.is_empty(),
        "leftovers"
    );

    // Revoked: the delay runs from the revocation.
    let got = client
        .acquire(limited("delay/revoked", 5_000, 500, 0))
        .await
        .unwrap()
        .into_inner();
    assert!(got.acquired);
    let revoked = std::time::Instant::now();
    client
        .revoke(leasehold::pb::RevokeRequest {
            name: "delay/revoked".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(
        !free_now(&mut client, "delay/revoked").await,
        "free at once after a revoke"
    );
    within(Duration::from_secs(3), "the delay after a revoke", async {
        while !free_now(&mut client, "delay/revoked").await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(revoked.elapsed() >= Duration::from_millis(480));

    // A broken stream whose grace runs out: the lock lasts the grace, the delay after it.
    let mut stream = LeaseStream::open(
        &mut client,
        limited_stream("delay/broken", 3_000, 600, 0, 300),
    )
    .await;
    stream.acquired().await;
    drop(stream);
    let broken = std::time::Instant::now();
    wait_until_gone(&direct, &lock_key("delay/broken"), Duration::from_secs(2)).await;
    let pttl: i64 = direct.pttl("leasehold:{delay/broken}:delay").await.unwrap();
    assert!(
        pttl > 300 && pttl <= 600,
        "delay key's TTL when the grace ran out: {pttl}"
    );
    assert!(
        !free_now(&mut client, "delay/broken").await,
        "free when the grace ran out"
    );
    within(Duration::from_secs(3), "the delay after the grace", async {
        while !free_now(&mut client, "delay/broken").await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(broken.elapsed() >= Duration::from_millis(850));
    assert!(
        keys_of(&direct, "delay/broken").await.is_empty(),
        "leftovers"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_refused_where_they_do_not_apply() {
    let (_redis, _server, _direct, mut client) = setup().await;
    let mut semaphore = limited("refused", 1_000, 500, 0);
    semaphore.limit = 2;
    let mut shared = limited("refused", 1_000, 500, 0);
    shared.mode = leasehold::pb::LeaseMode::Shared.into();
    for (request, what) in [
        (semaphore, "lock_delay_ms"),
        (shared, "lock_delay_ms"),
        (limited("refused", 1_000, 3_600_001, 0), "lock_delay_ms"),
        (limited("refused", 1_000, 0, 999), "max_hold_ms"),
        (
            limited("refused", 1_000, 0, 7 * 24 * 3_600_000 + 1),
            "max_hold_ms",
        ),
    ] {
        let refused = client.acquire(request).await.unwrap_err();
        assert_eq!(refused.code(), Code::InvalidArgument);
        assert!(refused.message().contains(what), "{}", refused.message());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_ends_a_stream_while_its_key_holds_and_caps_unary_extends() {
    use fred::prelude::KeysInterface;
    use leasehold::pb::lease_response::Event;
    let (_redis, _server, direct, mut client) = setup().await;

    let started = std::time::Instant::now();
    let mut stream =
        LeaseStream::open(&mut client, limited_stream("hold/stream", 300, 0, 1_000, 0)).await;
    let acquired = stream.acquired().await;
    // The ceiling counts from when the server sent the take, before the answer arrived here:
    // nothing is vouched for past that plus the max-hold. Counted with `valid_to_ms` (from the
    // stream's first request), not from an answer's arrival, which a busy machine delays.
    let ceiling = Duration::from_millis(1_000) + started.elapsed();
    assert!(Duration::from_millis(acquired.valid_to_ms) <= ceiling);
    let lost = within(Duration::from_secs(3), "lost at the max-hold", async {
        loop {
            match stream.next().await {
                Ok(Some(Event::Extended(extended))) => {
                    let vouched = Duration::from_millis(extended.valid_to_ms);
                    assert!(
                        vouched <= ceiling,
                        "vouched to {vouched:?}, past {ceiling:?}"
                    );
                }
                Ok(Some(Event::Lost(lost))) => return lost,
                other => panic!("expected Extended or Lost, got {other:?}"),
            }
        }
    })
    .await;
    let value = get(&direct, &lock_key("hold/stream")).await;
    assert_eq!(
        value.as_deref(),
        Some(acquired.token.as_str()),
        "the key no longer held"
    );
    assert_eq!(lost.code(), leasehold::pb::LostReason::MaxHold);
    assert!(lost.reason.contains("max hold"), "{}", lost.reason);
    let at = started.elapsed();
    // Told at its ceiling: not before it, and well before the key's next TTL would have run.
    assert!(
        at >= Duration::from_millis(950) && at < Duration::from_millis(2_000),
        "{at:?}"
    );
    // Past its ceiling the lease cannot be resumed, though its key still holds the token: a
    // resume would buy it another TTL.
    let mut resume = acquire_request("hold/stream", 300, 0, "limited");
    if let Some(leasehold::pb::lease_request::Action::Acquire(acquire)) = resume.action.as_mut() {
        acquire.resume_token = acquired.token.clone();
    }
    let status = LeaseStream::open(&mut client, resume).await.status().await;
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");

    // Unary: Extend sets no TTL past the ceiling, and is refused once it is reached.
    let got = client
        .acquire(limited("hold/unary", 300, 0, 600))
        .await
        .unwrap()
        .into_inner();
    assert!(got.acquired);
    let extend = leasehold::pb::ExtendRequest {
        name: "hold/unary".into(),
        token: got.token.clone(),
        ttl_ms: 5_000,
        ..Default::default()
    };
    let extended = client.extend(extend.clone()).await.unwrap().into_inner();
    assert!(extended.extended);
    assert!(extended.valid_for_ms <= 600, "{}", extended.valid_for_ms);
    let pttl: i64 = direct.pttl(lock_key("hold/unary")).await.unwrap();
    assert!(pttl <= 600, "TTL past the ceiling: {pttl}");
    tokio::time::sleep(Duration::from_millis(650)).await;
    let refused = client.extend(extend).await.unwrap().into_inner();
    assert!(!refused.extended);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_ends_a_session_lease_alone_while_its_key_holds() {
    use crate::session::Raw;
    use leasehold::pb::session_response::Event as S;
    let (_redis, server, direct, _client) = setup().await;
    let mut session = Raw::open(&server.url(), 300, 0).await;
    let acquire = |id, name: &str, max_hold_ms| {
        leasehold::pb::session_request::Action::Acquire(leasehold::pb::SessionAcquire {
            id,
            name: name.into(),
            max_hold_ms,
            ..Default::default()
        })
    };
    let started = std::time::Instant::now();
    session.send(acquire(1, "hold/session", 1_000));
    let capped = session.acquired(1).await;
    assert!(capped.valid_for_ms <= 1_000, "{}", capped.valid_for_ms);
    session.send(acquire(2, "hold/session-other", 0));
    let other = session.acquired(2).await;
    let lost = within(Duration::from_secs(3), "lost at the max-hold", async {
        match session.next_about().await {
            Ok(Some(S::LeaseLost(lost))) => lost,
            other => panic!("expected lease_lost, got {other:?}"),
        }
    })
    .await;
    let at = started.elapsed();
    assert_eq!(lost.id, 1);
    assert_eq!(lost.code(), leasehold::pb::LostReason::MaxHold);
    assert!(at >= Duration::from_millis(950), "{at:?}");
    assert_eq!(
        get(&direct, &lock_key("hold/session")).await.as_deref(),
        Some(capped.token.as_str()),
        "the key no longer held when its holder heard"
    );
    // The session's other lease is renewed on: still held well past its own TTL.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        get(&direct, &lock_key("hold/session-other"))
            .await
            .as_deref(),
        Some(other.token.as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_delay_follows_a_stream_that_ends_without_a_release_but_not_one_that_releases() {
    let (_redis, _server, direct, mut client) = setup().await;
    // Dropped without a `release` and without a grace: released at once, and its delay runs.
    let mut dropped = LeaseStream::open(
        &mut client,
        limited_stream("delay/dropped", 5_000, 800, 0, 0),
    )
    .await;
    dropped.acquired().await;
    let ended = std::time::Instant::now();
    drop(dropped);
    wait_until_gone(&direct, &lock_key("delay/dropped"), Duration::from_secs(2)).await;
    assert!(
        !free_now(&mut client, "delay/dropped").await,
        "taken in its delay"
    );
    let got = within(Duration::from_secs(3), "the name after its delay", async {
        loop {
            if free_now(&mut client, "delay/dropped").await {
                return ended.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        got >= Duration::from_millis(800),
        "taken {got:?} after the end"
    );
    // A `release` message: free at once.
    let mut released = LeaseStream::open(
        &mut client,
        limited_stream("delay/released", 5_000, 800, 0, 0),
    )
    .await;
    released.acquired().await;
    assert!(released.release().await, "was held");
    assert!(free_now(&mut client, "delay/released").await);
}
