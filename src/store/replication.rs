//! Whether a write is where a failover or a restart will find it, before a lease is vouched for.
//!
//! Redis replicates asynchronously: a primary answers a script before its replicas have it, so a
//! failover can promote a replica that never saw the grant (or the renewal) a holder was told of,
//! and hand the lock to a second holder. `WAIT n timeout` answers how many replicas acknowledged
//! every write sent earlier *on the same connection*; `WAITAOF 1 n timeout` (Redis 7.2+) also waits
//! for the primary's own disk. Neither can run inside a script, so each grant, renewal and resume
//! is followed by one on the connection that ran it, and only then told to its holder.
//!
//! One `WAIT` covers every write sent before it on its connection, so the calls of one node share
//! them ([`super::acknowledgement`]): under load a batch of grants and renewals pays one `WAIT`,
//! not one each. This module decides what each write must wait for ([`Replication::plan`]).
//!
//! What each node is asked at start, after every reconnection and with every health check
//! ([`Replication::check`]): its connected replicas, `min-replicas-to-write`, whether it keeps an
//! append-only file (and fsyncs it always), whether it has `WAITAOF`, and whether it came back
//! empty: a node that restarted (new `run_id`) without an AOF and not by a promotion has lost
//! every lease it held, and grants nothing until the leases its old incarnation could have held
//! have expired ([`RestartHold`]).

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand, InfoKind};
use tokio::time::Instant;
use tracing::{error, info, warn};

use super::acknowledgement::{Ask, Plan, Rounds};
use super::each_node::ask_each_node;
use crate::error::{Error, Result};
use crate::metrics::Metrics;

/// `--redis-replicas`: how many replicas must acknowledge a write before a lease is vouched for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replicas {
    /// Every replica the primary reports as connected (and online); none connected: no wait,
    /// warned of (a failover would lose what is granted meanwhile).
    Auto,
    /// Exactly this many; grants are refused while fewer are connected. `0`: never wait.
    Exactly(u32),
}

impl FromStr for Replicas {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        if text == "auto" {
            return Ok(Replicas::Auto);
        }
        text.parse().map(Replicas::Exactly).map_err(|_| {
            format!(
                "--redis-replicas takes auto or a number of replicas (0: never wait), not {text:?}"
            )
        })
    }
}

impl std::fmt::Display for Replicas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Replicas::Auto => f.write_str("auto"),
            Replicas::Exactly(n) => write!(f, "{n}"),
        }
    }
}

/// Default for `--redis-restart-hold`: the longest a node that came back empty waits before it
/// grants again. What it waits is the longest TTL this server vouched for, at most this: the
/// longest TTL a lease may have (an hour), so that by default no holder can still believe.
pub const DEFAULT_RESTART_HOLD: Duration = Duration::from_secs(3600);

/// How to make sure of a write before vouching for it.
#[derive(Clone, Copy, Debug)]
pub struct ReplicationSettings {
    pub replicas: Replicas,
    /// `--redis-durable`: also on the primary's disk (`WAITAOF`, or `appendfsync always`).
    pub durable: bool,
    /// `--redis-restart-hold`: see [`DEFAULT_RESTART_HOLD`]; zero turns the hold off.
    pub restart_hold: Duration,
}

impl Default for ReplicationSettings {
    fn default() -> Self {
        ReplicationSettings {
            replicas: Replicas::Auto,
            durable: false,
            restart_hold: DEFAULT_RESTART_HOLD,
        }
    }
}

/// What one node said of itself, as last read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeState {
    /// Replicas connected and online (`INFO replication`).
    pub replicas: u32,
    /// `min-replicas-to-write` (0: off, or not readable).
    pub min_replicas_to_write: u32,
    /// `appendonly yes`: a restart keeps what was written.
    pub aof: bool,
    /// `appendfsync always`: on disk before the reply.
    pub fsync_always: bool,
    /// Redis 7.2+ (or a Valkey that has it): `WAITAOF` exists.
    pub waitaof: bool,
    /// `run_id`, to tell a restart from a reconnection.
    pub run_id: String,
    /// A promoted replica keeps its old primary's history as `master_replid2`; a node that
    /// restarted has none.
    pub promoted: bool,
    pub uptime: Duration,
    /// It has had a replica since this server first read it: losing them all is a
    /// degradation to warn of, not a standalone Redis's normal state.
    pub had_replicas: bool,
    /// Under `auto`, replicas that left less than [`LOST_REPLICA_WAIT`] ago are still waited
    /// for: this many, until then.
    pub replicas_floor: u32,
    pub floor_until: Option<Instant>,
}

impl NodeState {
    /// The replicas `auto` still waits for at `now` (see [`LOST_REPLICA_WAIT`]).
    fn floor(&self, now: Instant) -> u32 {
        match self.floor_until {
            Some(until) if until > now => self.replicas_floor,
            _ => 0,
        }
    }
}

/// How long `--redis-replicas auto` goes on waiting for a replica that left. A primary whose
/// replica left may be an old primary cut off from it and already replaced by it: when the
/// partition heals, the promoted replica closes its link and the old primary sees none at once,
/// and would grant (and renew) unreplicated until the Sentinels demote it, a few seconds later.
/// Past this, a replica that stays gone (it crashed, it was removed) is no longer waited for,
/// and grants go on unreplicated, warned of and alerted on.
pub const LOST_REPLICA_WAIT: Duration = Duration::from_secs(15);

/// The replication state of one connection's nodes, shared by the connection, its reconnect
/// watcher and the health check.
pub struct Replication {
    settings: ReplicationSettings,
    metrics: Metrics,
    /// Node address (`host:port`) -> what it said last.
    nodes: Mutex<BTreeMap<String, NodeState>>,
    /// Node address -> until when it grants nothing (it came back empty).
    holds: Mutex<HashMap<String, Instant>>,
    /// Node address -> its `WAIT`s.
    rounds: Mutex<HashMap<String, Arc<Rounds>>>,
    /// The longest TTL this server vouched for, in ms: what a node that came back empty waits
    /// out (at most the restart hold).
    longest_ttl_ms: AtomicU64,
    /// Set once the server runs on this connection (before, the start logs its own line).
    started: AtomicBool,
    /// Redis's own engine fails its primaries over (Sentinel, Cluster): a node without a
    /// replica there is exposed from the start.
    failover_expected: bool,
}

impl Replication {
    pub fn new(settings: ReplicationSettings, metrics: Metrics, failover_expected: bool) -> Self {
        Replication {
            settings,
            metrics,
            nodes: Mutex::new(BTreeMap::new()),
            holds: Mutex::new(HashMap::new()),
            rounds: Mutex::new(HashMap::new()),
            longest_ttl_ms: AtomicU64::new(0),
            started: AtomicBool::new(false),
            failover_expected,
        }
    }

    /// Whether grants on a node in `state` are vouched for unreplicated where a failover may
    /// happen: a Sentinel's or Cluster's primary, or one that had a replica (it was set up to be
    /// failed over). A standalone Redis that never had one cannot fail over to anything.
    fn exposed(&self, state: &NodeState) -> bool {
        let may_fail_over = self.failover_expected || state.had_replicas;
        match self.settings.replicas {
            Replicas::Exactly(0) => may_fail_over,
            Replicas::Auto => state.replicas == 0 && may_fail_over,
            Replicas::Exactly(_) => false,
        }
    }

    /// Says in one line per node what a failover and a restart can and cannot lose, and refuses
    /// `--redis-durable` where neither `WAITAOF` nor `appendfsync always` can keep its promise.
    pub fn start(&self) -> Result<()> {
        let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for (node, state) in &nodes {
            if self.settings.durable && !(state.aof && (state.waitaof || state.fsync_always)) {
                let has = if state.aof {
                    "neither WAITAOF nor appendfsync always"
                } else {
                    "appendonly no"
                };
                return Err(Error::FailedPrecondition(format!(
                    "--redis-durable needs appendonly yes and either Redis 7.2+ (WAITAOF) or appendfsync always, and redis {node} has {has}: set them, upgrade, or drop --redis-durable"
                )));
            }
            self.announce(node, state);
        }
        self.started.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// The line that says what `node` promises in this mode.
    fn announce(&self, node: &str, state: &NodeState) {
        let restart = match (state.aof, self.settings.durable) {
            (true, true) => {
                "a restart, even of its host, keeps every lease (on disk before vouched for)"
            }
            (true, false) => {
                "a restart keeps every lease (AOF; a host crash may lose the last second's unless --redis-durable)"
            }
            (false, _) if self.settings.restart_hold.is_zero() => {
                "a restart empty loses every lease, and --redis-restart-hold 0 lets it grant at once: two holders are possible"
            }
            (false, _) => {
                "a restart empty loses every lease; it then grants nothing until they expired (--redis-restart-hold)"
            }
        };
        let min = state.min_replicas_to_write;
        match self.needed(state) {
            Err(needed) if self.settings.replicas == Replicas::Auto => warn!(
                node,
                replicas = state.replicas,
                needed,
                "redis {node} has {} connected replica(s), fewer than the {needed} it had: nothing on it is vouched for until they are back, or for {LOST_REPLICA_WAIT:?} (it may be an old primary cut off and replaced); {restart}",
                state.replicas
            ),
            Err(needed) => warn!(
                node,
                replicas = state.replicas,
                needed,
                "redis {node} has {} connected replica(s) and --redis-replicas {needed} needs more: no new lease on it until they connect; {restart}",
                state.replicas
            ),
            Ok(0) if !self.exposed(state) => info!(
                node,
                "redis {node} has no replica and none to fail over to: nothing to wait for; {restart}"
            ),
            Ok(0) if self.settings.replicas == Replicas::Exactly(0) => warn!(
                node,
                "redis {node}: grants are not waited on by any replica (--redis-replicas 0): a failover may lose a lease and hand it to a second holder; {restart}"
            ),
            Ok(0) => warn!(
                node,
                "redis {node} has no connected replica: grants are vouched for unreplicated (--redis-replicas auto), so a failover would lose them; {restart}"
            ),
            Ok(needed) => info!(
                node,
                replicas = state.replicas,
                min_replicas_to_write = min,
                "redis {node}: every grant and renewal is vouched for once {needed} replica(s) acknowledged it (WAIT): a failover to one of them loses none; {restart}{}",
                if min == 0 {
                    "; min-replicas-to-write is 0: an old primary cut off from its replicas keeps taking writes (set it to 1, see docs/redis-modes.md)"
                } else {
                    ""
                }
            ),
        }
    }

    /// How many replicas a write on a node in `state` needs: `Err(n)` when `n` are required but
    /// fewer are connected.
    fn needed(&self, state: &NodeState) -> std::result::Result<u32, u32> {
        match self.settings.replicas {
            Replicas::Auto => match state.floor(Instant::now()) {
                floor if floor > state.replicas => Err(floor),
                _ => Ok(state.replicas),
            },
            Replicas::Exactly(n) if state.replicas >= n => Ok(n),
            Replicas::Exactly(n) => Err(n),
        }
    }

    /// Why no new lease may be taken on `client`'s nodes now: too few replicas for
    /// `--redis-replicas N`, or a node that came back empty and is waiting out its old leases.
    pub fn refusal(&self, client: &Client, key: &str) -> Option<Error> {
        let node = node_of(client, key)?.to_string();
        if let Some(until) = self
            .holds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&node)
        {
            let left = until.saturating_duration_since(Instant::now());
            if !left.is_zero() {
                return Some(Error::RedisRestartedEmpty { left });
            }
        }
        let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        let state = nodes.get(&node)?;
        match self.needed(state) {
            Err(needed) => Some(Error::NotReplicated {
                context: "acquire",
                acked: state.replicas,
                needed,
            }),
            Ok(_) => None,
        }
    }

    /// What vouching for a write to `key`'s node takes now: `None` when nothing is waited for
    /// (`--redis-replicas 0`, or `auto` with no replica, and no disk asked for); an error when
    /// too few replicas are connected for `--redis-replicas N`. Notes `ttl` as vouched for.
    pub fn plan(
        &self,
        client: &Client,
        key: &str,
        ttl: Duration,
        context: &'static str,
    ) -> Result<Option<Plan>> {
        self.longest_ttl_ms.fetch_max(
            u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        if self.settings.replicas == Replicas::Exactly(0) && !self.settings.durable {
            return Ok(None);
        }
        let Some(server) = node_of(client, key) else {
            return Err(Error::NotConnected { context });
        };
        let node = server.to_string();
        // Read under the lock, not cloned: this runs for every grant and renewal.
        let (needed, local) = {
            let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
            let unread = NodeState::default();
            let state = nodes.get(&node).unwrap_or(&unread);
            // With appendfsync always the reply came after the fsync: nothing to wait for
            // locally.
            let local = self.settings.durable && state.waitaof && !state.fsync_always;
            (
                self.needed(state)
                    .map_err(|needed| (state.replicas, needed)),
                local,
            )
        };
        let needed = match needed {
            Ok(needed) => needed,
            Err((acked, needed)) => {
                self.metrics.not_replicated();
                return Err(Error::NotReplicated {
                    context,
                    acked,
                    needed,
                });
            }
        };
        if needed == 0 && !local {
            return Ok(None);
        }
        let rounds = {
            let mut rounds = self.rounds.lock().unwrap_or_else(|p| p.into_inner());
            rounds.entry(node).or_default().clone()
        };
        Ok(Some(Plan {
            server,
            ask: Ask {
                replicas: needed,
                local,
            },
            rounds,
            context,
            metrics: self.metrics.clone(),
        }))
    }

    /// Reads what every node `client` writes to says of itself, and records what changed
    /// (logged once per change, and in the metrics). A node that does not answer keeps what
    /// was last read.
    pub async fn check(&self, client: &Client, timeout: Duration) {
        let read =
            ask_each_node(client, |node| async move { state_of(&node, timeout).await }).await;
        if read.is_empty() {
            return; // Not connected now: nothing new to know, and nothing to forget.
        }
        self.record(read);
    }

    fn record(&self, read: Vec<(String, Option<NodeState>)>) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        let mut now = BTreeMap::new();
        for (node, answer) in read {
            let before = nodes.remove(&node);
            let Some(mut state) = answer.or_else(|| before.clone()) else {
                continue;
            };
            state.had_replicas =
                state.replicas > 0 || before.as_ref().is_some_and(|before| before.had_replicas);
            if let Some(before) = &before {
                let now = Instant::now();
                let waited = before.replicas.max(before.floor(now));
                if state.replicas < waited {
                    // Still waited for a while: see LOST_REPLICA_WAIT.
                    let until = match before.floor(now) {
                        0 => now + LOST_REPLICA_WAIT,
                        _ => before.floor_until.unwrap_or(now),
                    };
                    (state.replicas_floor, state.floor_until) = (waited, Some(until));
                }
            }
            if let Some(before) = &before
                && before.run_id != state.run_id
                && !before.run_id.is_empty()
            {
                self.restarted(&node, &state);
            }
            self.metrics
                .redis_replicas(&node, state.replicas, state.min_replicas_to_write);
            self.metrics.redis_unreplicated(&node, self.exposed(&state));
            let changed = before.as_ref().is_none_or(|before| {
                before.replicas != state.replicas
                    || before.min_replicas_to_write != state.min_replicas_to_write
                    || before.aof != state.aof
            });
            if changed && self.started.load(Ordering::Relaxed) {
                self.announce(&node, &state);
            }
            now.insert(node, state);
        }
        for node in nodes.keys() {
            self.metrics.redis_replicas_gone(node);
        }
        *nodes = now;
    }

    /// `node` came back with a new `run_id`. Without an AOF, and not as a promoted replica, it
    /// has lost every lease its old incarnation held; their holders may still believe in them
    /// for up to their TTL, so it grants nothing until that has passed since it started.
    fn restarted(&self, node: &str, state: &NodeState) {
        if state.aof || state.promoted || self.settings.restart_hold.is_zero() {
            return;
        }
        let longest = Duration::from_millis(self.longest_ttl_ms.load(Ordering::Relaxed));
        let hold = longest.min(self.settings.restart_hold);
        let left = hold.saturating_sub(state.uptime);
        if left.is_zero() {
            return;
        }
        error!(
            node,
            hold_ms = left.as_millis() as u64,
            "redis {node} restarted empty (new run_id, no AOF): no new lease on it for {left:?}, until every lease its old incarnation could hold has expired (--redis-restart-hold)"
        );
        self.holds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(node.to_owned(), Instant::now() + left);
    }
}

/// The node that serves `key`: on a cluster, per the slot map; elsewhere the one connected.
fn node_of(client: &Client, key: &str) -> Option<Server> {
    if client.is_clustered() {
        let slot = fred::util::redis_keyslot(key.as_bytes());
        let routing = client.cached_cluster_state()?;
        return routing.get_server(slot).cloned();
    }
    client.active_connections().into_iter().next()
}

/// One node's state: `INFO` (server, replication, persistence) and `CONFIG GET`; `None` when it
/// does not answer.
async fn state_of<C: ClientLike + ServerInterface>(
    node: &C,
    timeout: Duration,
) -> Option<NodeState> {
    let info = node.info::<String>(Some(InfoKind::Default));
    let text = match tokio::time::timeout(timeout, info).await {
        Ok(Ok(text)) => text,
        _ => return None,
    };
    let mut state = parse_info(&text);
    let config = CustomCommand::new_static("CONFIG", ClusterHash::Random, false);
    let asked =
        node.custom::<Value, _>(config, vec!["GET", "appendfsync", "min-replicas-to-write"]);
    // CONFIG may be renamed or not granted (managed Redis): what INFO said stands.
    if let Ok(Ok(reply)) = tokio::time::timeout(timeout, asked).await {
        let pairs = config_pairs(reply);
        state.fsync_always = pairs.get("appendfsync").is_some_and(|v| v == "always");
        state.min_replicas_to_write = pairs
            .get("min-replicas-to-write")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
    }
    Some(state)
}

/// The fields of `INFO`'s default sections that say where a write survives.
fn parse_info(text: &str) -> NodeState {
    let mut state = NodeState::default();
    for line in text.lines() {
        let Some((field, value)) = line.trim().split_once(':') else {
            continue;
        };
        match field {
            "run_id" => state.run_id = value.to_owned(),
            "uptime_in_seconds" => {
                state.uptime = Duration::from_secs(value.parse().unwrap_or(0));
            }
            "redis_version" => state.waitaof = at_least_7_2(value),
            "aof_enabled" => state.aof = value == "1",
            "master_replid2" => state.promoted = value.bytes().any(|b| b != b'0'),
            _ if field.starts_with("slave")
                && field[5..].bytes().all(|b| b.is_ascii_digit())
                && value.split(',').any(|part| part == "state=online") =>
            {
                state.replicas += 1;
            }
            _ => {}
        }
    }
    state
}

fn at_least_7_2(version: &str) -> bool {
    let mut parts = version
        .split('.')
        .map(|part| part.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (7, 2)
}

/// `CONFIG GET`'s answer as name -> value: a flat array (RESP2) or a map (RESP3).
fn config_pairs(reply: Value) -> HashMap<String, String> {
    let mut pairs = HashMap::new();
    match reply {
        Value::Array(values) => {
            let mut values = values.into_iter();
            while let (Some(name), Some(value)) = (values.next(), values.next()) {
                if let (Some(name), Some(value)) = (name.into_string(), value.into_string()) {
                    pairs.insert(name, value);
                }
            }
        }
        Value::Map(map) => {
            for (name, value) in map.inner() {
                if let (Some(name), Some(value)) = (name.into_string(), value.into_string()) {
                    pairs.insert(name, value);
                }
            }
        }
        _ => {}
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_says_where_a_write_survives() {
        let text = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\nuptime_in_seconds:12\r\n\
                    # Persistence\r\naof_enabled:0\r\n\
                    # Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
                    slave0:ip=127.0.0.1,port=7001,state=online,offset=10,lag=0\r\n\
                    slave1:ip=127.0.0.1,port=7002,state=wait_bgsave,offset=0,lag=0\r\n\
                    master_replid2:0000000000000000000000000000000000000000\r\n";
        let state = parse_info(text);
        assert_eq!(state.replicas, 1, "only the online replica counts");
        assert_eq!(state.run_id, "abc");
        assert_eq!(state.uptime, Duration::from_secs(12));
        assert!(!state.aof && !state.waitaof && !state.promoted);
        let promoted = parse_info("redis_version:7.2.4\r\naof_enabled:1\r\nmaster_replid2:9f\r\n");
        assert!(promoted.aof && promoted.waitaof && promoted.promoted);
        assert!(at_least_7_2("8.0.1") && !at_least_7_2("6.2.14"));
    }

    #[test]
    fn replicas_parse_and_refuse_when_too_few() {
        assert_eq!("auto".parse(), Ok(Replicas::Auto));
        assert_eq!("2".parse(), Ok(Replicas::Exactly(2)));
        assert!("some".parse::<Replicas>().is_err());
        let of = |replicas| {
            Replication::new(
                ReplicationSettings {
                    replicas,
                    ..Default::default()
                },
                Metrics::default(),
                false,
            )
        };
        let one = NodeState {
            replicas: 1,
            ..Default::default()
        };
        assert_eq!(of(Replicas::Auto).needed(&one), Ok(1));
        assert_eq!(of(Replicas::Exactly(2)).needed(&one), Err(2));
        assert_eq!(of(Replicas::Exactly(0)).needed(&one), Ok(0));
    }

    #[test]
    fn auto_goes_on_waiting_for_a_replica_that_just_left() {
        let replication =
            Replication::new(ReplicationSettings::default(), Metrics::default(), false);
        let read = |replicas| {
            let state = NodeState {
                replicas,
                run_id: "a".into(),
                ..Default::default()
            };
            replication.record(vec![("n:1".into(), Some(state))]);
            let nodes = replication.nodes.lock().unwrap_or_else(|p| p.into_inner());
            replication.needed(&nodes["n:1"])
        };
        assert_eq!(read(0), Ok(0), "a Redis that never had one waits for none");
        assert_eq!(read(1), Ok(1));
        // Gone (a crash, or a partition healed behind a promotion): still waited for, so
        // nothing is vouched for on this node for LOST_REPLICA_WAIT...
        assert_eq!(read(0), Err(1));
        assert_eq!(read(0), Err(1), "the wait is not restarted by every read");
        // ...unless it is back.
        assert_eq!(read(1), Ok(1));
    }
}
