//! Revoke against real processes: a holder on one server revoked through another hears it at
//! once (REVOKED), the next waiter is granted, the token cannot be resumed; one permit or shared
//! hold by its fencing token; a session's lease alone; a leader; who may, and what is written.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::Duration;

use fred::prelude::{KeysInterface, LuaInterface};
use leasehold::server::auth::token_digest;
use leasehold_client::{Client, ClientError, ConnectOptions, LeaseGuard, LostReason};
use support::certs::TempDir;
use support::*;
use tokio::time::Instant;
use tonic::Code;

/// How soon a revoked holder must hear it: far below any renewal period of the TTLs used here
/// (10 s leases renew every few seconds), so only the revocation message can explain it.
const TOLD_WITHIN: Duration = Duration::from_secs(1);
const TTL: Duration = Duration::from_secs(10);

/// Two server processes on one Redis, a client of each, and a direct Redis client.
async fn two_servers() -> (
    RedisServer,
    [ServerProcess; 2],
    Client,
    Client,
    fred::prelude::Client,
) {
    let redis = RedisServer::start();
    let servers = [
        ServerProcess::start(&redis, &[]),
        ServerProcess::start(&redis, &[]),
    ];
    let a = Client::connect(servers[0].url()).await.unwrap();
    let b = Client::connect(servers[1].url()).await.unwrap();
    let direct = redis.client().await;
    (redis, servers, a, b, direct)
}

/// Waits for `guard`'s loss, which must be a revocation heard within [`TOLD_WITHIN`] of `since`.
async fn told_revoked(guard: &LeaseGuard, since: Instant) {
    let loss = within(EVENT_TIMEOUT, "the revoked holder's loss", guard.loss()).await;
    assert_eq!(loss.code, LostReason::Revoked, "{loss:?}");
    let after = since.elapsed();
    assert!(after < TOLD_WITHIN, "told {after:?} after the revoke");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_revoked_through_another_server_is_told_at_once_and_the_waiter_granted() {
    let (_redis, _servers, a, b, direct) = two_servers().await;
    let held = a
        .lease("job")
        .ttl(TTL)
        .holder("h1")
        .acquire()
        .await
        .unwrap();
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.lease("job").ttl(TTL).wait(TTL).acquire().await })
    };
    wait_for_line(&direct, "leasehold:{job}:line", 1).await;
    let revoked_at = Instant::now();
    let revoked = b.revoke("job", None).await.unwrap();
    assert_eq!(revoked.len(), 1, "{revoked:?}");
    assert_eq!(revoked[0].holder, "h1");
    assert_eq!(revoked[0].fencing_token, held.fencing_token());
    told_revoked(&held, revoked_at).await;
    let next = within(EVENT_TIMEOUT, "the waiter granted", waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(next.fencing_token() > held.fencing_token());
    // Never resumed: its key is gone.
    let resumed = a.lease("job").resume(held.token()).acquire().await;
    match resumed {
        Err(ClientError::Status(status)) => assert_eq!(status.code(), Code::NotFound),
        other => panic!("a revoked lease resumed: {other:?}"),
    }
    assert!(next.release().await.unwrap());
    assert!(b.revoke("job", None).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_permit_or_one_shared_hold_revoked_by_fencing_token_leaves_the_others() {
    let (_redis, _servers, a, b, _direct) = two_servers().await;
    for shared in [false, true] {
        let name = if shared { "catalog" } else { "pool" };
        let mut holds = Vec::new();
        for i in 0..3 {
            let lease = a.lease(name).ttl(TTL).holder(format!("h{i}"));
            let lease = if shared {
                lease.shared()
            } else {
                lease.limit(3)
            };
            holds.push(lease.acquire().await.unwrap());
        }
        let target = holds[1].fencing_token();
        let revoked_at = Instant::now();
        let revoked = b.revoke(name, Some(target)).await.unwrap();
        assert_eq!(revoked.len(), 1, "{revoked:?}");
        assert_eq!(
            (revoked[0].holder.as_str(), revoked[0].fencing_token),
            ("h1", target)
        );
        told_revoked(&holds[1], revoked_at).await;
        let described = b.describe(name).await.unwrap();
        let left: Vec<u64> = described.holders.iter().map(|h| h.fencing_token).collect();
        assert_eq!(left, [holds[0].fencing_token(), holds[2].fencing_token()]);
        // Their server rechecked them too: still held, never told.
        assert!(!holds[0].is_lost() && !holds[2].is_lost());
        // Another fencing token: nothing.
        assert!(b.revoke(name, Some(target)).await.unwrap().is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_lease_revoked_is_lost_alone() {
    let (_redis, _servers, a, b, _direct) = two_servers().await;
    let session = a.session().ttl(TTL).open().await.unwrap();
    let first = session.lock("s1").acquire().await.unwrap();
    let second = session.lock("s2").acquire().await.unwrap();
    let revoked_at = Instant::now();
    assert_eq!(b.revoke("s1", None).await.unwrap().len(), 1);
    let loss = within(EVENT_TIMEOUT, "the session lease's loss", first.loss()).await;
    assert_eq!(loss.code, LostReason::Revoked, "{loss:?}");
    assert!(
        revoked_at.elapsed() < TOLD_WITHIN,
        "{:?}",
        revoked_at.elapsed()
    );
    assert!(!second.is_lost());
    assert!(b.describe("s2").await.unwrap().held);
    assert!(!session.is_ended());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_revoked_is_told_and_the_next_candidate_elected_with_a_larger_term() {
    let (_redis, _servers, a, b, _direct) = two_servers().await;
    let mut first = a.campaign("leader", "first", TTL).await.unwrap();
    let term = within(EVENT_TIMEOUT, "first elected", first.elected())
        .await
        .unwrap();
    let mut second = b.campaign("leader", "second", TTL).await.unwrap();
    let revoked_at = Instant::now();
    let revoked = b.revoke_leader("leader", None).await.unwrap().unwrap();
    assert_eq!(
        (revoked.term, revoked.value.as_slice()),
        (term, &b"first"[..])
    );
    let loss = within(EVENT_TIMEOUT, "the leader's loss", first.loss()).await;
    assert_eq!(loss.code, LostReason::Revoked, "{loss:?}");
    assert!(
        revoked_at.elapsed() < TOLD_WITHIN,
        "{:?}",
        revoked_at.elapsed()
    );
    let next = within(EVENT_TIMEOUT, "second elected", second.elected())
        .await
        .unwrap();
    assert!(next > term);
    let leader = b.leader("leader").await.unwrap().unwrap();
    assert_eq!(leader.value, b"second");
    // Another term: nothing.
    assert!(
        b.revoke_leader("leader", Some(term))
            .await
            .unwrap()
            .is_none()
    );
}

/// A server process with an auth file and metrics whose log (stderr) is kept in a file.
struct Logged {
    child: Child,
    url: String,
    metrics: String,
    log: std::path::PathBuf,
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn logged_server(redis: &RedisServer, dir: &TempDir) -> Logged {
    let auth = dir.write(
        "auth.toml",
        &format!(
            "[[grant]]\nname = \"worker\"\ntoken_sha256 = \"{}\"\nrole = \"hold\"\nlocks = [\"\"]\n\n\
             [[grant]]\nname = \"ops on call\"\ntoken_sha256 = \"{}\"\nrole = \"admin\"\nlocks = [\"\"]\n",
            token_digest("worker-secret"),
            token_digest("ops-secret"),
        ),
    );
    let log = dir.path().join("server.log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics",
            "127.0.0.1:0",
        ])
        .args(["--redis", &redis.url()])
        .arg("--auth-file")
        .arg(&auth)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = || {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        line.trim().to_owned()
    };
    let url = line().replace("leasehold: listening on ", "http://");
    let metrics = line()
        .replace("leasehold: metrics on http://", "")
        .replace("/metrics", "");
    Logged {
        child,
        url,
        metrics,
        log,
    }
}

async fn cli_revoke(url: &str, token: &str, name: &str) -> (i32, String) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["revoke", name])
        .env("LEASEHOLD_SERVER", url)
        .env("LEASEHOLD_TOKEN", token)
        .stdin(Stdio::null())
        .output();
    let output = within(EVENT_TIMEOUT, "leasehold revoke", output)
        .await
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    (output.status.code().unwrap(), stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_admin_may_revoke_and_each_revoke_is_audited_and_counted() {
    let redis = RedisServer::start();
    let dir = TempDir::new("revoke-auth");
    let server = logged_server(&redis, &dir);
    let as_token = |token: &str| ConnectOptions::new(&server.url).token(Some(token.to_owned()));
    let worker = Client::connect_with(as_token("worker-secret"))
        .await
        .unwrap();
    let held = worker
        .lease("nightly")
        .ttl(TTL)
        .holder("w1")
        .acquire()
        .await
        .unwrap();
    // A hold grant may not: refused, and nothing changes.
    match worker.revoke("nightly", None).await {
        Err(ClientError::Status(status)) => assert_eq!(status.code(), Code::PermissionDenied),
        other => panic!("a hold grant revoked: {other:?}"),
    }
    assert_eq!(
        cli_revoke(&server.url, "worker-secret", "nightly").await.0,
        77
    );
    assert!(!held.is_lost());
    assert!(worker.describe("nightly").await.unwrap().held);
    // An admin may: one line, exit 0; then nothing is held, exit 1.
    let (status, stdout) = cli_revoke(&server.url, "ops-secret", "nightly").await;
    assert_eq!(status, 0, "{stdout}");
    let fencing_token = held.fencing_token();
    assert_eq!(
        stdout,
        format!("revoked \"nightly\" (holder w1, fencing token {fencing_token})\n")
    );
    let loss = within(EVENT_TIMEOUT, "the loss", held.loss()).await;
    assert_eq!(loss.code, LostReason::Revoked);
    assert_eq!(cli_revoke(&server.url, "ops-secret", "nightly").await.0, 1);
    // The audit line: who, from where, which name, holder and fencing token; at WARN.
    let log = std::fs::read_to_string(&server.log).unwrap();
    let audit: Vec<&str> = log.lines().filter(|l| l.contains("audit")).collect();
    assert_eq!(audit.len(), 1, "{log}");
    for part in [
        "WARN",
        "ops on call",
        "127.0.0.1",
        "nightly",
        "w1",
        &fencing_token.to_string(),
    ] {
        assert!(audit[0].contains(part), "{part:?} not in {}", audit[0]);
    }
    assert!(!log.contains("ops-secret"), "a token logged");
    let metrics = crate::operations::scrape(&server.metrics).await;
    assert_eq!(
        metrics.get(r#"leasehold_revocations_total{kind="lock"}"#),
        Some(&1.0),
        "{metrics:?}"
    );
}

/// A holder whose server missed the revocation's message (its pub/sub connection down, or the
/// renewal's answer arriving first) is still told REVOKED, at its next renewal: the revoke
/// leaves the revoked tokens beside the lock for as long as the lease had left, and a renewal
/// that finds its key gone reads them. A key deleted by anything else is still TAKEN.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_server_missed_the_revocation_is_told_revoked_at_its_next_renewal() {
    let (_redis, _servers, a, _b, direct) = two_servers().await;
    let ttl = Duration::from_millis(1500);
    let revoked = a.lease("job").ttl(ttl).acquire().await.unwrap();
    let deleted = a.lease("other").ttl(ttl).acquire().await.unwrap();
    // What revoke.lua leaves behind, without its message: the key gone, the token recorded.
    let script = "redis.call('DEL', KEYS[1]) \
                  redis.call('SADD', KEYS[2], ARGV[1]) \
                  redis.call('PEXPIRE', KEYS[2], ARGV[2]) return 1";
    let _: i64 = direct
        .eval(
            script,
            vec!["leasehold:{job}:lock", "leasehold:{job}:revoked"],
            vec![revoked.token().to_owned(), ttl.as_millis().to_string()],
        )
        .await
        .unwrap();
    let _: i64 = direct.del("leasehold:{other}:lock").await.unwrap();
    let loss = within(EVENT_TIMEOUT, "the revoked holder's loss", revoked.loss()).await;
    assert_eq!(loss.code, LostReason::Revoked, "{loss:?}");
    let loss = within(EVENT_TIMEOUT, "the other holder's loss", deleted.loss()).await;
    assert_eq!(loss.code, LostReason::Taken, "{loss:?}");
}
