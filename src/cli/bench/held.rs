//! Section 4: many leases held at once: server memory and CPU, and the renewal scripts Redis
//! serves.

use super::*;

/// Lease streams per client connection in the held-leases section (the server allows 10,000).
pub(super) const LEASES_PER_CONNECTION: usize = 1_000;
/// Acquisitions in flight at once while opening held leases: a burst of 50,000 at once would
/// measure the Redis queue (and hit the server's Redis timeout), not holding.
pub(super) const OPENING_IN_FLIGHT: usize = 500;

pub(super) async fn held_section(
    options: &BenchOptions,
    redis: &fred::prelude::Client,
    window: Duration,
    progress: &Progress,
) -> Result<serde_json::Value, BenchError> {
    let on = match options.per_session {
        Some(k) => format!("{k} leases per Session stream"),
        None => "one Lease stream each".to_owned(),
    };
    println!(
        "\n## Held leases (TTL {}, renewed every third of it; {on}; {LEASES_PER_CONNECTION} leases per connection)\n",
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
        // As many idle or ticking streams as the leases take: one per lease, or per session.
        let streams = options.per_session.map_or(count, |k| count.div_ceil(k));
        // The floor first, kept open while the leases are measured, so each is measured on
        // memory the server never had before.
        let mut floor = None;
        let mut idle = None;
        if with_echo {
            progress.say(&format!("idle echo streams: {streams}"));
            let before = options.server_pid.and_then(rss_bytes);
            let connections = connections(options, streams).await?;
            idle = Some(echo::idle_streams(connections, streams).await?);
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
            progress.say(&format!("echo streams ticking: {streams}"));
            let interval = options.held_ttl / 3;
            let connections = connections(options, streams).await?;
            let ticking = echo::ticking_streams(connections, streams, interval).await?;
            ticking_cpu = cpu_share_over(options.server_pid, window).await;
            drop(ticking);
        }
        progress.clear();
        let floor_per_stream = floor.map(|bytes| bytes as f64 / streams as f64);
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
            "per_session": options.per_session,
            "streams": streams,
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
pub(super) async fn connections(
    options: &BenchOptions,
    count: usize,
) -> Result<Vec<Client>, BenchError> {
    let mut clients = Vec::new();
    for _ in 0..count.div_ceil(LEASES_PER_CONNECTION) {
        clients.push(Client::connect_with(options.connect.clone()).await?);
    }
    Ok(clients)
}

pub(super) struct Held {
    rss_growth: Option<u64>,
    /// Server CPU while holding, as a share of one core.
    cpu_share: Option<f64>,
    /// Redis CPU while holding (its main thread and helpers), as a share of one core.
    redis_cpu_share: f64,
    renewals_per_second: f64,
}

/// Holds `count` leases on distinct names for `window`: what they cost the server's memory and
/// Redis while nothing else happens.
pub(super) async fn held_leases(
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
    let one_stream_each = if options.per_session.is_some() {
        0
    } else {
        count
    };
    for i in 0..one_stream_each {
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
    let mut sessions = Vec::new();
    match options.per_session {
        None => guards.extend(join_clients(tasks).await?),
        Some(k) => sessions = on_sessions(options, &clients, &prefix, count, k).await?,
    }
    let rss_held = options.server_pid.and_then(rss_bytes);
    let before = script_calls(redis).await?;
    let redis_cpu_before = redis_cpu_seconds(redis).await?;
    let cpu_before = options.server_pid.and_then(cpu_seconds);
    tokio::time::sleep(window).await;
    let cpu_after = options.server_pid.and_then(cpu_seconds);
    let redis_cpu_after = redis_cpu_seconds(redis).await?;
    let after = script_calls(redis).await?;
    let lost_on_sessions = sessions
        .iter()
        .flat_map(|(_, leases)| leases)
        .any(|lease| lease.is_lost());
    if guards.iter().any(|g| g.is_lost()) || lost_on_sessions {
        return Err(unexpected("a held lease was lost during the measurement"));
    }
    drop(guards); // Each stream half-closes; the server releases.
    drop(sessions); // Each session closes; the server releases its leases.
    Ok(Held {
        rss_growth: rss_before.zip(rss_held).map(|(b, h)| h.saturating_sub(b)),
        cpu_share: cpu_before
            .zip(cpu_after)
            .map(|(b, a)| (a - b) / window.as_secs_f64()),
        redis_cpu_share: (redis_cpu_after - redis_cpu_before) / window.as_secs_f64(),
        renewals_per_second: after.saturating_sub(before) as f64 / window.as_secs_f64(),
    })
}

/// A session and the leases it holds.
type HeldSession = (
    leasehold_client::Session,
    Vec<leasehold_client::SessionLease>,
);

/// Holds `count` leases on distinct names, `per_session` on each session, the sessions spread
/// over `clients` as the leases would be ([`LEASES_PER_CONNECTION`] leases per connection).
async fn on_sessions(
    options: &BenchOptions,
    clients: &[Client],
    prefix: &str,
    count: usize,
    per_session: usize,
) -> Result<Vec<HeldSession>, BenchError> {
    let opening = std::sync::Arc::new(tokio::sync::Semaphore::new(OPENING_IN_FLIGHT));
    let mut tasks = Vec::new();
    for first in (0..count).step_by(per_session) {
        let client = clients[first / LEASES_PER_CONNECTION].clone();
        let names: Vec<String> = (first..(first + per_session).min(count))
            .map(|i| format!("{prefix}-{i}"))
            .collect();
        let (opening, ttl) = (opening.clone(), options.held_ttl);
        tasks.push(tokio::spawn(async move {
            let session = client.session().ttl(ttl).open().await?;
            let mut leases = Vec::with_capacity(names.len());
            {
                let mut taking = futures_util::stream::FuturesUnordered::new();
                for name in names {
                    let (session, opening) = (&session, opening.clone());
                    taking.push(async move {
                        let _turn = opening.acquire().await;
                        session.lock(name).acquire().await
                    });
                }
                use futures_util::StreamExt;
                while let Some(lease) = taking.next().await {
                    leases.push(lease?);
                }
            }
            Ok::<_, ClientError>((session, leases))
        }));
    }
    join_clients(tasks).await
}
