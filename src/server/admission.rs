//! Limits on what one client connection may hold open.
//!
//! HTTP/2 lets one connection carry thousands of streams, and each `Lease` stream is a task, a
//! lock and a renewal loop. One misbehaving client must not take the server's capacity from all
//! others, so each connection gets a bounded number of open leases; past it, RESOURCE_EXHAUSTED.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};

/// Default for `--max-leases-per-connection`.
pub const DEFAULT_MAX_LEASES_PER_CONNECTION: usize = 10_000;

/// Open lease streams per client connection (identified by its peer address).
#[derive(Clone, Debug)]
pub struct ConnectionLimits {
    open: Arc<Mutex<HashMap<SocketAddr, usize>>>,
    max_leases: usize,
}

impl ConnectionLimits {
    pub fn new(max_leases: usize) -> Self {
        ConnectionLimits {
            open: Arc::default(),
            max_leases,
        }
    }

    fn open(&self) -> MutexGuard<'_, HashMap<SocketAddr, usize>> {
        // A panic elsewhere cannot leave a count half-written: recover the map as it is.
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits one more lease from `peer`; the slot frees when dropped. Connections without a
    /// peer address (not TCP) are not counted.
    pub fn admit(&self, peer: Option<SocketAddr>) -> Result<Option<LeaseSlot>> {
        let Some(peer) = peer else {
            return Ok(None);
        };
        let mut open = self.open();
        let count = open.entry(peer).or_insert(0);
        if *count >= self.max_leases {
            return Err(Error::TooManyLeases {
                limit: self.max_leases,
            });
        }
        *count += 1;
        Ok(Some(LeaseSlot {
            limits: self.clone(),
            peer,
        }))
    }
}

/// One admitted lease; dropping it gives the place back.
#[derive(Debug)]
pub struct LeaseSlot {
    limits: ConnectionLimits,
    peer: SocketAddr,
}

impl Drop for LeaseSlot {
    fn drop(&mut self) {
        let mut open = self.limits.open();
        if let Some(count) = open.get_mut(&self.peer) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.peer);
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
        assert!(limits.admit(Some(b)).unwrap().is_some());
        drop(first);
        assert!(limits.admit(Some(a)).unwrap().is_some());
        assert!(limits.admit(None).unwrap().is_none());
    }
}
