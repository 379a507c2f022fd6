//! Leader election against real Redis: candidates and observers on two server processes.

use crate::support;

use std::time::Duration;

use fred::prelude::KeysInterface;
use leasehold_client::Client;
use leasehold_client::{Candidate, Leader, Observation};
use support::*;
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};

/// How long a hand-over may take: the bound.
const HANDOVER: Duration = Duration::from_secs(1);

/// Two server processes on one Redis, and a client of each.
async fn two_servers(redis: &RedisServer) -> (ServerProcess, Client, ServerProcess, Client) {
    let (server_a, server_b) = (
        ServerProcess::start(redis, &[]),
        ServerProcess::start(redis, &[]),
    );
    let a = Client::connect(server_a.url()).await.unwrap();
    let b = Client::connect(server_b.url()).await.unwrap();
    (server_a, a, server_b, b)
}

/// Whether `candidate` has been told it leads, without waiting: one poll of its stream.
async fn told_elected_yet(candidate: &mut Candidate) -> bool {
    matches!(
        timeout(Duration::ZERO, candidate.elected()).await,
        Ok(Ok(_))
    )
}

fn value_of(leader: &Option<Leader>) -> Option<&str> {
    leader
        .as_ref()
        .map(|l| std::str::from_utf8(&l.value).expect("utf-8 value"))
}

/// Reads `observation` until it reports `expected` (a value, or `None` for no leader),
/// returning everything it saw on the way.
async fn observe_until(
    observation: &mut Observation,
    expected: Option<&str>,
) -> Vec<Option<Leader>> {
    let mut seen = Vec::new();
    within(EVENT_TIMEOUT, "the observed change", async {
        loop {
            let state = observation.next().await.expect("observation");
            let done = value_of(&state) == expected;
            seen.push(state);
            if done {
                return;
            }
        }
    })
    .await;
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_handed_over_within_a_second_and_seen_alike_on_both_servers() {
    let redis = RedisServer::start();
    let (_server_a, a, _server_b, b) = two_servers(&redis).await;
    let mut observer_a = a.observe("leader").await.unwrap();
    let mut observer_b = b.observe("leader").await.unwrap();
    let mut seen_a = vec![observer_a.next().await.unwrap()];
    let mut seen_b = vec![observer_b.next().await.unwrap()];
    assert_eq!(seen_a, [None]);
    assert_eq!(seen_b, [None]);

    let ttl = Duration::from_secs(5);
    let mut first = a.campaign("leader", "first", ttl).await.unwrap();
    let first_term = within(EVENT_TIMEOUT, "first elected", first.elected())
        .await
        .unwrap();
    seen_a.extend(observe_until(&mut observer_a, Some("first")).await);
    seen_b.extend(observe_until(&mut observer_b, Some("first")).await);
    // Second in line, then third: each waits until the line has grown, so the order is known.
    let direct = redis.client().await;
    let mut second = b.campaign("leader", "second", ttl).await.unwrap();
    wait_for_line(&direct, "leasehold:election:{leader}:line", 1).await;
    let mut third = a.campaign("leader", "third", ttl).await.unwrap();
    wait_for_line(&direct, "leasehold:election:{leader}:line", 2).await;
    for client in [&a, &b] {
        let leader = client.leader("leader").await.unwrap();
        assert_eq!(
            leader,
            Some(Leader {
                term: first_term,
                value: b"first".to_vec()
            })
        );
    }
    assert!(!told_elected_yet(&mut second).await);
    assert!(!told_elected_yet(&mut third).await);

    // Dropping the leader (it resigns on drop) elects the next in line within a second.
    let dropped = Instant::now();
    drop(first);
    let second_term = within(HANDOVER, "hand-over after cancel", second.elected())
        .await
        .unwrap();
    assert!(dropped.elapsed() < HANDOVER);
    assert!(second_term > first_term);
    assert!(!told_elected_yet(&mut third).await, "two leaders at once");
    seen_a.extend(observe_until(&mut observer_a, Some("second")).await);
    seen_b.extend(observe_until(&mut observer_b, Some("second")).await);

    // Resigning hands over at once.
    assert!(second.resign().await.unwrap());
    let third_term = within(HANDOVER, "hand-over after resign", third.elected())
        .await
        .unwrap();
    assert!(third_term > second_term);
    seen_a.extend(observe_until(&mut observer_a, Some("third")).await);
    seen_b.extend(observe_until(&mut observer_b, Some("third")).await);
    assert!(third.resign().await.unwrap());
    seen_a.extend(observe_until(&mut observer_a, None).await);
    seen_b.extend(observe_until(&mut observer_b, None).await);

    // Both servers' observers saw the same sequence, every leader in turn, terms growing.
    assert_eq!(seen_a, seen_b);
    let leaders: Vec<(u64, &str)> = seen_a
        .iter()
        .flatten()
        .map(|l| (l.term, std::str::from_utf8(&l.value).unwrap()))
        .collect();
    assert_eq!(
        leaders,
        [
            (first_term, "first"),
            (second_term, "second"),
            (third_term, "third")
        ]
    );
    assert_eq!(seen_a.last(), Some(&None));
    assert_eq!(a.leader("leader").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proclaimed_value_reaches_observers_and_the_leader_query() {
    let redis = RedisServer::start();
    let (_server_a, a, _server_b, b) = two_servers(&redis).await;
    let mut candidate = a
        .campaign("svc", "10.0.0.1:80", Duration::from_secs(5))
        .await
        .unwrap();
    let term = candidate.elected().await.unwrap();
    let mut observer = b.observe("svc").await.unwrap();
    // The first state is the current one.
    assert_eq!(
        observer.next().await.unwrap(),
        Some(Leader {
            term,
            value: b"10.0.0.1:80".to_vec()
        })
    );
    candidate.proclaim("10.0.0.2:80").await.unwrap();
    assert_eq!(
        within(EVENT_TIMEOUT, "proclaimed value", observer.next())
            .await
            .unwrap(),
        Some(Leader {
            term,
            value: b"10.0.0.2:80".to_vec()
        }),
        "a proclaim keeps the term and changes the value"
    );
    assert_eq!(
        b.leader("svc").await.unwrap().map(|l| l.value),
        Some(b"10.0.0.2:80".to_vec())
    );
    // A binary value of the largest size makes it through unchanged.
    let largest: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
    candidate.proclaim(largest.clone()).await.unwrap();
    let seen = within(EVENT_TIMEOUT, "largest value", observer.next())
        .await
        .unwrap();
    assert_eq!(seen.map(|l| l.value), Some(largest));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leaders_server_elects_another_after_the_ttl() {
    let redis = RedisServer::start();
    let (mut server_a, a, _server_b, b) = two_servers(&redis).await;
    let ttl = Duration::from_secs(1);
    let mut doomed = a.campaign("cron", "a", ttl).await.unwrap();
    let doomed_term = doomed.elected().await.unwrap();
    let mut heir = b.campaign("cron", "b", ttl).await.unwrap();
    let mut observer = b.observe("cron").await.unwrap();
    assert_eq!(value_of(&observer.next().await.unwrap()), Some("a"));

    let killed = Instant::now();
    server_a.kill();
    let heir_term = within(
        ttl + Duration::from_secs(3),
        "election after the kill",
        heir.elected(),
    )
    .await
    .unwrap();
    let waited = killed.elapsed();
    assert!(heir_term > doomed_term);
    // Nobody released the lease: the heir had to wait for its TTL (less what had passed since
    // the last renewal, at most a third of it).
    assert!(waited >= ttl / 2, "elected after only {waited:?}");
    let seen = observe_until(&mut observer, Some("b")).await;
    assert_eq!(
        seen.last().and_then(|l| l.as_ref()).map(|l| l.term),
        Some(heir_term)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_learn_there_is_no_leader_when_a_dead_servers_lease_runs_out() {
    let redis = RedisServer::start();
    let (mut server_a, a, _server_b, b) = two_servers(&redis).await;
    let ttl = Duration::from_secs(1);
    let mut alone = a.campaign("solo", "a", ttl).await.unwrap();
    alone.elected().await.unwrap();
    let mut observer = b.observe("solo").await.unwrap();
    assert_eq!(value_of(&observer.next().await.unwrap()), Some("a"));
    server_a.kill();
    let next = within(
        ttl + Duration::from_secs(2),
        "no leader after the TTL",
        observer.next(),
    )
    .await
    .unwrap();
    assert_eq!(next, None);
    assert_eq!(b.leader("solo").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_is_deleted_is_told_it_lost_and_observers_see_no_leader() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let client = Client::connect(server.url()).await.unwrap();
    let ttl = Duration::from_millis(600);
    let mut candidate = client.campaign("fragile", "x", ttl).await.unwrap();
    candidate.elected().await.unwrap();
    let mut observer = client.observe("fragile").await.unwrap();
    assert_eq!(value_of(&observer.next().await.unwrap()), Some("x"));
    let direct = redis.client().await;
    let _: i64 = direct
        .del("leasehold:election:{fragile}:lock")
        .await
        .unwrap();
    let reason = within(EVENT_TIMEOUT, "lost", candidate.lost()).await;
    assert!(reason.contains("deleted or taken"), "{reason}");
    assert_eq!(
        within(EVENT_TIMEOUT, "no leader", observer.next())
            .await
            .unwrap(),
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_never_blocks_a_lock_of_the_same_name() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let client = Client::connect(server.url()).await.unwrap();
    let mut candidate = client
        .campaign("shared-name", "leader", Duration::from_secs(5))
        .await
        .unwrap();
    candidate.elected().await.unwrap();
    // The lock of the same name is free, and taking it leaves the leader alone.
    let guard = client.lease("shared-name").acquire().await.unwrap();
    assert!(
        !client
            .describe("shared-name")
            .await
            .unwrap()
            .holder
            .contains("candidate")
    );
    assert_eq!(
        value_of(&client.leader("shared-name").await.unwrap()),
        Some("leader")
    );
    guard.release().await.unwrap();
    assert!(candidate.resign().await.unwrap());
}

/// The README's example program, built by `cargo test` next to this test's own binary.
fn example_binary(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    dir.join("examples").join(name)
}

/// Starts one instance per name, numbered from `first`; each printed line goes to `lines` as
/// (instance, line).
fn spawn_instances(
    server: &str,
    names: &[&str],
    first: usize,
    lines: &mpsc::UnboundedSender<(usize, String)>,
) -> Instances {
    use std::io::BufRead;
    let mut children = Vec::new();
    for (i, name) in (first..).zip(names) {
        let mut child = std::process::Command::new(example_binary("who_leads"))
            .args([server, "example", name])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("run examples/who_leads (built by cargo test)");
        let stdout = child.stdout.take().expect("stdout");
        let lines = lines.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let _ = lines.send((i, line));
            }
        });
        children.push(child);
    }
    Instances(children)
}

/// Example instances, killed when the test ends however it ends.
struct Instances(Vec<std::process::Child>);

impl Drop for Instances {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What the example instances have printed so far.
#[derive(Default)]
struct Printed {
    /// The leader each instance printed last (`leader: <name> ...`).
    leader: std::collections::HashMap<usize, String>,
    /// Instances that printed `I lead`, in order.
    leads: Vec<usize>,
}

impl Printed {
    /// Reads lines until `done` holds.
    async fn until(
        &mut self,
        lines: &mut mpsc::UnboundedReceiver<(usize, String)>,
        what: &str,
        done: impl Fn(&Printed) -> bool,
    ) {
        within(EVENT_TIMEOUT, what, async {
            while !done(self) {
                let (i, line) = lines.recv().await.expect("instances exited");
                if line.contains(": I lead") {
                    self.leads.push(i);
                }
                if let Some(rest) = line.strip_prefix("leader: ") {
                    let name = rest.split(' ').next().unwrap_or_default();
                    self.leader.insert(i, name.to_owned());
                }
            }
        })
        .await;
    }

    fn all_see(&self, instances: &[usize], leader: &str) -> bool {
        instances
            .iter()
            .all(|i| self.leader.get(i).map(String::as_str) == Some(leader))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_of_the_readme_example_agree_on_one_leader() {
    let redis = RedisServer::start();
    let server = ServerProcess::start(&redis, &[]);
    let names = ["alice", "bob", "carol"];
    let (sender, mut lines) = mpsc::unbounded_channel();
    let mut printed = Printed::default();
    // Alice first, so the test knows who must lead.
    let alice = spawn_instances(&server.url(), &names[..1], 0, &sender);
    printed
        .until(&mut lines, "alice leading", |p| p.all_see(&[0], "alice"))
        .await;
    let _others = spawn_instances(&server.url(), &names[1..], 1, &sender);
    printed
        .until(&mut lines, "everyone seeing alice", |p| {
            p.all_see(&[0, 1, 2], "alice")
        })
        .await;
    assert_eq!(printed.leads, [0], "exactly alice leads");

    // Kill the leader: one of the others takes over and all survivors agree. A killed leader
    // cannot resign: its leadership is kept for its grace (the example's TTL, 5 s) as a frozen
    // one's is, and runs out first.
    drop(alice);
    printed
        .until(&mut lines, "a new leader everyone sees", |p| {
            p.leads.len() > 1 && p.all_see(&[1, 2], names[p.leads[1]])
        })
        .await;
    assert!(printed.leads[1] == 1 || printed.leads[1] == 2);
    assert_eq!(
        printed.leads.len(),
        2,
        "one new leader only: {:?}",
        printed.leads
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_follow_an_election_across_a_redis_restart() {
    let mut redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let client = Client::connect(server.url()).await.unwrap();
    let ttl = Duration::from_millis(600);
    let mut before = client.campaign("phoenix", "before", ttl).await.unwrap();
    before.elected().await.unwrap();
    // Some history, so the state's revision is well past where a fresh one starts.
    for value in ["v1", "v2", "v3"] {
        before.proclaim(value).await.unwrap();
    }
    let mut observer = client.observe("phoenix").await.unwrap();
    assert_eq!(value_of(&observer.next().await.unwrap()), Some("v3"));

    // Redis comes back empty: the leader loses its lease, and observers must follow the new
    // history, whose revisions start again.
    redis.restart_empty();
    let reason = within(EVENT_TIMEOUT, "the leader told it lost", before.lost()).await;
    assert!(!reason.is_empty());
    assert_eq!(
        within(EVENT_TIMEOUT, "no leader", observer.next())
            .await
            .unwrap(),
        None
    );
    let mut after = client.campaign("phoenix", "after", ttl).await.unwrap();
    within(EVENT_TIMEOUT, "a new leader", after.elected())
        .await
        .unwrap();
    assert_eq!(
        value_of(
            &within(EVENT_TIMEOUT, "the new leader observed", observer.next())
                .await
                .unwrap()
        ),
        Some("after")
    );
}

/// A leader whose server freezes (SIGSTOP) hears nothing more: it stops believing by its own
/// clock exactly when the validity its server last confirmed ends, never later (another may
/// lead from then on) and not much earlier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_server_freezes_stops_believing_when_its_validity_ends() {
    let redis = RedisServer::start();
    let server = ServerProcess::start(&redis, &[]);
    let client = Client::connect(server.url()).await.unwrap();
    let ttl = Duration::from_millis(600);
    let mut candidate = client.campaign("frozen", "a", ttl).await.unwrap();
    candidate.elected().await.unwrap();
    signal(server.pid(), "STOP");
    let frozen_at = Instant::now();
    let reason = within(EVENT_TIMEOUT, "lost()", candidate.lost()).await;
    let lost_at = Instant::now();
    signal(server.pid(), "CONT");
    assert!(reason.contains("server silent"), "{reason}");
    // Read after `lost()`: a renewal already on its way when the server froze counts too.
    let valid_until = candidate.valid_until().expect("it led");
    assert!(valid_until <= frozen_at + ttl, "vouched past the freeze");
    assert!(
        lost_at >= valid_until,
        "stopped believing {:?} early",
        valid_until - lost_at
    );
    assert!(
        lost_at - valid_until < Duration::from_millis(100),
        "believed {:?} past its validity",
        lost_at - valid_until
    );
}

/// A raw Campaign stream on `url` (to end it as the client library never would), and when it
/// was opened.
async fn raw_campaign(
    url: &str,
    start: leasehold::pb::CampaignStart,
) -> (
    mpsc::Sender<leasehold::pb::CampaignRequest>,
    tonic::Streaming<leasehold::pb::CampaignResponse>,
    Instant,
) {
    use leasehold::pb::campaign_request::Action;
    let channel = tonic::transport::Channel::from_shared(url.to_owned())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let (tx, rx) = mpsc::channel(4);
    let start = leasehold::pb::CampaignRequest {
        action: Some(Action::Start(start)),
    };
    tx.send(start).await.unwrap();
    let opened = Instant::now();
    let responses = leasehold::pb::election_service_client::ElectionServiceClient::new(channel)
        .campaign(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    (tx, responses, opened)
}

/// A leader with a resume grace shorter than its TTL whose stream ends with no `resign` (a
/// bare half-close, as when its connection dies): its lease is shortened to the grace, never
/// below what the server already vouched for, so the next candidate is elected only once the
/// leader's own belief (as its client computes it) has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_closed_leader_is_replaced_only_after_its_vouched_validity() {
    use leasehold::pb::campaign_response::Event;
    let redis = RedisServer::start();
    let direct = redis.client().await;
    let server = TestServer::start(&redis).await;
    let (ttl, grace) = (Duration::from_secs(3), Duration::from_millis(1200));
    let start = leasehold::pb::CampaignStart {
        election: "short".into(),
        value: b"a".to_vec(),
        ttl_ms: leasehold::pb::millis(ttl),
        resume_grace_ms: leasehold::pb::millis(grace),
        ..Default::default()
    };
    let (requests, mut responses, opened) = raw_campaign(&server.url(), start).await;
    // Believed as a client does: from the stream's opening, or from receipt, whichever ends
    // first. Until one renewal after the election was heard.
    let mut believed_until = None;
    let mut renewals = 0;
    within(EVENT_TIMEOUT, "elected, then extended", async {
        while renewals < 1 {
            let (valid_for, valid_to) = match responses.message().await.unwrap() {
                Some(leasehold::pb::CampaignResponse {
                    event: Some(Event::Elected(e)),
                }) => (e.valid_for_ms, e.valid_to_ms),
                Some(leasehold::pb::CampaignResponse {
                    event: Some(Event::Extended(e)),
                }) => {
                    renewals += 1;
                    (e.valid_for_ms, e.valid_to_ms)
                }
                other => panic!("expected elected or extended, got {other:?}"),
            };
            let from_receipt = Instant::now() + Duration::from_millis(valid_for.into());
            believed_until = Some(from_receipt.min(opened + Duration::from_millis(valid_to)));
        }
    })
    .await;
    let believed_until = believed_until.expect("vouched for");
    let client = Client::connect(server.url()).await.unwrap();
    let mut next = client.campaign("short", "b", ttl).await.unwrap();
    wait_for_line(&direct, "leasehold:election:{short}:line", 1).await;

    drop(requests); // A bare half-close.
    let key = "leasehold:election:{short}:lock";
    within(EVENT_TIMEOUT, "the lease shortened to its grace", async {
        loop {
            let pttl: i64 = direct.pttl(key).await.unwrap();
            if (0..=grace.as_millis() as i64).contains(&pttl) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    within(EVENT_TIMEOUT, "the next candidate elected", next.elected())
        .await
        .unwrap();
    let elected_at = Instant::now();
    assert!(
        elected_at >= believed_until,
        "elected {:?} before the old leader's validity ended",
        believed_until - elected_at
    );
    assert!(next.resign().await.unwrap());
}

/// `ElectionService.List`, called as the gRPC client calls it with `token`.
async fn list_elections(
    server: &TestServer,
    token: &str,
) -> Result<leasehold::pb::ElectionServiceListResponse, tonic::Status> {
    use leasehold::pb::election_service_client::ElectionServiceClient;
    let channel = tonic::transport::Endpoint::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut request = tonic::Request::new(leasehold::pb::ElectionServiceListRequest { limit: 0 });
    let bearer = format!("Bearer {token}").parse().unwrap();
    request.metadata_mut().insert("authorization", bearer);
    let listed = ElectionServiceClient::new(channel).list(request).await;
    listed.map(tonic::Response::into_inner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_the_elections_led_now_under_the_admins_prefixes_only() {
    use leasehold::server::auth::{AuthPolicy, token_digest};
    let redis = RedisServer::start();
    let dir = certs::TempDir::new("election-list");
    let grants = format!(
        "[[grant]]\nname = \"ops\"\ntoken_sha256 = \"{}\"\nrole = \"admin\"\nelections = [\"app/\"]\n\n\
         [[grant]]\nname = \"worker\"\ntoken_sha256 = \"{}\"\nrole = \"hold\"\nelections = [\"\"]\n",
        token_digest("admin-secret"),
        token_digest("hold-secret"),
    );
    let policy = AuthPolicy::load(&dir.write("auth.toml", &grants)).unwrap();
    let config = leasehold::server::ServerConfig {
        auth: Some(std::sync::Arc::new(policy)),
        ..fast_keepalive()
    };
    let server = TestServer::start_with(&redis, "leasehold:", config).await;
    let worker = Client::connect_with(
        leasehold_client::ConnectOptions::new(server.url()).token(Some("hold-secret".into())),
    )
    .await
    .unwrap();

    let ttl = Duration::from_secs(5);
    let mut leader = worker.campaign("app/db", "node-1", ttl).await.unwrap();
    let term = within(EVENT_TIMEOUT, "elected", leader.elected())
        .await
        .unwrap();
    let _waiting = worker.campaign("app/db", "node-2", ttl).await.unwrap();
    let direct = redis.client().await;
    wait_for_line(&direct, "leasehold:election:{app/db}:line", 1).await;
    let mut outside = worker.campaign("other/db", "hidden", ttl).await.unwrap();
    within(EVENT_TIMEOUT, "elected", outside.elected())
        .await
        .unwrap();
    let mut resigned = worker.campaign("app/gone", "was", ttl).await.unwrap();
    within(EVENT_TIMEOUT, "elected", resigned.elected())
        .await
        .unwrap();
    assert!(resigned.resign().await.unwrap());

    let listed = list_elections(&server, "admin-secret").await.unwrap();
    assert!(!listed.truncated);
    let [db] = listed.elections.as_slice() else {
        panic!("only app/db leads under app/: {listed:?}");
    };
    assert_eq!(
        (
            db.election.as_str(),
            db.value.as_slice(),
            db.term,
            db.waiting
        ),
        ("app/db", &b"node-1"[..], term, 1)
    );
    assert!(
        db.ttl_remaining_ms > 0 && db.ttl_remaining_ms <= 5_000,
        "{db:?}"
    );

    // Listing shows names: a hold token may campaign everywhere, but not list.
    let refused = list_elections(&server, "hold-secret").await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);
    assert!(leader.resign().await.unwrap());
}
