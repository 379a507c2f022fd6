//! Limits on how many leases are open: on one client connection, and on the whole server.
//!
//! HTTP/2 lets one connection carry thousands of streams, and each `Lease` stream is a task, a
//! lock and a renewal loop. One misbehaving client must not take the server's capacity from all
//! others, so each connection gets a bounded number of open leases, and the server as a whole a
//! bounded number (its memory); past either, RESOURCE_EXHAUSTED naming the limit.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::metrics::{Counted, Metrics};

/// Default for `--max-leases-per-connection`.
pub const DEFAULT_MAX_LEASES_PER_CONNECTION: usize = 10_000;
/// Default for `--max-leases`: about 0.6 GB of server memory at ~6 KB per lease.
pub const DEFAULT_MAX_LEASES: usize = 100_000;

/// Open lease streams per client connection (identified by its peer address) and in all.
#[derive(Clone, Debug)]
pub struct ConnectionLimits {
    open: Arc<Mutex<HashMap<SocketAddr, usize>>>,
    total: Arc<AtomicUsize>,
    max_leases: usize,
    max_on_server: usize,
    /// Where the admitted leases are counted (`leasehold_leases_admitted`).
    metrics: Metrics,
}

impl ConnectionLimits {
    pub fn new(max_leases: usize) -> Self {
        ConnectionLimits::with_server_limit(max_leases, usize::MAX)
    }

    /// `max_leases` per connection, `max_on_server` in all.
    pub fn with_server_limit(max_leases: usize, max_on_server: usize) -> Self {
        ConnectionLimits {
            open: Arc::default(),
            total: Arc::default(),
            max_leases,
            max_on_server,
            metrics: Metrics::default(),
        }
    }

    /// Counts admitted leases in `metrics`, beside the limits themselves.
    pub fn counted_in(mut self, metrics: Metrics) -> Self {
        metrics.limit("leases", self.max_on_server);
        metrics.limit("leases_per_connection", self.max_leases);
        self.metrics = metrics;
        self
    }

    fn open(&self) -> MutexGuard<'_, HashMap<SocketAddr, usize>> {
        // A panic elsewhere cannot leave a count half-written: recover the map as it is.
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits one more lease from `peer`; the slot frees when dropped. Connections without a
    /// peer address (not TCP) count only against the server's limit.
    pub fn admit(&self, peer: Option<SocketAddr>) -> Result<LeaseSlot> {
        if self.total.fetch_add(1, Ordering::SeqCst) >= self.max_on_server {
            self.total.fetch_sub(1, Ordering::SeqCst);
            return Err(Error::TooManyLeasesOnServer {
                limit: self.max_on_server,
            });
        }
        // From here, dropping the slot gives back what it took.
        let mut slot = LeaseSlot {
            limits: self.clone(),
            peer: None,
            _counted: self.metrics.admitted(),
        };
        if let Some(peer) = peer {
            let mut open = self.open();
            let count = open.entry(peer).or_insert(0);
            if *count >= self.max_leases {
                return Err(Error::TooManyLeases {
                    limit: self.max_leases,
                });
            }
            *count += 1;
            slot.peer = Some(peer);
        }
        Ok(slot)
    }
}

/// One admitted lease; dropping it gives the place back.
#[derive(Debug)]
pub struct LeaseSlot {
    limits: ConnectionLimits,
    peer: Option<SocketAddr>,
    _counted: Counted,
}

impl Drop for LeaseSlot {
    fn drop(&mut self) {
        self.limits.total.fetch_sub(1, Ordering::SeqCst);
        let Some(peer) = self.peer else {
            return;
        };
        let mut open = self.limits.open();
        if let Some(count) = open.get_mut(&peer) {
            *count -= 1;
            if *count == 0 {
                open.remove(&peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_up_to_the_limit_per_connection_and_frees_on_drop() {
        let limits = ConnectionLimits::new(2);
        let a: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:1001".parse().unwrap();
        let first = limits.admit(Some(a)).unwrap();
        let _second = limits.admit(Some(a)).unwrap();
        assert!(matches!(
            limits.admit(Some(a)),
            Err(Error::TooManyLeases { limit: 2 })
        ));
        let _other = limits.admit(Some(b)).unwrap();
        drop(first);
        let _again = limits.admit(Some(a)).unwrap();
        let _unix = limits.admit(None).unwrap();
    }

    #[test]
    fn admits_up_to_the_limit_of_the_server_across_connections() {
        let limits = ConnectionLimits::with_server_limit(10, 2);
        let a: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:1001".parse().unwrap();
        let first = limits.admit(Some(a)).unwrap();
        let _second = limits.admit(Some(b)).unwrap();
        assert!(matches!(
            limits.admit(None),
            Err(Error::TooManyLeasesOnServer { limit: 2 })
        ));
        drop(first);
        let _third = limits.admit(Some(b)).unwrap();
    }
}
