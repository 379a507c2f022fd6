//! `leasehold bench`: what a lease costs through the service, against the same work done
//! directly on Redis in the same run (the baseline any user could build by hand).
//!
//! It starts nothing: it points at a running server and the Redis that server uses. Sections:
//! 1. uncontended acquire + release, one client at a time: through the `Lease` stream, through the
//!    unary `Acquire`/`Release`, and directly with fred (`SET NX PX` + the compare-and-delete
//!    script);
//! 2. contention: 2, 16 and 128 clients looping on one lock through the `Lease` stream, against
//!    as many polling clients on Redis directly (`SET NX PX`, 50 ms retry): waits and hand-offs;
//! 3. many locks: as many clients on distinct names at once;
//! 4. held leases: server RSS and CPU, and the renewal scripts Redis serves;
//! 5. primitives: acquire + release of a semaphore's permit and of a shared hold, against the
//!    plain lock.
//!
//! The rslock and etcd peers are in `benches/peers.rs`, a separate binary, so the server never
//! links them.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use fred::prelude::*;
use fred::types::scripts::Script;
use serde_json::json;
use tokio::time::Instant;

use leasehold::client::{Client, ConnectOptions};
use leasehold::store::Token;

mod echo;
mod figures;
mod paths;
mod primitives;

use figures::{Figures, ms, print_uncontended, ratio};
use leasehold::client::ClientError;
use paths::{BenchError, RELEASE_SCRIPT, direct_redis, lease_stream, unary, unexpected};

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub connect: ConnectOptions,
    pub redis: String,
    /// A smoke run in well under a minute, for CI: figures from it are not to be judged.
    pub quick: bool,
    /// How many leases to hold at once in the held-leases section (one run per count).
    pub held: Vec<usize>,
    /// Their TTL (30 s by default: renewals every 10 s).
    pub held_ttl: Duration,
    /// How long to measure them once held (`None`: the section's usual window).
    pub held_window: Option<Duration>,
    /// The server's process id, to read its memory (RSS) from /proc; optional.
    pub server_pid: Option<u32>,
    /// Sections to run; empty for all.
    pub sections: Vec<Section>,
}

/// The bench's sections, to run one alone (`--only held`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Section {
    Uncontended,
    Contention,
    Many,
    Held,
    Primitives,
}

impl BenchOptions {
    fn runs(&self, section: Section) -> bool {
        self.sections.is_empty() || self.sections.contains(&section)
    }
}

/// Lease streams per client connection in the held-leases section (the server allows 10,000).
const LEASES_PER_CONNECTION: usize = 1_000;
/// Acquisitions in flight at once while opening held leases: a burst of 50,000 at once would
/// measure the Redis queue (and hit the server's Redis timeout), not holding.
const OPENING_IN_FLIGHT: usize = 500;

/// Runs the chosen sections, prints tables, and returns the figures as JSON.
pub async fn run(options: &BenchOptions) -> Result<serde_json::Value, BenchError> {
    let progress = Progress::new();
    let redis = Builder::from_config(Config::from_url(&options.redis)?).build()?;
    redis.init().await?;
    let window = if options.quick {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(10)
    };
    let mut figures = json!({ "quick": options.quick });
    if options.runs(Section::Uncontended) {
        figures["uncontended"] = uncontended_section(options, &redis, &progress).await?;
    }
    if options.runs(Section::Contention) {
        figures["contention"] = contention_section(options, window, &progress).await?;
    }
    if options.runs(Section::Many) {
        figures["many_locks"] = many_section(options, &progress).await?;
    }
    if options.runs(Section::Held) {
        let window = options.held_window.unwrap_or(window);
        figures["held_leases"] = held_section(options, &redis, window, &progress).await?;
    }
    if options.runs(Section::Primitives) {
        figures["primitives"] = primitives::section(options, &progress).await?;
    }
    Ok(figures)
}

/// Rounds of the uncontended section: every path runs once per round, in turn, so a slow
/// spell of this shared machine falls on all of them rather than on one.
const UNCONTENDED_ROUNDS: usize = 5;

async fn uncontended_section(
    options: &BenchOptions,
    redis: &fred::prelude::Client,
    progress: &Progress,
) -> Result<serde_json::Value, BenchError> {
    let operations: usize = if options.quick { 200 } else { 5_000 };
    let per_round = operations.div_ceil(UNCONTENDED_ROUNDS);
    let client = Client::connect_with(options.connect.clone()).await?;
    let with_echo = echo::available(&client).await;
    // direct, stream, unary, echo stream, echo unary
    let mut rounds: [Vec<Figures>; 5] = Default::default();
    for round in 1..=UNCONTENDED_ROUNDS {
        progress.say(&format!(
            "uncontended: round {round} of {UNCONTENDED_ROUNDS}"
        ));
        rounds[0].push(direct_redis(redis, per_round).await?);
        rounds[1].push(lease_stream(&client, per_round).await?);
        rounds[2].push(unary(&client, per_round).await?);
        if with_echo {
            rounds[3].push(echo::stream_pair(&client, per_round).await?);
            rounds[4].push(echo::unary_pair(&client, per_round).await?);
        }
    }
    progress.clear();
    let [direct, stream, unary, echo_stream, echo_unary] =
        rounds.map(|path| Figures::combine(&path));
    let (Some(direct), Some(stream), Some(unary)) = (direct, stream, unary) else {
        return Err(unexpected("no uncontended rounds ran"));
    };
    let mut rows = vec![&direct, &stream, &unary];
    rows.extend(echo_stream.iter().chain(echo_unary.iter()));
    print_uncontended("Uncontended acquire + release, one client", &rows);
    let mut figures = json!({
        "paths": rows.iter().map(|row| row.to_json(Some(&direct))).collect::<Vec<_>>(),
    });
    let (Some(echo_stream), Some(echo_unary)) = (echo_stream, echo_unary) else {
        println!("\n(no transport baseline: start the server with `--echo` to measure it)");
        return Ok(figures);
    };
    // What the service adds is judged against the round trips it cannot avoid: Redis's (the
    // direct path is exactly the two scripts a lease needs) and gRPC's (the echoes).
    println!("\n| path | against | p50 ratio | mean ratio |\n| --- | --- | --- | --- |");
    let mut floors = Vec::new();
    for (path, transport) in [(&stream, &echo_stream), (&unary, &echo_unary)] {
        let p50 = ratio(path.p50, direct.p50 + transport.p50);
        let mean = ratio(path.mean, direct.mean + transport.mean);
        println!(
            "| {} | direct Redis + {} | {p50:.2}x | {mean:.2}x |",
            path.path, transport.path
        );
        floors.push(json!({
            "path": path.path,
            "transport": transport.path,
            "p50_ratio_to_redis_plus_transport": p50,
            "mean_ratio_to_redis_plus_transport": mean,
        }));
    }
    figures["against_redis_plus_transport"] = json!(floors);
    Ok(figures)
}

async fn contention_section(
    options: &BenchOptions,
    window: Duration,
    progress: &Progress,
) -> Result<serde_json::Value, BenchError> {
    let contenders: &[usize] = if options.quick {
        &[2, 16]
    } else {
        &[2, 16, 128]
    };
    let mut contention_rows = Vec::new();
    println!("\n## Contention: clients looping on one lock\n");
    println!(
        "Lease stream (fair line, wake-ups) against a polling client on Redis directly (`SET NX PX`, 50 ms retry).\n"
    );
    println!(
        "| clients | path | acquisitions/s | wait p50 | wait p99 | hand-off p50 | hand-off p99 | hand-off p50 ratio (polling / stream) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for &clients in contenders {
        progress.say(&format!("contention: {clients} clients, Lease stream"));
        let stream = contention(&options.connect, clients, window).await?;
        progress.say(&format!("contention: {clients} clients, polling"));
        let polling = polling_contention(&options.redis, clients, window).await?;
        progress.clear();
        let handoff_ratio = ratio(polling.handoffs.p50, stream.handoffs.p50);
        for (run, shown_ratio) in [
            (&stream, String::new()),
            (&polling, format!("{handoff_ratio:.0}x")),
        ] {
            println!(
                "| {clients} | {} | {:.0} | {:.3} ms | {:.3} ms | {:.3} ms | {:.3} ms | {shown_ratio} |",
                run.waits.path,
                run.waits.per_second,
                ms(run.waits.p50),
                ms(run.waits.p99),
                ms(run.handoffs.p50),
                ms(run.handoffs.p99),
            );
        }
        contention_rows.push(json!({
            "clients": clients,
            "stream_waits": stream.waits.to_json(None),
            "stream_handoffs": stream.handoffs.to_json(None),
            "polling_waits": polling.waits.to_json(None),
            "polling_handoffs": polling.handoffs.to_json(None),
            "handoff_p50_ratio_polling_to_stream": handoff_ratio,
        }));
    }
    Ok(json!(contention_rows))
}

async fn many_section(
    options: &BenchOptions,
    progress: &Progress,
) -> Result<serde_json::Value, BenchError> {
    let names = if options.quick { 100 } else { 1_000 };
    progress.say(&format!("many locks: {names} clients on {names} names"));
    let many = many_locks(&options.connect, names).await?;
    progress.clear();
    println!(
        "\n## Many locks: {names} clients, one distinct name each, acquire + release at once\n"
    );
    println!("| ops | ops/s | p50 | p99 |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| {} | {:.0} | {:.3} ms | {:.3} ms |",
        many.operations,
        many.per_second,
        ms(many.p50),
        ms(many.p99)
    );
    Ok(many.to_json(None))
}

async fn held_section(
    options: &BenchOptions,
    redis: &fred::prelude::Client,
    window: Duration,
    progress: &Progress,
) -> Result<serde_json::Value, BenchError> {
    println!(
        "\n## Held leases (TTL {}, renewed every third of it; {LEASES_PER_CONNECTION} streams per connection)\n",
        humantime::format_duration(options.held_ttl)
    );
    println!(
        "| leases | server RSS growth per lease | idle echo stream (transport floor) | server CPU while holding | echo streams ticking every TTL/3 (transport floor) | Redis CPU while holding | renewal scripts/s | scripts (round trips) per renewal period | leases per script |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let with_echo = match options.server_pid {
        Some(_) => echo::available(&Client::connect_with(options.connect.clone()).await?).await,
        None => false,
    };
    let mut held_rows = Vec::new();
    for &count in &options.held {
        // The floor first, kept open while the leases are measured, so each is measured on
        // memory the server never had before.
        let mut floor = None;
        let mut idle = None;
        if with_echo {
            progress.say(&format!("idle echo streams: {count}"));
            let before = options.server_pid.and_then(rss_bytes);
            let connections = connections(options, count).await?;
            idle = Some(echo::idle_streams(connections, count).await?);
            let after = options.server_pid.and_then(rss_bytes);
            floor = before.zip(after).map(|(b, a)| a.saturating_sub(b));
        }
        progress.say(&format!("held leases: {count}"));
        let held = held_leases(options, redis, count, window).await?;
        drop(idle);
        // The CPU floor: as many streams told something every TTL/3, with nothing else to do.
        let mut ticking_cpu = None;
        if with_echo {
            // The leases just let go: let the server finish releasing them first.
            progress.say("waiting for the server to go idle");
            until_idle(options.server_pid).await;
            progress.say(&format!("echo streams ticking: {count}"));
            let interval = options.held_ttl / 3;
            let connections = connections(options, count).await?;
            let ticking = echo::ticking_streams(connections, count, interval).await?;
            ticking_cpu = cpu_share_over(options.server_pid, window).await;
            drop(ticking);
        }
        progress.clear();
        let floor_per_stream = floor.map(|bytes| bytes as f64 / count as f64);
        let floor_cell = floor_per_stream.map_or("n/a (needs --echo)".to_owned(), |bytes| {
            format!("{bytes:.0} B")
        });
        let per_lease = held
            .rss_growth
            .map_or("n/a (no --server-pid)".to_owned(), |bytes| {
                format!("{:.0} B", bytes as f64 / count as f64)
            });
        // Renewal scripts are batched (store::renewals): one script, one round trip.
        let per_period = held.renewals_per_second * (options.held_ttl / 3).as_secs_f64();
        let per_ttl_third = per_period / count as f64;
        let share = |share: Option<f64>| {
            share.map_or("n/a".to_owned(), |share| {
                format!("{:.1}% of a core", share * 100.0)
            })
        };
        let (cpu, ticking_cell) = (share(held.cpu_share), share(ticking_cpu));
        // No renewal inside the window (a window shorter than TTL/3, as --quick has): nothing
        // to divide by.
        let per_script = if per_ttl_third > 0.0 {
            format!("{:.0}", 1.0 / per_ttl_third)
        } else {
            "n/a (no renewal measured)".to_owned()
        };
        println!(
            "| {count} | {per_lease} | {floor_cell} | {cpu} | {ticking_cell} | {:.1}% of a core | {:.1} | {per_period:.0} | {per_script} |",
            held.redis_cpu_share * 100.0,
            held.renewals_per_second,
        );
        held_rows.push(json!({
            "leases": count,
            "ttl_ms": options.held_ttl.as_millis() as u64,
            "rss_growth_bytes": held.rss_growth,
            "idle_echo_stream_rss_bytes_each": floor_per_stream,
            "ticking_echo_streams_cpu_share_of_one_core": ticking_cpu,
            "cpu_share_of_one_core": held.cpu_share,
            "redis_cpu_share_of_one_core": held.redis_cpu_share,
            "renewal_scripts_per_second": held.renewals_per_second,
            "renewal_scripts_per_period": per_period,
            "renewal_scripts_per_lease_per_ttl_third": per_ttl_third,
        }));
    }

    Ok(json!(held_rows))
}

/// Enough client connections for `count` streams, [`LEASES_PER_CONNECTION`] each.
async fn connections(options: &BenchOptions, count: usize) -> Result<Vec<Client>, BenchError> {
    let mut clients = Vec::new();
    for _ in 0..count.div_ceil(LEASES_PER_CONNECTION) {
        clients.push(Client::connect_with(options.connect.clone()).await?);
    }
    Ok(clients)
}

/// Waits for every client task, in order; the first failure fails the section.
async fn join_clients<T, E>(
    tasks: Vec<tokio::task::JoinHandle<Result<T, E>>>,
) -> Result<Vec<T>, BenchError>
where
    BenchError: From<E>,
{
    let mut results = Vec::with_capacity(tasks.len());
    for task in tasks {
        results.push(
            task.await
                .map_err(|e| unexpected(format!("client task failed: {e}")))??,
        );
    }
    Ok(results)
}

/// One holding of the lock in a contention run: when it began and when its release was sent.
type Holding = (Instant, Instant);

/// What a contention run measured: each acquisition's wait, and each hand-off's latency (from
/// one holder sending its release to the next holder having the lock).
pub struct Contention {
    pub waits: Figures,
    pub handoffs: Figures,
}

impl Contention {
    fn from_holdings(
        path: &str,
        clients: Vec<(Vec<Duration>, Vec<Holding>)>,
        elapsed: Duration,
    ) -> Self {
        let mut waits = Vec::new();
        let mut holdings = Vec::new();
        for (client_waits, client_holdings) in clients {
            waits.extend(client_waits);
            holdings.extend(client_holdings);
        }
        holdings.sort();
        let handoffs = holdings
            .windows(2)
            .map(|pair| pair[1].0.saturating_duration_since(pair[0].1))
            .collect();
        Contention {
            waits: Figures::from_samples(path, waits, elapsed),
            handoffs: Figures::from_samples(path, handoffs, elapsed),
        }
    }
}

/// `clients` loop on one lock for `window` through the fair `Lease` stream.
async fn contention(
    server: &ConnectOptions,
    clients: usize,
    window: Duration,
) -> Result<Contention, BenchError> {
    let name = format!("bench-contention-{}", Token::random().lease_id());
    let deadline = Instant::now() + window;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let client = Client::connect_with(server.clone()).await?;
        let name = name.clone();
        tasks.push(tokio::spawn(async move {
            let (mut waits, mut holdings) = (Vec::new(), Vec::new());
            while Instant::now() < deadline {
                let begun = Instant::now();
                let guard = client
                    .lease(name.clone())
                    .ttl(Duration::from_secs(30))
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await?;
                let acquired = Instant::now();
                waits.push(acquired - begun);
                holdings.push((acquired, Instant::now()));
                guard.release().await?;
            }
            Ok::<_, ClientError>((waits, holdings))
        }));
    }
    let results = join_clients(tasks).await?;
    Ok(Contention::from_holdings(
        "Lease stream",
        results,
        started.elapsed(),
    ))
}

/// Retry interval of the polling baseline: what a hand-rolled `SET NX` loop sleeps between tries.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The baseline for hand-off: `clients` loop directly on Redis, each trying `SET NX PX` and,
/// whether or not it got the lock, sleeping 50 ms before its next try.
async fn polling_contention(
    redis_url: &str,
    clients: usize,
    window: Duration,
) -> Result<Contention, BenchError> {
    let key = format!("leasehold-bench-polling:{}", Token::random().lease_id());
    let release = Script::from_lua(RELEASE_SCRIPT);
    let deadline = Instant::now() + window;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let redis = Builder::from_config(Config::from_url(redis_url)?).build()?;
        redis.init().await?;
        release.load(&redis).await?;
        let (key, release) = (key.clone(), release.clone());
        tasks.push(tokio::spawn(async move {
            let (mut waits, mut holdings) = (Vec::new(), Vec::new());
            let mut begun = Instant::now();
            while Instant::now() < deadline {
                let token = Token::random();
                let set: Option<String> = redis
                    .set(
                        &key,
                        token.secret(),
                        Some(Expiration::PX(30_000)),
                        Some(SetOptions::NX),
                        false,
                    )
                    .await?;
                if set.is_some() {
                    let acquired = Instant::now();
                    waits.push(acquired - begun);
                    holdings.push((acquired, Instant::now()));
                    let _: i64 = release
                        .evalsha(&redis, key.as_str(), token.secret())
                        .await?;
                }
                tokio::time::sleep(POLL_INTERVAL).await;
                if set.is_some() {
                    begun = Instant::now();
                }
            }
            Ok::<_, fred::error::Error>((waits, holdings))
        }));
    }
    let results = join_clients(tasks).await?;
    Ok(Contention::from_holdings(
        "polling",
        results,
        started.elapsed(),
    ))
}

/// `names` clients, each acquiring and releasing its own name once, all at once.
async fn many_locks(server: &ConnectOptions, names: usize) -> Result<Figures, BenchError> {
    let client = Client::connect_with(server.clone()).await?;
    let prefix = format!("bench-many-{}", Token::random().lease_id());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..names {
        let client = client.clone();
        let name = format!("{prefix}-{i}");
        tasks.push(tokio::spawn(async move {
            let begun = Instant::now();
            let guard = client
                .lease(name)
                .ttl(Duration::from_secs(30))
                .acquire()
                .await?;
            guard.release().await?;
            Ok::<_, ClientError>(begun.elapsed())
        }));
    }
    let mut samples = Vec::with_capacity(names);
    samples.extend(join_clients(tasks).await?);
    Ok(Figures::from_samples(
        "many locks",
        samples,
        started.elapsed(),
    ))
}

struct Held {
    rss_growth: Option<u64>,
    /// Server CPU while holding, as a share of one core.
    cpu_share: Option<f64>,
    /// Redis CPU while holding (its main thread and helpers), as a share of one core.
    redis_cpu_share: f64,
    renewals_per_second: f64,
}

/// Holds `count` leases on distinct names for `window`: what they cost the server's memory and
/// Redis while nothing else happens.
async fn held_leases(
    options: &BenchOptions,
    redis: &fred::prelude::Client,
    count: usize,
    window: Duration,
) -> Result<Held, BenchError> {
    let rss_before = options.server_pid.and_then(rss_bytes);
    let clients = connections(options, count).await?;
    let prefix = format!("bench-held-{}", Token::random().lease_id());
    let opening = std::sync::Arc::new(tokio::sync::Semaphore::new(OPENING_IN_FLIGHT));
    let mut tasks = Vec::with_capacity(count);
    for i in 0..count {
        let client = clients[i / LEASES_PER_CONNECTION].clone();
        let name = format!("{prefix}-{i}");
        let opening = opening.clone();
        let ttl = options.held_ttl;
        tasks.push(tokio::spawn(async move {
            let _turn = opening.acquire().await;
            client.lease(name).ttl(ttl).acquire().await
        }));
    }
    let mut guards = Vec::with_capacity(count);
    guards.extend(join_clients(tasks).await?);
    let rss_held = options.server_pid.and_then(rss_bytes);
    let before = script_calls(redis).await?;
    let redis_cpu_before = redis_cpu_seconds(redis).await?;
    let cpu_before = options.server_pid.and_then(cpu_seconds);
    tokio::time::sleep(window).await;
    let cpu_after = options.server_pid.and_then(cpu_seconds);
    let redis_cpu_after = redis_cpu_seconds(redis).await?;
    let after = script_calls(redis).await?;
    if guards.iter().any(|g| g.is_lost()) {
        return Err(unexpected("a held lease was lost during the measurement"));
    }
    drop(guards); // Each stream half-closes; the server releases.
    Ok(Held {
        rss_growth: rss_before.zip(rss_held).map(|(b, h)| h.saturating_sub(b)),
        cpu_share: cpu_before
            .zip(cpu_after)
            .map(|(b, a)| (a - b) / window.as_secs_f64()),
        redis_cpu_share: (redis_cpu_after - redis_cpu_before) / window.as_secs_f64(),
        renewals_per_second: after.saturating_sub(before) as f64 / window.as_secs_f64(),
    })
}

/// `INFO section` of every primary: the one Redis, or each primary of a cluster.
async fn info_of_primaries(
    redis: &fred::prelude::Client,
    section: fred::types::InfoKind,
) -> Result<Vec<String>, BenchError> {
    let primaries = match redis.cached_cluster_state() {
        Some(state) if redis.is_clustered() => state.unique_primary_nodes(),
        _ => return Ok(vec![redis.info(Some(section)).await?]),
    };
    let mut infos = Vec::with_capacity(primaries.len());
    for primary in primaries {
        infos.push(
            redis
                .with_cluster_node(primary)
                .info(Some(section.clone()))
                .await?,
        );
    }
    Ok(infos)
}

/// EVALSHA calls Redis has served, over every primary (each renewal script is one, and one
/// round trip).
async fn script_calls(redis: &fred::prelude::Client) -> Result<u64, BenchError> {
    let infos = info_of_primaries(redis, fred::types::InfoKind::CommandStats).await?;
    Ok(infos
        .iter()
        .filter_map(|info| {
            info.lines()
                .find_map(|line| line.trim().strip_prefix("cmdstat_evalsha:calls="))
                .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
        })
        .sum())
}

/// CPU time (user + system) Redis has used, from `INFO cpu`, over every primary.
async fn redis_cpu_seconds(redis: &fred::prelude::Client) -> Result<f64, BenchError> {
    let infos = info_of_primaries(redis, fred::types::InfoKind::Cpu).await?;
    let field = |info: &str, name: &str| -> f64 {
        info.lines()
            .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
            .and_then(|value| value.parse().ok())
            .unwrap_or(0.0)
    };
    Ok(infos
        .iter()
        .map(|info| field(info, "used_cpu_user") + field(info, "used_cpu_sys"))
        .sum())
}

/// Waits (at most a minute) until the server uses under 3 % of a core over half a second.
async fn until_idle(server_pid: Option<u32>) {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        match cpu_share_over(server_pid, Duration::from_millis(500)).await {
            Some(share) if share >= 0.03 => continue,
            _ => return,
        }
    }
}

/// The server's CPU over the next `window`, as a share of one core.
async fn cpu_share_over(server_pid: Option<u32>, window: Duration) -> Option<f64> {
    let before = server_pid.and_then(cpu_seconds);
    tokio::time::sleep(window).await;
    let after = server_pid.and_then(cpu_seconds);
    before
        .zip(after)
        .map(|(b, a)| (a - b) / window.as_secs_f64())
}

/// CPU time (user + system) a process has used, from /proc (Linux; 100 ticks per second, the
/// kernel's fixed `USER_HZ` on every Linux architecture Rust targets).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

/// A process's resident memory, from /proc (Linux).
fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// One status line on a terminal; nothing otherwise.
struct Progress {
    enabled: bool,
}

impl Progress {
    fn new() -> Self {
        Progress {
            enabled: std::io::stderr().is_terminal(),
        }
    }

    fn say(&self, what: &str) {
        if self.enabled {
            let _ = write!(std::io::stderr(), "\r\x1b[2Kbench: {what}…");
            let _ = std::io::stderr().flush();
        }
    }

    fn clear(&self) {
        if self.enabled {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
        }
    }
}
