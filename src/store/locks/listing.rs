//! Reading: who holds a lock (`Describe`), and which locks are held (`List`, by `SCAN`).

use std::time::Duration;

use fred::prelude::*;

use super::types::{Described, HolderState, LockState, Mode, TokenState};
use super::{Locks, bad_reply, pttl};
use crate::error::{Error, Result};
use crate::store::connection::{Connection, millis};
use crate::store::keys::LockKeys;
use crate::store::keys::{lock_key_pattern, lock_name};
use crate::store::scan::Scan;

impl Locks {
    /// The locks held under this prefix, at most `limit`, found by `SCAN` (bounded in pages, so
    /// a huge key space bounds the time, not only the answer: see [`Scan`]). `true`: more locks
    /// may be held than returned.
    pub async fn held(&self, limit: usize) -> Result<(Vec<(String, Described)>, bool)> {
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
            let described = self.describe(&self.keys(&name)).await?;
            if matches!(described.state, LockState::Held { .. }) {
                held.push((name, described));
            }
        }
        Ok((held, truncated))
    }

    /// Reads who holds the lock and how many wait: on Redlock, held when a majority of
    /// primaries say so (with the highest token among them), free when enough answered to rule
    /// that out; the most waiters any primary counts.
    pub async fn describe(&self, keys: &LockKeys) -> Result<Described> {
        self.read(keys, None).await
    }

    /// [`Locks::describe`] for a watcher, which also marks the name watched for `mark_ttl` on
    /// every node (see [`LockKeys::watched`]): every change after this read is announced.
    pub async fn read_watched(&self, keys: &LockKeys, mark_ttl: Duration) -> Result<Described> {
        self.read(keys, Some(mark_ttl)).await
    }

    /// Whether `fencing_token` is a live holding of the lock (`Check`): one read-only script per
    /// node. On Redlock, current only if a majority says so; otherwise held (superseded, with
    /// the highest token among those that say held) if a majority holds it; free when enough
    /// answered to rule both out.
    pub async fn check(&self, keys: &LockKeys, fencing_token: u64) -> Result<TokenState> {
        const CONTEXT: &str = "check";
        let asked = &fencing_token.to_string();
        let answers = self
            .0
            .nodes
            .gather(
                |_, connection| async {
                    let reply: Vec<u64> = connection
                        .eval(&self.0.scripts.check, CONTEXT, move || {
                            (
                                vec![keys.lock().to_owned(), keys.holders(), keys.permits()],
                                vec![Value::from(asked.as_str())],
                            )
                        })
                        .await?;
                    match reply.as_slice() {
                        [1, _] => Ok(TokenState::Current),
                        [2, current] => Ok(TokenState::Superseded { current: *current }),
                        [3, _] => Ok(TokenState::Free),
                        _ => Err(Error::BadReply {
                            context: CONTEXT,
                            detail: format!("{reply:?}"),
                        }),
                    }
                },
                |_| false,
            )
            .await;
        let current = answers.count(|state| *state == TokenState::Current);
        let held = answers.count(|state| *state != TokenState::Free);
        if answers.is_majority(current) {
            return Ok(TokenState::Current);
        }
        if answers.is_majority(held) {
            let superseded = answers.ok.iter().filter_map(|(_, state)| match state {
                TokenState::Superseded { current } => Some(*current),
                _ => None,
            });
            return Ok(TokenState::Superseded {
                current: superseded.max().unwrap_or(fencing_token),
            });
        }
        // Free only when the free answers alone rule out a majority holding it (nodes that did
        // not answer may be the ones holding it).
        if answers.rules_out_majority(answers.ok.len() - held) {
            return Ok(TokenState::Free);
        }
        Err(answers.into_error(CONTEXT))
    }

    async fn read(&self, keys: &LockKeys, mark_ttl: Option<Duration>) -> Result<Described> {
        let answers = self
            .0
            .nodes
            .gather(
                |_, connection| self.describe_on(connection, keys, mark_ttl),
                |_| false,
            )
            .await;
        let is_held = |d: &Described| matches!(d.state, LockState::Held { .. });
        let held = answers.count(is_held);
        let enough = answers.is_majority(answers.ok.len());
        let held_by_majority = answers.is_majority(held);
        if !held_by_majority && !enough {
            return Err(answers.into_error("describe"));
        }
        let answered: Vec<Described> = answers.ok.into_iter().map(|(_, d)| d).collect();
        let waiting = answered.iter().map(|d| d.waiting).max().unwrap_or(0);
        let first_waiter_leaves = answered.iter().filter_map(|d| d.first_waiter_leaves).min();
        let state = if held_by_majority {
            answered
                .into_iter()
                .filter(is_held)
                .max_by_key(|d| match &d.state {
                    LockState::Held { holders, .. } => {
                        holders.iter().map(|h| h.fencing_token).max().unwrap_or(0)
                    }
                    LockState::Free => 0,
                })
                .map_or(LockState::Free, |d| d.state)
        } else {
            LockState::Free
        };
        Ok(Described {
            state,
            waiting,
            first_waiter_leaves,
        })
    }

    async fn describe_on(
        &self,
        connection: &Connection,
        keys: &LockKeys,
        mark_ttl: Option<Duration>,
    ) -> Result<Described> {
        const CONTEXT: &str = "describe";
        let arguments = || {
            let mut script_keys = vec![
                keys.lock().to_owned(),
                keys.holders(),
                keys.permits(),
                keys.deadlines(),
            ];
            let mut args = Vec::new();
            if let Some(ttl) = mark_ttl {
                script_keys.push(keys.watched());
                args.push(Value::from(millis(ttl)));
            }
            (script_keys, args)
        };
        let reply: Vec<Value> = connection
            .eval(&self.0.scripts.describe, CONTEXT, arguments)
            .await?;
        let [waiting, first_leaves, kind, held @ ..] = reply.as_slice() else {
            return Err(bad_reply(CONTEXT, &reply));
        };
        let waiting = waiting
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| bad_reply(CONTEXT, &reply))?;
        let first_waiter_leaves = pttl(first_leaves);
        let kind = kind.as_str().unwrap_or_default();
        if kind.is_empty() && held.is_empty() {
            return Ok(Described {
                state: LockState::Free,
                waiting,
                first_waiter_leaves,
            });
        }
        let mode = Mode::from_kind(&kind).ok_or_else(|| bad_reply(CONTEXT, &reply))?;
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
        Ok(Described {
            state: LockState::Held { mode, holders },
            waiting,
            first_waiter_leaves,
        })
    }
}
