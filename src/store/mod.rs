//! The Redis layer: the connection, and one module per key space with its own Lua scripts.
//!
//! - [`connection`]: connect, reconnect (and tell leases), bounded calls, background calls.
//! - [`keys`]: key layout; no name can reach another name's keys or leave the prefix.
//! - [`locks`]: a lock's keys and scripts (`locks/*.lua`): acquire, extend, release, the line.
//! - [`elections`]: an election's keys and scripts (`elections/*.lua`): announce, retire.
//! - [`subscriptions`]: the sharded pub/sub channels a server listens to.
//! - [`token`]: the secret that proves one acquisition.
//!
//! Nothing here knows about gRPC or about how long a lease lives: that is the lease layer's.

pub mod connection;
pub mod elections;
pub mod keys;
pub mod locks;
pub mod subscriptions;
pub mod token;

pub use connection::{Connection, RedisSettings};
pub use elections::{ElectionKeys, Elections};
pub use keys::LockKeys;
pub use locks::Locks;
pub use token::Token;

use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::tasks::Tasks;

/// Everything a server keeps in one Redis: the connection and its key spaces. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    pub locks: Locks,
    pub elections: Elections,
}

impl Store {
    /// Connects to Redis and loads every key space's scripts under `prefix`. Fails at once if
    /// Redis cannot be reached or the prefix would break the hash tags.
    pub async fn connect(settings: &RedisSettings, prefix: &str, metrics: Metrics) -> Result<Self> {
        if prefix.contains(['{', '}']) {
            return Err(Error::invalid(format!(
                "key prefix {prefix:?} must not contain '{{' or '}}': they would break the hash tags"
            )));
        }
        let connection = Connection::open(settings, metrics, Tasks::new()).await?;
        let locks = Locks::open(&connection, prefix).await?;
        let elections = Elections::open(&connection, prefix).await?;
        Ok(Store { locks, elections })
    }

    pub fn connection(&self) -> &Connection {
        self.locks.connection()
    }
}
