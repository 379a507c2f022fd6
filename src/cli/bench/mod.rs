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
//!    plain lock;
//! 6. check: the token check (`Check`) against one direct Redis `GET` and a unary echo that
//!    pings Redis once.
//!
//! The rslock and etcd peers are in `benches/peers.rs`, a separate binary, so the server never
//! links them.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use fred::prelude::*;
use fred::types::scripts::Script;
use serde_json::json;
use tokio::time::Instant;

use leasehold::store::Token;
use leasehold_client::{Client, ConnectOptions};

mod check;
mod contention;
mod echo;
mod figures;
mod held;
mod many;
mod paths;
mod primitives;
mod stats;
mod uncontended;

use contention::contention_section;
use held::held_section;
use many::many_section;
use stats::{cpu_seconds, cpu_share_over, redis_cpu_seconds, rss_bytes, script_calls, until_idle};
use uncontended::uncontended_section;

use figures::{Figures, ms, print_uncontended, ratio};
use leasehold_client::ClientError;
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
    /// Hold them on sessions of this many leases each (`None`: one Lease stream each).
    pub per_session: Option<usize>,
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
    Check,
}

impl BenchOptions {
    fn runs(&self, section: Section) -> bool {
        self.sections.is_empty() || self.sections.contains(&section)
    }
}

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
    if options.runs(Section::Check) {
        figures["check"] = check::section(options, &redis, &progress).await?;
    }
    Ok(figures)
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
