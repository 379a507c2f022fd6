//! A Redis that may evict held locks (`maxmemory-policy` other than `noeviction`) is refused at
//! start, turns a running server NOT_SERVING and refuses new leases until fixed; a Redis that
//! hides its policy is served with a warning and a metric; a full Redis answers
//! RESOURCE_EXHAUSTED. Every Redis here is a real `redis-server`.

use crate::support;

use std::process::Stdio;
use std::time::Duration;

use leasehold::pb::lock_service_client::LockServiceClient;
use support::cluster::RedisCluster;
use support::sentinel::RedisSentinel;
use support::*;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_types::StatusExt;

/// Longest wait for a state a test expects (a health check runs every second).
const SETTLE: Duration = Duration::from_secs(15);

/// `leasehold serve` on `redis` (`--redis URL` or `--redlock URLS`) and `extra` flags, logging
/// at `warn` to a pipe.
pub(crate) fn serve(redis: &[&str], extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(redis)
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start leasehold")
}

/// The sentence `serve` must refuse `node` with.
fn refusal(node: &str, policy: &str) -> String {
    format!(
        "leasehold: redis {node} has maxmemory-policy {policy}, which may evict held locks; set it to noeviction (CONFIG SET maxmemory-policy noeviction) or start with --redis-allow-eviction to accept the risk"
    )
}

/// Runs `serve` until it exits by itself (bounded) and checks it refused with status 78 and
/// exactly `sentence` on stderr.
async fn refused(redis: &[&str], sentence: &str) {
    let child = serve(redis, &[]);
    let output = within(SETTLE, "serve exits", child.wait_with_output())
        .await
        .expect("serve's output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(78), "{stderr}");
    assert_eq!(stderr.trim_end(), sentence);
    assert!(output.stdout.is_empty(), "it listened: {:?}", output.stdout);
}

/// A server that started: its gRPC URL (from stdout), and its metrics address when started
/// with `--metrics`.
pub(crate) async fn started(child: &mut Child, metrics: bool) -> (String, String) {
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut next = vec![];
    for _ in 0..1 + usize::from(metrics) {
        let line = within(SETTLE, "a line from serve", lines.next_line())
            .await
            .expect("read stdout")
            .unwrap_or_default();
        next.push(line);
    }
    let addr = next[0]
        .strip_prefix("leasehold: listening on ")
        .unwrap_or_else(|| panic!("not serving: {next:?}"))
        .to_owned();
    let metrics = next
        .get(1)
        .and_then(|line| line.strip_prefix("leasehold: metrics on http://"))
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_default()
        .to_owned();
    (format!("http://{addr}"), metrics)
}

/// Stops a started server and returns what it logged.
pub(crate) async fn stderr_of(mut child: Child) -> String {
    child.start_kill().expect("kill serve");
    let mut stderr = String::new();
    let mut pipe = child.stderr.take().expect("stderr");
    within(SETTLE, "serve's stderr", pipe.read_to_string(&mut stderr))
        .await
        .expect("read stderr");
    stderr
}

/// A unary acquisition of `name` (no wait): the status it was refused with.
async fn refused_acquisition(client: &mut LockServiceClient<Channel>, name: &str) -> tonic::Status {
    match client.acquire(unary_acquire(name, 5_000, 0, "new")).await {
        Err(status) => status,
        Ok(answer) => panic!("acquired: {answer:?}"),
    }
}

/// The ErrorInfo reason of a status.
pub(crate) fn reason(status: &tonic::Status) -> String {
    status
        .get_details_error_info()
        .map(|info| info.reason)
        .unwrap_or_default()
}

/// Tries new acquisitions until one is refused for `why` (a reconnecting server first answers
/// REDIS_UNAVAILABLE), and returns that status.
async fn until_refused_for(client: &mut LockServiceClient<Channel>, why: &str) -> tonic::Status {
    within(SETTLE, why, async {
        loop {
            if let Err(status) = client.acquire(unary_acquire("new", 5_000, 0, "new")).await
                && reason(&status) == why
            {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

/// Checks the health of `url` until it is `wanted` (a health check runs every second).
async fn until_health(url: &str, wanted: ServingStatus) {
    within(SETTLE, "the health wanted", async {
        while health(url).await != wanted {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// Waits until `url` is NOT_SERVING, and checks it stays so over two health checks: not only
/// while Redis was unreachable, but because it may evict.
async fn stays_not_serving(url: &str) {
    until_health(url, ServingStatus::NotServing).await;
    tokio::time::sleep(2 * leasehold::server::health::CHECK_INTERVAL + Duration::from_millis(500))
        .await;
    assert_eq!(health(url).await, ServingStatus::NotServing);
}

/// The health of `url`'s whole server ("") by a unary Check.
async fn health(url: &str) -> ServingStatus {
    let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let request = tonic_health::pb::HealthCheckRequest {
        service: String::new(),
    };
    let status = tonic_health::pb::health_client::HealthClient::new(channel)
        .check(request)
        .await
        .unwrap()
        .into_inner()
        .status;
    ServingStatus::try_from(status).unwrap()
}

fn node(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_a_redis_that_may_evict_with_status_78_and_one_sentence() {
    let lru = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    refused(
        &["--redis", &lru.url()],
        &refusal(&node(lru.port()), "allkeys-lru"),
    )
    .await;
    let volatile = RedisServer::start_with(&["--maxmemory-policy", "volatile-ttl"]);
    refused(
        &["--redis", &volatile.url()],
        &refusal(&node(volatile.port()), "volatile-ttl"),
    )
    .await;
    // CONFIG renamed away (managed Redis): INFO still tells, and the start is still refused.
    let hidden = RedisServer::start_with(&[
        "--maxmemory-policy",
        "volatile-lru",
        "--rename-command",
        "CONFIG",
        "",
    ]);
    refused(
        &["--redis", &hidden.url()],
        &refusal(&node(hidden.port()), "volatile-lru"),
    )
    .await;
    // Nothing was written on any of them.
    for redis in [&lru, &volatile, &hidden] {
        assert_eq!(redis_cli(redis.port(), &["dbsize"]), "0");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_a_cluster_with_one_primary_that_may_evict() {
    let cluster = RedisCluster::start(3, 0);
    let primaries = cluster.primaries();
    let bad = primaries[1];
    let set = redis_cli(
        bad,
        &["config", "set", "maxmemory-policy", "allkeys-random"],
    );
    assert_eq!(set, "OK");
    refused(
        &["--redis", &cluster.url()],
        &refusal(&node(bad), "allkeys-random"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_redlock_with_one_primary_that_may_evict() {
    let good = [RedisServer::start(), RedisServer::start()];
    let bad = RedisServer::start_with(&["--maxmemory-policy", "volatile-random"]);
    let urls = [good[0].url(), bad.url(), good[1].url()].join(",");
    refused(
        &["--redlock", &urls],
        &refusal(&node(bad.port()), "volatile-random"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_hides_its_policy_is_served_with_a_warning_and_a_metric() {
    // CONFIG and INFO both renamed away: nothing tells the policy.
    let hidden = RedisServer::start_with(&[
        "--rename-command",
        "CONFIG",
        "",
        "--rename-command",
        "INFO",
        "",
    ]);
    let mut child = serve(&["--redis", &hidden.url()], &["--metrics", "127.0.0.1:0"]);
    let (url, metrics) = started(&mut child, true).await;
    let samples = crate::operations::scrape(&metrics).await;
    let unknown = format!(
        r#"leasehold_redis_maxmemory_policy{{node="{}",policy="unknown"}}"#,
        node(hidden.port())
    );
    assert_eq!(samples.get(&unknown), Some(&1.0), "{samples:#?}");
    // It serves.
    let client = leasehold_client::Client::connect(url.clone())
        .await
        .unwrap();
    let guard = client.lease("unchecked").acquire().await.unwrap();
    assert!(guard.release().await.unwrap());
    assert_eq!(health(&url).await, ServingStatus::Serving);
    let stderr = stderr_of(child).await;
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("maxmemory-policy"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("WARN") && warnings[0].contains(&node(hidden.port())),
        "{stderr}"
    );

    // A Redis that tells: its policy is the label.
    let plain = RedisServer::start();
    let mut child = serve(&["--redis", &plain.url()], &["--metrics", "127.0.0.1:0"]);
    let (_, metrics) = started(&mut child, true).await;
    let samples = crate::operations::scrape(&metrics).await;
    let noeviction = format!(
        r#"leasehold_redis_maxmemory_policy{{node="{}",policy="noeviction"}}"#,
        node(plain.port())
    );
    assert_eq!(samples.get(&noeviction), Some(&1.0), "{samples:#?}");
    let stderr = stderr_of(child).await;
    assert!(!stderr.contains("maxmemory-policy"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_eviction_serves_with_a_warning_at_every_start() {
    let lru = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    for _ in 0..2 {
        let mut child = serve(&["--redis", &lru.url()], &["--redis-allow-eviction"]);
        let (url, _) = started(&mut child, false).await;
        let client = leasehold_client::Client::connect(url.clone())
            .await
            .unwrap();
        let guard = client.lease("accepted").acquire().await.unwrap();
        assert!(guard.release().await.unwrap());
        assert_eq!(health(&url).await, ServingStatus::Serving);
        let stderr = stderr_of(child).await;
        let flag = stderr
            .lines()
            .filter(|line| line.contains("WARN") && line.contains("--redis-allow-eviction"))
            .count();
        assert_eq!(flag, 2, "the flag and the node, each at WARN: {stderr}");
    }
    // The same from the config file's key.
    let dir = support::certs::TempDir::new("eviction-config");
    let file = dir.write("leasehold.toml", "redis_allow_eviction = true\n");
    let mut child = serve(
        &["--redis", &lru.url()],
        &["--config", file.to_str().unwrap()],
    );
    let (url, _) = started(&mut child, false).await;
    assert_eq!(health(&url).await, ServingStatus::Serving);
    let stderr = stderr_of(child).await;
    assert!(stderr.contains("--redis-allow-eviction:"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_switched_to_eviction_stops_new_leases_until_fixed() {
    let mut redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let mut health_watch = HealthWatch::open(&server.url(), "").await;
    assert_eq!(health_watch.next(SETTLE).await, ServingStatus::Serving);
    let mut raw = server.client().await;
    let mut held = LeaseStream::acquire(&mut raw, "held", 600, 0, "holder").await;
    held.acquired().await;

    // Switched at run time, and the server's connections cut: it reconnects to a Redis that
    // may evict.
    let set = redis_cli(
        redis.port(),
        &["config", "set", "maxmemory-policy", "allkeys-lru"],
    );
    assert_eq!(set, "OK");
    redis_cli(redis.port(), &["client", "kill", "type", "normal"]);
    assert_eq!(health_watch.next(SETTLE).await, ServingStatus::NotServing);
    let status = refused_acquisition(&mut raw, "new").await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(reason(&status), "REDIS_MAY_EVICT", "{status:?}");
    let info = status.get_details_error_info().unwrap();
    assert_eq!(
        info.metadata.get("policy").map(String::as_str),
        Some("allkeys-lru")
    );
    assert!(status.message().contains("noeviction"), "{status:?}");
    // A waiter is refused the same way, at once.
    let mut waiter = LeaseStream::acquire(&mut raw, "waiting", 5_000, 60_000, "w").await;
    assert_eq!(reason(&waiter.status().await), "REDIS_MAY_EVICT");
    // The lease held before goes on renewing (several TTLs pass).
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    // Fixed: it serves again, at the next health check.
    let set = redis_cli(
        redis.port(),
        &["config", "set", "maxmemory-policy", "noeviction"],
    );
    assert_eq!(set, "OK");
    assert_eq!(health_watch.next(SETTLE).await, ServingStatus::Serving);
    let answer = raw
        .acquire(unary_acquire("new", 5_000, 0, "new"))
        .await
        .unwrap()
        .into_inner();
    assert!(answer.acquired);
    assert!(held.release().await, "the lease held throughout was lost");

    // Restarted on its port with a policy that may evict: refused again once reconnected.
    redis.restart_with(&["--maxmemory-policy", "volatile-lru"]);
    until_refused_for(&mut raw, "REDIS_MAY_EVICT").await;
    stays_not_serving(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_to_a_replica_that_may_evict_stops_new_leases() {
    let mut sentinel = RedisSentinel::start();
    let set = redis_cli(
        sentinel.replica,
        &["config", "set", "maxmemory-policy", "allkeys-lru"],
    );
    assert_eq!(set, "OK");
    let server = TestServer::start_at(&sentinel.url(), "leasehold:", fast_keepalive()).await;
    let mut raw = server.client().await;
    let answer = raw
        .acquire(unary_acquire("before", 5_000, 0, "a"))
        .await
        .unwrap()
        .into_inner();
    assert!(answer.acquired);
    assert_eq!(health(&server.url()).await, ServingStatus::Serving);

    sentinel.kill(sentinel.primary);
    sentinel.until_promoted();
    let status = until_refused_for(&mut raw, "REDIS_MAY_EVICT").await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    stays_not_serving(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_refuses_new_locks_with_resource_exhausted_while_held_leases_renew() {
    let redis = RedisServer::start_with(&["--maxmemory", "8mb"]);
    let server = TestServer::start(&redis).await;
    let mut raw = server.client().await;
    let mut held = LeaseStream::acquire(&mut raw, "held", 600, 0, "holder").await;
    held.acquired().await;

    // Filled past maxmemory (noeviction, the default): every write that takes memory is refused.
    assert_eq!(
        redis_cli(redis.port(), &["setrange", "ballast", "3000000", "x"]),
        "3000001"
    );
    assert_eq!(
        redis_cli(redis.port(), &["config", "set", "maxmemory", "1mb"]),
        "OK"
    );
    assert!(redis_cli(redis.port(), &["set", "probe", "x"]).starts_with("OOM"));

    let status = refused_acquisition(&mut raw, "new").await;
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(reason(&status), "REDIS_OUT_OF_MEMORY", "{status:?}");
    assert!(status.get_details_retry_info().is_some(), "{status:?}");
    assert!(!status.message().contains("OOM command"), "{status:?}");
    // On a stream, and for a waiter, the same at once.
    let mut stream = LeaseStream::acquire(&mut raw, "new", 5_000, 0, "s").await;
    assert_eq!(reason(&stream.status().await), "REDIS_OUT_OF_MEMORY");
    let mut waiter = LeaseStream::acquire(&mut raw, "held", 5_000, 60_000, "w").await;
    assert_eq!(reason(&waiter.status().await), "REDIS_OUT_OF_MEMORY");
    // Health stays SERVING: Redis answers, and held leases are safe.
    assert_eq!(health(&server.url()).await, ServingStatus::Serving);

    // The lease held before renews through several TTLs, and is still ours.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(held.release().await, "the lease held throughout was lost");
}
