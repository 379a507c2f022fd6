//! Hand-off and idle-waiter benchmark (`cargo bench --bench handoff`).
//!
//! Starts its own redis-server and two in-process Leasehold servers on it: one with pub/sub
//! wake-ups (the default) and one with wake-ups off, whose waiters poll with backoff (the path
//! before wake-ups existed). Both are measured in the same run, so the ratio holds on a noisy
//! machine even when absolute figures drift.
//!
//! 1. Hand-off latency: from the moment a holder sends `release` to the moment the next waiter
//!    receives `Acquired`, with 1, 10 and 100 waiters in line; each holder keeps the lock 100 ms
//!    once everyone else is in line.
//! 2. Redis commands per second spent by 100 idle waiters (from `INFO commandstats`).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use fred::prelude::ClientLike;
use leasehold::pb::lease_response::Event;
use leasehold::server::ServerConfig;
use support::{LeaseStream, RedisServer, TestServer, connect, release_request};
use tokio::sync::mpsc;
use tokio::time::Instant;

const WAITER_COUNTS: [usize; 3] = [1, 10, 100];
/// Hand-offs measured per configuration, and the time budget that may cut them short (polling).
const ROUNDS: usize = 100;
const BUDGET: Duration = Duration::from_secs(20);
/// How long each holder keeps the lock once the line is full: a short critical section, long
/// enough that a polling waiter's backoff is what it would be in real use.
const HOLD: Duration = Duration::from_millis(100);
const IDLE_WINDOW: Duration = Duration::from_secs(10);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    // One Redis per path, so each one's command count is its own.
    let (wake_redis, poll_redis) = (RedisServer::start(), RedisServer::start());
    let wakeups = TestServer::start_with(&wake_redis, "leasehold:", ServerConfig::default()).await;
    let polling = TestServer::start_with(
        &poll_redis,
        "leasehold:",
        ServerConfig {
            wakeups: false,
            ..ServerConfig::default()
        },
    )
    .await;

    println!("## Redis commands per second spent by 100 idle waiters (one holder, TTL 30 s)\n");
    println!(
        "| path | scripts and subscriptions sent/s | all commands run/s (incl. inside scripts) |"
    );
    println!("| --- | --- | --- |");
    let window = if quick {
        Duration::from_secs(3)
    } else {
        IDLE_WINDOW
    };
    for (path, redis, server) in [
        ("wake-ups", &wake_redis, &wakeups),
        ("polling", &poll_redis, &polling),
    ] {
        let rate = idle_rate(redis, &server.url(), 100, window).await;
        println!("| {path} | {:.1} | {:.1} |", rate.round_trips, rate.all);
    }
    println!();
    println!("## Hand-off latency (release sent -> next waiter's Acquired)\n");
    println!("| waiters | path | hand-offs | p50 | p99 | p50 ratio (polling / wake-ups) |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for waiters in WAITER_COUNTS {
        let rounds = if quick { 20 } else { ROUNDS };
        let fast = handoffs(&wakeups.url(), waiters, rounds).await;
        let slow = handoffs(&polling.url(), waiters, rounds).await;
        let ratio = slow.p50.as_secs_f64() / fast.p50.as_secs_f64();
        println!(
            "| {waiters} | wake-ups | {} | {:.3} ms | {:.3} ms | |",
            fast.count,
            ms(fast.p50),
            ms(fast.p99)
        );
        println!(
            "| {waiters} | polling | {} | {:.3} ms | {:.3} ms | {ratio:.0}x |",
            slow.count,
            ms(slow.p50),
            ms(slow.p99)
        );
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

struct Latencies {
    count: usize,
    p50: Duration,
    p99: Duration,
}

/// A participant: joins the line, reports `Acquired`, releases when told, joins again.
async fn participant(
    url: String,
    name: String,
    id: usize,
    acquired: mpsc::UnboundedSender<(usize, Instant)>,
    waiting: mpsc::UnboundedSender<usize>,
    mut release: mpsc::UnboundedReceiver<()>,
) {
    let mut client = connect(&url).await;
    loop {
        let mut lease = LeaseStream::acquire(&mut client, &name, 30_000, 3_600_000, "").await;
        loop {
            match lease.next_significant().await {
                Ok(Some(Event::Waiting(_))) => {
                    let _ = waiting.send(id);
                }
                Ok(Some(Event::Acquired(_))) => break,
                other => panic!("participant {id}: {other:?}"),
            }
        }
        if acquired.send((id, Instant::now())).is_err() || release.recv().await.is_none() {
            return;
        }
        lease.send(release_request()).await;
        let _ = lease.next_significant().await;
    }
}

async fn handoffs(url: &str, waiters: usize, rounds: usize) -> Latencies {
    let name = format!("handoff-{waiters}-{}", rand_suffix());
    let (acquired_tx, mut acquired) = mpsc::unbounded_channel();
    let (waiting_tx, mut waiting) = mpsc::unbounded_channel();
    let mut release = Vec::new();
    for id in 0..=waiters {
        let (tx, rx) = mpsc::unbounded_channel();
        release.push(tx);
        tokio::spawn(participant(
            url.to_owned(),
            name.clone(),
            id,
            acquired_tx.clone(),
            waiting_tx.clone(),
            rx,
        ));
    }
    let mut samples = Vec::new();
    let started = Instant::now();
    let (mut holder, _) = acquired.recv().await.expect("first holder");
    // Who is in line: from their first `Waiting` until they acquire.
    let mut in_line = std::collections::HashSet::new();
    for _ in 0..rounds {
        // Everyone else in line, then hand over.
        while in_line.len() < waiters {
            let id = waiting.recv().await.expect("waiting");
            if id != holder {
                in_line.insert(id);
            }
        }
        tokio::time::sleep(HOLD).await;
        let released_at = Instant::now();
        release[holder].send(()).expect("holder gone");
        let (next, acquired_at) = acquired.recv().await.expect("next holder");
        samples.push(acquired_at - released_at);
        in_line.remove(&next);
        holder = next;
        if started.elapsed() > BUDGET {
            break;
        }
    }
    drop(release);
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    Latencies {
        count: samples.len(),
        p50: at(0.50),
        p99: at(0.99),
    }
}

/// What the Redis serves per second while `waiters` wait for a lock held all along.
async fn idle_rate(redis: &RedisServer, url: &str, waiters: usize, window: Duration) -> IdleRate {
    let name = format!("idle-{}", rand_suffix());
    let mut client = connect(url).await;
    let mut holder = LeaseStream::acquire(&mut client, &name, 30_000, 0, "").await;
    holder.acquired().await;
    let mut leases = Vec::new();
    for _ in 0..waiters {
        let mut lease = LeaseStream::acquire(&mut client, &name, 30_000, 3_600_000, "").await;
        assert!(matches!(
            lease.next_significant().await,
            Ok(Some(Event::Waiting(_)))
        ));
        leases.push(lease);
    }
    let direct = redis.client().await;
    // Let the polling waiters reach their steady (capped) backoff before counting.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = calls(&direct).await;
    tokio::time::sleep(window).await;
    let after = calls(&direct).await;
    let per_second = |n: u64| n as f64 / window.as_secs_f64();
    IdleRate {
        // Our servers send everything as scripts, but for (un)subscribing.
        round_trips: per_second(after.round_trips - before.round_trips),
        // The INFO call itself is counted once.
        all: per_second((after.all - before.all).saturating_sub(1)),
    }
}

struct IdleRate {
    /// Commands the servers sent (EVALSHA, SSUBSCRIBE, ...), per second.
    round_trips: f64,
    /// Every command Redis ran, including those inside scripts, per second.
    all: f64,
}

#[derive(Clone, Copy)]
struct Calls {
    round_trips: u64,
    all: u64,
}

async fn calls(redis: &fred::prelude::Client) -> Calls {
    let info: String = redis
        .info(Some(fred::types::InfoKind::CommandStats))
        .await
        .expect("info");
    let mut calls = Calls {
        round_trips: 0,
        all: 0,
    };
    for line in info.lines() {
        let Some((name, rest)) = line
            .trim()
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let Some(count) = rest
            .strip_prefix("calls=")
            .and_then(|r| r.split(',').next())
            .and_then(|c| c.parse::<u64>().ok())
        else {
            continue;
        };
        calls.all += count;
        if matches!(name, "evalsha" | "eval" | "ssubscribe" | "sunsubscribe") {
            calls.round_trips += count;
        }
    }
    calls
}

fn rand_suffix() -> u32 {
    rand::random()
}
