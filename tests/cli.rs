//! The `leasehold` command line as users run it: real binary, real server, real Redis.

use crate::support;

use std::process::Stdio;
use std::time::Duration;

use fred::prelude::KeysInterface;
use leasehold::server::ServerConfig;
use support::*;
use tokio::process::Command;
use tokio::time::Instant;

/// Exit statuses the command line documents (see `leasehold run --help`).
const EXIT_USAGE: i32 = 64;
const EXIT_NOT_ACQUIRED: u8 = 75;
const EXIT_LOST: u8 = 76;

pub(crate) fn leasehold(server: &TestServer) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    command
        .env("LEASEHOLD_SERVER", server.url())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

pub(crate) fn temp_file(name: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("leasehold-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

async fn exit_code(mut command: Command) -> i32 {
    let status = tokio::time::timeout(Duration::from_secs(30), command.status())
        .await
        .expect("leasehold run did not finish")
        .expect("run leasehold");
    status.code().expect("exit code")
}

/// Four `leasehold run ARGS -- sh -c SCRIPT` at once, each marking in a file when its command
/// starts and ends (`start|end PID NANOSECONDS` lines); all must exit 0. Returns the marks.
async fn four_runs_marking(server: &TestServer, marks: &str, args: &[&str], hold: &str) -> String {
    let marks = temp_file(marks);
    let script = format!(
        "echo start $$ $(date +%s%N) >> {0}; sleep {hold}; echo end $$ $(date +%s%N) >> {0}",
        marks.display()
    );
    let mut runs = Vec::new();
    for _ in 0..4 {
        let mut command = leasehold(server);
        command.args(args).args(["--", "sh", "-c", &script]);
        runs.push(tokio::spawn(exit_code(command)));
    }
    for run in runs {
        assert_eq!(run.await.unwrap(), 0);
    }
    std::fs::read_to_string(&marks).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_on_one_name_never_overlap() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let run = ["run", "--wait", "20s", "--ttl", "2s", "shared"];
    let text = four_runs_marking(&server, "marks", &run, "0.2").await;
    // (mark, pid, nanoseconds)
    let marks: Vec<(&str, &str, u128)> = text
        .lines()
        .map(|line| {
            let mut fields = line.split(' ');
            let mark = fields.next().unwrap();
            let pid = fields.next().unwrap();
            (mark, pid, fields.next().unwrap().parse().unwrap())
        })
        .collect();
    assert_eq!(marks.len(), 8, "{text}");
    let mut last_end = 0;
    for pair in marks.chunks(2) {
        let ((start, pid, started), (end, end_pid, ended)) = (pair[0], pair[1]);
        assert_eq!(
            (start, end, pid),
            ("start", "end", end_pid),
            "interleaved runs:\n{text}"
        );
        assert!(
            started >= last_end,
            "a run started before the previous one ended:\n{text}"
        );
        assert!(ended >= started);
        last_end = ended;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_statuses_and_the_fencing_token_reach_the_caller() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let out = temp_file("token");

    let mut command = leasehold(&server);
    command.args(["run", "job", "--", "sh", "-c"]);
    command.arg(format!(
        "echo $LEASEHOLD_FENCING_TOKEN $LEASEHOLD_LOCK > {}; exit 7",
        out.display()
    ));
    assert_eq!(exit_code(command).await, 7);
    let written = std::fs::read_to_string(&out).unwrap();
    let (token, lock) = written.trim().split_once(' ').unwrap();
    assert!(token.parse::<u64>().unwrap() > 0);
    assert_eq!(lock, "job");

    // Killed by a signal: 128 + the signal, as a shell reports it.
    let mut command = leasehold(&server);
    command.args(["run", "job", "--", "sh", "-c", "kill -KILL $$"]);
    assert_eq!(exit_code(command).await, 128 + 9);

    // The lock stays free afterwards.
    let mut client = server.client().await;
    let mut lease = LeaseStream::acquire(&mut client, "job", 30_000, 0, "").await;
    lease.acquired().await;

    // Taken, and no waiting: the command does not run.
    let mut command = leasehold(&server);
    command.args(["run", "job", "--", "sh", "-c", "exit 0"]);
    command.stderr(Stdio::piped());
    let output = command.output().await.unwrap();
    assert_eq!(output.status.code(), Some(EXIT_NOT_ACQUIRED.into()));
    // One sentence: who holds it, and when it frees at the latest (from the status details).
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with("leasehold: lock \"job\" is held by \"")
            && stderr.contains("(its lease ends within ")
            && stderr.lines().count() == 1,
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_stops_the_command_with_its_own_status() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let direct = redis.client().await;
    let marks = temp_file("lost");

    let mut command = leasehold(&server);
    command.args([
        "run", "--ttl", "300ms", "--grace", "1s", "job", "--", "sh", "-c",
    ]);
    // Records that it started, and that it was told to stop.
    command.arg(format!(
        "trap 'echo terminated >> {0}; exit 0' TERM; echo started >> {0}; while true; do sleep 0.05; done",
        marks.display()
    ));
    let run = tokio::spawn(exit_code(command));
    // Once the command runs, take the lock away behind the server's back.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&marks).map_or(true, |t| !t.contains("started")) {
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _: i64 = direct.del(lock_key("job")).await.unwrap();
    let deleted_at = Instant::now();
    assert_eq!(run.await.unwrap(), i32::from(EXIT_LOST));
    // Noticed at the next renewal (ttl/3) and stopped within the grace period.
    assert!(
        deleted_at.elapsed() < Duration::from_secs(2),
        "{:?}",
        deleted_at.elapsed()
    );
    assert!(
        std::fs::read_to_string(&marks)
            .unwrap()
            .contains("terminated")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_release_commands() {
    let (_redis, server, _, mut client) = setup().await;
    let acquired = client
        .acquire(leasehold::pb::AcquireRequest {
            name: "job".into(),
            ttl_ms: 30_000,
            holder: "cron@host".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();

    let mut command = leasehold(&server);
    command.args(["status", "--json", "job", "free-one"]);
    let output = command.output().await.unwrap();
    assert!(output.status.success());
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json[0]["name"], "job");
    assert_eq!(json[0]["held"], true);
    assert_eq!(json[0]["holder"], "cron@host");
    assert_eq!(json[0]["fencing_token"], acquired.fencing_token);
    assert_eq!(json[1]["held"], false);

    let mut command = leasehold(&server);
    command.args(["release", "job", &"0".repeat(32)]);
    assert_eq!(
        exit_code(command).await,
        1,
        "a wrong token must not release"
    );
    let mut command = leasehold(&server);
    command.args(["release", "job", &acquired.token]);
    let output = command.output().await.unwrap();
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "released \"job\"\n"
    );
    // The address as every other client takes it: host:port, no scheme.
    let mut command = leasehold(&server);
    let address = server.url().trim_start_matches("http://").to_owned();
    command
        .env("LEASEHOLD_SERVER", &address)
        .args(["status", "job"]);
    let output = command.output().await.unwrap();
    assert!(String::from_utf8_lossy(&output.stdout).contains("free"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_stops_the_command_and_releases_the_lock() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let direct = redis.client().await;
    let marks = temp_file("interrupt");

    let mut command = leasehold(&server);
    command.args(["run", "--grace", "2s", "job", "--", "sh", "-c"]);
    command.arg(format!(
        "trap 'echo terminated >> {0}; exit 0' TERM; echo started >> {0}; while true; do sleep 0.05; done",
        marks.display()
    ));
    let mut child = command.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&marks).map_or(true, |t| !t.contains("started")) {
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(get(&direct, &lock_key("job")).await.is_some());
    // Ctrl-C (to leasehold alone, as `kill -INT` would).
    signal(child.id().unwrap(), "INT");
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(
        std::fs::read_to_string(&marks)
            .unwrap()
            .contains("terminated")
    );
    assert_eq!(
        get(&direct, &lock_key("job")).await,
        None,
        "lock not released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_quick_runs_against_a_real_server() {
    let redis = RedisServer::start();
    let config = ServerConfig {
        echo: true,
        ..ServerConfig::default()
    };
    let server = TestServer::start_unhurried(&redis, config).await;
    let out = temp_file("bench.json");
    let mut command = leasehold(&server);
    command.args(["bench", "--quick", "--redis", &redis.url(), "--json"]);
    command.arg(&out).stdout(Stdio::piped());
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("| Lease stream |"));
    let figures: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let uncontended = &figures["uncontended"];
    let paths: Vec<&str> = uncontended["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "direct Redis (fred)",
            "Lease stream",
            "unary Acquire/Release",
            "gRPC echo: 1 stream, 2 round trips",
            "gRPC echo: 2 unary calls",
            "gRPC echo + Redis PING: 1 stream, 2 round trips",
            "gRPC echo + Redis PING: 2 unary calls"
        ]
    );
    for figure in uncontended["paths"].as_array().unwrap() {
        assert_eq!(figure["operations"], 200);
        assert!(figure["p50_us"].as_u64().unwrap() > 0);
    }
    // The service against the round trips it needs (Redis's and the transport's), per path.
    let floors = uncontended["against_redis_plus_transport"]
        .as_array()
        .unwrap();
    assert_eq!(floors.len(), 2);
    for floor in floors {
        assert!(floor["p50_ratio_to_redis_plus_transport"].as_f64().unwrap() > 0.0);
    }
    // And against the same echoes, each making the server ask Redis once.
    let floors = uncontended["against_echo_with_redis"].as_array().unwrap();
    assert_eq!(floors.len(), 2);
    for floor in floors {
        assert!(floor["p50_ratio"].as_f64().unwrap() > 0.0);
    }
    for path in ["stream_handoffs", "polling_handoffs"] {
        assert!(
            figures["contention"][1][path]["operations"]
                .as_u64()
                .unwrap()
                > 0,
            "no {path} measured"
        );
    }
    assert_eq!(figures["many_locks"]["operations"], 100);
    assert_eq!(figures["held_leases"][0]["leases"], 200);
    assert!(figures["held_leases"][0]["renewal_scripts_per_second"].is_number());
    let shapes: Vec<&str> = figures["primitives"]["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        shapes,
        [
            "Lease stream, plain lock",
            "Lease stream, permit of 4",
            "Lease stream, shared"
        ]
    );
    assert_eq!(figures["primitives"]["paths"][1]["operations"], 200);
}

/// Runs `leasehold ARGS` against `server` and returns (exit code, stderr).
async fn failing(server: &str, args: &[&str]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .env("LEASEHOLD_SERVER", server)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run leasehold");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code().expect("exit code"), stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_arguments_exit_with_usage_and_one_plain_sentence() {
    // Checked before connecting: no server needs to be there.
    let nobody = format!("http://127.0.0.1:{}", free_port());
    let cases: [(&[&str], &str); 4] = [
        (
            &["run", "--ttl", "50ms", "job", "--", "true"],
            "leasehold: ttl 50ms is below the 100ms minimum\n",
        ),
        (
            &["run", "--ttl", "2h", "job", "--", "true"],
            "leasehold: ttl 2h is above the 1h maximum\n",
        ),
        (
            &["run", "--wait", "90m", "job", "--", "true"],
            "leasehold: wait 1h 30m is above the 1h maximum\n",
        ),
        (
            &["run", "", "--", "true"],
            "leasehold: lock name is empty\n",
        ),
    ];
    for (args, expected) in cases {
        let (code, stderr) = failing(&nobody, args).await;
        assert_eq!((code, stderr.as_str()), (EXIT_USAGE, expected), "{args:?}");
    }
    // Refused by the argument parser: the same status and one sentence, not a page of usage.
    let parsed: [(&[&str], &str); 4] = [
        (
            &["run", "--ttl", "10", "job", "--", "true"],
            "time unit needed",
        ),
        (
            &["run", "--ttl", "abc", "job", "--", "true"],
            "'abc' for '--ttl",
        ),
        (
            &["run", "--shared", "--limit", "3", "job", "--", "true"],
            "'--shared' cannot be used with '--limit",
        ),
        (&["status", "--bogus"], "unexpected argument '--bogus'"),
    ];
    for (args, expected) in parsed {
        let (code, stderr) = failing(&nobody, args).await;
        assert_eq!(code, EXIT_USAGE, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("leasehold: ") && stderr.lines().count() == 1,
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }

    // Refused by the server: the same status, in the server's words, without gRPC's wrapping.
    let (_redis, server, _, _) = setup().await;
    let (code, stderr) = failing(&server.url(), &["status", &"n".repeat(300)]).await;
    assert_eq!(code, EXIT_USAGE, "{stderr}");
    assert_eq!(
        stderr,
        "leasehold: lock name is 300 bytes, over the limit of 256\n"
    );
    // An unreachable server is not a usage error.
    let (code, stderr) = failing(&nobody, &["status", "job"]).await;
    assert_eq!(code, 69, "{stderr}");
    assert!(
        stderr.starts_with("leasehold: cannot connect to"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_without_names_lists_every_held_lock() {
    let (_redis, server, _, mut client) = setup().await;
    let names = ["nightly-report", "a b/{x}:*", "élan"];
    let mut held = Vec::new();
    for name in names {
        held.push(LeaseStream::acquire(&mut client, name, 30_000, 0, "cron@host").await);
    }
    let mut tokens = Vec::new();
    for lease in &mut held {
        tokens.push(lease.acquired().await.fencing_token);
    }
    // A lock that was held and let go is not listed.
    let mut gone = LeaseStream::acquire(&mut client, "gone", 30_000, 0, "").await;
    gone.acquired().await;
    assert!(gone.release().await);

    let mut command = leasehold(&server);
    command.args(["status", "--json"]);
    let output = command.output().await.unwrap();
    assert!(output.status.success());
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let listed = json.as_array().expect("a JSON array");
    let mut seen: Vec<(&str, u64)> = listed
        .iter()
        .map(|lock| {
            assert_eq!(lock["held"], true);
            assert_eq!(lock["holder"], "cron@host");
            let name = lock["name"].as_str().expect("name");
            (name, lock["fencing_token"].as_u64().expect("token"))
        })
        .collect();
    seen.sort();
    let mut expected: Vec<(&str, u64)> = names.iter().copied().zip(tokens).collect();
    expected.sort();
    assert_eq!(seen, expected);

    let mut command = leasehold(&server);
    command.arg("status");
    let output = command.output().await.unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(text.contains("a b/{x}:*\theld by cron@host"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_with_a_limit_overlap_at_most_that_many() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let run = ["run", "--limit", "2", "--wait", "20s", "pool"];
    let text = four_runs_marking(&server, "permits", &run, "1").await;
    let mut events: Vec<(u128, i32)> = text
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let step = if fields[0] == "start" { 1 } else { -1 };
            (fields[2].parse().unwrap(), step)
        })
        .collect();
    assert_eq!(events.len(), 8, "{text}");
    // At one instant, ends before starts: a run that ended let the next one in.
    events.sort_unstable();
    let (mut running, mut most) = (0, 0);
    for (_, step) in events {
        running += step;
        most = most.max(running);
    }
    assert_eq!(most, 2, "runs at once, with --limit 2:\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_every_holder_and_shared_runs_share() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let client = leasehold_client::Client::connect(server.url())
        .await
        .unwrap();
    let mut permits = Vec::new();
    for holder in ["encoder-a", "encoder-b"] {
        let lease = client.lease("pool").limit(2).holder(holder);
        permits.push(lease.acquire().await.unwrap());
    }

    let mut command = leasehold(&server);
    command.args(["status", "pool"]);
    let text = String::from_utf8(command.output().await.unwrap().stdout).unwrap();
    assert!(text.contains("pool\t2 held of limit 2"), "{text}");
    assert!(text.contains("held by encoder-a") && text.contains("held by encoder-b"));
    let mut command = leasehold(&server);
    command.args(["status", "--json", "pool"]);
    let json: serde_json::Value =
        serde_json::from_slice(&command.output().await.unwrap().stdout).unwrap();
    assert_eq!(json[0]["limit"], 2);
    assert_eq!(json[0]["holders"][1]["holder"], "encoder-b");
    assert_eq!(
        json[0]["holders"][1]["fencing_token"],
        permits[1].fencing_token()
    );

    // Full: a third run does not start; another limit is refused as a usage error.
    let mut command = leasehold(&server);
    command.args(["run", "--limit", "2", "pool", "--", "true"]);
    assert_eq!(exit_code(command).await, i32::from(EXIT_NOT_ACQUIRED));
    let mut command = leasehold(&server);
    command.args(["run", "--limit", "3", "pool", "--", "true"]);
    command.stderr(Stdio::piped());
    let output = command.output().await.unwrap();
    assert_eq!(output.status.code(), Some(EXIT_USAGE));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("limit 2") && stderr.contains("limit 3"),
        "{stderr}"
    );

    // Readers run beside a reader, not beside a writer.
    let _reader = client.lease("catalog").shared().acquire().await.unwrap();
    let mut command = leasehold(&server);
    command.args(["run", "--shared", "catalog", "--", "true"]);
    assert_eq!(exit_code(command).await, 0);
    let _writer = client.lease("schema").acquire().await.unwrap();
    let mut command = leasehold(&server);
    command.args(["run", "--shared", "schema", "--", "true"]);
    assert_eq!(exit_code(command).await, i32::from(EXIT_NOT_ACQUIRED));
}

/// The README's "From the shell" block, run line by line exactly as written (with the server's
/// address in `LEASEHOLD_SERVER` and the binary first on `PATH`, as the README has the reader set
/// them up): every line succeeds and says what the README says it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_shell_commands_run_as_written() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let section = readme
        .split("\n## From the shell\n")
        .nth(1)
        .expect("a From the shell section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a sh block in it");
    let lines: Vec<&str> = block
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    assert!(lines.len() >= 4, "{block}");
    let (_redis, server, _, _) = setup().await;
    let bin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_leasehold"))
        .parent()
        .expect("the binary's folder");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut outputs = Vec::new();
    for line in &lines {
        let output = Command::new("sh")
            .args(["-c", line])
            .env("PATH", &path)
            .env("LEASEHOLD_SERVER", server.url())
            .stdin(Stdio::null())
            .output()
            .await
            .expect("run sh");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "{line}\n{stdout}{stderr}");
        outputs.push((stdout, stderr));
    }
    assert!(
        outputs[0]
            .0
            .starts_with("holding nightly-report, fencing token "),
        "{:?}",
        outputs[0]
    );
    // Each run released its lock: `status` lists none, and says so to a person.
    let listed = lines
        .iter()
        .position(|line| line.split('#').next().map(str::trim) == Some("leasehold status"))
        .expect("a bare `leasehold status` line");
    assert_eq!(outputs[listed].0, "", "{:?}", outputs[listed]);
    assert_eq!(outputs[listed].1, "leasehold: no locks are held\n");
    let one = lines
        .iter()
        .position(|line| line.starts_with("leasehold status nightly-report"))
        .expect("a `leasehold status nightly-report` line");
    assert_eq!(outputs[one].0, "nightly-report\tfree\n");
    // `elect` ran its command as leader, then resigned: nobody leads.
    let elect = lines
        .iter()
        .position(|line| line.starts_with("leasehold elect scheduler"))
        .expect("a `leasehold elect scheduler` line");
    assert!(
        outputs[elect].0.starts_with("leading scheduler, term "),
        "{:?}",
        outputs[elect]
    );
    assert!(
        outputs[elect + 1].0.starts_with("scheduler\tno leader\n"),
        "{:?}",
        outputs[elect + 1]
    );
}

/// Whether process `pid` no longer runs: no such process (ESRCH), or one that has exited and
/// waits to be reaped (a zombie: an orphan's new parent, init in some containers, may never
/// reap it; it runs nothing).
pub(crate) fn gone(pid: i32) -> bool {
    use nix::errno::Errno;
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Err(Errno::ESRCH) => true,
        _ => std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        }),
    }
}

/// Waits until `pid` is [`gone`]; panics at `deadline`. Returns when it was seen gone.
pub(crate) async fn until_gone(pid: i32, deadline: Instant, what: &str) -> Instant {
    loop {
        if gone(pid) {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "{what} (pid {pid}) still runs");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The pid a command wrote to `path` (a whole line), once written; panics after 10 s.
pub(crate) async fn pid_in(path: &std::path::Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if let Some(line) = text.strip_suffix('\n') {
            return line.trim().parse().expect("a pid");
        }
        assert!(
            Instant::now() < deadline,
            "no pid written to {}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `leasehold run ARGS -- sh -c SCRIPT`, started; `{pids}` in SCRIPT stands for a pid file.
/// Returns the child and the pid file.
fn run_tree(
    server: &TestServer,
    file: &str,
    args: &[&str],
    script: &str,
) -> (tokio::process::Child, std::path::PathBuf) {
    let pids = temp_file(file);
    let mut command = leasehold(server);
    command.arg("run").args(args).args(["--", "sh", "-c"]);
    command.arg(script.replace("{pids}", &pids.display().to_string()));
    (command.spawn().expect("leasehold run"), pids)
}

pub(crate) async fn exited(run: &mut tokio::process::Child) -> Option<i32> {
    within(Duration::from_secs(30), "leasehold run to exit", run.wait())
        .await
        .expect("wait")
        .code()
}

/// The issue's reproduction: a job whose work is a grandchild (`sh -c 'sleep 300 & wait'`).
/// When the lease is lost, the whole tree gets SIGTERM, not just the shell: the grandchild is
/// gone within --grace, so no copy of the job runs on once another holder may have started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_stops_the_commands_whole_process_tree() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let direct = redis.client().await;
    let grace = Duration::from_secs(2);
    let args = ["--ttl", "1s", "--grace", "2s", "tree-job"];
    let script = "sleep 300 & echo $! > {pids}; wait";
    let (mut run, pids) = run_tree(&server, "tree-lost", &args, script);
    let grandchild = pid_in(&pids).await;
    assert!(!gone(grandchild));

    let _: i64 = direct.del(lock_key("tree-job")).await.unwrap();
    let lost_at = Instant::now();
    until_gone(
        grandchild,
        lost_at + grace,
        "the grandchild, within --grace of the loss",
    )
    .await;
    assert_eq!(exited(&mut run).await, Some(i32::from(EXIT_LOST)));
}

/// SIGTERM to `run` stops the whole tree before `run` exits (143) and lets the lock go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_to_run_stops_the_whole_tree() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let direct = redis.client().await;
    let args = ["--grace", "10s", "tree-job"];
    let script = "sleep 300 & echo $! > {pids}; wait";
    let (mut run, pids) = run_tree(&server, "tree-term", &args, script);
    let grandchild = pid_in(&pids).await;

    signal(run.id().expect("pid"), "TERM");
    assert_eq!(exited(&mut run).await, Some(143));
    assert!(gone(grandchild), "the grandchild outlived leasehold run");
    assert_eq!(get(&direct, &lock_key("tree-job")).await, None);
}

/// `run` killed outright (SIGKILL: it runs no code of its own): its watchdog stops the command's
/// group, and SIGKILLs it by the end of the lease's last confirmed validity (within the TTL of
/// the kill) even though the grandchild ignores SIGTERM and --grace is far longer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_run_leaves_no_process_of_its_command_past_the_lease() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let ttl = Duration::from_secs(2);
    let args = ["--ttl", "2s", "--grace", "60s", "tree-job"];
    let script = "(trap '' TERM; exec sh -c 'echo $$ > {pids}; exec sleep 300') & wait";
    let (mut run, pids) = run_tree(&server, "tree-kill", &args, script);
    let grandchild = pid_in(&pids).await;

    let killed_at = Instant::now();
    signal(run.id().expect("pid"), "KILL");
    assert_eq!(exited(&mut run).await, None, "killed by a signal");
    let gone_at = until_gone(
        grandchild,
        killed_at + ttl,
        "the grandchild, within the TTL of the kill",
    )
    .await;
    eprintln!(
        "grandchild gone {:?} after run was killed",
        gone_at - killed_at
    );
}

/// A grandchild that ignores SIGTERM gets SIGKILL once --grace has passed, not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grandchild_ignoring_sigterm_gets_sigkill_after_the_grace() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let grace = Duration::from_secs(1);
    let args = ["--grace", "1s", "tree-job"];
    let script = "(trap '' TERM; exec sh -c 'echo $$ > {pids}; exec sleep 300') & wait";
    let (mut run, pids) = run_tree(&server, "tree-stubborn", &args, script);
    let grandchild = pid_in(&pids).await;

    let signalled_at = Instant::now();
    signal(run.id().expect("pid"), "TERM");
    let gone_at = until_gone(
        grandchild,
        signalled_at + grace + Duration::from_secs(2),
        "the grandchild after --grace",
    )
    .await;
    assert!(
        gone_at - signalled_at >= grace,
        "killed before --grace: {:?}",
        gone_at - signalled_at
    );
    assert_eq!(exited(&mut run).await, Some(143));
}

/// A command that ends leaving a process of its group running (it would go on without the
/// lock): `run` stops it before releasing, and exits with the command's own status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_a_command_leaves_behind_are_stopped_before_the_release() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let args = ["--grace", "10s", "tree-job"];
    let script = "sleep 300 & echo $! > {pids}; exit 3";
    let (mut run, pids) = run_tree(&server, "tree-left", &args, script);
    let grandchild = pid_in(&pids).await;
    assert_eq!(exited(&mut run).await, Some(3));
    assert!(gone(grandchild), "the leftover outlived leasehold run");
}

/// With --no-resume the server frees the lock the moment a killed `run`'s connection drops, so
/// the watchdog does not wait for the validity: SIGKILL follows SIGTERM at once, long before
/// the TTL or --grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_resuming_a_killed_runs_command_is_killed_at_once() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let args = ["--no-resume", "--ttl", "30s", "--grace", "60s", "tree-job"];
    let script = "(trap '' TERM; exec sh -c 'echo $$ > {pids}; exec sleep 300') & wait";
    let (mut run, pids) = run_tree(&server, "tree-no-resume", &args, script);
    let grandchild = pid_in(&pids).await;

    let killed_at = Instant::now();
    signal(run.id().expect("pid"), "KILL");
    assert_eq!(exited(&mut run).await, None, "killed by a signal");
    let deadline = killed_at + Duration::from_secs(2);
    until_gone(grandchild, deadline, "the grandchild, at once").await;
}
