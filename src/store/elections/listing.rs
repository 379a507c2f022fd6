//! Which elections have a leader now (`ElectionService.List`), by `SCAN` as the locks' listing.

use std::sync::LazyLock;
use std::time::Duration;

use fred::bytes::Bytes;
use fred::prelude::*;
use fred::types::scripts::Script;

use super::{ELECTION_SPACE, Elections, Leader};
use crate::error::{Error, Result};
use crate::store::keys::{lock_key_pattern, lock_name};
use crate::store::scan::Scan;

/// Reads an election without retiring anything: a listing never writes (loaded on first use).
static LISTED: LazyLock<Script> = LazyLock::new(|| {
    Script::from_lua(concat!(
        include_str!("../locks/lease.lua"),
        include_str!("listed.lua")
    ))
});

/// One election with a leader, as a listing reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leading {
    pub leader: Leader,
    /// The leadership lease's remaining time (`None`: a key without expiry, set by hand).
    pub lease_ttl: Option<Duration>,
    /// Candidates in line whose servers still vouch for them.
    pub waiting: u32,
}

impl Elections {
    /// The elections with a leader now, at most `limit`, found by `SCAN` of their leases' keys
    /// (an election without a leader has none). `true`: more may have one than returned.
    pub async fn leading(&self, limit: usize) -> Result<(Vec<(String, Leading)>, bool)> {
        let space = format!("{}{ELECTION_SPACE}", self.0.prefix);
        let pattern = lock_key_pattern(&space);
        let mut scan = Scan::new(&pattern, |key| lock_name(&space, key), limit);
        scan.node(self.connection()).await?;
        let (names, truncated) = scan.finish();
        let mut leading = Vec::with_capacity(names.len());
        for name in names {
            // Resigned or lost since the scan saw it: no leader now, so not listed.
            if let Some(state) = self.read_leading(&name).await? {
                leading.push((name, state));
            }
        }
        Ok((leading, truncated))
    }

    async fn read_leading(&self, name: &str) -> Result<Option<Leading>> {
        const CONTEXT: &str = "list elections";
        let keys = self.keys(name);
        let reply: Vec<Value> = self
            .connection()
            .eval(&LISTED, CONTEXT, || {
                (
                    vec![
                        keys.lease.lock().to_owned(),
                        keys.state.clone(),
                        keys.lease.deadlines(),
                    ],
                    Vec::new(),
                )
            })
            .await?;
        let bad = |detail: &str| Error::BadReply {
            context: CONTEXT,
            detail: detail.to_owned(),
        };
        let [term, value, ttl, waiting] = reply.as_slice() else {
            return if reply.is_empty() {
                Ok(None)
            } else {
                Err(bad("expected 0 or 4 fields"))
            };
        };
        Ok(Some(Leading {
            leader: Leader {
                term: term.as_u64().ok_or_else(|| bad("term is not a number"))?,
                value: Bytes::copy_from_slice(value.as_bytes().unwrap_or_default()),
            },
            lease_ttl: ttl
                .as_i64()
                .and_then(|ms| u64::try_from(ms).ok())
                .map(Duration::from_millis),
            waiting: waiting
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(u32::MAX),
        }))
    }
}
