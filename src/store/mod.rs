//! The Redis layer: the connection, and one module per key space with its own Lua scripts.
//!
//! - [`acknowledgement`]: the `WAIT` behind a write, shared by every write of a node.
//! - [`connection`]: connect, reconnect (and tell leases), bounded calls, background calls.
//! - [`each_node`]: one question to every node that holds locks, all at once.
//! - [`eviction`]: whether a node's `maxmemory-policy` may evict held locks.
//! - [`failover`]: following a Sentinel failover whose old primary went silent.
//! - [`keys`]: key layout; no name can reach another name's keys or leave the prefix.
//! - [`locks`]: a lock's keys and scripts (`locks/*.lua`): acquire, extend, release, the line.
//! - [`elections`]: an election's keys and scripts (`elections/*.lua`): announce, retire.
//! - [`quorum`]: the nodes a key space lives on, and Redlock's majority rule over them.
//! - [`renewals`]: extends that fall due together, sent as one script per node.
//! - [`replication`]: a write vouched for only once replicas (and disk) have it (`WAIT`).
//! - [`scan`]: a key space's names by `SCAN`, within a budget (`List`).
//! - [`subscriptions`]: the sharded pub/sub channels a server listens to.
//! - [`token`]: the secret that proves one acquisition.
//!
//! Nothing here knows about gRPC or about how long a lease lives: that is the lease layer's.

pub mod acknowledgement;
pub mod connection;
pub mod each_node;
pub mod elections;
pub mod eviction;
pub mod failover;
pub mod keys;
pub mod locks;
pub mod quorum;
pub mod renewals;
pub mod replication;
pub mod scan;
pub mod subscriptions;
pub mod token;

pub use connection::{Connection, RedisSettings};
pub use elections::{ElectionKeys, Elections};
pub use keys::LockKeys;
pub use locks::Locks;
pub use quorum::Nodes;
pub use token::Token;

use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::tasks::Tasks;

/// Everything a server keeps in Redis: the connections and its key spaces. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    pub locks: Locks,
    pub elections: Elections,
}

impl Store {
    /// Connects to one Redis (single, Sentinel or Cluster, by the URL's scheme) and loads every
    /// key space's scripts under `prefix`. Fails at once if Redis cannot be reached or the
    /// prefix would break the hash tags.
    pub async fn connect(settings: &RedisSettings, prefix: &str, metrics: Metrics) -> Result<Self> {
        check_prefix(prefix)?;
        let connection = Connection::open(settings, metrics, Tasks::new()).await?;
        Self::open(Nodes::single(connection), prefix).await
    }

    /// Redlock: connects to each of `urls`, independent Redis primaries (odd, at least three),
    /// with `settings` for all but the URL. A majority must answer at start; the others are
    /// retried in the background, so a server can start (or restart) while a minority is down.
    pub async fn connect_redlock(
        settings: &RedisSettings,
        urls: &[String],
        prefix: &str,
        metrics: Metrics,
    ) -> Result<Self> {
        check_prefix(prefix)?;
        let tasks = Tasks::new();
        let mut connections = Vec::with_capacity(urls.len());
        for url in urls {
            if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
                return Err(Error::invalid(format!(
                    "Redlock's primaries are plain redis:// or rediss:// URLs, not {url:?}"
                )));
            }
            let node = RedisSettings {
                url: url.clone(),
                fail_fast: true,
                ..settings.clone()
            };
            connections.push(Connection::open(&node, metrics.clone(), tasks.clone()).await?);
        }
        let nodes = Nodes::quorum(connections)?;
        let up = nodes.all().iter().filter(|node| node.is_up()).count();
        if up < nodes.majority() {
            return Err(Error::NoQuorum {
                context: "connect",
                answered: up,
                nodes: nodes.all().len(),
                needed: nodes.majority(),
                first_error: "primaries unreachable at start".into(),
            });
        }
        Self::open(nodes, prefix).await
    }

    async fn open(nodes: Nodes, prefix: &str) -> Result<Self> {
        let locks = Locks::open(&nodes, prefix).await?;
        let elections = Elections::open(nodes.home(), prefix).await?;
        Ok(Store { locks, elections })
    }

    /// The home connection: the server's tasks and metrics.
    pub fn connection(&self) -> &Connection {
        self.locks.connection()
    }

    pub fn nodes(&self) -> &Nodes {
        self.locks.nodes()
    }

    /// Whether locks live on Redlock's primaries (elections do not, yet).
    pub fn is_redlock(&self) -> bool {
        self.nodes().is_quorum()
    }

    /// Whether enough of Redis answers a PING, with a `maxmemory-policy` that cannot evict
    /// held locks, to serve (the one Redis, or a majority of Redlock's primaries). Each node's
    /// policy is read again here, so a `CONFIG SET` without a reconnection is seen too.
    pub async fn health(&self) -> Health {
        let answers = self
            .nodes()
            .gather(
                |_, connection| async move {
                    if !connection.reachable().await {
                        return Err(Error::NotConnected { context: "ping" });
                    }
                    connection.check_eviction().await;
                    Ok(connection.eviction_refusal().is_none())
                },
                // Every node's answer, not just a majority: operators are told of one primary
                // down before the quorum is short.
                |_| false,
            )
            .await;
        let safe = answers.count(|&safe| safe);
        Health {
            reachable: answers.is_majority(answers.ok.len()),
            serving: answers.is_majority(safe),
            answered: answers.ok.len(),
            may_evict: answers.ok.len() - safe,
            nodes: self.nodes().all().len(),
        }
    }

    /// Closes every connection: for the end of `serve`, once every lease has let go.
    pub async fn close(&self) {
        for connection in self.nodes().all() {
            connection.close().await;
        }
    }
}

/// One health check of the nodes that hold locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Health {
    /// Enough nodes answer (the `leasehold_redis_reachable` metric).
    pub reachable: bool,
    /// Enough nodes answer, and may not evict, to take new leases (gRPC health).
    pub serving: bool,
    /// Nodes that answered a PING.
    pub answered: usize,
    /// Of those, nodes whose `maxmemory-policy` may evict held locks (not allowed).
    pub may_evict: usize,
    /// Nodes in all.
    pub nodes: usize,
}

fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.contains(['{', '}']) {
        return Err(Error::invalid(format!(
            "key prefix {prefix:?} must not contain '{{' or '}}': they would break the hash tags"
        )));
    }
    Ok(())
}
