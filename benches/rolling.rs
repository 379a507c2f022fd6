//! Rolling-restart benchmark (`cargo bench --bench rolling [-- --quick]`).
//!
//! Starts its own redis-server and three replicas of the release binary on it, holds 10,000
//! leases (1,000 with `--quick`) through twelve clients that each know all three replicas (four
//! start on each), then stops every replica in turn as a deploy does (SIGTERM, wait for its
//! exit, start it again, wait until it serves). It reports:
//!
//! 1. leases lost (goal 0), counted a whole TTL after the last restart, when any lease that had
//!    not resumed would have been told;
//! 2. how long holders spent between their stream breaking and their resume (p50, p99), beside
//!    the same clients' acquire latency in the same run (the baseline: a fresh `Lease` stream to
//!    `acquired`, a third of the leases at once, as a restart moves a third at once);
//! 3. resumes per second one replica absorbs: a stopped replica's leases all move to the next
//!    one in their clients' lists, so each restart is one server taking a third of the leases at
//!    once, beside the acquisitions per second the same servers took in waves of a third.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use futures_util::StreamExt;
use leasehold_client::{Client, LeaseGuard, Outage};
use support::{RedisServer, Replicas};
use tokio::time::Instant;

const LEASES: usize = 10_000;
const QUICK_LEASES: usize = 1_000;
const CLIENTS: usize = 12;
const TTL: Duration = Duration::from_secs(10);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let leases = if quick { QUICK_LEASES } else { LEASES };
    let redis = RedisServer::start();
    let mut replicas = Replicas::start(&redis, 3, &[]);
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        clients.push(Client::connect(replicas.urls_from(c % 3)).await.unwrap());
    }

    // Baseline: the same clients taking fresh leases in three waves of a third each, every
    // acquisition of a wave at once: the shape of a restart, whose third of the leases all
    // resume at once.
    let mut guards = Vec::new();
    let mut acquire_latency = Vec::new();
    let mut waves = Vec::new();
    for wave in 0..3 {
        let started = Instant::now();
        let names: Vec<usize> = (0..leases).filter(|k| k % 3 == wave).collect();
        let count = names.len();
        let taken: Vec<(LeaseGuard, Duration)> = futures_util::stream::iter(names)
            .map(|k| {
                let client = clients[k % CLIENTS].clone();
                async move {
                    let asked = Instant::now();
                    let guard = client
                        .lease(format!("rolling-{k}"))
                        .ttl(TTL)
                        .acquire()
                        .await
                        .expect("acquire");
                    (guard, asked.elapsed())
                }
            })
            .buffer_unordered(usize::MAX)
            .collect()
            .await;
        waves.push(count as f64 / started.elapsed().as_secs_f64());
        for (guard, latency) in taken {
            guards.push(guard);
            acquire_latency.push(latency);
        }
    }
    let acquire_rate = waves.iter().sum::<f64>() / waves.len() as f64;

    // The deploy: one replica at a time.
    let mut restarts = Vec::new();
    for i in 0..3 {
        let stopped_at = Instant::now();
        let status = replicas.stop(i).await;
        assert!(status.success(), "replica {i} exited {status:?}");
        replicas.start_again(i).await;
        restarts.push(stopped_at);
    }
    // A whole TTL on: a lease that had not resumed would have been told lost by now.
    tokio::time::sleep(TTL).await;
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    let outages: Vec<Outage> = guards.iter().flat_map(LeaseGuard::outages).collect();
    let mut between: Vec<Duration> = outages.iter().map(Outage::duration).collect();

    println!("## A rolling restart of three replicas holding {leases} leases (TTL 10 s)\n");
    println!(
        "| leases | lost | resumes | between streams p50 | p99 | acquire p50 (baseline) | p99 | p50 ratio |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    let (b50, b99) = (
        percentile(&mut between, 0.50),
        percentile(&mut between, 0.99),
    );
    let (a50, a99) = (
        percentile(&mut acquire_latency, 0.50),
        percentile(&mut acquire_latency, 0.99),
    );
    println!(
        "| {leases} | {lost} | {} | {} | {} | {} | {} | {:.2}x |",
        outages.len(),
        ms(b50),
        ms(b99),
        ms(a50),
        ms(a99),
        b50.as_secs_f64() / a50.as_secs_f64().max(1e-9),
    );

    println!("\n## Resumes one replica absorbs\n");
    println!(
        "| restart of | leases moved | first break to last resume | resumes/s | acquisitions/s in a wave of a third (baseline) | ratio |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for (i, stopped_at) in restarts.iter().enumerate() {
        let until = restarts.get(i + 1).copied();
        let batch: Vec<&Outage> = outages
            .iter()
            .filter(|o| o.broke_at >= *stopped_at && until.is_none_or(|u| o.broke_at < u))
            .collect();
        let (Some(first), Some(last)) = (
            batch.iter().map(|o| o.broke_at).min(),
            batch.iter().map(|o| o.resumed_at).max(),
        ) else {
            println!("| replica {i} | 0 | - | - | {acquire_rate:.0} | - |");
            continue;
        };
        let span = last.saturating_duration_since(first);
        let rate = batch.len() as f64 / span.as_secs_f64().max(1e-9);
        println!(
            "| replica {i} | {} | {} | {rate:.0} | {acquire_rate:.0} | {:.2}x |",
            batch.len(),
            ms(span),
            rate / acquire_rate,
        );
    }
    for guard in guards {
        let _ = guard.release().await;
    }
}

fn percentile(values: &mut [Duration], p: f64) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    values.sort_unstable();
    let index = ((values.len() - 1) as f64 * p).round() as usize;
    values[index]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}
