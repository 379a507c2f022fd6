//! The server's life: it refuses to start without Redis, takes its settings from the
//! environment, and once stopped leaves nothing behind: every lease let go, every task it started
//! finished, every Redis connection it opened closed, whatever it was doing when told to stop.

use crate::support;

use std::time::Duration;

use fred::prelude::ClientLike;
use leasehold_client::Client;
use support::*;
use tokio::time::Instant;

/// Connections Redis has open, from `CLIENT LIST` (the caller's own included).
async fn redis_connections(direct: &fred::prelude::Client) -> usize {
    let list: String = direct
        .custom(fred::cmd!("CLIENT"), vec!["LIST"])
        .await
        .expect("client list");
    list.lines().count()
}

/// Polls `condition` until it holds, failing the test after `limit`.
async fn eventually<F, Fut>(what: &str, limit: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    while !condition().await {
        assert!(started.elapsed() < limit, "{what} after {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_leaves_no_task_and_no_redis_connection_behind() {
    let redis = RedisServer::start();
    let direct = redis.client().await;
    let tasks = tokio::runtime::Handle::current().metrics();
    let (tasks_before, connections_before) =
        (tasks.num_alive_tasks(), redis_connections(&direct).await);

    let server = TestServer::start(&redis).await;
    let client = Client::connect(server.url()).await.unwrap();
    // Every kind of work the server keeps: a held lock, a waiter (waiting room), a leader and a
    // waiting candidate (campaigns), an observer (election hub).
    // Not resumable: released at shutdown, as a lease without a grace is.
    let held = client
        .lease("held")
        .auto_resume(false)
        .acquire()
        .await
        .unwrap();
    let mut raw = server.client().await;
    let mut waiter = LeaseStream::acquire(&mut raw, "held", 30_000, 60_000, "waiter").await;
    assert!(matches!(
        waiter.next().await,
        Ok(Some(leasehold::pb::lease_response::Event::Waiting(_)))
    ));
    let mut leader = client
        .campaign_with("vote", "a", Duration::from_secs(30), false)
        .await
        .unwrap();
    leader.elected().await.unwrap();
    let _candidate = client
        .campaign("vote", "b", Duration::from_secs(30))
        .await
        .unwrap();
    let mut observer = client.observe("vote").await.unwrap();
    observer.next().await.unwrap();
    assert!(
        redis_connections(&direct).await >= connections_before + 3,
        "a command connection and two subscriber connections while serving"
    );

    server.stop().await;

    let reason = held.lost().await;
    assert!(reason.contains("shutting down"), "{reason}");
    assert_eq!(get(&direct, &lock_key("held")).await, None);
    eventually(
        "the server's Redis connections are still open",
        Duration::from_secs(2),
        || async { redis_connections(&direct).await == connections_before },
    )
    .await;
    drop((held, waiter, leader, _candidate, observer, raw, client));
    eventually(
        "tasks of the stopped server are still running",
        Duration::from_secs(2),
        || async { tasks.num_alive_tasks() <= tasks_before },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_refuses_to_start_without_redis() {
    let unused = {
        let redis = RedisServer::start();
        redis.port()
    }; // Stopped: nothing listens there now.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(["--redis", &format!("redis://127.0.0.1:{unused}")])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot use Redis at redis://127.0.0.1:"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_reads_its_settings_from_the_environment() {
    let redis = RedisServer::start();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    for var in ["LEASEHOLD_REDIS", "LEASEHOLD_LISTEN"] {
        assert!(help.contains(var), "{help}");
    }
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("serve")
        .env("LEASEHOLD_REDIS", redis.url())
        .env("LEASEHOLD_LISTEN", "127.0.0.1:0")
        .env("LEASEHOLD_KEY_PREFIX", "from-env:")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let addr = line
        .trim()
        .strip_prefix("leasehold: listening on ")
        .unwrap()
        .to_owned();
    let mut client = connect(&format!("http://{addr}")).await;
    let mut lease = LeaseStream::acquire(&mut client, "job", 30_000, 0, "").await;
    let token = lease.acquired().await.token;
    let direct = redis.client().await;
    assert_eq!(get(&direct, "from-env:{job}:lock").await, Some(token));
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_written_to_a_file_carry_no_colour_codes() {
    let redis = RedisServer::start();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--listen", "127.0.0.1:0", "--redis", &redis.url()])
        .env("RUST_LOG", "leasehold=info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut logs = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    // The first lines: connected to Redis, then serving.
    while !line.contains("serving") {
        line.clear();
        let read = std::io::BufRead::read_line(&mut logs, &mut line).unwrap();
        assert!(read > 0, "the server stopped before serving");
        assert!(!line.contains('\x1b'), "escape codes in {line:?}");
        assert!(line.contains("INFO"), "{line:?}");
    }
    let _ = child.kill();
    let _ = child.wait();
}
