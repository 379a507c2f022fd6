//! Leasehold beside the lock services a user could pick instead (`cargo bench --bench peers`).
//!
//! Every service runs in a process of its own, the bench being only their client: the release
//! `leasehold serve --echo` (the binary Cargo builds for this bench) on a Redis of its own,
//! etcd, and a second Redis for the direct pair and `rslock`. The same client pattern for all,
//! from one tokio runtime of 2 threads over the same tonic stack for both gRPC services:
//!
//! 1. Uncontended: one client, one lock, acquire + release back to back, every path taking turns
//!    over 5 rounds: direct Redis with fred (`SET NX PX` + the compare-and-delete script, the
//!    baseline), Leasehold's `Lease` stream and unary `Acquire`/`Release`, `rslock` (the Redlock
//!    crate a Rust user would pick) on one Redis, and etcd's lock API (`v3lockpb.Lock/Lock` and
//!    `Unlock` with one lease granted up front, as `concurrency.Mutex` does within a session).
//!    Beside them, Leasehold's floors: no-op gRPC echoes of the same shape, with and without a
//!    Redis `PING` in the server, which split a Leasehold figure into transport, Redis hop and
//!    the server's own work.
//! 2. Contended: 2 and 8 clients on one lock, each its own connection (and etcd lease), looping
//!    acquire + release with no hold, then 2 holding it 150 ms each time: each acquire's latency
//!    (its wait included) and the hand-off, from the holder's release being sent to the next
//!    waiter holding (`peers/contention.rs`).
//!
//! etcd is measured when an `etcd` binary is installed (`scripts/bench-peers.sh --rust` installs
//! Debian's `etcd-server` and runs this bench); its data directory is on tmpfs when `/dev/shm`
//! exists: the Redis keeps nothing on disk either, so neither pays for fsync. The peers live in
//! this bench binary, so the server never links them. `--quick`: fewer operations (a smoke run).

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "peers/contention.rs"]
mod contention;
#[path = "peers/etcd.rs"]
mod etcd;

use std::time::Duration;

use fred::prelude::{Builder, ClientLike, Config};
// The same measured paths and tables as `leasehold bench`, which keeps them out of the library.
#[allow(dead_code)]
#[path = "../src/cli/bench/echo.rs"]
mod echo;
#[allow(dead_code)]
#[path = "../src/cli/bench/figures.rs"]
mod figures;
#[allow(dead_code)]
#[path = "../src/cli/bench/paths.rs"]
mod paths;

use etcd::{Etcd, EtcdLock};
use figures::{Figures, ms, print_uncontended, ratio};
use leasehold_client::Client;
use paths::{BenchError, direct_redis, lease_stream, sequential, unary, unexpected};
use support::{RedisServer, ServerProcess};

/// Rounds of the uncontended paths: each runs once per round, in turn, so a slow spell of this
/// shared machine falls on all of them rather than on one.
const ROUNDS: usize = 5;
/// A hold longer than etcd's watch resync (100 ms, `watchResyncPeriod` in etcd's
/// mvcc/watchable_store.go): a waiter's watch, opened at a past revision, is caught up by then,
/// so etcd's hand-off is measured without it. The runs with no hold show it.
const HELD: Duration = Duration::from_millis(150);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BenchError> {
    let quick = std::env::args().any(|a| a == "--quick");
    let operations: usize = if quick { 200 } else { 5_000 };
    let grants = if quick { 200 } else { 1_000 };
    let held_grants = if quick { 10 } else { 40 };
    let per_round = operations.div_ceil(ROUNDS);
    // The server and its Redis, each a process of its own; the direct pair and rslock on another.
    let server_redis = RedisServer::start();
    let mut server = ServerProcess::start(&server_redis, &["--echo"]);
    let redis_server = RedisServer::start();
    let redis = Builder::from_config(Config::from_url(&redis_server.url())?).build()?;
    redis.init().await?;
    let client = Client::connect(server.url()).await?;
    let etcd = Etcd::start();
    let etcd_name = format!("bench-etcd-{}", std::process::id());
    let mut etcd_lock = match &etcd {
        Some(etcd) => Some(EtcdLock::connect(etcd.port, &etcd_name).await?),
        None => None,
    };
    let rslock = rslock::LockManager::new(vec![redis_server.url()]);

    // direct, stream, unary, rslock, etcd, then the echo floors: stream, stream + PING, two
    // unary calls, two unary calls + PING. The first round warms every path up and is dropped.
    let mut rounds: [Vec<Figures>; 9] = Default::default();
    for round in 0..=ROUNDS {
        let count = if round == 0 { 50 } else { per_round };
        let mut measured = vec![
            direct_redis(&redis, count).await?,
            lease_stream(&client, count).await?,
            unary(&client, count).await?,
            rslock_path(&rslock, count).await?,
        ];
        if let Some(lock) = etcd_lock.as_mut() {
            measured.push(etcd_path(lock, count).await?);
        }
        measured.push(echo::stream_pair(&client, count, false).await?);
        measured.push(echo::stream_pair(&client, count, true).await?);
        measured.push(echo::unary_calls(&client, count, 2, false).await?);
        measured.push(echo::unary_calls(&client, count, 2, true).await?);
        if round > 0 {
            for figures in measured {
                let slot = slot_of(&figures.path)?;
                rounds[slot].push(figures);
            }
        }
    }
    let rows: Vec<Figures> = rounds.iter().filter_map(|r| Figures::combine(r)).collect();
    print_uncontended(
        "Uncontended acquire + release, one client, one lock (every service its own process)",
        &rows.iter().collect::<Vec<_>>(),
    );
    let find = |path: &str| rows.iter().find(|r| r.path == path);
    if let (Some(stream), Some(unary), Some(etcd)) = (
        find("Lease stream"),
        find("unary Acquire/Release"),
        find("etcd v3lock"),
    ) {
        println!("\n## Goal: p50 and p99 ahead of etcd's lock API\n");
        println!("| path | p50 vs etcd | p99 vs etcd | ahead at both |");
        println!("| --- | --- | --- | --- |");
        for row in [stream, unary] {
            let (p50, p99) = (ratio(row.p50, etcd.p50), ratio(row.p99, etcd.p99));
            let met = if p50 < 1.0 && p99 < 1.0 { "yes" } else { "no" };
            println!("| {} | {p50:.2}x | {p99:.2}x | {met} |", row.path);
        }
    }

    if let Some(etcd) = &etcd {
        println!("\n## Contended: N clients on one lock, acquire, hold, release\n");
        println!(
            "| clients | hold | path | grants | grants/s | acquire p50 | acquire p99 | hand-off p50 | hand-off p99 |"
        );
        println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
        for (clients, hold, grants) in [
            (2, Duration::ZERO, grants),
            (8, Duration::ZERO, grants),
            (2, HELD, held_grants),
        ] {
            // Two rounds each, in turn, combined.
            let (mut ours, mut theirs) = (Vec::new(), Vec::new());
            for _ in 0..2 {
                let url = server.url();
                ours.push(contention::leasehold(&url, clients, grants / 2, hold).await?);
                theirs.push(contention::etcd(etcd.port, clients, grants / 2, hold).await?);
            }
            for runs in [ours, theirs] {
                let acquire: Vec<_> = runs.iter().map(|r| r.acquire.clone()).collect();
                let handoff: Vec<_> = runs.iter().map(|r| r.handoff.clone()).collect();
                let (Some(acquire), Some(handoff)) =
                    (Figures::combine(&acquire), Figures::combine(&handoff))
                else {
                    return Err(unexpected("no contended rounds ran"));
                };
                println!(
                    "| {clients} | {} ms | {} | {} | {:.0} | {:.3} ms | {:.3} ms | {:.3} ms | {:.3} ms |",
                    hold.as_millis(),
                    acquire.path,
                    acquire.operations,
                    acquire.per_second,
                    ms(acquire.p50),
                    ms(acquire.p99),
                    ms(handoff.p50),
                    ms(handoff.p99)
                );
            }
        }
    } else {
        println!(
            "\n(etcd not measured: no `etcd` binary; scripts/bench-peers.sh --rust installs it)"
        );
    }
    drop(client);
    server.stop().await;
    Ok(())
}

/// Where a path's rounds are kept: the order the table prints them in.
fn slot_of(path: &str) -> Result<usize, BenchError> {
    const ORDER: [&str; 9] = [
        "direct Redis (fred)",
        "Lease stream",
        "unary Acquire/Release",
        "rslock (Redlock, 1 Redis)",
        "etcd v3lock",
        "gRPC echo: 1 stream, 2 round trips",
        "gRPC echo + Redis PING: 1 stream, 2 round trips",
        "gRPC echo: 2 unary calls",
        "gRPC echo + Redis PING: 2 unary calls",
    ];
    ORDER
        .iter()
        .position(|p| *p == path)
        .ok_or_else(|| unexpected(format!("unknown path {path}")))
}

async fn rslock_path(
    manager: &rslock::LockManager,
    operations: usize,
) -> Result<Figures, BenchError> {
    let resource = format!("bench-rslock-{}", std::process::id());
    let resource = &resource;
    sequential(
        "rslock (Redlock, 1 Redis)",
        operations,
        move || async move {
            let lock = manager
                .lock(resource.as_bytes(), Duration::from_secs(30))
                .await
                .map_err(|e| unexpected(format!("rslock lock: {e:?}")))?;
            manager.unlock(&lock).await;
            Ok(())
        },
    )
    .await
}

async fn etcd_path(lock: &mut EtcdLock, operations: usize) -> Result<Figures, BenchError> {
    let lock = std::sync::Arc::new(tokio::sync::Mutex::new(lock));
    sequential("etcd v3lock", operations, || {
        let lock = lock.clone();
        async move {
            let mut lock = lock.lock().await;
            let key = lock.lock().await?;
            lock.unlock(key).await
        }
    })
    .await
}
