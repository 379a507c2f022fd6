//! Watch: a lock's state on every change, from pub/sub, on real servers over a real Redis.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use leasehold_client::pb::DescribeResponse;
use leasehold_client::watch::same_state;
use leasehold_client::{Client, Watch};
use support::*;
use tokio::time::Instant;
use tokio_stream::StreamExt;

/// How soon a change must be reported (the bound for the clients).
const REPORTED: Duration = Duration::from_secs(2);

/// The next state of `watch`, within [`REPORTED`].
async fn next_state(watch: &mut Watch) -> DescribeResponse {
    within(REPORTED, "the next watched state", watch.next())
        .await
        .expect("the watch ended")
        .expect("a state")
}

/// States of `watch` up to the first that `done` accepts (each within [`REPORTED`]), all of
/// them, checking that none repeats the one before.
async fn states_until(
    watch: &mut Watch,
    done: impl Fn(&DescribeResponse) -> bool,
) -> Vec<DescribeResponse> {
    let mut seen: Vec<DescribeResponse> = Vec::new();
    loop {
        let state = next_state(watch).await;
        if let Some(last) = seen.last() {
            assert!(!same_state(last, &state), "reported twice: {state:?}");
        }
        let stop = done(&state);
        seen.push(state);
        if stop {
            return seen;
        }
    }
}

fn held_by<'a>(holder: &'a str) -> impl Fn(&DescribeResponse) -> bool + 'a {
    move |state| state.held && state.holder == holder
}

/// The changes a lock goes through, as the watchers on two servers of one Redis see them: free,
/// taken (holder, fencing token), a waiter joining (on the other server), the hand-over to it
/// with a larger token, free again; Describe counting the waiter too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_on_two_servers_see_every_change_once() {
    let redis = RedisServer::start();
    let (server_a, server_b) = (
        ServerProcess::start(&redis, &[]),
        ServerProcess::start(&redis, &[]),
    );
    let a = Client::connect(server_a.url()).await.unwrap();
    let b = Client::connect(server_b.url()).await.unwrap();
    let mut watch_a = a.watch("job").await.unwrap();
    let mut watch_b = b.watch("job").await.unwrap();
    for watch in [&mut watch_a, &mut watch_b] {
        let first = next_state(watch).await;
        assert!(!first.held && first.waiting == 0, "{first:?}");
    }

    let first = a.lease("job").holder("first").acquire().await.unwrap();
    let mut seen = Vec::new();
    for watch in [&mut watch_a, &mut watch_b] {
        let held = states_until(watch, held_by("first")).await;
        assert_eq!(held.len(), 1, "{held:?}");
        assert_eq!(held[0].fencing_token, first.fencing_token());
        seen.push(held);
    }

    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            b.lease("job")
                .holder("second")
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        })
    };
    for (watch, seen) in [&mut watch_a, &mut watch_b].into_iter().zip(&mut seen) {
        let joined = states_until(watch, |s| s.waiting == 1).await;
        assert!(joined.iter().all(|s| s.holder == "first"), "{joined:?}");
        seen.extend(joined);
    }
    let described = a.describe("job").await.unwrap();
    assert_eq!((described.holder.as_str(), described.waiting), ("first", 1));
    let listed = a.list(0).await.unwrap();
    assert_eq!(listed.locks[0].waiting, 1, "{listed:?}");

    let first_token = first.fencing_token();
    assert!(first.release().await.unwrap());
    let second = within(EVENT_TIMEOUT, "the hand-over", waiter)
        .await
        .unwrap()
        .unwrap();
    for (watch, seen) in [&mut watch_a, &mut watch_b].into_iter().zip(&mut seen) {
        let handed = states_until(watch, held_by("second")).await;
        let last = handed.last().unwrap();
        assert_eq!(last.fencing_token, second.fencing_token());
        assert!(
            last.fencing_token > first_token && last.waiting == 0,
            "{last:?}"
        );
        // Between the two holders, at most a free state.
        assert!(
            handed[..handed.len() - 1].iter().all(|s| !s.held),
            "{handed:?}"
        );
        seen.extend(handed.into_iter().filter(|s| s.held));
    }
    // Both servers' watchers saw the same holders in the same order.
    let holders = |seen: &[DescribeResponse]| -> Vec<(String, u64, u32)> {
        let shown = seen
            .iter()
            .map(|s| (s.holder.clone(), s.fencing_token, s.waiting));
        shown.collect()
    };
    assert_eq!(holders(&seen[0]), holders(&seen[1]));

    assert!(second.release().await.unwrap());
    for watch in [&mut watch_a, &mut watch_b] {
        states_until(watch, |s| !s.held).await;
    }
}

/// A holder that vanished (a unary Acquire never extended) is reported free when its TTL runs
/// out, though nothing in Redis announces an expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_lock_is_reported_free_at_its_ttl() {
    let redis = RedisServer::start();
    let server = ServerProcess::start(&redis, &[]);
    let client = Client::connect(server.url()).await.unwrap();
    let mut watch = client.watch("abandoned").await.unwrap();
    assert!(!next_state(&mut watch).await.held);
    let ttl = Duration::from_millis(400);
    let taken = client.acquire_once("abandoned", ttl).await.unwrap();
    let at = Instant::now();
    assert!(taken.acquired);
    let held = next_state(&mut watch).await;
    assert_eq!(held.fencing_token, taken.fencing_token);
    let free = next_state(&mut watch).await;
    let after = at.elapsed();
    assert!(!free.held, "{free:?}");
    assert!(
        after >= ttl - Duration::from_millis(50) && after < ttl + Duration::from_millis(400),
        "reported free after {after:?}, TTL {ttl:?}"
    );
}

/// Redis restarted empty: the watch goes on and reports the state after (free, the lock's key
/// lost), then later changes (the mark and the subscription are back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_goes_on_across_a_redis_restart() {
    let mut redis = RedisServer::start();
    // After a restart empty, grants are held back (for the 60 s TTL vouched for, by default):
    // a second here.
    let server = ServerProcess::start(&redis, &["--redis-restart-hold", "1s"]);
    let client = Client::connect(server.url()).await.unwrap();
    let mut watch = client.watch("kept").await.unwrap();
    assert!(!next_state(&mut watch).await.held);
    let taken = client
        .acquire_once("kept", Duration::from_secs(60))
        .await
        .unwrap();
    assert!(next_state(&mut watch).await.held);
    redis.restart_empty();
    let after = within(EVENT_TIMEOUT, "the state after the restart", watch.next())
        .await
        .expect("the watch ended")
        .expect("a state");
    assert!(!after.held, "{after:?}");
    // A change after the restart is reported too (once the server can take it again).
    let again = within(EVENT_TIMEOUT, "taking the lock again", async {
        loop {
            match client.acquire_once("kept", Duration::from_secs(60)).await {
                Ok(taken) if taken.acquired => return taken,
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await;
    let held = next_state(&mut watch).await;
    assert_eq!(held.fencing_token, again.fencing_token);
    assert_ne!(again.token, taken.token);
}

/// `leasehold watch --json`: one object per line, per change, and exit 0 on SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_a_json_line_per_change() {
    let redis = RedisServer::start();
    let server = ServerProcess::start(&redis, &[]);
    let client = Client::connect(server.url()).await.unwrap();
    let mut cli = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["watch", "--json", "--server", &server.url(), "job"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start leasehold watch");
    let (lines, mut read) = tokio::sync::mpsc::unbounded_channel();
    let stdout = cli.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let mut next_line = async || -> serde_json::Value {
        let line = within(REPORTED, "a line", read.recv())
            .await
            .expect("a line");
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("not JSON: {line}"))
    };
    let free = next_line().await;
    assert_eq!(
        (free["name"].as_str(), free["held"].as_bool()),
        (Some("job"), Some(false))
    );
    let guard = client
        .lease("job")
        .holder("cli-test")
        .acquire()
        .await
        .unwrap();
    let held = next_line().await;
    assert_eq!(held["holder"], "cli-test");
    assert_eq!(held["fencing_token"], guard.fencing_token());
    assert_eq!(held["waiting"], 0);
    guard.release().await.unwrap();
    assert_eq!(next_line().await["held"], false);
    signal(cli.id(), "TERM");
    let status = within(REPORTED, "the exit", async {
        loop {
            if let Some(status) = cli.try_wait().unwrap() {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(status.code(), Some(0));
}

/// The server a watch runs through stops: the client watches again through another replica,
/// does not repeat the state it last showed, and reports the next change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_moves_to_another_replica_when_its_server_stops() {
    let redis = RedisServer::start();
    let (mut first, second) = (
        ServerProcess::start(&redis, &[]),
        ServerProcess::start(&redis, &[]),
    );
    // The first replica listed is the one in use.
    let client = Client::connect(format!("{},{}", first.url(), second.url()))
        .await
        .unwrap();
    let holder = Client::connect(second.url()).await.unwrap();
    let mut watch = client.watch("moved").await.unwrap();
    assert!(!next_state(&mut watch).await.held);
    let guard = holder.lease("moved").holder("h").acquire().await.unwrap();
    assert!(next_state(&mut watch).await.held);
    first.stop().await;
    assert!(guard.release().await.unwrap());
    // Whatever the resumed watch reads first, "held" is not shown again before "free".
    let free = within(
        EVENT_TIMEOUT,
        "the release, through the other replica",
        watch.next(),
    )
    .await
    .expect("the watch ended")
    .expect("a state");
    assert!(!free.held, "{free:?}");
}

/// A semaphore's watch names every holder, each with its fencing token, as they come and go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphores_watch_names_every_holder() {
    let redis = RedisServer::start();
    let server = ServerProcess::start(&redis, &[]);
    let client = Client::connect(server.url()).await.unwrap();
    let mut watch = client.watch("pool").await.unwrap();
    assert!(!next_state(&mut watch).await.held);
    let permit = |holder: &'static str| client.lease("pool").limit(2).holder(holder).acquire();
    let a = permit("a").await.unwrap();
    let one = next_state(&mut watch).await;
    assert_eq!((one.limit, one.holders.len()), (2, 1), "{one:?}");
    let b = permit("b").await.unwrap();
    let two = next_state(&mut watch).await;
    let holders: Vec<(&str, u64)> = two
        .holders
        .iter()
        .map(|h| (h.holder.as_str(), h.fencing_token))
        .collect();
    assert_eq!(
        holders,
        [("a", a.fencing_token()), ("b", b.fencing_token())]
    );
    assert!(a.release().await.unwrap());
    let left = next_state(&mut watch).await;
    assert_eq!(left.holders.len(), 1);
    assert_eq!(left.holder, "b");
    drop(b);
}
