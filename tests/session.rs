//! The `Session` stream: many leases on one stream, confirmed together, each lost or failed
//! alone, all let go together (the conformance file has what every client must do with it).

use crate::support;

use std::time::Duration;

use fred::prelude::KeysInterface;
use leasehold::pb::session_request::Action;
use leasehold::pb::session_response::Event;
use leasehold::pb::session_service_client::SessionServiceClient;
use leasehold::pb::{self, SessionRequest, SessionResponse};
use leasehold_client::{Client, Refusal};
use support::*;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Code, Status, Streaming};

/// A session seen from the wire (also used by tests/several.rs).
pub(crate) struct Raw {
    requests: mpsc::UnboundedSender<SessionRequest>,
    events: Streaming<SessionResponse>,
}

impl Raw {
    pub(crate) async fn open(url: &str, ttl_ms: u32, resume_grace_ms: u32) -> Self {
        let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
            .unwrap()
            .connect()
            .await
            .unwrap();
        let (requests, outbox) = mpsc::unbounded_channel();
        let raw = |action| SessionRequest {
            action: Some(action),
        };
        requests
            .send(raw(Action::Open(pb::SessionOpen {
                ttl_ms,
                resume_grace_ms,
                holder: "raw session".into(),
            })))
            .unwrap();
        let events = SessionServiceClient::new(channel)
            .session(UnboundedReceiverStream::new(outbox))
            .await
            .unwrap()
            .into_inner();
        Raw { requests, events }
    }

    pub(crate) fn send(&self, action: Action) {
        self.requests
            .send(SessionRequest {
                action: Some(action),
            })
            .unwrap();
    }

    fn acquire(&self, id: u64, name: &str, wait_ms: u32) {
        self.send(Action::Acquire(pb::SessionAcquire {
            id,
            name: name.into(),
            wait_ms,
            ..Default::default()
        }));
    }

    /// Asks to resume, as `id`, the lease `token` holds on `name`.
    fn resume(&self, id: u64, name: &str, token: &str) {
        self.send(Action::Acquire(pb::SessionAcquire {
            id,
            name: name.into(),
            resume_token: token.into(),
            ..Default::default()
        }));
    }

    /// The next message, confirmations included.
    async fn next(&mut self) -> Result<Option<Event>, Status> {
        let message = within(EVENT_TIMEOUT, "a session message", self.events.message()).await;
        Ok(message?.and_then(|response| response.event))
    }

    /// The next message about a lease (or the session's end), confirmations skipped.
    pub(crate) async fn next_about(&mut self) -> Result<Option<Event>, Status> {
        loop {
            match self.next().await? {
                Some(Event::KeptAlive(_)) => continue,
                other => return Ok(other),
            }
        }
    }

    pub(crate) async fn acquired(&mut self, id: u64) -> pb::SessionAcquired {
        match self.next_about().await {
            Ok(Some(Event::Acquired(acquired))) if acquired.id == id => acquired,
            other => panic!("expected acquired {id}, got {other:?}"),
        }
    }
}

/// The refusal a `failed` carries, as a client reads it from its status details.
fn refusal_of(failed: &pb::SessionFailed) -> Refusal {
    let status = Status::with_details(
        Code::from(failed.code),
        failed.message.clone(),
        failed.status.clone().into(),
    );
    Refusal::of(&status).expect("the failure carries its details")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_leases_are_confirmed_by_one_message_per_renewal_period() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let direct = redis.client().await;
    let ttl = Duration::from_millis(300);
    let mut session = Raw::open(&server.url(), 300, 0).await;
    const LEASES: u64 = 50;
    for id in 0..LEASES {
        session.acquire(id, &format!("lock-{id}"), 0);
    }
    let mut tokens = std::collections::HashMap::new();
    while tokens.len() < LEASES as usize {
        match session.next_about().await {
            Ok(Some(Event::Acquired(acquired))) => {
                tokens.insert(acquired.id, acquired.token);
            }
            other => panic!("expected acquired, got {other:?}"),
        }
    }
    // Four TTLs: twelve renewal periods. Nothing but the session's confirmations arrives, one
    // per period, not one per lease.
    let until = Instant::now() + 4 * ttl;
    let mut confirmations = 0;
    while Instant::now() < until {
        match tokio::time::timeout_at(until, session.next()).await {
            Err(_) => break,
            Ok(Ok(Some(Event::KeptAlive(kept)))) => {
                assert!(kept.valid_for_ms > 0 && kept.valid_for_ms < 300, "{kept:?}");
                confirmations += 1;
            }
            Ok(other) => panic!("expected only kept_alive, got {other:?}"),
        }
    }
    assert!(
        (6..=16).contains(&confirmations),
        "{confirmations} confirmations in 4 TTLs"
    );
    // Still held, four TTLs after they were taken.
    for (id, token) in &tokens {
        let key = lock_key(&format!("lock-{id}"));
        assert_eq!(get(&direct, &key).await.as_ref(), Some(token), "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_or_refused_lease_fails_alone_and_a_reused_id_ends_the_session() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let direct = redis.client().await;
    let mut session = Raw::open(&server.url(), 5_000, 0).await;
    session.acquire(1, "a", 0);
    let held = session.acquired(1).await;
    session.acquire(2, "", 0);
    match session.next_about().await {
        Ok(Some(Event::Failed(failed))) if failed.id == 2 => {
            assert_eq!(Code::from(failed.code), Code::InvalidArgument);
            assert!(failed.message.contains("lock name is empty"), "{failed:?}");
            assert_eq!(refusal_of(&failed).reason, "INVALID_REQUEST");
        }
        other => panic!("expected failed 2, got {other:?}"),
    }
    // Its own lock, asked for again under another id: refused like anyone's, naming the holder.
    session.acquire(3, "a", 0);
    match session.next_about().await {
        Ok(Some(Event::Failed(failed))) if failed.id == 3 => {
            assert_eq!(Code::from(failed.code), Code::Aborted);
            let refusal = refusal_of(&failed);
            assert_eq!(refusal.reason, "LOCK_HELD");
            assert_eq!(refusal.holder.as_deref(), Some("raw session"));
        }
        other => panic!("expected failed 3, got {other:?}"),
    }
    assert_eq!(get(&direct, &lock_key("a")).await, Some(held.token.clone()));
    // An id still in use: the session ends, and with it the lease it held.
    session.acquire(1, "b", 0);
    match session.next_about().await {
        Err(status) => {
            assert_eq!(status.code(), Code::InvalidArgument);
            assert!(status.message().contains("already in use"), "{status:?}");
        }
        other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
    }
    within(EVENT_TIMEOUT, "the lock released", async {
        while get(&direct, &lock_key("a")).await.is_some() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_a_waiting_lease_gives_up_its_place_in_line() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let direct = redis.client().await;
    let client = Client::connect(server.url()).await.unwrap();
    let holder = client.lease("a").acquire().await.unwrap();
    let mut session = Raw::open(&server.url(), 5_000, 0).await;
    session.acquire(1, "a", 60_000);
    match session.next_about().await {
        Ok(Some(Event::Waiting(waiting))) => assert_eq!((waiting.id, waiting.position), (1, 1)),
        other => panic!("expected waiting, got {other:?}"),
    }
    session.send(Action::Release(pb::SessionRelease { id: 1 }));
    match session.next_about().await {
        Ok(Some(Event::Released(released))) => {
            assert_eq!((released.id, released.was_held), (1, false))
        }
        other => panic!("expected released, got {other:?}"),
    }
    wait_for_line(&direct, "leasehold:{a}:line", 0).await;
    assert!(holder.release().await.unwrap());
    // Nobody in line: a caller that does not wait gets it.
    let next = client.lease("a").acquire().await.unwrap();
    assert!(next.release().await.unwrap());
    // The session goes on: the id is free again.
    session.acquire(1, "c", 0);
    session.acquired(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_loses_every_lease_of_the_session_by_the_clients_clock() {
    let redis = RedisServer::start();
    let server = ServerProcess::start(&redis, &[]);
    let client = Client::connect(server.url()).await.unwrap();
    let ttl = Duration::from_millis(600);
    let session = client
        .session()
        .ttl(ttl)
        .resume_grace(Duration::ZERO)
        .open()
        .await
        .unwrap();
    let leases = [
        session.lock("a").acquire().await.unwrap(),
        session.lock("b").acquire().await.unwrap(),
        session.lock("c").limit(3).acquire().await.unwrap(),
    ];
    signal(server.pid(), "STOP");
    let frozen_at = Instant::now();
    for lease in &leases {
        let reason = within(EVENT_TIMEOUT, "lost()", lease.lost()).await;
        assert!(reason.contains("server silent"), "{reason}");
    }
    let after = frozen_at.elapsed();
    signal(server.pid(), "CONT");
    // Believed no longer than the TTL past the freeze (the last confirmation left before it),
    // and told by its own clock then: read from the validity each lease counted down, since on
    // a busy machine this task may notice the loss late.
    for lease in &leases {
        let believed = lease.valid_until().saturating_duration_since(frozen_at);
        assert!(believed <= ttl, "believed {believed:?} past the freeze");
    }
    assert!(
        after <= ttl + Duration::from_secs(1),
        "lost() fired {after:?} after the freeze"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stopping_releases_a_session_without_grace_and_keeps_one_with() {
    let redis = RedisServer::start();
    let direct = redis.client().await;
    for grace_ms in [0, 5_000] {
        let server = TestServer::start(&redis).await;
        let mut session = Raw::open(&server.url(), 5_000, grace_ms).await;
        session.acquire(1, "a", 0);
        session.acquire(2, "b", 0);
        let (a, b) = (session.acquired(1).await, session.acquired(2).await);
        let stopping = tokio::spawn(server.stop());
        let end = session.next_about().await;
        stopping.await.unwrap();
        if grace_ms == 0 {
            match end {
                Ok(Some(Event::Lost(lost))) => {
                    assert!(lost.reason.contains("shutting down"), "{lost:?}")
                }
                other => panic!("expected lost, got {other:?}"),
            }
            assert_eq!(get(&direct, &lock_key("a")).await, None);
            assert_eq!(get(&direct, &lock_key("b")).await, None);
        } else {
            match end {
                Err(status) => {
                    assert_eq!(status.code(), Code::Unavailable);
                    assert_eq!(Refusal::of(&status).unwrap().reason, "HANDED_OVER");
                }
                other => panic!("expected UNAVAILABLE, got {other:?}"),
            }
            assert_eq!(get(&direct, &lock_key("a")).await, Some(a.token));
            assert_eq!(get(&direct, &lock_key("b")).await, Some(b.token));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_leases_count_against_its_connections_limit() {
    let redis = RedisServer::start();
    let config = leasehold::server::ServerConfig {
        max_leases_per_connection: 3,
        ..fast_keepalive()
    };
    let server = TestServer::start_with(&redis, "leasehold:", config).await;
    // The stream takes one slot, each lease one more.
    let mut session = Raw::open(&server.url(), 5_000, 0).await;
    session.acquire(1, "a", 0);
    session.acquire(2, "b", 0);
    session.acquired(1).await;
    session.acquired(2).await;
    session.acquire(3, "c", 0);
    match session.next_about().await {
        Ok(Some(Event::Failed(failed))) if failed.id == 3 => {
            assert_eq!(Code::from(failed.code), Code::ResourceExhausted);
            assert_eq!(refusal_of(&failed).reason, "CONNECTION_LEASE_LIMIT");
        }
        other => panic!("expected failed 3, got {other:?}"),
    }
    // Released, a lease frees its slot.
    session.send(Action::Release(pb::SessionRelease { id: 1 }));
    match session.next_about().await {
        Ok(Some(Event::Released(released))) => assert!(released.was_held),
        other => panic!("expected released, got {other:?}"),
    }
    session.acquire(3, "c", 0);
    session.acquired(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_on_a_session_proclaims_and_its_loss_ends_it_alone() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let direct = redis.client().await;
    let client = Client::connect(server.url()).await.unwrap();
    let session = client
        .session()
        .ttl(Duration::from_millis(300))
        .open()
        .await
        .unwrap();
    let lock = session.lock("a").acquire().await.unwrap();
    let leader = session.campaign("e", b"one".to_vec()).await.unwrap();
    leader.proclaim(b"two".to_vec()).await.unwrap();
    let now = client.leader("e").await.unwrap().expect("a leader");
    assert_eq!(
        (now.term, now.value.as_slice()),
        (leader.term(), &b"two"[..])
    );
    // The election's lease key deleted: the leadership alone is lost.
    let deleted: i64 = direct.del("leasehold:election:{e}:lock").await.unwrap();
    assert_eq!(deleted, 1);
    let reason = within(EVENT_TIMEOUT, "leader.lost()", leader.lost()).await;
    assert!(reason.contains("deleted or taken"), "{reason}");
    assert!(!lock.is_lost());
    assert_eq!(
        get(&direct, &lock_key("a")).await.as_deref(),
        Some(lock.token())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_renewals_cannot_be_confirmed_is_lost_whole() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let mut session = Raw::open(&server.url(), 300, 0).await;
    session.acquire(1, "a", 0);
    session.acquire(2, "b", 0);
    session.acquired(1).await;
    session.acquired(2).await;
    // Redis frozen past the session's validity: no round can be confirmed.
    redis.pause();
    let paused_at = Instant::now();
    let end = session.next_about().await;
    let after = paused_at.elapsed();
    redis.resume();
    match end {
        Ok(Some(Event::Lost(lost))) => {
            assert!(lost.reason.contains("before the lease ran out"), "{lost:?}")
        }
        other => panic!("expected the session lost, got {other:?}"),
    }
    assert!(after <= Duration::from_millis(400), "told {after:?} after");
    // Nothing follows the session's loss: the stream ends.
    assert!(matches!(session.next().await, Ok(None)));
}

/// Bytes received and not yet read on the connections a server listening on `port` accepted
/// (`ss`'s Recv-Q): what a frozen server has been sent since it froze.
fn unread_bytes(port: u16) -> u64 {
    let filter = format!("sport = :{port}");
    let out = std::process::Command::new("ss")
        .args(["-tnH", "state", "established", &filter])
        .output()
        .expect("run ss");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_in_flight_when_its_server_stops_or_crashes_is_answered_from_the_resumed_session()
{
    let redis = RedisServer::start();
    let direct = redis.client().await;
    for crash in [false, true] {
        let mut replicas = Replicas::start(&redis, 2, &[]);
        let client = Client::connect(replicas.urls()).await.unwrap();
        let session = client
            .session()
            .ttl(Duration::from_secs(3))
            .open()
            .await
            .unwrap();
        let lease = session.lock("job").acquire().await.unwrap();
        let leader = session.campaign("jobs", b"a".to_vec()).await.unwrap();
        let port = replicas.servers[0].addr.port();
        // Frozen, the server reads nothing: the release and the resignation reach its socket
        // and wait there while it stops or dies.
        signal(replicas.servers[0].pid(), "STOP");
        let before = unread_bytes(port);
        let releasing = tokio::spawn(lease.release());
        let resigning = tokio::spawn(leader.resign());
        within(EVENT_TIMEOUT, "the release at the frozen server", async {
            while unread_bytes(port) <= before {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        if crash {
            replicas.kill(0);
        } else {
            signal(replicas.servers[0].pid(), "TERM");
            signal(replicas.servers[0].pid(), "CONT");
        }
        let released = within(EVENT_TIMEOUT, "release()", releasing).await.unwrap();
        let resigned = within(EVENT_TIMEOUT, "resign()", resigning).await.unwrap();
        assert!(released.unwrap(), "crash: {crash}");
        assert!(resigned.unwrap(), "crash: {crash}");
        assert_eq!(get(&direct, &lock_key("job")).await, None, "crash: {crash}");
        // The session goes on, on the other server.
        assert!(!session.is_ended());
        let again = session.lock("job").acquire().await.unwrap();
        assert!(again.release().await.unwrap());
        within(EVENT_TIMEOUT, "close()", session.close())
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_no_server_answers_ends_with_the_leases_validity() {
    let redis = RedisServer::start();
    let server = ServerProcess::start(&redis, &[]);
    let client = Client::connect(server.url()).await.unwrap();
    let ttl = Duration::from_millis(800);
    let session = client.session().ttl(ttl).open().await.unwrap();
    let lease = session.lock("job").acquire().await.unwrap();
    let valid_until = lease.valid_until();
    signal(server.pid(), "STOP");
    let error = within(EVENT_TIMEOUT, "release()", lease.release())
        .await
        .unwrap_err();
    let late = Instant::now().saturating_duration_since(valid_until);
    signal(server.pid(), "CONT");
    assert!(
        error
            .to_string()
            .contains("not confirmed before the lease's validity ran out"),
        "{error}"
    );
    assert!(
        late < Duration::from_millis(200),
        "answered {late:?} after the validity"
    );
}

/// How a resume's stream ends while Redis still has the resume in hand.
#[derive(Clone, Copy, Debug, PartialEq)]
enum ResumeEnds {
    /// The client leaves its session (the connection dropped).
    ClientLeaves,
    /// The session's server stops (SIGTERM): the session is handed over.
    ServerStops,
    /// The client releases the id it is resuming: the one end that lets the lease go.
    ClientReleases,
    /// The client leaves a `Lease` stream, whose driver waits for the resume's answer.
    LeaseStreamLeft,
}

/// A resume creates nothing: the key is the one the holder's earlier stream vouched for, and
/// may have been renewed by the resume itself. A resume abandoned while Redis has it in hand
/// (its session ended by the client or by a stopping server) must not release it: the next
/// waiter would get the lock while the holder still believes in it, and resumes it again.
/// (Found in review: a session dropped its resume in flight, and the lease with it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_in_flight_when_its_stream_ends_never_lets_the_lease_go() {
    use ResumeEnds::*;
    const TTL_MS: u32 = 5_000;
    let redis = RedisServer::start();
    let direct = redis.client().await;
    let a = TestServer::start(&redis).await;
    for (i, how) in [ClientLeaves, ServerStops, ClientReleases, LeaseStreamLeft]
        .into_iter()
        .enumerate()
    {
        let name = format!("job-{i}");
        let key = lock_key(&name);
        // B, where the client resumes: a process of its own, whose metrics show its commands in
        // flight, and whose Redis timeout outlasts the freeze (the resume stays in flight).
        let mut b = ServerProcess::start(
            &redis,
            &["--metrics", "127.0.0.1:0", "--redis-timeout", "60s"],
        );
        let metrics = b.metrics_addr();
        // X holds the lock on A, whose session then breaks: A keeps it for its grace.
        let mut x = Raw::open(&a.url(), TTL_MS, TTL_MS).await;
        x.acquire(1, &name, 0);
        let held = x.acquired(1).await;
        drop(x);
        // W waits for it.
        let mut w = Raw::open(&a.url(), TTL_MS, 0).await;
        w.acquire(1, &name, 60_000);
        match w.next_about().await {
            Ok(Some(Event::Waiting(_))) => {}
            other => panic!("{how:?}: expected waiting, got {other:?}"),
        }
        let value: String = direct.get(&key).await.unwrap();
        let attachment = lease_value(&value).attachment;
        let in_flight = "leasehold_redis_in_flight";
        crate::operations::until_metric(&metrics, in_flight, 0.0).await;
        // X resumes on B, and Redis has the resume in hand, frozen.
        redis.pause();
        let mut session = None;
        let mut lease = None;
        if how == LeaseStreamLeft {
            let mut request = acquire_request(&name, TTL_MS, 0, "raw lease");
            if let Some(leasehold::pb::lease_request::Action::Acquire(acquire)) =
                &mut request.action
            {
                acquire.resume_token = held.token.clone();
                acquire.resume_grace_ms = TTL_MS;
            }
            lease = Some(LeaseStream::open(&mut connect(&b.url()).await, request).await);
        } else {
            let raw = Raw::open(&b.url(), TTL_MS, TTL_MS).await;
            raw.resume(1, &name, &held.token);
            session = Some(raw);
        }
        crate::operations::until_metric(&metrics, in_flight, 1.0).await;
        // Its stream ends with the resume in flight.
        let streams = match how {
            ClientLeaves => {
                drop(session.take());
                let open = r#"leasehold_open_streams{kind="session"}"#;
                crate::operations::until_metric(&metrics, open, 0.0).await;
                open
            }
            ServerStops => {
                signal(b.pid(), "TERM");
                match session.as_mut().unwrap().next_about().await {
                    Err(status) => {
                        assert_eq!(Refusal::of(&status).unwrap().reason, "HANDED_OVER")
                    }
                    other => panic!("expected HANDED_OVER, got {other:?}"),
                }
                ""
            }
            ClientReleases => {
                let raw = session.as_mut().unwrap();
                raw.send(Action::Release(pb::SessionRelease { id: 1 }));
                match raw.next_about().await {
                    Ok(Some(Event::Released(released))) => assert!(!released.was_held),
                    other => panic!("expected released, got {other:?}"),
                }
                ""
            }
            // The driver waits for the resume's answer, whatever its client does meanwhile.
            LeaseStreamLeft => {
                drop(lease.take());
                r#"leasehold_open_streams{kind="lease"}"#
            }
        };
        redis.resume();
        // Every command B sent answered, its streams ended (or B exited).
        if how == ServerStops {
            let exited = b.exited_within(EVENT_TIMEOUT).await;
            assert!(exited.is_some(), "B did not exit after its stop");
        } else {
            if !streams.is_empty() {
                crate::operations::until_metric(&metrics, streams, 0.0).await;
            }
            crate::operations::until_metric(&metrics, in_flight, 0.0).await;
        }
        if how == ClientReleases {
            // Released at the holder's request: the waiter's at once.
            within(EVENT_TIMEOUT, "released", async {
                while get(&direct, &key).await == Some(held.token.clone()) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await;
            w.acquired(1).await;
            continue;
        }
        // The resume lands (one attachment on), and nothing lets the lease go.
        within(EVENT_TIMEOUT, "the resume landing", async {
            loop {
                let value: Option<String> = direct.get(&key).await.unwrap();
                let value = value.map(|value| lease_value(&value));
                let value = value.unwrap_or_else(|| {
                    panic!("{how:?}: the lease was let go under its holder, who resumed it")
                });
                assert!(
                    value.token == held.token,
                    "{how:?}: the lease was let go under its holder, and the waiter took it"
                );
                if value.attachment > attachment {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        // X resumes it again (the answer never reached it): the same lease, W still in line.
        let mut x = Raw::open(&a.url(), TTL_MS, TTL_MS).await;
        x.resume(1, &name, &held.token);
        let again = x.acquired(1).await;
        assert_eq!(again.fencing_token, held.fencing_token, "{how:?}");
        let early = tokio::time::timeout(Duration::from_millis(300), w.next_about()).await;
        assert!(early.is_err(), "{how:?}: the waiter heard {early:?}");
        // X lets go: now W has it.
        x.send(Action::Close(pb::SessionClose {}));
        w.acquired(1).await;
    }
}
