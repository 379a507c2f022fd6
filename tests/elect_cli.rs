//! `leasehold elect`, `elect --observe` and `leader` as users run them: the real binary, a real
//! server and Redis; commands that mark in a file when they start and end.

use crate::cli::{exited, gone, leasehold, pid_in, temp_file, until_gone};
use crate::support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fred::prelude::KeysInterface;
use support::*;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::Instant;

const EXIT_LOST: i32 = 76;

/// The key of an election's leadership lease, and its line of candidates.
fn lease_key(election: &str) -> String {
    format!("leasehold:election:{{{election}}}:lock")
}

fn line_key(election: &str) -> String {
    format!("leasehold:election:{{{election}}}:line")
}

/// Waits (bounded) until `path` holds a line starting with `prefix`; returns that line.
async fn marked(path: &Path, prefix: &str) -> String {
    within(
        EVENT_TIMEOUT,
        &format!("{prefix:?} in {}", path.display()),
        async {
            loop {
                let text = std::fs::read_to_string(path).unwrap_or_default();
                if let Some(line) = text.lines().find(|line| line.starts_with(prefix)) {
                    return line.to_owned();
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        },
    )
    .await
}

/// The leadership lease of `election` as Redis holds it.
async fn lease(direct: &fred::prelude::Client, election: &str) -> Option<LeaseValue> {
    let value: Option<String> = direct.get(lease_key(election)).await.unwrap();
    value.map(|value| lease_value(&value))
}

/// The `leasehold` binary, given `servers` (replicas, comma-separated).
fn leasehold_at(servers: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    command
        .env("LEASEHOLD_SERVER", servers)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// `leasehold elect ARGS NAME -- sh -c SCRIPT`, started.
fn elect(command: Command, args: &[&str], name: &str, script: &str) -> Child {
    let mut command = command;
    command
        .arg("elect")
        .args(args)
        .args([name, "--", "sh", "-c", script]);
    command.spawn().expect("leasehold elect")
}

/// `leasehold leader NAME`: its exit status and stdout.
async fn leader(server: &TestServer, name: &str) -> (i32, String) {
    let mut command = leasehold(server);
    command.args(["leader", name]);
    let output = within(EVENT_TIMEOUT, "leasehold leader", command.output())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    (output.status.code().expect("an exit status"), stdout)
}

/// `leasehold elect --observe NAME`, its lines read as they come.
struct Observer {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Observer {
    fn start(server: &TestServer, name: &str) -> Self {
        let mut command = leasehold(server);
        command
            .args(["elect", "--observe", name])
            .stdout(Stdio::piped());
        let mut child = command.spawn().expect("leasehold elect --observe");
        let stdout = child.stdout.take().expect("stdout");
        Observer {
            child,
            lines: BufReader::new(stdout).lines(),
        }
    }

    async fn next(&mut self) -> String {
        within(
            EVENT_TIMEOUT,
            "a line of elect --observe",
            self.lines.next_line(),
        )
        .await
        .unwrap()
        .expect("elect --observe ended")
    }
}

/// A job for `elect` marked `label`: it notes its start (with the election and term it was
/// given) and its end in `marks`, runs until `marks`'s `go-LABEL` file exists, and exits 3.
fn job(marks: &Path, label: &str) -> (String, PathBuf) {
    let go = marks.with_extension(format!("go-{label}"));
    let _ = std::fs::remove_file(&go);
    let script = format!(
        "echo start {label} $LEASEHOLD_ELECTION $LEASEHOLD_TERM >> {marks}; \
         until [ -e {go} ]; do sleep 0.02; done; echo end {label} >> {marks}; exit 3",
        marks = marks.display(),
        go = go.display()
    );
    (script, go)
}

/// Two `elect`s on one election: one runs its command at a time, given the election and its
/// term; when the leader's command exits 3 its `elect` exits 3 and the other is elected with a
/// larger term. `leader` and `elect --observe` follow it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_elects_take_turns_and_exit_with_their_commands_status() {
    let (_redis, server, direct, _) = setup().await;
    let mut observer = Observer::start(&server, "vote");
    assert_eq!(observer.next().await, "vote\tno leader");
    assert_eq!(
        leader(&server, "vote").await,
        (1, "vote\tno leader\n".into())
    );

    let marks = temp_file("elect-turns");
    let mut elects = Vec::new();
    let mut gos = Vec::new();
    for label in ["a", "b"] {
        let (script, go) = job(&marks, label);
        elects.push(elect(
            leasehold(&server),
            &["--value", label, "--ttl", "2s"],
            "vote",
            &script,
        ));
        gos.push(go);
    }
    let first_start = marked(&marks, "start").await;
    wait_for_line(&direct, &line_key("vote"), 1).await;
    let fields: Vec<&str> = first_start.split(' ').collect();
    let (first, first_term) = (fields[1], fields[3].parse::<u64>().unwrap());
    assert_eq!(fields[2], "vote", "LEASEHOLD_ELECTION: {first_start}");
    let led = format!("vote\tled by {first}\tterm {first_term}");
    assert_eq!(leader(&server, "vote").await, (0, format!("{led}\n")));
    assert_eq!(observer.next().await, led);

    let (first_index, second) = match first {
        "a" => (0, "b"),
        _ => (1, "a"),
    };
    std::fs::write(&gos[first_index], b"").unwrap();
    assert_eq!(exited(&mut elects[first_index]).await, Some(3));
    let second_start = marked(&marks, &format!("start {second}")).await;
    let second_term: u64 = second_start.split(' ').nth(3).unwrap().parse().unwrap();
    assert!(second_term > first_term, "{first_term} then {second_term}");
    let led = format!("vote\tled by {second}\tterm {second_term}");
    let mut seen = observer.next().await;
    if seen == "vote\tno leader" {
        seen = observer.next().await; // between the resign and the next election
    }
    assert_eq!(seen, led);

    std::fs::write(&gos[1 - first_index], b"").unwrap();
    assert_eq!(exited(&mut elects[1 - first_index]).await, Some(3));
    assert_eq!(observer.next().await, "vote\tno leader");
    assert_eq!(
        leader(&server, "vote").await,
        (1, "vote\tno leader\n".into())
    );
    // Never both at once: each started after the other ended.
    assert_eq!(
        std::fs::read_to_string(&marks).unwrap(),
        format!(
            "start {first} vote {first_term}\nend {first}\nstart {second} vote {second_term}\nend {second}\n"
        )
    );
    // An observation ends when interrupted, with 0.
    signal(observer.child.id().expect("pid"), "TERM");
    assert_eq!(exited(&mut observer.child).await, Some(0));
}

/// The leadership lost (its lease deleted behind the server's back: the server tells `lost` at
/// its next renewal): the command gets SIGTERM and `elect` exits 76.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_leadership_stops_the_command_and_exits_76() {
    let (_redis, server, direct, _) = setup().await;
    let marks = temp_file("elect-lost");
    let script = format!(
        "trap 'echo terminated >> {0}; exit 0' TERM; echo started >> {0}; \
         while true; do sleep 0.05; done",
        marks.display()
    );
    let args = ["--ttl", "600ms", "--grace", "2s"];
    let mut child = elect(leasehold(&server), &args, "fragile", &script);
    marked(&marks, "started").await;
    let _: i64 = direct.del(lease_key("fragile")).await.unwrap();
    let deleted_at = Instant::now();
    assert_eq!(exited(&mut child).await, Some(EXIT_LOST));
    // Told at the next renewal (a third of the TTL), then stopped at once (it obeys SIGTERM).
    assert!(
        deleted_at.elapsed() < Duration::from_secs(2),
        "{:?}",
        deleted_at.elapsed()
    );
    marked(&marks, "terminated").await;
}

/// `elect` killed outright: its watchdog stops the command's group, a grandchild that ignores
/// SIGTERM included, by the end of the leadership's last confirmed validity (within the TTL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_elect_leaves_no_process_of_its_command_past_the_leadership() {
    let (_redis, server, _, _) = setup().await;
    let pids = temp_file("elect-kill");
    let script = format!(
        "(trap '' TERM; exec sh -c 'echo $$ > {}; exec sleep 300') & wait",
        pids.display()
    );
    let ttl = Duration::from_secs(2);
    let args = ["--ttl", "2s", "--grace", "60s"];
    let mut child = elect(leasehold(&server), &args, "watched", &script);
    let grandchild = pid_in(&pids).await;
    assert!(!gone(grandchild));

    let killed_at = Instant::now();
    signal(child.id().expect("pid"), "KILL");
    assert_eq!(exited(&mut child).await, None, "killed by a signal");
    until_gone(
        grandchild,
        killed_at + ttl,
        "the grandchild, within the TTL",
    )
    .await;
}

/// Refused arguments are usage errors (64); an `elect` interrupted while in line leaves the
/// line (143) without running its command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_and_an_interrupt_while_in_line() {
    let (_redis, server, direct, _) = setup().await;
    for args in [
        vec!["elect", "job"],
        vec!["elect", "--observe", "job", "--", "true"],
        vec!["elect", "--ttl", "10ms", "job", "--", "true"],
        vec!["leader", ""],
    ] {
        let mut command = leasehold(&server);
        command.args(&args).stderr(Stdio::piped());
        let output = within(EVENT_TIMEOUT, "a refusal", command.output())
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    }

    let client = leasehold_client::Client::connect(server.url())
        .await
        .unwrap();
    let mut holder = client
        .campaign("busy", "holder", Duration::from_secs(5))
        .await
        .unwrap();
    within(EVENT_TIMEOUT, "elected", holder.elected())
        .await
        .unwrap();
    let marks = temp_file("elect-in-line");
    let script = format!("echo ran >> {}", marks.display());
    let mut waiting = elect(leasehold(&server), &[], "busy", &script);
    wait_for_line(&direct, &line_key("busy"), 1).await;
    signal(waiting.id().expect("pid"), "TERM");
    assert_eq!(exited(&mut waiting).await, Some(143));
    wait_for_line(&direct, &line_key("busy"), 0).await;
    assert!(!marks.exists(), "the command ran without leading");
    assert!(holder.resign().await.unwrap());
}

/// The replica holding `elect`'s leadership is stopped for a deploy (SIGTERM): the leadership
/// moves to the other replica of `--server` with its term, and the command runs on, unstopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elects_command_runs_on_when_its_server_stops() {
    let redis = RedisServer::start();
    let mut first = ServerProcess::start(&redis, &[]);
    let second = ServerProcess::start(&redis, &[]);
    let marks = temp_file("elect-handover");
    let (script, go) = job(&marks, "a");
    let direct = redis.client().await;
    let servers = format!("{},{}", first.url(), second.url());
    let args = ["--ttl", "2s", "--value", "a"];
    let mut child = elect(leasehold_at(&servers), &args, "deploy", &script);
    let started = marked(&marks, "start a").await;
    let term: u64 = started.split(' ').nth(3).unwrap().parse().unwrap();
    let attached = lease(&direct, "deploy")
        .await
        .expect("the leadership's lease");
    assert_eq!(attached.fencing_token, term);

    assert!(first.stop().await.success());
    // Resumed on the second replica: the same lease, attached once more.
    within(EVENT_TIMEOUT, "the leadership resumed", async {
        loop {
            let now = lease(&direct, "deploy").await.expect("the lease kept");
            assert_eq!(
                (now.token.as_str(), now.fencing_token),
                (attached.token.as_str(), term)
            );
            if now.attachment > attached.attachment {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let client = leasehold_client::Client::connect(second.url())
        .await
        .unwrap();
    let leader = client.leader("deploy").await.unwrap().expect("a leader");
    assert_eq!((leader.term, leader.value.as_slice()), (term, &b"a"[..]));
    // Still the one command, unstopped, until it is done.
    assert!(child.try_wait().unwrap().is_none(), "elect exited");
    std::fs::write(&go, b"").unwrap();
    assert_eq!(exited(&mut child).await, Some(3));
    assert_eq!(
        std::fs::read_to_string(&marks).unwrap(),
        format!("start a deploy {term}\nend a\n")
    );
    assert_eq!(client.leader("deploy").await.unwrap(), None);
}
