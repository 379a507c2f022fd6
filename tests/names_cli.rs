//! `leasehold run` on several names, `run --max-hold`, and `leasehold check`, as users run them:
//! real binary, real server, real Redis (issue 41; the rest of the command line: tests/cli.rs).

use crate::cli::{leasehold, temp_file};
use crate::support;

use std::time::Duration;

use leasehold_client::Client;
use support::*;
use tokio::time::Instant;

/// Waits (within 10 s) until `path` exists, and returns what it holds.
async fn written(path: &std::path::Path, what: &str) -> String {
    within(EVENT_TIMEOUT, what, async {
        loop {
            match std::fs::read_to_string(path) {
                Ok(text) if !text.is_empty() => return text,
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    })
    .await
}

/// The command's output: exit status, stdout and stderr.
async fn finished(command: &mut tokio::process::Command) -> (i32, String, String) {
    let output = within(
        Duration::from_secs(30),
        "leasehold's exit",
        command.output(),
    )
    .await
    .expect("run leasehold");
    (
        output.status.code().expect("an exit status"),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_on_two_names_holds_both_and_gives_each_fencing_token() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let client = Client::connect(server.url()).await.unwrap();
    let (out, go) = (temp_file("tokens"), temp_file("go"));
    // The command writes its environment, then runs until told to end (bounded by its own
    // count, should the test die).
    let script = format!(
        "printf '%s\\n--\\n%s' \"$LEASEHOLD_FENCING_TOKENS\" \"$LEASEHOLD_FENCING_TOKEN\" > {out}.tmp; \
         mv {out}.tmp {out}; i=0; while [ ! -e {go} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done",
        out = out.display(),
        go = go.display()
    );
    let mut run = leasehold(&server);
    run.args(["run", "a", "b", "--", "sh", "-c", &script]);
    let run = tokio::spawn(async move { finished(&mut run).await });
    let text = written(&out, "the command's environment").await;
    let (tokens, first) = text.split_once("\n--\n").expect("both variables");
    // While it runs, both names are held, each under the fencing token the command was given.
    let mut given = Vec::new();
    for line in tokens.lines() {
        let (name, token) = line.rsplit_once('=').expect("name=token");
        given.push((
            name.to_owned(),
            token.parse::<u64>().expect("a fencing token"),
        ));
    }
    let names: Vec<&str> = given.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["a", "b"], "{tokens:?}");
    assert_eq!(first.trim(), given[0].1.to_string());
    for (name, token) in &given {
        let described = client.describe(name).await.unwrap();
        assert!(described.held, "{name} not held while the command runs");
        assert_eq!(described.fencing_token, *token, "{name}");
    }
    std::fs::write(&go, "").unwrap();
    let (code, _, stderr) = run.await.unwrap();
    assert_eq!(code, 0, "{stderr}");
    for name in ["a", "b"] {
        assert!(
            !client.describe(name).await.unwrap().held,
            "{name} left held"
        );
    }

    // One of them taken: nothing runs, and the message names the one taken.
    let taken = client.lease("b").holder("other").acquire().await.unwrap();
    let mut refused = leasehold(&server);
    refused.args(["run", "a", "b", "--", "true"]);
    let (code, _, stderr) = finished(&mut refused).await;
    assert_eq!(code, 75, "{stderr}");
    assert!(
        stderr.contains("lock \"b\" is held by \"other\""),
        "{stderr}"
    );
    assert!(!client.describe("a").await.unwrap().held, "a left held");
    assert!(taken.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_stops_its_command_at_the_max_hold_with_76() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let mut run = leasehold(&server);
    run.args([
        "run",
        "--ttl",
        "1s",
        "--max-hold",
        "1s",
        "--grace",
        "1s",
        "job",
        "--",
        "sleep",
        "30",
    ]);
    let started = Instant::now();
    let (code, _, stderr) = finished(&mut run).await;
    let took = started.elapsed();
    assert_eq!(code, 76, "{stderr}");
    assert!(
        stderr.contains("the max hold of 1s was reached"),
        "{stderr}"
    );
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(5),
        "{took:?}"
    );
    // Refused before anything is asked: a max hold below the TTL, a name twice, a semaphore.
    for args in [
        &["--max-hold", "10s", "job"][..],
        &["job", "job"],
        &["--limit", "2", "a", "b"],
    ] {
        let mut refused = leasehold(&server);
        refused.arg("run").args(args).args(["--", "true"]);
        let (code, _, stderr) = finished(&mut refused).await;
        assert_eq!(code, 64, "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_exits_0_for_the_current_fencing_token_and_1_otherwise() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let client = Client::connect(server.url()).await.unwrap();
    let check = |args: &[&str]| {
        let mut command = leasehold(&server);
        command.arg("check").args(args);
        command
    };
    let held = client.lease("job").acquire().await.unwrap();
    let fence = held.fencing_token().to_string();
    let (code, stdout, _) = finished(&mut check(&["job", &fence])).await;
    assert_eq!(
        (code, stdout.trim()),
        (
            0,
            format!("\"job\": fencing token {fence} is current").as_str()
        )
    );

    let stale = (held.fencing_token() - 1).to_string();
    let (code, stdout, _) = finished(&mut check(&["job", &stale])).await;
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains(&format!("the current fencing token is {fence}")),
        "{stdout}"
    );
    let (code, stdout, _) = finished(&mut check(&["--json", "job", &stale])).await;
    assert_eq!(code, 1);
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["state"], "superseded");
    assert_eq!(json["current_fencing_token"], held.fencing_token());

    assert!(held.release().await.unwrap());
    let (code, stdout, _) = finished(&mut check(&["job", &fence])).await;
    assert_eq!(code, 1);
    assert!(stdout.contains("is free"), "{stdout}");
    // No server: the usual 69.
    let mut unreachable = check(&["job", &fence]);
    unreachable.env("LEASEHOLD_SERVER", "http://127.0.0.1:1");
    assert_eq!(finished(&mut unreachable).await.0, 69);
}
