//! Running it in production: health that follows Redis, reflection, Prometheus metrics, TLS and
//! mutual TLS with certificate rotation, authorisation by token and by certificate, graceful
//! shutdown, the config file, limits, and JSON logs. (The burst over the Redis in-flight limit
//! has a test binary of its own, tests/burst.rs, so no other test competes with it for the CPU.)

use crate::support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use leasehold::server::ServerConfig;
use leasehold::server::auth::{AuthPolicy, token_digest};
use leasehold::store::{RedisSettings, Store};
use leasehold::tls::TlsFiles;
use leasehold_client::{Client, ConnectOptions};
use support::certs::{TempDir, TestCa};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_stream::StreamExt;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;

/// Longest wait for a state a test expects (health flips take about three seconds).
const SETTLE: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_redis_and_reflection_lists_every_service() {
    let mut redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let channel = tonic::transport::Endpoint::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap();

    let mut health = HealthWatch::open(&server.url(), "leasehold.v1.LockService").await;
    assert_eq!(health.next(SETTLE).await, ServingStatus::Serving);

    redis.kill();
    assert_eq!(health.next(SETTLE).await, ServingStatus::NotServing);
    redis.restart_empty();
    assert_eq!(health.next(SETTLE).await, ServingStatus::Serving);

    // Reflection: tools find the services without the .proto files.
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let mut reflection = ServerReflectionClient::new(channel);
    let request = tonic_reflection::pb::v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers = reflection
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let Some(MessageResponse::ListServicesResponse(list)) =
        answers.next().await.unwrap().unwrap().message_response
    else {
        panic!("no service list");
    };
    let names: Vec<_> = list.service.into_iter().map(|s| s.name).collect();
    for service in [
        "leasehold.v1.LockService",
        "leasehold.v1.ElectionService",
        "grpc.health.v1.Health",
    ] {
        assert!(names.iter().any(|n| n == service), "{names:?}");
    }
    // The bench's echo is listed only where `--echo` serves it.
    assert!(
        !names.iter().any(|n| n == "leasehold.bench.v1.EchoService"),
        "{names:?}"
    );
}

/// One scrape of `/metrics`: each sample line (`name{labels}`) and its value.
pub(crate) async fn scrape(addr: &str) -> HashMap<String, f64> {
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    socket.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.0 200"), "{head}");
    body.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (sample, value) = line.rsplit_once(' ').unwrap();
            (sample.to_owned(), value.parse().unwrap())
        })
        .collect()
}

/// Scrapes until `sample` reaches `value` (metrics are updated as events happen, but the test
/// sees them only by scraping).
pub(crate) async fn until_metric(addr: &str, sample: &str, value: f64) -> HashMap<String, f64> {
    let started = tokio::time::Instant::now();
    loop {
        let metrics = scrape(addr).await;
        if metrics.get(sample) == Some(&value) {
            return metrics;
        }
        assert!(
            started.elapsed() < SETTLE,
            "{sample} never reached {value}: {metrics:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_as_leases_come_and_go() {
    let redis = RedisServer::start();
    let direct = redis.client().await;
    let mut server = ServerProcess::start(
        &redis,
        &[
            "--metrics",
            "127.0.0.1:0",
            "--metrics-name-prefix",
            "billing/",
        ],
    );
    let addr = server.metrics_addr();
    let client = Client::connect(server.url()).await.unwrap();

    let guard = client
        .lease("billing/run")
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    let refused = client.lease("billing/run").acquire().await;
    assert!(refused.is_err());
    let held = r#"leasehold_leases_held{prefix="billing/"}"#;
    let metrics = until_metric(&addr, held, 1.0).await;
    assert_eq!(
        metrics[r#"leasehold_acquisitions_total{outcome="acquired",prefix="billing/"}"#],
        1.0
    );
    assert_eq!(
        metrics[r#"leasehold_acquisitions_total{outcome="refused",prefix="billing/"}"#],
        1.0
    );
    assert!(metrics["leasehold_redis_round_trip_seconds_count"] >= 2.0);
    // What an operator's alerts compare with: the limits, what is admitted against them, and
    // whether Redis answers (the first health check runs within a second).
    assert_eq!(metrics[r#"leasehold_limit{limit="leases"}"#], 100_000.0);
    assert_eq!(metrics[r#"leasehold_limit{limit="waiters"}"#], 10_000.0);
    assert_eq!(metrics["leasehold_leases_admitted"], 1.0);
    assert!(metrics.contains_key("leasehold_redis_in_flight"));
    let info = format!(
        r#"leasehold_info{{redis_mode="single",version="{}"}}"#,
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(metrics[&info], 1.0);
    let metrics = until_metric(&addr, "leasehold_redis_reachable", 1.0).await;
    assert_eq!(metrics["leasehold_redis_nodes"], 1.0);
    assert_eq!(metrics["leasehold_redis_nodes_reachable"], 1.0);
    assert!(metrics["leasehold_acquire_wait_seconds_count"] >= 2.0);
    // A 300 ms lease renews every 100 ms.
    until_metric(&addr, "leasehold_renewals_total", 2.0).await;

    // Deleted behind the server's back: lost, by reason.
    let other = client
        .lease("reports/x")
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    until_metric(&addr, r#"leasehold_leases_held{prefix=""}"#, 1.0).await;
    let _: i64 = fred::prelude::KeysInterface::del(&direct, lock_key("reports/x"))
        .await
        .unwrap();
    let reason = within(SETTLE, "lost", other.lost()).await;
    assert!(reason.contains("deleted"), "{reason}");
    let metrics = until_metric(
        &addr,
        r#"leasehold_leases_lost_total{reason="not_held"}"#,
        1.0,
    )
    .await;
    assert!(metrics["leasehold_renewal_failures_total"] >= 1.0);

    guard.release().await.unwrap();
    let metrics = until_metric(&addr, held, 0.0).await;
    assert!(metrics["leasehold_hold_seconds_count"] >= 2.0);
    assert_eq!(metrics[r#"leasehold_open_streams{kind="lease"}"#], 0.0);

    let mut leader = client
        .campaign("vote", "a", Duration::from_secs(10))
        .await
        .unwrap();
    leader.elected().await.unwrap();
    until_metric(&addr, "leasehold_elections_led", 1.0).await;
    until_metric(&addr, r#"leasehold_open_streams{kind="campaign"}"#, 1.0).await;
    let observer = client.observe("vote").await.unwrap();
    until_metric(&addr, r#"leasehold_open_streams{kind="observe"}"#, 1.0).await;
    drop(observer);
    // A session is one stream; each of its leases is held, and counted, on its own.
    let session = client.session().open().await.unwrap();
    let _a = session.lock("billing/s1").acquire().await.unwrap();
    let _b = session.lock("billing/s2").acquire().await.unwrap();
    until_metric(&addr, r#"leasehold_open_streams{kind="session"}"#, 1.0).await;
    until_metric(&addr, held, 2.0).await;
    session.close().await.unwrap();
    until_metric(&addr, held, 0.0).await;
    until_metric(&addr, r#"leasehold_open_streams{kind="session"}"#, 0.0).await;
    // Unary calls count too.
    let once = client
        .acquire_once("billing/once", Duration::from_secs(5))
        .await
        .unwrap();
    assert!(once.acquired);
    // The first lease, the session's two, and this one.
    until_metric(
        &addr,
        r#"leasehold_acquisitions_total{outcome="acquired",prefix="billing/"}"#,
        4.0,
    )
    .await;
    // No lock name is ever a label.
    let text: Vec<String> = scrape(&addr).await.into_keys().collect();
    assert!(!text.iter().any(|sample| sample.contains("reports/x")));
}

/// A server with `tls` (and `auth`), in this process.
async fn server_with(
    redis: &RedisServer,
    tls: Option<TlsFiles>,
    auth: Option<AuthPolicy>,
) -> TestServer {
    TestServer::start_with(
        redis,
        "leasehold:",
        ServerConfig {
            tls,
            auth: auth.map(Arc::new),
            ..fast_keepalive()
        },
    )
    .await
}

fn https(server: &TestServer) -> ConnectOptions {
    ConnectOptions::new(format!("https://127.0.0.1:{}", server.addr.port()))
}

/// Whether a full call works over `options`: connect, and take and release a lock.
async fn works(options: ConnectOptions, name: &str) -> Result<(), String> {
    let client = Client::connect_with(options)
        .await
        .map_err(|e| e.to_string())?;
    let guard = client
        .lease(name)
        .acquire()
        .await
        .map_err(|e| e.to_string())?;
    guard.release().await.map_err(|e| e.to_string())?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_mutual_tls_accept_good_certificates_and_refuse_others() {
    let redis = RedisServer::start();
    let (ca, stranger) = (TestCa::new("leasehold test ca"), TestCa::new("stranger ca"));
    let dir = TempDir::new("tls");
    let files = ca.server_files(&dir, None);
    let server = server_with(&redis, Some(files.clone()), None).await;
    works(https(&server).ca_pem(ca.pem().into_bytes()), "tls")
        .await
        .unwrap();
    let untrusted = works(https(&server).ca_pem(stranger.pem().into_bytes()), "tls").await;
    assert!(
        untrusted.is_err(),
        "a server certificate from an untrusted CA was accepted"
    );
    let plaintext = works(ConnectOptions::new(server.url()), "tls").await;
    assert!(plaintext.is_err(), "plaintext was served on a TLS listener");
    server.stop().await;

    // Mutual TLS: a client certificate from the client CA, or nothing.
    let mutual = ca.server_files(&dir, Some(&ca));
    let server = server_with(&redis, Some(mutual), None).await;
    let client = ca.client("worker-1");
    let with_identity = https(&server)
        .ca_pem(ca.pem().into_bytes())
        .identity_pem(client.cert.into_bytes(), client.key.into_bytes());
    works(with_identity, "mtls").await.unwrap();
    let without = works(https(&server).ca_pem(ca.pem().into_bytes()), "mtls").await;
    assert!(
        without.is_err(),
        "a client without a certificate was served"
    );
    let forged = stranger.client("worker-1");
    let forged = https(&server)
        .ca_pem(ca.pem().into_bytes())
        .identity_pem(forged.cert.into_bytes(), forged.key.into_bytes());
    assert!(
        works(forged, "mtls").await.is_err(),
        "a client certificate from another CA was served"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_serves_new_connections_while_old_leases_live_on() {
    let redis = RedisServer::start();
    let direct = redis.client().await;
    let (old_ca, new_ca) = (TestCa::new("old ca"), TestCa::new("new ca"));
    let dir = TempDir::new("rotate");
    let files = old_ca.server_files(&dir, None);
    let server = server_with(&redis, Some(files), None).await;
    let before = Client::connect_with(https(&server).ca_pem(old_ca.pem().into_bytes()))
        .await
        .unwrap();
    let guard = before
        .lease("long-job")
        .ttl(Duration::from_millis(600))
        .acquire()
        .await
        .unwrap();
    let token = get(&direct, &lock_key("long-job")).await;

    let new = new_ca.server();
    dir.write("server.key", &new.key);
    dir.write("server.pem", &new.cert);
    // The server notices the change (SIGHUP would be at once); new connections get the new
    // certificate.
    let started = tokio::time::Instant::now();
    while works(https(&server).ca_pem(new_ca.pem().into_bytes()), "fresh")
        .await
        .is_err()
    {
        assert!(
            started.elapsed() < SETTLE,
            "the new certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        works(https(&server).ca_pem(old_ca.pem().into_bytes()), "fresh")
            .await
            .is_err(),
        "new connections still get the old certificate"
    );
    // The lease taken before lived through it: same token, renewed many times, never lost.
    assert!(!guard.is_lost());
    assert_eq!(get(&direct, &lock_key("long-job")).await, token);
    assert!(guard.release().await.unwrap());
}

async fn keys_matching(direct: &fred::prelude::Client, pattern: &str) -> Vec<String> {
    use fred::prelude::ClientLike;
    direct
        .custom(fred::cmd!("KEYS"), vec![pattern])
        .await
        .unwrap()
}

fn grants(dir: &TempDir) -> std::path::PathBuf {
    let text = format!(
        r#"
        [[grant]]
        name = "billing jobs"
        token_sha256 = "{}"
        role = "hold"
        locks = ["billing/"]
        elections = ["billing/"]

        [[grant]]
        name = "dashboard"
        token_sha256 = "{}"
        role = "observe"
        locks = [""]

        [[grant]]
        name = "ops"
        token_sha256 = "{}"
        role = "admin"
        locks = ["billing/"]

        [[grant]]
        name = "worker certificate"
        subject = "CN=worker-7"
        role = "hold"
        locks = ["jobs/"]
        "#,
        token_digest("billing-secret"),
        token_digest("dashboard-secret"),
        token_digest("ops-secret"),
    );
    dir.write("auth.toml", &text)
}

/// A server in this process holding its callers to [`grants`] (the folder holds the file).
async fn granting(redis: &RedisServer) -> (TestServer, TempDir) {
    let dir = TempDir::new("auth");
    let policy = AuthPolicy::load(&grants(&dir)).unwrap();
    (server_with(redis, None, Some(policy)).await, dir)
}

fn as_token(server: &TestServer, token: &str) -> ConnectOptions {
    ConnectOptions::new(server.url()).token(Some(token.to_owned()))
}

fn code(error: leasehold_client::ClientError) -> Code {
    match error {
        leasehold_client::ClientError::Status(status) => status.code(),
        other => panic!("not a status: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_held_to_their_role_and_prefixes_and_refusals_touch_nothing() {
    let redis = RedisServer::start();
    let direct = redis.client().await;
    let (server, _grants) = granting(&redis).await;

    let billing = Client::connect_with(as_token(&server, "billing-secret"))
        .await
        .unwrap();
    let held = billing.lease("billing/nightly").acquire().await.unwrap();
    let token = get(&direct, &lock_key("billing/nightly")).await;

    // Outside its prefix: PERMISSION_DENIED, and Redis never hears of the name.
    let outside = billing
        .lease("reports/nightly")
        .acquire()
        .await
        .unwrap_err();
    assert_eq!(code(outside), Code::PermissionDenied);
    let once = billing
        .acquire_once("reports/nightly", Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(code(once), Code::PermissionDenied);
    let keys = keys_matching(&direct, "*reports*").await;
    assert!(keys.is_empty(), "{keys:?}");
    // Election names have their own prefixes.
    let campaign = billing
        .campaign("reports/leader", "a", Duration::from_secs(5))
        .await;
    let refused = match campaign {
        Ok(mut candidate) => candidate.elected().await.unwrap_err(),
        Err(error) => error,
    };
    assert_eq!(code(refused), Code::PermissionDenied);

    // Observers may look but not take; nobody without a known token gets in.
    let dashboard = Client::connect_with(as_token(&server, "dashboard-secret"))
        .await
        .unwrap();
    let described = dashboard.describe("billing/nightly").await.unwrap();
    assert!(described.held);
    let take = dashboard
        .lease("billing/other")
        .acquire()
        .await
        .unwrap_err();
    assert_eq!(code(take), Code::PermissionDenied);
    let steal = dashboard
        .release("billing/nightly", "0123456789abcdef0123456789abcdef")
        .await
        .unwrap_err();
    assert_eq!(code(steal), Code::PermissionDenied);
    let listing = dashboard.list(0).await.unwrap_err();
    assert_eq!(code(listing), Code::PermissionDenied);
    for options in [
        as_token(&server, "wrong-secret"),
        ConnectOptions::new(server.url()),
    ] {
        let anonymous = Client::connect_with(options).await.unwrap();
        let refused = anonymous
            .lease("billing/nightly")
            .acquire()
            .await
            .unwrap_err();
        assert_eq!(code(refused), Code::Unauthenticated);
        let refused = anonymous.describe("billing/nightly").await.unwrap_err();
        assert_eq!(code(refused), Code::Unauthenticated);
    }
    // Health stays open to probes.
    let anonymous = Client::connect(server.url()).await.unwrap();
    assert!(anonymous.serving().await.unwrap());

    // Admins list, but only names under their prefixes.
    let _other = Client::connect_with(as_token(&server, "dashboard-secret"))
        .await
        .unwrap();
    let ops = Client::connect_with(as_token(&server, "ops-secret"))
        .await
        .unwrap();
    let listed = ops.list(0).await.unwrap();
    let names: Vec<_> = listed.locks.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["billing/nightly"]);

    // The holder never noticed any of it.
    assert!(!held.is_lost());
    assert_eq!(get(&direct, &lock_key("billing/nightly")).await, token);
    assert!(held.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_leases_are_held_to_the_callers_grant_one_by_one() {
    let redis = RedisServer::start();
    let direct = redis.client().await;
    let (server, _grants) = granting(&redis).await;

    let billing = Client::connect_with(as_token(&server, "billing-secret"))
        .await
        .unwrap();
    let session = billing.session().open().await.unwrap();
    let held = session.lock("billing/a").acquire().await.unwrap();
    // Outside its prefixes: that lease refused, Redis never hears of the name, the rest goes on.
    let outside = session.lock("reports/a").acquire().await.unwrap_err();
    assert_eq!(code(outside), Code::PermissionDenied);
    let campaign = session.campaign("reports/leader", b"a".to_vec()).await;
    assert_eq!(code(campaign.unwrap_err()), Code::PermissionDenied);
    let keys = keys_matching(&direct, "*reports*").await;
    assert!(keys.is_empty(), "{keys:?}");
    let leader = session
        .campaign("billing/leader", b"a".to_vec())
        .await
        .unwrap();
    assert!(leader.term() > 0 && !held.is_lost());
    assert_eq!(
        get(&direct, &lock_key("billing/a")).await.as_deref(),
        Some(held.token())
    );

    // Observers hold nothing on a session either; unknown callers open none.
    let dashboard = Client::connect_with(as_token(&server, "dashboard-secret"))
        .await
        .unwrap();
    let watching = dashboard.session().open().await.unwrap();
    let take = watching.lock("billing/b").acquire().await.unwrap_err();
    assert_eq!(code(take), Code::PermissionDenied);
    let anonymous = Client::connect(server.url()).await.unwrap();
    let refused = anonymous.session().open().await.err().expect("refused");
    assert_eq!(code(refused), Code::Unauthenticated);
    assert_eq!(session.close().await.unwrap(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_subject_stands_in_for_a_token() {
    let redis = RedisServer::start();
    let ca = TestCa::new("clients ca");
    let dir = TempDir::new("subject");
    let tls = ca.server_files(&dir, Some(&ca));
    let policy = AuthPolicy::load(&grants(&dir)).unwrap();
    let server = server_with(&redis, Some(tls), Some(policy)).await;
    let as_cert = |cn: &str| {
        let client = ca.client(cn);
        https(&server)
            .ca_pem(ca.pem().into_bytes())
            .identity_pem(client.cert.into_bytes(), client.key.into_bytes())
    };
    works(as_cert("worker-7"), "jobs/a").await.unwrap();
    let client = Client::connect_with(as_cert("worker-7")).await.unwrap();
    let outside = client.lease("billing/a").acquire().await.unwrap_err();
    assert_eq!(code(outside), Code::PermissionDenied);
    let stranger = Client::connect_with(as_cert("worker-8")).await.unwrap();
    let unknown = stranger.lease("jobs/a").acquire().await.unwrap_err();
    assert_eq!(code(unknown), Code::Unauthenticated);
    // A token wins over the certificate.
    let both = Client::connect_with(as_cert("worker-8").token(Some("billing-secret".into())))
        .await
        .unwrap();
    both.lease("billing/a").acquire().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_leases_without_a_grace_hands_the_others_over_and_exits_0_within_the_drain()
 {
    let redis = RedisServer::start();
    let direct = redis.client().await;
    let mut server = ServerProcess::start(&redis, &["--drain", "3s"]);
    let client = Client::connect(server.url()).await.unwrap();
    // A load balancer's health watch: it must hear NOT_SERVING, and it must not hold the process
    // past the drain (it never ends by itself).
    let mut health = HealthWatch::open(&server.url(), "").await;
    assert_eq!(health.next(SETTLE).await, ServingStatus::Serving);
    // Twenty leases that do not resume (released at shutdown), ten that do (kept for their
    // grace, for their client to resume on another server).
    let mut guards = Vec::new();
    for i in 0..20 {
        let lease = client.lease(format!("job-{i}")).auto_resume(false);
        guards.push(lease.acquire().await.unwrap());
    }
    let mut kept = Vec::new();
    for i in 0..10 {
        let lease = client
            .lease(format!("kept-{i}"))
            .ttl(Duration::from_secs(30));
        kept.push(lease.acquire().await.unwrap());
    }
    let mut leader = client
        .campaign_with("vote", "a", Duration::from_secs(30), false)
        .await
        .unwrap();
    leader.elected().await.unwrap();

    signal(server.pid(), "TERM");
    assert_eq!(health.next(SETTLE).await, ServingStatus::NotServing);
    for guard in &guards {
        let reason = within(SETTLE, "Lost after SIGTERM", guard.lost()).await;
        assert!(reason.starts_with("server shutting down"), "{reason}");
    }
    let status = server
        .exited_within(Duration::from_secs(4))
        .await
        .expect("still running a second after the 3 s drain");
    assert!(status.success(), "{status:?}");
    for i in 0..20 {
        assert_eq!(get(&direct, &lock_key(&format!("job-{i}"))).await, None);
    }
    let keys = keys_matching(&direct, "*vote*:lock").await;
    assert!(keys.is_empty(), "{keys:?}");
    // Handed over: still theirs in Redis (no other replica here to resume on).
    for (i, guard) in kept.iter().enumerate() {
        let key = lock_key(&format!("kept-{i}"));
        assert_eq!(get(&direct, &key).await.as_deref(), Some(guard.token()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_file_is_honoured_and_flags_and_variables_override_it() {
    let redis = RedisServer::start();
    let direct = redis.client().await;
    let dir = TempDir::new("config");
    // The file's listen address is unusable: the flag must win for the server to start.
    let config = dir.write(
        "leasehold.toml",
        &format!(
            "redis = \"{}\"\nlisten = \"256.0.0.1:1\"\nkey-prefix = \"from-file:\"\nmax_leases_per_connection = 1\nmax-waiters = 7\necho = true\n",
            redis.url()
        ),
    );
    let start = |env: &[(&str, &str)]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"));
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(&config)
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        command
    };
    let mut child = start(&[]).spawn().unwrap();
    let url = read_listen_url(&mut child);
    let client = Client::connect(url).await.unwrap();
    let _held = client.lease("configured").acquire().await.unwrap();
    assert!(get(&direct, "from-file:{configured}:lock").await.is_some());
    // An on/off switch from the file (`echo = true`): the echo service is served.
    let echoed = client
        .echo()
        .echo(leasehold_client::pb::bench::EchoRequest {
            payload: b"x".to_vec(),
            redis: false,
        })
        .await;
    assert!(echoed.is_ok(), "{echoed:?}");
    // max_leases_per_connection = 1 from the file: a second lease on this connection is refused.
    let second = client.lease("another").acquire().await.unwrap_err();
    assert_eq!(code(second), Code::ResourceExhausted);
    let _ = child.kill();
    let _ = child.wait();

    // A variable beats the file.
    let mut child = start(&[("LEASEHOLD_KEY_PREFIX", "from-env:")])
        .spawn()
        .unwrap();
    let client = Client::connect(read_listen_url(&mut child)).await.unwrap();
    let _held = client.lease("configured").acquire().await.unwrap();
    assert!(get(&direct, "from-env:{configured}:lock").await.is_some());
    let _ = child.kill();
    let _ = child.wait();

    // `serve --help` documents every option with its variable (and so its config key).
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let options: Vec<&str> = help
        .split("\n      --")
        .skip(1)
        .filter(|block| !block.starts_with("help"))
        .collect();
    assert!(options.len() >= 25, "{help}");
    for block in options {
        assert!(
            block.contains("[env: LEASEHOLD_"),
            "an option without its variable: {block}"
        );
    }

    // A key that is no option is refused, naming it.
    let typo = dir.write("typo.toml", "max-leeses = 5\n");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--config"])
        .arg(&typo)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("max-leeses"), "{stderr}");
}

fn read_listen_url(child: &mut std::process::Child) -> String {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("leasehold: listening on ")
        .unwrap_or_else(|| panic!("{line:?}"));
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_limit_answers_resource_exhausted_naming_itself() {
    let redis = RedisServer::start();
    let direct = redis.client().await;
    let exhausted = |error: leasehold_client::ClientError, limit: &str| match error {
        leasehold_client::ClientError::Status(status) => {
            assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
            assert!(status.message().contains(limit), "{status:?}");
        }
        other => panic!("not a status: {other}"),
    };

    // Leases on the server, counted across connections.
    let mut config = fast_keepalive();
    config.max_leases = 2;
    let server = TestServer::start_with(&redis, "small:", config).await;
    let (a, b) = (
        Client::connect(server.url()).await.unwrap(),
        Client::connect(server.url()).await.unwrap(),
    );
    let _first = a.lease("one").acquire().await.unwrap();
    let _second = b.lease("two").acquire().await.unwrap();
    exhausted(b.lease("three").acquire().await.unwrap_err(), "max-leases");

    let mut config = fast_keepalive();
    config.max_message_bytes = 512;
    config.wait.max_waiters_per_lock = 1;
    let server = TestServer::start_with(&redis, "leasehold:", config).await;
    // Waiters per lock: one waits, the second is refused.
    let client = Client::connect(server.url()).await.unwrap();
    let held = client.lease("hot").acquire().await.unwrap();
    let mut raw = server.client().await;
    let mut waiter = LeaseStream::acquire(&mut raw, "hot", 30_000, 60_000, "waiter").await;
    assert!(matches!(
        waiter.next().await,
        Ok(Some(leasehold::pb::lease_response::Event::Waiting(_)))
    ));
    let refused = client
        .lease("hot")
        .wait(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap_err();
    exhausted(refused, "max-waiters-per-lock");

    // Message size, on a stream and on a unary call.
    let big = "n".repeat(600);
    let mut stream = LeaseStream::acquire(&mut raw, &big, 30_000, 0, "big").await;
    let status = stream.status().await;
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("max-message-bytes"), "{status:?}");
    let refused = client
        .acquire_once(big, Duration::from_secs(5))
        .await
        .unwrap_err();
    exhausted(refused, "max-message-bytes");

    // None of it disturbed the holder.
    assert!(!held.is_lost());
    assert!(get(&direct, &lock_key("hot")).await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_carry_the_lease_span_and_never_a_full_token() {
    use std::io::BufRead;
    let redis = RedisServer::start();
    let direct = redis.client().await;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"])
        .args(["--redis", &redis.url()])
        .env("RUST_LOG", "leasehold=info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let url = read_listen_url(&mut child);
    let client = Client::connect(url).await.unwrap();
    let guard = client.lease("logged").acquire().await.unwrap();
    let token = get(&direct, &lock_key("logged")).await.unwrap();
    let acquired = tokio::task::spawn_blocking(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let line = line.unwrap();
            let entry: serde_json::Value =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            assert!(!line.contains(&token), "a full token in the logs: {line}");
            if entry["fields"]["message"] == "acquired" {
                return entry;
            }
        }
        panic!("no acquired line");
    });
    let entry = within(SETTLE, "the acquired log line", acquired)
        .await
        .unwrap();
    assert_eq!(entry["span"]["lock"], "logged", "{entry}");
    assert!(
        entry["span"]["lease"]
            .as_str()
            .is_some_and(|id| !id.is_empty()),
        "{entry}"
    );
    guard.release().await.unwrap();
    let _ = child.kill();
    let _ = child.wait();
}

/// A redis-server speaking only TLS (certificate from `ca`), with an ACL user `leasehold` whose
/// password is `password`; killed on drop.
struct TlsRedis {
    child: std::process::Child,
    port: u16,
}

impl TlsRedis {
    fn start(dir: &TempDir, ca: &TestCa, password: &str) -> Self {
        let issued = ca.server();
        let (cert, key) = (
            dir.write("redis.pem", &issued.cert),
            dir.write("redis.key", &issued.key),
        );
        let ca_file = dir.write("redis-ca.pem", &ca.pem());
        let port = free_port();
        // ACL users need a config file: on the command line, a rule's spaces split it.
        let acl = dir.write(
            "redis.conf",
            &format!("user leasehold on >{password} ~* &* +@all\nuser default off\n"),
        );
        let child = std::process::Command::new("redis-server")
            .arg(&acl)
            .args([
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .arg("--tls-cert-file")
            .arg(&cert)
            .arg("--tls-key-file")
            .arg(&key)
            .arg("--tls-ca-cert-file")
            .arg(&ca_file)
            .args([
                "--tls-auth-clients",
                "no",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server with TLS");
        // Ready when the TLS port accepts connections.
        let started = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < SETTLE,
                "redis-server (TLS) did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        TlsRedis { child, port }
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_over_tls_with_a_private_ca_and_an_acl_password_from_a_file() {
    let dir = TempDir::new("rediss");
    let ca = TestCa::new("redis ca");
    let redis = TlsRedis::start(&dir, &ca, "acl-s3cret");
    let url = format!("rediss://leasehold@127.0.0.1:{}", redis.port);
    let ca_file = dir.write("trusted.pem", &ca.pem());
    let password_file = dir.write("password", "acl-s3cret\n");

    let mut settings = RedisSettings::new(&url);
    settings.ca_file = Some(ca_file.clone());
    settings.password_file = Some(password_file.clone());
    Store::connect(&settings, "tls:", Default::default())
        .await
        .expect("rediss:// with the CA file and the password file");

    // The real binary: a lease through it lands in the TLS Redis.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--listen", "127.0.0.1:0", "--redis", &url])
        .arg("--redis-ca")
        .arg(&ca_file)
        .arg("--redis-password-file")
        .arg(&password_file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let client = Client::connect(read_listen_url(&mut child)).await.unwrap();
    let guard = client.lease("over-tls").acquire().await.unwrap();
    assert!(client.describe("over-tls").await.unwrap().held);
    guard.release().await.unwrap();
    let _ = child.kill();
    let _ = child.wait();

    // Without the CA, or with a wrong password, the server refuses to start, and says why
    // without showing the password.
    let wrong = dir.write("wrong", "not-it\n");
    for (ca, password, expect) in [
        (None, &password_file, "cannot use Redis"),
        (Some(&ca_file), &wrong, "cannot use Redis"),
    ] {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"));
        command
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--redis",
                &url,
                "--redis-timeout",
                "1s",
            ])
            .arg("--redis-password-file")
            .arg(password);
        if let Some(ca) = ca {
            command.arg("--redis-ca").arg(ca);
        }
        let output = command.output().unwrap();
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expect), "{stderr}");
        assert!(
            !stderr.contains("acl-s3cret") && !stderr.contains("not-it"),
            "{stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_passes_a_token_and_tls_settings() {
    let redis = RedisServer::start();
    let ca = TestCa::new("cli ca");
    let dir = TempDir::new("cli");
    let tls = ca.server_files(&dir, None);
    let policy = AuthPolicy::load(&grants(&dir)).unwrap();
    let server = server_with(&redis, Some(tls), Some(policy)).await;
    let ca_file = dir.write("ca.pem", &ca.pem());
    let token_file = dir.write("token", "billing-secret\n");
    let url = format!("https://127.0.0.1:{}", server.addr.port());
    let leasehold = |args: &[&str], token_file: Option<&std::path::Path>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"));
        command
            .args(args)
            .args(["--server", &url, "--tls-ca"])
            .arg(&ca_file)
            .env_remove("LEASEHOLD_TOKEN");
        if let Some(token_file) = token_file {
            command.arg("--token-file").arg(token_file);
        }
        command.output().unwrap()
    };

    let ran = {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"));
        command
            .args(["run", "--server", &url, "--tls-ca"])
            .arg(&ca_file)
            .args([
                "billing/cli",
                "--",
                "sh",
                "-c",
                "echo $LEASEHOLD_FENCING_TOKEN",
            ])
            .env("LEASEHOLD_TOKEN", "billing-secret");
        command.output().unwrap()
    };
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(
        String::from_utf8_lossy(&ran.stdout)
            .trim()
            .parse::<u64>()
            .is_ok()
    );

    let outside = leasehold(&["status", "reports/x"], Some(&token_file));
    assert_eq!(outside.status.code(), Some(77));
    assert!(String::from_utf8_lossy(&outside.stderr).contains("not allowed"));
    let anonymous = leasehold(&["status", "billing/cli"], None);
    assert_eq!(anonymous.status.code(), Some(77));
    let health = leasehold(&["health"], None);
    assert!(
        health.status.success(),
        "{}",
        String::from_utf8_lossy(&health.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&health.stdout).trim(), "SERVING");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rereads_the_certificates() {
    let redis = RedisServer::start();
    let (old_ca, new_ca) = (TestCa::new("old ca"), TestCa::new("new ca"));
    let dir = TempDir::new("sighup");
    let TlsFiles { cert, key, .. } = old_ca.server_files(&dir, None);
    let server = ServerProcess::start(
        &redis,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let url = format!("https://127.0.0.1:{}", server.addr.port());
    let with_ca = |ca: &TestCa| ConnectOptions::new(&url).ca_pem(ca.pem().into_bytes());
    works(with_ca(&old_ca), "before").await.unwrap();

    // New files with the old modification times: only the signal can make the server look.
    let times: Vec<_> = [&cert, &key]
        .iter()
        .map(|path| std::fs::metadata(path).unwrap().modified().unwrap())
        .collect();
    let new = new_ca.server();
    dir.write("server.pem", &new.cert);
    dir.write("server.key", &new.key);
    for (path, time) in [&cert, &key].iter().zip(times) {
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(time)
            .unwrap();
    }
    signal(server.pid(), "HUP");
    let started = tokio::time::Instant::now();
    while works(with_ca(&new_ca), "after").await.is_err() {
        assert!(
            started.elapsed() < SETTLE,
            "SIGHUP did not reload the certificates"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The load tool most gRPC users reach for finds our methods by reflection alone (it asks
/// reflection `v1alpha`), with no `.proto` file: `ghz` as scripts/test.sh installs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ghz_calls_acquire_by_reflection_alone() {
    let ghz = std::env::var("LEASEHOLD_GHZ")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/target/go/bin/ghz").to_owned());
    assert!(
        std::path::Path::new(&ghz).exists(),
        "{ghz} is missing: scripts/test.sh installs ghz (or set LEASEHOLD_GHZ)"
    );
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let address = server.url().trim_start_matches("http://").to_owned();
    let output = tokio::process::Command::new(&ghz)
        .args([
            "--insecure",
            "--call",
            "leasehold.v1.LockService.Acquire",
            "--data",
            r#"{"name": "ghz-{{.RequestNumber}}", "ttl_ms": 60000}"#,
            "--total",
            "40",
            "--concurrency",
            "4",
            "--format",
            "json",
            &address,
        ])
        .output()
        .await
        .expect("run ghz");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("ghz's JSON report");
    assert_eq!(report["count"], 40, "{stdout}");
    assert_eq!(report["statusCodeDistribution"]["OK"], 40, "{stdout}");
    // Each call took its own lock, and Redis holds all forty.
    let redis = redis.client().await;
    for number in 0..40 {
        let key = lock_key(&format!("ghz-{number}"));
        let exists: u32 = fred::prelude::KeysInterface::exists(&redis, &key)
            .await
            .unwrap();
        assert_eq!(exists, 1, "{key}");
    }
}
