//! The Redis layer: the connection, and one module per key space with its own Lua scripts.
//!
//! - [`connection`]: connect, reconnect (and tell leases), bounded calls, background calls.
//! - [`keys`]: key layout; no name can reach another name's keys or leave the prefix.
//! - [`locks`]: a lock's keys and scripts (`locks/*.lua`): acquire, extend, release, the line.
//! - [`elections`]: an election's keys and scripts (`elections/*.lua`): announce, retire.
//! - [`quorum`]: the nodes a key space lives on, and Redlock's majority rule over them.
//! - [`renewals`]: extends that fall due together, sent as one script per node.
//! - [`subscriptions`]: the sharded pub/sub channels a server listens to.
//! - [`token`]: the secret that proves one acquisition.
//!
//! Nothing here knows about gRPC or about how long a lease lives: that is the lease layer's.

pub mod connection;
pub mod elections;
pub mod keys;
pub mod locks;
pub mod quorum;
pub mod renewals;
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

    /// Whether enough of Redis answers a PING to serve (the one Redis, or a majority of
    /// Redlock's primaries), with how many nodes answered and how many there are.
    pub async fn health(&self) -> (bool, usize, usize) {
        let answers = self
            .nodes()
            .gather(
                |_, connection| async move {
                    if connection.reachable().await {
                        Ok(())
                    } else {
                        Err(Error::NotConnected { context: "ping" })
                    }
                },
                // Every node's answer, not just a majority: operators are told of one primary
                // down before the quorum is short.
                |_| false,
            )
            .await;
        let answered = answers.ok.len();
        (
            answers.is_majority(answered),
            answered,
            self.nodes().all().len(),
        )
    }

    /// Closes every connection: for the end of `serve`, once every lease has let go.
    pub async fn close(&self) {
        for connection in self.nodes().all() {
            connection.close().await;
        }
    }
}

fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.contains(['{', '}']) {
        return Err(Error::invalid(format!(
            "key prefix {prefix:?} must not contain '{{' or '}}': they would break the hash tags"
        )));
    }
    Ok(())
}
