//! What the bench reads of the processes it measures: Redis's `INFO`, the server's /proc.

use super::*;

/// `INFO section` of every primary: the one Redis, or each primary of a cluster.
pub(super) async fn info_of_primaries(
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
pub(super) async fn script_calls(redis: &fred::prelude::Client) -> Result<u64, BenchError> {
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
pub(super) async fn redis_cpu_seconds(redis: &fred::prelude::Client) -> Result<f64, BenchError> {
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
pub(super) async fn until_idle(server_pid: Option<u32>) {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        match cpu_share_over(server_pid, Duration::from_millis(500)).await {
            Some(share) if share >= 0.03 => continue,
            _ => return,
        }
    }
}

/// The server's CPU over the next `window`, as a share of one core.
pub(super) async fn cpu_share_over(server_pid: Option<u32>, window: Duration) -> Option<f64> {
    let before = server_pid.and_then(cpu_seconds);
    tokio::time::sleep(window).await;
    let after = server_pid.and_then(cpu_seconds);
    before
        .zip(after)
        .map(|(b, a)| (a - b) / window.as_secs_f64())
}

/// CPU time (user + system) a process has used, from /proc (Linux; 100 ticks per second, the
/// kernel's fixed `USER_HZ` on every Linux architecture Rust targets).
pub(super) fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

/// A process's resident memory, from /proc (Linux).
pub(super) fn rss_bytes(pid: u32) -> Option<u64> {
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
