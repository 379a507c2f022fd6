//! Prometheus metrics of one server: what an operator needs to see what leases do.
//!
//! One registry per server (no process-wide globals), so two servers in one process, as in the
//! tests, never mix their figures. Off by default: a disabled [`Metrics`] is `None` inside, and
//! every call on it is a branch and nothing else.
//!
//! Labels are outcomes and reasons, never lock names: a name per label value would grow without
//! bound. An operator may opt in to a bounded list of name prefixes (`--metrics-name-prefix`);
//! a lease whose name starts with one is labelled with it, every other with `""`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

/// At most this many opted-in name prefixes: each multiplies the series of two metrics.
pub const MAX_NAME_PREFIXES: usize = 64;

/// How an acquisition ended, the `outcome` label of `leasehold_acquisitions_total`.
#[derive(Clone, Copy, Debug)]
pub enum Outcome {
    Acquired,
    /// Taken, and the caller asked not to wait.
    Refused,
    /// Still taken when the wait ran out.
    TimedOut,
    /// Redis failed, or the server stopped.
    Failed,
}

impl Outcome {
    /// How an acquisition attempt's result counts.
    pub fn of<T>(attempt: &crate::error::Result<T>) -> Self {
        use crate::error::Error;
        match attempt {
            Ok(_) => Outcome::Acquired,
            Err(Error::LockHeld { .. }) => Outcome::Refused,
            Err(Error::WaitExpired { .. }) => Outcome::TimedOut,
            Err(_) => Outcome::Failed,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Outcome::Acquired => "acquired",
            Outcome::Refused => "refused",
            Outcome::TimedOut => "timed_out",
            Outcome::Failed => "failed",
        }
    }
}

/// A server's metrics; cheap to clone. `Metrics::default()` is off.
#[derive(Clone, Default)]
pub struct Metrics(Option<Arc<Registered>>);

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Metrics").field(&self.is_enabled()).finish()
    }
}

struct Registered {
    registry: Registry,
    prefixes: Vec<String>,
    leases_held: IntGaugeVec,
    waiters: IntGauge,
    acquisitions: IntCounterVec,
    wait_seconds: Histogram,
    hold_seconds: Histogram,
    renewals: IntCounter,
    renewal_failures: IntCounter,
    lost: IntCounterVec,
    moves: IntCounterVec,
    revocations: IntCounterVec,
    redis_seconds: Histogram,
    open_streams: IntGaugeVec,
    elections_led: IntGauge,
    admitted: IntGauge,
    limits: IntGaugeVec,
    redis_in_flight: IntGauge,
    redis_reachable: IntGauge,
    redis_nodes: IntGauge,
    redis_nodes_reachable: IntGauge,
    redis_policy: IntGaugeVec,
    redis_replicas: IntGaugeVec,
    redis_min_replicas_to_write: IntGaugeVec,
    redis_unreplicated: IntGaugeVec,
    not_replicated: IntCounter,
    info: IntGaugeVec,
}

impl Metrics {
    /// Metrics on, labelling leases by the longest of `prefixes` their name starts with.
    pub fn enabled(prefixes: Vec<String>) -> Result<Self, prometheus::Error> {
        if prefixes.len() > MAX_NAME_PREFIXES {
            return Err(prometheus::Error::Msg(format!(
                "at most {MAX_NAME_PREFIXES} metric name prefixes, got {}",
                prefixes.len()
            )));
        }
        let registry = Registry::new();
        let seconds = |name: &str, help: &str, buckets: Vec<f64>| {
            Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))
        };
        let registered = Registered {
            prefixes,
            leases_held: IntGaugeVec::new(
                Opts::new("leasehold_leases_held", "Leases held by open streams now."),
                &["prefix"],
            )?,
            waiters: IntGauge::new("leasehold_waiters", "Streams waiting for a lock now.")?,
            acquisitions: IntCounterVec::new(
                Opts::new(
                    "leasehold_acquisitions_total",
                    "Acquisition attempts, by outcome.",
                ),
                &["outcome", "prefix"],
            )?,
            wait_seconds: seconds(
                "leasehold_acquire_wait_seconds",
                "From the acquire request to its outcome.",
                prometheus::exponential_buckets(0.0005, 4.0, 12)?,
            )?,
            hold_seconds: seconds(
                "leasehold_hold_seconds",
                "How long leases were held, from acquired to released or lost.",
                prometheus::exponential_buckets(0.01, 4.0, 12)?,
            )?,
            renewals: IntCounter::new("leasehold_renewals_total", "Renewals Redis confirmed.")?,
            renewal_failures: IntCounter::new(
                "leasehold_renewal_failures_total",
                "Renewals that failed (Redis unreachable or slow, or the key not ours).",
            )?,
            lost: IntCounterVec::new(
                Opts::new("leasehold_leases_lost_total", "Leases lost, by reason."),
                &["reason"],
            )?,
            moves: IntCounterVec::new(
                Opts::new(
                    "leasehold_lease_moves_total",
                    "Leases kept for their clients to resume elsewhere (handed_over, at shutdown) and leases resumed here (resumed).",
                ),
                &["event"],
            )?,
            revocations: IntCounterVec::new(
                Opts::new(
                    "leasehold_revocations_total",
                    "Holdings ended by an operator's Revoke, by kind (lock, election).",
                ),
                &["kind"],
            )?,
            redis_seconds: seconds(
                "leasehold_redis_round_trip_seconds",
                "Redis command round trips, from sent to answered.",
                prometheus::exponential_buckets(0.0001, 3.0, 12)?,
            )?,
            open_streams: IntGaugeVec::new(
                Opts::new(
                    "leasehold_open_streams",
                    "Open held-lease streams, by kind.",
                ),
                &["kind"],
            )?,
            elections_led: IntGauge::new(
                "leasehold_elections_led",
                "Elections whose leader holds its stream on this server.",
            )?,
            admitted: IntGauge::new(
                "leasehold_leases_admitted",
                "Leases open now against --max-leases: held or waiting, on their own streams or on sessions (each session's stream counts one too).",
            )?,
            limits: IntGaugeVec::new(
                Opts::new(
                    "leasehold_limit",
                    "The server's configured limits: leases, leases_per_connection, waiters, waiters_per_lock, redis_in_flight.",
                ),
                &["limit"],
            )?,
            redis_in_flight: IntGauge::new(
                "leasehold_redis_in_flight",
                "Redis commands in flight now, against --redis-max-in-flight (per Redis node).",
            )?,
            redis_reachable: IntGauge::new(
                "leasehold_redis_reachable",
                "1 while Redis answers (the one Redis, or a majority of Redlock's primaries): gRPC health SERVING; 0 while it does not (NOT_SERVING).",
            )?,
            redis_nodes: IntGauge::new(
                "leasehold_redis_nodes",
                "Redis nodes the server writes locks to: 1, or Redlock's primaries.",
            )?,
            redis_nodes_reachable: IntGauge::new(
                "leasehold_redis_nodes_reachable",
                "Of those, how many answered the last health check (Redlock needs a majority).",
            )?,
            redis_policy: IntGaugeVec::new(
                Opts::new(
                    "leasehold_redis_maxmemory_policy",
                    "1 for each Redis node that holds locks, labelled with its maxmemory-policy as last read (unknown: CONFIG and INFO refused, unchecked); anything but noeviction may evict held locks.",
                ),
                &["node", "policy"],
            )?,
            redis_replicas: IntGaugeVec::new(
                Opts::new(
                    "leasehold_redis_replicas",
                    "Replicas connected and online, per Redis node that holds locks (INFO replication), as last read.",
                ),
                &["node"],
            )?,
            redis_min_replicas_to_write: IntGaugeVec::new(
                Opts::new(
                    "leasehold_redis_min_replicas_to_write",
                    "Each Redis node's min-replicas-to-write (0: off, or unreadable): with 0, a primary cut off from its replicas keeps accepting writes.",
                ),
                &["node"],
            )?,
            redis_unreplicated: IntGaugeVec::new(
                Opts::new(
                    "leasehold_redis_unreplicated",
                    "1 while grants on this Redis node are vouched for without any replica's acknowledgement (no replica connected under --redis-replicas auto, or --redis-replicas 0): a failover would lose them.",
                ),
                &["node"],
            )?,
            not_replicated: IntCounter::new(
                "leasehold_redis_not_replicated_total",
                "Grants and renewals not vouched for because too few replicas acknowledged them in time (WAIT), or too few were connected.",
            )?,
            info: IntGaugeVec::new(
                Opts::new(
                    "leasehold_info",
                    "Always 1: the server's version and Redis mode (single, sentinel, cluster, redlock).",
                ),
                &["version", "redis_mode"],
            )?,
            registry,
        };
        let r = &registered;
        let collectors: [Box<dyn prometheus::core::Collector>; 25] = [
            Box::new(r.leases_held.clone()),
            Box::new(r.waiters.clone()),
            Box::new(r.acquisitions.clone()),
            Box::new(r.wait_seconds.clone()),
            Box::new(r.hold_seconds.clone()),
            Box::new(r.renewals.clone()),
            Box::new(r.renewal_failures.clone()),
            Box::new(r.lost.clone()),
            Box::new(r.moves.clone()),
            Box::new(r.revocations.clone()),
            Box::new(r.redis_seconds.clone()),
            Box::new(r.open_streams.clone()),
            Box::new(r.elections_led.clone()),
            Box::new(r.admitted.clone()),
            Box::new(r.limits.clone()),
            Box::new(r.redis_in_flight.clone()),
            Box::new(r.redis_reachable.clone()),
            Box::new(r.redis_nodes.clone()),
            Box::new(r.redis_nodes_reachable.clone()),
            Box::new(r.redis_policy.clone()),
            Box::new(r.redis_replicas.clone()),
            Box::new(r.redis_min_replicas_to_write.clone()),
            Box::new(r.redis_unreplicated.clone()),
            Box::new(r.not_replicated.clone()),
            Box::new(r.info.clone()),
        ];
        for collector in collectors {
            r.registry.register(collector)?;
        }
        Ok(Metrics(Some(Arc::new(registered))))
    }

    pub fn is_enabled(&self) -> bool {
        self.0.is_some()
    }

    /// The Prometheus text exposition of every metric; `None` when off.
    pub fn render(&self) -> Option<String> {
        let registered = self.0.as_ref()?;
        TextEncoder::new()
            .encode_to_string(&registered.registry.gather())
            .ok()
    }

    /// One Redis command's round trip.
    pub fn redis_round_trip(&self, took: Duration) {
        if let Some(r) = &self.0 {
            r.redis_seconds.observe(took.as_secs_f64());
        }
    }

    /// An acquisition of `name` ended with `outcome`, `waited` after it was asked for.
    pub fn acquisition(&self, name: &str, outcome: Outcome, waited: Duration) {
        if let Some(r) = &self.0 {
            r.acquisitions
                .with_label_values(&[outcome.label(), r.prefix_of(name)])
                .inc();
            r.wait_seconds.observe(waited.as_secs_f64());
        }
    }

    /// One renewal's result.
    pub fn renewal(&self, confirmed: bool) {
        if let Some(r) = &self.0 {
            match confirmed {
                true => r.renewals.inc(),
                false => r.renewal_failures.inc(),
            }
        }
    }

    /// A lease was lost; `reason` is a short fixed label (`not_held`, `expired`, `shutdown`).
    pub fn lost(&self, reason: &'static str) {
        if let Some(r) = &self.0 {
            r.lost.with_label_values(&[reason]).inc();
        }
    }

    /// `count` holdings of `kind` ("lock", "election") were revoked by an operator.
    pub fn revoked(&self, kind: &'static str, count: usize) {
        if let Some(r) = &self.0 {
            let count = u64::try_from(count).unwrap_or(u64::MAX);
            r.revocations.with_label_values(&[kind]).inc_by(count);
        }
    }

    /// A resumable lease moved: `handed_over` (kept at shutdown for its client to resume
    /// elsewhere) or `resumed` (taken back here by its token).
    pub fn moved(&self, event: &'static str) {
        if let Some(r) = &self.0 {
            r.moves.with_label_values(&[event]).inc();
        }
    }

    /// An open stream of `kind` ("lease", "campaign"), counted until the guard drops.
    pub fn open_stream(&self, kind: &'static str) -> Counted {
        Counted::new(
            self.0
                .as_ref()
                .map(|r| r.open_streams.with_label_values(&[kind])),
        )
    }

    /// A stream waiting for its lock, counted until the guard drops.
    pub fn waiting(&self) -> Counted {
        Counted::new(self.0.as_ref().map(|r| r.waiters.clone()))
    }

    /// A lease admitted against the server's limits, counted until the guard drops.
    pub fn admitted(&self) -> Counted {
        Counted::new(self.0.as_ref().map(|r| r.admitted.clone()))
    }

    /// A Redis command in flight, counted until the guard drops.
    pub fn redis_command(&self) -> Counted {
        Counted::new(self.0.as_ref().map(|r| r.redis_in_flight.clone()))
    }

    /// A configured limit (`leases`, `waiters`, ...), for alerts on how near it is.
    pub fn limit(&self, limit: &str, value: usize) {
        if let Some(r) = &self.0 {
            let value = i64::try_from(value).unwrap_or(i64::MAX);
            r.limits.with_label_values(&[limit]).set(value);
        }
    }

    /// The last health check: how many of the `nodes` Redis nodes answered, and whether that
    /// is enough to serve.
    pub fn redis_health(&self, reachable: bool, answered: usize, nodes: usize) {
        if let Some(r) = &self.0 {
            r.redis_reachable.set(i64::from(reachable));
            r.redis_nodes.set(i64::try_from(nodes).unwrap_or(i64::MAX));
            r.redis_nodes_reachable
                .set(i64::try_from(answered).unwrap_or(i64::MAX));
        }
    }

    /// A Redis node's `maxmemory-policy` changed from `before` to `now` (`None`: the node is
    /// new, or no longer holds locks).
    pub fn redis_policy(&self, node: &str, before: Option<&str>, now: Option<&str>) {
        if let Some(r) = &self.0 {
            if let Some(before) = before {
                let _ = r.redis_policy.remove_label_values(&[node, before]);
            }
            if let Some(now) = now {
                r.redis_policy.with_label_values(&[node, now]).set(1);
            }
        }
    }

    /// A Redis node's replicas and `min-replicas-to-write`, as last read.
    pub fn redis_replicas(&self, node: &str, replicas: u32, min_to_write: u32) {
        if let Some(r) = &self.0 {
            r.redis_replicas
                .with_label_values(&[node])
                .set(i64::from(replicas));
            r.redis_min_replicas_to_write
                .with_label_values(&[node])
                .set(i64::from(min_to_write));
        }
    }

    /// Whether grants on a Redis node go unreplicated now.
    pub fn redis_unreplicated(&self, node: &str, unreplicated: bool) {
        if let Some(r) = &self.0 {
            r.redis_unreplicated
                .with_label_values(&[node])
                .set(i64::from(unreplicated));
        }
    }

    /// A Redis node no longer holds locks (a failed-over primary): its series go.
    pub fn redis_replicas_gone(&self, node: &str) {
        if let Some(r) = &self.0 {
            let _ = r.redis_replicas.remove_label_values(&[node]);
            let _ = r.redis_min_replicas_to_write.remove_label_values(&[node]);
            let _ = r.redis_unreplicated.remove_label_values(&[node]);
        }
    }

    /// A grant or renewal too few replicas acknowledged in time.
    pub fn not_replicated(&self) {
        if let Some(r) = &self.0 {
            r.not_replicated.inc();
        }
    }

    /// What the server is: its version and Redis mode.
    pub fn info(&self, redis_mode: &str) {
        if let Some(r) = &self.0 {
            r.info
                .with_label_values(&[env!("CARGO_PKG_VERSION"), redis_mode])
                .set(1);
        }
    }

    /// A leader's stream, counted until the guard drops.
    pub fn leading(&self) -> Counted {
        Counted::new(self.0.as_ref().map(|r| r.elections_led.clone()))
    }

    /// A lease of `name` just taken: counted as held, and its hold time recorded, until the
    /// guard drops.
    pub fn held(&self, name: &str) -> HeldFor {
        HeldFor(self.0.as_ref().map(|r| {
            let gauge = r.leases_held.with_label_values(&[r.prefix_of(name)]);
            gauge.inc();
            (gauge, r.hold_seconds.clone(), Instant::now())
        }))
    }
}

impl Registered {
    fn prefix_of(&self, name: &str) -> &str {
        self.prefixes
            .iter()
            .filter(|prefix| name.starts_with(prefix.as_str()))
            .max_by_key(|prefix| prefix.len())
            .map_or("", String::as_str)
    }
}

/// One count in a gauge, given back on drop.
pub struct Counted(Option<IntGauge>);

impl std::fmt::Debug for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Counted")
    }
}

impl Counted {
    fn new(gauge: Option<IntGauge>) -> Self {
        if let Some(gauge) = &gauge {
            gauge.inc();
        }
        Counted(gauge)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if let Some(gauge) = &self.0 {
            gauge.dec();
        }
    }
}

/// A held lease: counted, and its hold time observed, until dropped.
pub struct HeldFor(Option<(IntGauge, Histogram, Instant)>);

impl Drop for HeldFor {
    fn drop(&mut self) {
        if let Some((gauge, hold_seconds, since)) = &self.0 {
            gauge.dec();
            hold_seconds.observe(since.elapsed().as_secs_f64());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_by_the_longest_opted_in_prefix_and_nothing_else() {
        let metrics = Metrics::enabled(vec!["billing/".into(), "billing/eu/".into()]).unwrap();
        metrics.acquisition("billing/eu/run", Outcome::Acquired, Duration::ZERO);
        metrics.acquisition("reports/x", Outcome::Refused, Duration::ZERO);
        let text = metrics.render().unwrap();
        assert!(
            text.contains(
                r#"leasehold_acquisitions_total{outcome="acquired",prefix="billing/eu/"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"leasehold_acquisitions_total{outcome="refused",prefix=""} 1"#),
            "{text}"
        );
        assert!(!text.contains("reports/x"), "{text}");
    }

    #[test]
    fn off_renders_nothing_and_guards_do_nothing() {
        let metrics = Metrics::default();
        let _held = metrics.held("a");
        let _open = metrics.open_stream("lease");
        assert!(metrics.render().is_none());
        assert!(Metrics::enabled(vec![String::new(); MAX_NAME_PREFIXES + 1]).is_err());
    }
}
