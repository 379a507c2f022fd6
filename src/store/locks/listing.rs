//! Reading: who holds a lock (`Describe`), and which locks are held (`List`, by `SCAN`).

use fred::prelude::*;

use super::permit_script_keys;
use super::types::{HolderState, LockState, Mode};
use super::{Locks, bad_reply, pttl};
use crate::error::Result;
use crate::store::connection::Connection;
use crate::store::keys::LockKeys;
use crate::store::keys::{lock_key_pattern, lock_name};
use crate::store::scan::Scan;

impl Locks {
    /// The locks held under this prefix, at most `limit`, found by `SCAN` (bounded in pages, so
    /// a huge key space bounds the time, not only the answer: see [`Scan`]). `true`: more locks
    /// may be held than returned.
    pub async fn held(&self, limit: usize) -> Result<(Vec<(String, LockState)>, bool)> {
        let prefix = &self.0.prefix;
        let pattern = lock_key_pattern(prefix);
        let mut scan = Scan::new(&pattern, |key| lock_name(prefix, key), limit);
        for connection in self.0.nodes.all() {
            scan.node(connection).await?;
        }
        let (names, truncated) = scan.finish();
        let mut held = Vec::with_capacity(names.len());
        for name in names {
            // Released since the scan saw it: not held any more, so not listed.
            if let state @ LockState::Held { .. } = self.describe(&self.keys(&name)).await? {
                held.push((name, state));
            }
        }
        Ok((held, truncated))
    }

    /// Reads who holds the lock: on Redlock, held when a majority of primaries say so (with the
    /// highest token among them), free when enough answered to rule that out.
    pub async fn describe(&self, keys: &LockKeys) -> Result<LockState> {
        let answers = self
            .0
            .nodes
            .gather(
                |_, connection| self.describe_on(connection, keys),
                |_| false,
            )
            .await;
        let held = answers.count(|state| matches!(state, LockState::Held { .. }));
        if answers.is_majority(held) {
            let newest = answers
                .ok
                .into_iter()
                .map(|(_, state)| state)
                .filter(|state| matches!(state, LockState::Held { .. }))
                .max_by_key(|state| match state {
                    LockState::Held { holders, .. } => {
                        holders.iter().map(|h| h.fencing_token).max().unwrap_or(0)
                    }
                    LockState::Free => 0,
                });
            return Ok(newest.unwrap_or(LockState::Free));
        }
        if answers.is_majority(answers.ok.len()) {
            return Ok(LockState::Free);
        }
        Err(answers.into_error("describe"))
    }

    async fn describe_on(&self, connection: &Connection, keys: &LockKeys) -> Result<LockState> {
        const CONTEXT: &str = "describe";
        let reply: Vec<Value> = connection
            .eval(
                &self.0.scripts.describe,
                CONTEXT,
                permit_script_keys(keys),
                Vec::<Value>::new(),
            )
            .await?;
        let Some((kind, held)) = reply.split_first() else {
            return Ok(LockState::Free);
        };
        let mode = kind
            .as_str()
            .and_then(|kind| Mode::from_kind(&kind))
            .ok_or_else(|| bad_reply(CONTEXT, &reply))?;
        if held.is_empty() || held.len() % 3 != 0 {
            return Err(bad_reply(CONTEXT, &reply));
        }
        let mut holders: Vec<HolderState> = held
            .chunks_exact(3)
            .map(|holder| HolderState {
                ttl_remaining: pttl(&holder[0]),
                holder: holder[1].as_string().unwrap_or_default(),
                fencing_token: holder[2].as_u64().unwrap_or(0),
            })
            .collect();
        holders.sort_by_key(|holder| holder.fencing_token);
        Ok(LockState::Held { mode, holders })
    }
}
