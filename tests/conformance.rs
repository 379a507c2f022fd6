//! The conformance scenarios (`clients/conformance/scenarios.txt`) for the Rust client, against
//! the real binary and a real redis-server: the Go, Python and Java clients run the same list.

use crate::support;

use std::time::Duration;

use fred::prelude::KeysInterface;
use leasehold_client::{Client, ClientError};
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

/// The status a refused lease ended with.
fn refusal(result: Result<leasehold_client::LeaseGuard, ClientError>) -> tonic::Status {
    match result {
        Err(ClientError::Status(status)) => status,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_semaphore_limit() {
    let (_redis, _server, client, _direct) = start().await;
    let first = client.lease("pool").limit(2).acquire().await.unwrap();
    let second = client.lease("pool").limit(2).acquire().await.unwrap();
    assert_ne!(first.fencing_token(), second.fencing_token());
    let full = refusal(client.lease("pool").limit(2).acquire().await);
    assert_eq!(full.code(), Code::Aborted);
    let other = refusal(client.lease("pool").limit(3).acquire().await);
    assert_eq!(other.code(), Code::FailedPrecondition);
    let message = other.message();
    assert!(
        message.contains("limit 2") && message.contains("limit 3"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_shared_readers() {
    let (_redis, _server, client, direct) = start().await;
    let first = client.lease("catalog").shared().acquire().await.unwrap();
    let second = client.lease("catalog").shared().acquire().await.unwrap();
    let readers = first.fencing_token().max(second.fencing_token());
    let writer = {
        let client = client.clone();
        tokio::spawn(async move {
            let lease = client.lease("catalog").wait(Duration::from_secs(10));
            lease.acquire().await
        })
    };
    wait_for_line(&direct, "leasehold:{catalog}:line", 1).await;
    assert!(
        !writer.is_finished(),
        "the writer got in beside the readers"
    );
    assert!(first.release().await.unwrap());
    assert!(second.release().await.unwrap());
    let writer = within(EVENT_TIMEOUT, "the writer", writer)
        .await
        .unwrap()
        .unwrap();
    assert!(writer.fencing_token() > readers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_resume_after_break() {
    let (_redis, server, client, direct) = start().await;
    let proxy = proxy::Proxy::start(server.addr).await;
    let through_proxy = Client::connect(proxy.url()).await.unwrap();
    let held = through_proxy
        .lease("job")
        .ttl(Duration::from_secs(3))
        .resume_grace(Duration::from_secs(2))
        .auto_resume(false) // This scenario resumes by hand.
        .acquire()
        .await
        .unwrap();
    proxy.cut(); // The connection breaks; the lease is kept for its grace.
    within(EVENT_TIMEOUT, "the lease shortened to its grace", async {
        loop {
            let pttl: i64 = direct.pttl(lock_key("job")).await.unwrap();
            if (0..=2_000).contains(&pttl) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let wrong = client.lease("job").resume("0".repeat(32)).acquire().await;
    assert_eq!(refusal(wrong).code(), Code::NotFound);
    let resumed = client
        .lease("job")
        .ttl(Duration::from_secs(3))
        .resume(held.token())
        .acquire()
        .await
        .unwrap();
    assert_eq!(resumed.fencing_token(), held.fencing_token());
    assert_eq!(
        get(&direct, &lock_key("job")).await.as_deref(),
        Some(held.token())
    );
    assert!(resumed.release().await.unwrap());
}

const REPLICATED_TTL: Duration = Duration::from_secs(2);

/// Three servers on one Redis, and a lease on "job" (TTL 2 s) held through a client given all
/// three.
async fn three_replicas_holding() -> (
    RedisServer,
    fred::prelude::Client,
    Replicas,
    leasehold_client::LeaseGuard,
) {
    let redis = RedisServer::start();
    let direct = redis.client().await;
    let replicas = Replicas::start(&redis, 3, &[]);
    let client = Client::connect(replicas.urls()).await.unwrap();
    let guard = client
        .lease("job")
        .ttl(REPLICATED_TTL)
        .acquire()
        .await
        .unwrap();
    (redis, direct, replicas, guard)
}

/// The lease on `name` still ours (not lost, its key holding its token, its fencing token
/// unchanged), and a thief with no wait through each server in `through` refused.
async fn still_held(
    guard: &leasehold_client::LeaseGuard,
    direct: &fred::prelude::Client,
    through: &[&ServerProcess],
) {
    assert!(!guard.is_lost(), "reported lost");
    assert_eq!(
        get(direct, &lock_key("job")).await.as_deref(),
        Some(guard.token())
    );
    for server in through {
        let thief = Client::connect(server.url()).await.unwrap();
        let refused = thief.lease("job").auto_resume(false).acquire().await;
        assert_eq!(refusal(refused).code(), Code::Aborted);
        let described = thief.describe("job").await.unwrap();
        assert_eq!(described.fencing_token, guard.fencing_token());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_survives_rolling_restart() {
    let (_redis, direct, mut replicas, guard) = three_replicas_holding().await;
    for i in 0..3 {
        replicas.stop(i).await;
        let others: Vec<&ServerProcess> = (0..3)
            .filter(|&j| j != i)
            .map(|j| &replicas.servers[j])
            .collect();
        still_held(&guard, &direct, &others).await;
        replicas.start_again(i).await;
    }
    // A whole TTL on: a lease that had not resumed would have been reported lost by now.
    tokio::time::sleep(REPLICATED_TTL).await;
    let all: Vec<&ServerProcess> = replicas.servers.iter().collect();
    still_held(&guard, &direct, &all).await;
    assert!(guard.release().await.unwrap());
    assert_eq!(get(&direct, &lock_key("job")).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_survives_server_crash() {
    let (_redis, direct, mut replicas, guard) = three_replicas_holding().await;
    replicas.kill(0);
    replicas.kill(1);
    // Past the validity it had when its servers died.
    tokio::time::sleep(REPLICATED_TTL).await;
    still_held(&guard, &direct, &[&replicas.servers[2]]).await;
    assert!(guard.release().await.unwrap());
    assert_eq!(get(&direct, &lock_key("job")).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_refusal_details() {
    let (_redis, _server, client, _direct) = start().await;
    let ttl = Duration::from_secs(30);
    let _held = client
        .lease("job")
        .holder("holder-a")
        .ttl(ttl)
        .acquire()
        .await
        .unwrap();
    let Err(error) = client.lease("job").acquire().await else {
        panic!("a second acquire of a held lock was not refused");
    };
    let refusal = error.refusal().expect("the status carries details");
    assert_eq!(refusal.code, Code::Aborted);
    assert_eq!(refusal.reason, "LOCK_HELD");
    assert_eq!(refusal.holder.as_deref(), Some("holder-a"));
    assert_eq!(
        refusal.metadata.get("lock").map(String::as_str),
        Some("job")
    );
    let retry_after = refusal.retry_after.expect("a retry delay");
    assert!(
        !retry_after.is_zero() && retry_after <= ttl,
        "{retry_after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_lists_held_locks() {
    let (_redis, _server, client, _direct) = start().await;
    let held = client
        .lease("job")
        .holder("holder-a")
        .acquire()
        .await
        .unwrap();
    let listed = client.list(0).await.unwrap();
    let lock = listed
        .locks
        .iter()
        .find(|lock| lock.name == "job")
        .expect("the held lock is listed");
    assert_eq!(lock.holder, "holder-a");
    assert_eq!(lock.fencing_token, held.fencing_token());
    assert!(held.release().await.unwrap());
    let listed = client.list(0).await.unwrap();
    assert!(
        listed.locks.iter().all(|lock| lock.name != "job"),
        "{listed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_watch_reports_changes() {
    use leasehold_client::pb::DescribeResponse;
    use leasehold_client::watch::same_state;
    use tokio_stream::StreamExt;

    let (_redis, _server, client, _direct) = start().await;
    let mut watch = client.watch("job").await.unwrap();
    let mut last: Option<DescribeResponse> = None;
    // The next state, within 2 s, never the one before it again.
    let mut next = async || {
        let state = within(
            Duration::from_secs(2),
            "the next watched state",
            watch.next(),
        )
        .await
        .expect("the watch ended")
        .expect("a state");
        if let Some(last) = &last {
            assert!(!same_state(last, &state), "reported twice: {state:?}");
        }
        last = Some(state.clone());
        state
    };
    assert!(!next().await.held);
    let first = client.lease("job").holder("first").acquire().await.unwrap();
    let held = next().await;
    assert_eq!(
        (held.holder.as_str(), held.fencing_token),
        ("first", first.fencing_token())
    );
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move {
            let waiting = client.lease("job").holder("second");
            waiting.wait(Duration::from_secs(10)).acquire().await
        })
    };
    let waiting = next().await;
    assert_eq!((waiting.holder.as_str(), waiting.waiting), ("first", 1));
    let first_token = first.fencing_token();
    assert!(first.release().await.unwrap());
    let mut handed = next().await;
    if !handed.held {
        handed = next().await; // A free state between the two holders may be seen.
    }
    assert_eq!(handed.holder, "second");
    assert!(handed.fencing_token > first_token);
    let second = within(EVENT_TIMEOUT, "the hand-over", waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(handed.fencing_token, second.fencing_token());
    assert!(second.release().await.unwrap());
    assert!(!next().await.held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_session_holds_many() {
    let (_redis, _server, client, direct) = start().await;
    let session = client.session().open().await.unwrap();
    let a = session.lock("a").acquire().await.unwrap();
    let b = session.lock("b").acquire().await.unwrap();
    let permit = session.lock("pool").limit(2).acquire().await.unwrap();
    for lease in [&a, &b] {
        let name = if lease.token() == a.token() { "a" } else { "b" };
        assert_eq!(
            get(&direct, &lock_key(name)).await.as_deref(),
            Some(lease.token())
        );
        let thief = client.lease(name).acquire().await;
        assert_eq!(refusal(thief).code(), Code::Aborted);
    }
    let pool = client.describe("pool").await.unwrap();
    assert_eq!(pool.limit, 2);
    assert_eq!(pool.holders.len(), 1);
    assert_eq!(pool.fencing_token, permit.fencing_token());
    let a_token = a.fencing_token();
    assert!(a.release().await.unwrap());
    let next = client.lease("a").acquire().await.unwrap();
    assert!(next.fencing_token() > a_token);
    assert_eq!(
        get(&direct, &lock_key("b")).await.as_deref(),
        Some(b.token())
    );
    assert!(!b.is_lost() && !permit.is_lost());
    assert_eq!(session.close().await.unwrap(), 2);
    assert_eq!(get(&direct, &lock_key("b")).await, None);
    assert!(!client.describe("pool").await.unwrap().held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_session_lease_lost_alone() {
    let (_redis, _server, client, direct) = start().await;
    // Renewals every 0.5 s leave a second for a late confirmation on a loaded machine.
    let ttl = Duration::from_millis(1_500);
    let session = client.session().ttl(ttl).open().await.unwrap();
    let a = session.lock("a").acquire().await.unwrap();
    let b = session.lock("b").acquire().await.unwrap();
    let _: i64 = direct.del(lock_key("a")).await.unwrap();
    let reason = within(EVENT_TIMEOUT, "a.lost()", a.lost()).await;
    assert!(reason.contains("deleted or taken"), "{reason}");
    // The session is confirmed again after the loss: b's validity moves past what any message
    // before it vouched for.
    let lost_at = Instant::now();
    within(EVENT_TIMEOUT, "a later kept_alive", async {
        while b.valid_until() < lost_at + ttl / 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(!b.is_lost());
    assert_eq!(
        get(&direct, &lock_key("b")).await.as_deref(),
        Some(b.token())
    );
    assert!(b.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_session_campaign() {
    let (_redis, _server, client, direct) = start().await;
    let first = client.session().open().await.unwrap();
    let leader = first.campaign("e", b"one".to_vec()).await.unwrap();
    assert!(leader.term() > 0);
    let second = client.session().open().await.unwrap();
    let waiting = tokio::spawn(async move {
        let leader = second.campaign("e", b"two".to_vec()).await;
        (second, leader)
    });
    wait_for_line(&direct, "leasehold:election:{e}:line", 1).await;
    let now = client.leader("e").await.unwrap().expect("a leader");
    assert_eq!(now.value, b"one");
    assert!(
        !waiting.is_finished(),
        "the second candidate led beside the first"
    );
    let term = leader.term();
    first.close().await.unwrap();
    let (_second, next) = within(EVENT_TIMEOUT, "the second elected", waiting)
        .await
        .unwrap();
    let next = next.unwrap();
    assert!(next.term() > term, "{} after {term}", next.term());
    let now = client.leader("e").await.unwrap().expect("a leader");
    assert_eq!(now.value, b"two");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_session_survives_server_crash() {
    let redis = RedisServer::start();
    let direct = redis.client().await;
    let mut replicas = Replicas::start(&redis, 3, &[]);
    let client = Client::connect(replicas.urls()).await.unwrap();
    let session = client.session().ttl(REPLICATED_TTL).open().await.unwrap();
    let a = session.lock("a").acquire().await.unwrap();
    let b = session.lock("b").acquire().await.unwrap();
    // The session runs on the first server.
    replicas.kill(0);
    // Past the validity the leases had when their server died.
    tokio::time::sleep(REPLICATED_TTL).await;
    for (name, lease) in [("a", &a), ("b", &b)] {
        assert!(!lease.is_lost(), "{name} reported lost");
        assert_eq!(
            get(&direct, &lock_key(name)).await.as_deref(),
            Some(lease.token())
        );
        let described = client.describe(name).await.unwrap();
        assert_eq!(described.fencing_token, lease.fencing_token());
    }
    let c = session.lock("c").acquire().await.unwrap();
    assert_eq!(
        get(&direct, &lock_key("c")).await.as_deref(),
        Some(c.token())
    );
    assert_eq!(session.close().await.unwrap(), 3);
}

/// The frozen leader's TTL, and its resume grace (the clients' default: the TTL).
const FROZEN_TTL: Duration = Duration::from_secs(4);
/// How long the leader stays frozen: well past the server's keepalive (200 ms + 300 ms), well
/// inside the validity its server last confirmed (at least two thirds of the TTL, renewed every
/// third of it).
const FREEZE: Duration = Duration::from_secs(2);
/// Set (to the server's URL) in the leader's own process: see [`frozen_leader_process`].
const FROZEN_LEADER: &str = "LEASEHOLD_TEST_FROZEN_LEADER";
/// What starts each line the leader's process reports on stdout (libtest prints there too).
const FROZEN_SAYS: &str = "frozen-leader:";

/// The election's lease in Redis: its fencing token (the term) and its attachment (counted up
/// by each resume).
async fn election_lease(direct: &fred::prelude::Client, election: &str) -> (u64, u64) {
    let key = format!("leasehold:election:{{{election}}}:lock");
    let value: Option<String> = direct.get(&key).await.expect("get");
    let value = lease_value(&value.unwrap_or_else(|| panic!("{key} holds no lease")));
    (value.fencing_token, value.attachment)
}

/// The leader, in a process of its own (this test binary again, running
/// [`frozen_leader_process`]), which the test can freeze: its reports arrive in `said`, and
/// `resign` on its stdin makes it resign. Killed when dropped.
struct LeaderProcess {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    said: tokio::sync::mpsc::UnboundedReceiver<String>,
}

impl LeaderProcess {
    fn start(server: &str) -> Self {
        use tokio::io::AsyncBufReadExt;
        let mut child = tokio::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "conformance::frozen_leader_process",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(FROZEN_LEADER, server)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the leader's process");
        let stdin = child.stdin.take().expect("stdin");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        let (says, said) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                // libtest may print `test NAME ... ` on the same line first.
                if let Some((_, said)) = line.split_once(FROZEN_SAYS) {
                    let _ = says.send(said.trim().to_owned());
                }
            }
        });
        LeaderProcess { child, stdin, said }
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("the leader's process runs")
    }

    /// The next report, which must start with `what`: the rest of it.
    async fn next(&mut self, what: &str) -> String {
        let line = within(EVENT_TIMEOUT, what, self.said.recv())
            .await
            .unwrap_or_else(|| panic!("the leader's process exited before saying {what}"));
        match line.strip_prefix(what) {
            Some(rest) => rest.trim().to_owned(),
            None => panic!("the leader's process said {line:?}, not {what}"),
        }
    }

    async fn tell(&mut self, command: &str) {
        use tokio::io::AsyncWriteExt;
        let line = format!("{command}\n");
        self.stdin
            .write_all(line.as_bytes())
            .await
            .expect("write to the leader's process");
    }
}

impl Drop for LeaderProcess {
    fn drop(&mut self) {
        // A frozen process dies of SIGKILL too (kill_on_drop); woken first all the same.
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .status();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_frozen_leader_not_replaced() {
    let redis = RedisServer::start();
    let direct = redis.client().await;
    let server = ServerProcess::start(
        &redis,
        &[
            "--keepalive-interval",
            "200ms",
            "--keepalive-timeout",
            "300ms",
        ],
    );
    let mut leader = LeaderProcess::start(&server.url());
    let term: u64 = leader.next("elected").await.parse().expect("a term");
    let client = Client::connect(server.url()).await.unwrap();
    let mut second = client.campaign("vote", "second", FROZEN_TTL).await.unwrap();
    wait_for_line(&direct, "leasehold:election:{vote}:line", 1).await;
    let (fence, attached) = election_lease(&direct, "vote").await;
    assert_eq!(fence, term);

    // Frozen: the server's keepalive ends the leader's stream (a bare half-close, or a broken
    // transport) well before the freeze ends; the leadership is kept all the same.
    signal(leader.pid(), "STOP");
    let meanwhile = tokio::time::timeout(FREEZE, second.elected()).await;
    signal(leader.pid(), "CONT");
    assert!(
        meanwhile.is_err(),
        "the second candidate was elected while the leader was frozen: {meanwhile:?}"
    );

    // Woken, the leader resumes its leadership (a new attachment) with its term, and leads.
    within(EVENT_TIMEOUT, "the leader's resume", async {
        while election_lease(&direct, "vote").await.1 <= attached {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(election_lease(&direct, "vote").await.0, term);
    let now = client.leader("vote").await.unwrap().expect("a leader");
    assert_eq!(
        (now.term, now.value.as_slice()),
        (term, b"frozen".as_slice())
    );
    assert!(
        tokio::time::timeout(Duration::ZERO, second.elected())
            .await
            .is_err(),
        "the second candidate leads beside the resumed leader"
    );

    leader.tell("resign").await;
    assert_eq!(leader.next("resigned").await, "true");
    let next = within(EVENT_TIMEOUT, "the second elected", second.elected())
        .await
        .unwrap();
    assert!(next > term, "term {next} after {term}");
}

/// The leader of [`conformance_frozen_leader_not_replaced`], run in a process of its own by
/// that test (which sets `FROZEN_LEADER` to the server's URL): it campaigns, reports `elected
/// TERM`, and on `resign` from stdin resigns and reports `resigned WAS_LEADER` (or `lost
/// REASON` if the leadership ends first). Run any other way it has no server, and returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the leader's process of conformance_frozen_leader_not_replaced, run by that test"]
async fn frozen_leader_process() {
    use tokio::io::AsyncBufReadExt;
    let Ok(server) = std::env::var(FROZEN_LEADER) else {
        return;
    };
    let client = Client::connect(server).await.expect("connect");
    let mut candidate = client
        .campaign("vote", "frozen", FROZEN_TTL)
        .await
        .expect("campaign");
    let term = candidate.elected().await.expect("elected");
    println!("{FROZEN_SAYS} elected {term}");
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    tokio::select! {
        reason = candidate.lost() => {
            println!("{FROZEN_SAYS} lost {reason}");
            return;
        }
        // Also the end of stdin: the test is gone, and so is this process.
        command = stdin.next_line() => {
            assert_eq!(command.ok().flatten().as_deref(), Some("resign"));
        }
    }
    let was_leader = candidate.resign().await.expect("resign");
    println!("{FROZEN_SAYS} resigned {was_leader}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_revoke_ends_holding() {
    let (redis, first_server, client, direct) = start().await;
    let second_server = ServerProcess::start(&redis, &[]);
    let operator = Client::connect(second_server.url()).await.expect("connect");
    let held = client.lease("job").acquire().await.unwrap();
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
    let revoked_at = Instant::now();
    let revoked = operator.revoke("job", None).await.unwrap();
    assert_eq!(revoked.len(), 1, "{revoked:?}");
    assert_eq!(revoked[0].fencing_token, held.fencing_token());
    let loss = within(
        Duration::from_secs(2),
        "the revoked holder's loss",
        held.loss(),
    )
    .await;
    assert_eq!(loss.code, leasehold_client::LostReason::Revoked, "{loss:?}");
    assert!(revoked_at.elapsed() < Duration::from_secs(2));
    assert!(held.outages().is_empty(), "a revoked lease was resumed");
    let next = within(EVENT_TIMEOUT, "the waiter granted", waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(next.fencing_token() > held.fencing_token());
    assert!(next.release().await.unwrap());
    assert!(operator.revoke("job", None).await.unwrap().is_empty());
    drop(first_server);
}

/// Waits (within 5 s) until `name` has `count` leases waiting for it, as the server reports.
async fn waiting_for(client: &Client, name: &str, count: u32) {
    within(Duration::from_secs(5), "the waiters in line", async {
        while client.describe(name).await.unwrap().waiting < count {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_all_or_none() {
    let (_redis, _server, client, direct) = start().await;
    let b_held = client.lease("b").holder("other").acquire().await.unwrap();
    let refused = client.lease("a").more_names(["b"]).acquire().await;
    assert_eq!(refusal(refused).code(), Code::Aborted);
    // Nothing was left taken: a is free.
    let a = client.lease("a").acquire().await.unwrap();
    assert!(a.release().await.unwrap());

    // Two waiting leases on the same pair, asked in opposite orders, while b is held.
    let (granted, mut grants) = tokio::sync::mpsc::unbounded_channel();
    for asked in [["a", "b"], ["b", "a"]] {
        let (client, granted) = (client.clone(), granted.clone());
        tokio::spawn(async move {
            let lease = client.lease(asked[0]).more_names([asked[1]]);
            let held = lease.wait(Duration::from_secs(20)).acquire().await;
            let _ = granted.send((asked, held));
        });
    }
    waiting_for(&client, "b", 2).await;
    assert!(b_held.release().await.unwrap());
    let mut turns = Vec::new();
    for _ in 0..2 {
        let (asked, held) = within(Duration::from_secs(5), "a pair granted", grants.recv())
            .await
            .expect("a grant");
        let held = held.unwrap_or_else(|error| panic!("{asked:?} refused: {error}"));
        let names: Vec<&str> = held.fences().iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names, asked,
            "one fencing token per name, in the order asked"
        );
        assert!(held.fences().iter().all(|(_, fence)| *fence > 0));
        assert_eq!(held.fences()[0].1, held.fencing_token());
        for name in asked {
            assert_eq!(
                get(&direct, &lock_key(name)).await.as_deref(),
                Some(held.token()),
                "{name}'s key while {asked:?} holds"
            );
            let thief = client.lease(name).acquire().await;
            assert_eq!(
                refusal(thief).code(),
                Code::Aborted,
                "{name} taken beside {asked:?}"
            );
        }
        assert!(held.release().await.unwrap());
        turns.push(asked);
    }
    assert_ne!(turns[0], turns[1]);
    // The last release freed both names.
    for name in ["a", "b"] {
        let free = client.lease(name).acquire().await.unwrap();
        assert!(free.release().await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_lock_delay_after_loss() {
    use leasehold_client::LostReason;
    let (_redis, _server, client, _direct) = start().await;
    let delay = Duration::from_secs(1);
    let held = client
        .lease("job")
        .lock_delay(delay)
        .acquire()
        .await
        .unwrap();
    let revoked_at = Instant::now();
    assert_eq!(client.revoke("job", None).await.unwrap().len(), 1);
    let loss = within(
        Duration::from_secs(2),
        "the revoked lease's loss",
        held.loss(),
    )
    .await;
    assert_eq!(loss.code, LostReason::Revoked, "{loss:?}");
    let refused = client.lease("job").acquire().await;
    assert_eq!(
        refusal(refused).code(),
        Code::Aborted,
        "taken within the delay"
    );
    let waiter = client.lease("job").wait(Duration::from_secs(5)).acquire();
    let next = within(Duration::from_secs(5), "the waiter granted", waiter)
        .await
        .unwrap();
    let after = revoked_at.elapsed();
    assert!(after >= delay, "granted {after:?} after the revoke");
    assert!(next.release().await.unwrap());

    // A clean release leaves the name free at once.
    let clean = client
        .lease("job")
        .lock_delay(delay)
        .acquire()
        .await
        .unwrap();
    assert!(clean.release().await.unwrap());
    let again = client.lease("job").acquire().await.unwrap();
    assert!(again.release().await.unwrap());
}

/// Waits (within `limit`) for the loss `loss` completes with, checking every 20 ms until then
/// that the validity (`valid_until`) never reaches past `ceiling`.
pub(crate) async fn lost_by<F: Future<Output = leasehold_client::Loss>>(
    limit: Duration,
    ceiling: Instant,
    valid_until: impl Fn() -> Instant,
    loss: impl Fn() -> F,
) -> leasehold_client::Loss {
    within(limit, "the loss at the max hold", async {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        loop {
            assert!(valid_until() <= ceiling, "believed past the max hold");
            tokio::select! {
                loss = loss() => break loss,
                _ = tick.tick() => {}
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_max_hold_ends_lease() {
    use leasehold_client::LostReason;
    let (_redis, _server, client, direct) = start().await;
    // The scenario's line says ttl 3 s, which the protocol refuses (a max hold is at least the
    // TTL): a TTL of 1 s, whose key still holds at the loss (renewed at a third of it, it
    // expires about 1.7 s after the acquire).
    let max_hold = Duration::from_secs(1);
    let sent = Instant::now();
    let guard = client
        .lease("job")
        .ttl(max_hold)
        .max_hold(max_hold)
        .acquire()
        .await
        .unwrap();
    // The validity, checked as it moves until the loss, never reaches past the max hold after
    // the acquire was sent (between `sent` and now).
    let ceiling = Instant::now() + max_hold;
    let loss = lost_by(
        Duration::from_secs(3),
        ceiling,
        || guard.valid_until(),
        || guard.loss(),
    )
    .await;
    let after = sent.elapsed();
    assert_eq!(loss.code, LostReason::MaxHold, "{loss:?}");
    assert!(after >= max_hold, "lost {after:?} after the acquire");
    assert!(
        after <= Duration::from_secs(3),
        "lost {after:?} after the acquire"
    );
    // Its key still holds it: nobody else takes the name before its TTL runs out.
    assert_eq!(
        get(&direct, &lock_key("job")).await.as_deref(),
        Some(guard.token())
    );
    let refused = client.lease("job").acquire().await;
    assert_eq!(refusal(refused).code(), Code::Aborted);
    assert!(
        guard.outages().is_empty(),
        "a lease at its max hold was resumed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_token_check() {
    use leasehold_client::TokenState;
    let (_redis, _server, client, _direct) = start().await;
    assert_eq!(
        client.check("job", 1).await.unwrap().state,
        TokenState::Free
    );
    let held = client.lease("job").acquire().await.unwrap();
    let fence = held.fencing_token();
    let current = client.check("job", fence).await.unwrap();
    assert_eq!(
        (current.state, current.current_fencing_token),
        (TokenState::Current, fence)
    );
    let stale = client.check("job", fence - 1).await.unwrap();
    assert_eq!(
        (stale.state, stale.current_fencing_token),
        (TokenState::Superseded, fence)
    );
    assert!(held.release().await.unwrap());
    assert_eq!(
        client.check("job", fence).await.unwrap().state,
        TokenState::Free
    );
}
