//! Whether Redis may evict the locks: every lock is a key with a TTL, and any `maxmemory-policy`
//! but `noeviction` (`allkeys-*` evicts any key, `volatile-*` exactly the keys with a TTL) lets
//! Redis drop a held lock under memory pressure and hand it to the next caller.
//!
//! Each node that holds locks (the one Redis, the Sentinel's primary, every Cluster primary,
//! every Redlock primary) is asked at start, after every reconnection (a failover's new primary
//! may be configured differently) and with every health check (a `CONFIG SET` needs no
//! reconnection). `CONFIG GET` is asked first; where it is refused (renamed or disabled, as on
//! managed Redis, or not granted by the ACL) `INFO memory`'s `maxmemory_policy` says the same.
//! Only a node that refuses both is left unchecked: warned of, shown in the metric, and served.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand};
use tracing::{error, info, warn};

use super::each_node::ask_each_node;
use crate::error::Error;
use crate::metrics::Metrics;

/// The one policy that never evicts a key: a full Redis refuses writes instead.
pub const NO_EVICTION: &str = "noeviction";

/// What a node said of its `maxmemory-policy`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Its setting, by `CONFIG GET` or `INFO memory`.
    Read(String),
    /// It refused both (`CONFIG` and `INFO` renamed, disabled or not granted).
    Unchecked,
}

impl Policy {
    /// The metric's `policy` label.
    fn label(&self) -> &str {
        match self {
            Policy::Read(policy) => policy,
            Policy::Unchecked => "unknown",
        }
    }

    /// Whether this setting lets Redis evict keys.
    fn evicts(&self) -> bool {
        matches!(self, Policy::Read(policy) if policy != NO_EVICTION)
    }
}

/// The nodes of one connection and their policies, as last read. Shared by the connection (which
/// refuses new acquisitions while a node may evict), its reconnect watcher and the health check.
pub struct Eviction {
    /// `--redis-allow-eviction`: an evicting node is warned of, and served.
    allowed: bool,
    metrics: Metrics,
    /// Node address (`host:port`) -> its policy. Nodes that no longer hold locks (a failed-over
    /// primary) are dropped at the next read.
    nodes: Mutex<BTreeMap<String, Policy>>,
    /// Set once the server runs on this connection; before, an evicting node refuses the start
    /// with its own sentence, and is not logged too.
    started: AtomicBool,
}

impl Eviction {
    pub fn new(allowed: bool, metrics: Metrics) -> Self {
        Eviction {
            allowed,
            metrics,
            nodes: Mutex::new(BTreeMap::new()),
            started: AtomicBool::new(false),
        }
    }

    /// The connection is open: from now on an evicting node is logged as an error.
    pub fn started(&self) {
        self.started.store(true, Ordering::Relaxed);
    }

    /// The refusal for a new acquisition: the first node whose policy may evict (unless
    /// allowed), as [`Error::RedisMayEvict`].
    pub fn refusal(&self) -> Option<Error> {
        if self.allowed {
            return None;
        }
        let nodes = self
            .nodes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        nodes
            .iter()
            .find(|(_, policy)| policy.evicts())
            .map(|(node, policy)| Error::RedisMayEvict {
                node: node.clone(),
                policy: policy.label().to_owned(),
            })
    }

    /// Reads the policy of every node `client` writes to, and records what changed (logged once
    /// per change, and in the metric). A node that does not answer keeps what was last read.
    pub async fn check(&self, client: &Client, timeout: Duration) {
        let read = ask_each_node(
            client,
            |node| async move { policy_of(&node, timeout).await },
        )
        .await;
        if read.is_empty() {
            return; // Not connected now: nothing new to know, and nothing to forget.
        }
        self.record(read);
    }

    /// Replaces the nodes by those just `read` (`None`: it did not answer, keep the last).
    fn record(&self, read: Vec<(String, Option<Policy>)>) {
        let mut nodes = self
            .nodes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut now = BTreeMap::new();
        for (node, answer) in read {
            let before = nodes.remove(&node);
            let Some(policy) = answer.or_else(|| before.clone()) else {
                continue; // Never read yet, and silent now: nothing known.
            };
            if before.as_ref() != Some(&policy) {
                self.announce(&node, before.as_ref(), &policy);
            }
            now.insert(node, policy);
        }
        for (node, policy) in nodes.iter() {
            self.metrics.redis_policy(node, Some(policy.label()), None);
        }
        *nodes = now;
    }

    /// Logs a node's new policy and moves its metric.
    fn announce(&self, node: &str, before: Option<&Policy>, policy: &Policy) {
        self.metrics
            .redis_policy(node, before.map(Policy::label), Some(policy.label()));
        match policy {
            Policy::Read(name) if policy.evicts() && self.allowed => warn!(
                node,
                policy = %name,
                "redis {node} has maxmemory-policy {name}, which may evict held locks; accepted by --redis-allow-eviction"
            ),
            Policy::Read(_) if policy.evicts() && !self.started.load(Ordering::Relaxed) => {}
            Policy::Read(name) if policy.evicts() => error!(
                node,
                policy = %name,
                "redis {node} has maxmemory-policy {name}, which may evict held locks: no new leases on it (health NOT_SERVING) until it is set to noeviction (CONFIG SET maxmemory-policy noeviction)"
            ),
            Policy::Read(_) if before.is_some_and(Policy::evicts) => {
                info!(node, "redis {node} has maxmemory-policy noeviction again")
            }
            Policy::Read(_) => {}
            Policy::Unchecked => warn!(
                node,
                "cannot read the maxmemory-policy of redis {node} (CONFIG and INFO refused): make sure it is noeviction, or held locks may be evicted"
            ),
        }
    }
}

/// One node's policy: `CONFIG GET`, else `INFO memory`; `Unchecked` when it refuses both,
/// `None` when it does not answer at all.
async fn policy_of<C: ClientLike + ServerInterface>(node: &C, timeout: Duration) -> Option<Policy> {
    let config = CustomCommand::new_static("CONFIG", ClusterHash::Random, false);
    let asked = node.custom::<Value, _>(config, vec!["GET", "maxmemory-policy"]);
    match tokio::time::timeout(timeout, asked).await {
        Ok(Ok(reply)) => {
            if let Some(policy) = config_value(reply) {
                return Some(Policy::Read(policy));
            }
        }
        Ok(Err(error)) if refused(&error) => {}
        Ok(Err(_)) | Err(_) => return None,
    }
    let info = node.info::<String>(Some(fred::types::InfoKind::Memory));
    match tokio::time::timeout(timeout, info).await {
        Ok(Ok(text)) => Some(
            text.lines()
                .find_map(|line| line.strip_prefix("maxmemory_policy:"))
                .map_or(Policy::Unchecked, |policy| {
                    Policy::Read(policy.trim().to_owned())
                }),
        ),
        Ok(Err(error)) if refused(&error) => Some(Policy::Unchecked),
        Ok(Err(_)) | Err(_) => None,
    }
}

/// `CONFIG GET`'s answer: `[name, value]` (RESP2) or `{name: value}` (RESP3).
fn config_value(reply: Value) -> Option<String> {
    match reply {
        Value::Array(mut values) if values.len() == 2 => values.pop()?.into_string(),
        Value::Map(map) => map.inner().into_iter().next()?.1.into_string(),
        _ => None,
    }
}

/// Redis answered with an error (unknown command, NOPERM), rather than not answering.
pub(crate) fn refused(error: &fred::error::Error) -> bool {
    use fred::error::ErrorKind;
    !matches!(
        error.kind(),
        ErrorKind::IO | ErrorKind::Timeout | ErrorKind::Canceled | ErrorKind::Routing
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_get_answers_in_either_protocol() {
        let resp2 = Value::Array(vec!["maxmemory-policy".into(), "allkeys-lru".into()]);
        assert_eq!(config_value(resp2).as_deref(), Some("allkeys-lru"));
        assert_eq!(config_value(Value::Array(vec![])), None);
    }

    #[test]
    fn only_an_evicting_policy_refuses_and_only_when_not_allowed() {
        let eviction = Eviction::new(false, Metrics::default());
        eviction.record(vec![
            ("a:1".into(), Some(Policy::Read("noeviction".into()))),
            ("b:2".into(), Some(Policy::Unchecked)),
        ]);
        assert!(eviction.refusal().is_none());
        eviction.record(vec![
            ("a:1".into(), Some(Policy::Read("volatile-ttl".into()))),
            ("b:2".into(), None),
        ]);
        let refusal = eviction.refusal();
        assert!(
            matches!(&refusal, Some(Error::RedisMayEvict { node, policy }) if node == "a:1" && policy == "volatile-ttl"),
            "{refusal:?}"
        );
        // A node that stops answering keeps its last reading: still refused.
        eviction.record(vec![("a:1".into(), None)]);
        assert!(eviction.refusal().is_some());
        let allowed = Eviction::new(true, Metrics::default());
        allowed.record(vec![(
            "a:1".into(),
            Some(Policy::Read("allkeys-lru".into())),
        )]);
        assert!(allowed.refusal().is_none());
    }
}
