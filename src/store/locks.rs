//! The lock key space: one lock's keys and the Lua scripts that change them atomically.
//!
//! Scripts are loaded once (`SCRIPT LOAD`) when the key space is opened and run by `EVALSHA`; a
//! Redis that lost its script cache answers `NOSCRIPT` and the script is loaded again.

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;

use super::connection::{Connection, millis};
use super::keys::{LockKeys, lock_keys};
use super::quorum::{Answers, Nodes};
use super::renewals::RenewalBatches;
use super::token::Token;
use crate::error::{Error, Result};

mod acquire;
mod listing;
mod revoke;
mod scripts;
mod types;

pub use super::scan::MAX_SCAN_PAGES;
use scripts::Scripts;
pub use types::{
    AcquireOutcome, Described, HoldLimits, HolderState, LockState, Mode, Resumed, TokenState,
    Waiter,
};

/// The locks under one key prefix. Cheap to clone: one pointer.
#[derive(Clone)]
pub struct Locks(Arc<Shared>);

struct Shared {
    nodes: Nodes,
    /// One renewal batcher per node, in the nodes' order.
    renewals: Vec<RenewalBatches>,
    scripts: Scripts,
    prefix: String,
}

impl Locks {
    /// Opens the key space under `prefix` on `nodes`, loading its scripts into each.
    pub async fn open(nodes: &Nodes, prefix: &str) -> Result<Self> {
        super::keys::slot_tags();
        let scripts = Scripts::new();
        for connection in nodes.all() {
            for script in scripts.all() {
                connection.load(script).await?;
            }
        }
        let renewals = nodes
            .all()
            .iter()
            .map(|connection| RenewalBatches::start(connection, scripts.extend.clone()))
            .collect();
        Ok(Locks(Arc::new(Shared {
            nodes: nodes.clone(),
            renewals,
            scripts,
            prefix: prefix.to_owned(),
        })))
    }

    /// The home node's connection: the server's tasks and metrics.
    pub fn connection(&self) -> &Connection {
        self.0.nodes.home()
    }

    /// Every node the locks live on (one, or Redlock's primaries).
    pub fn nodes(&self) -> &Nodes {
        &self.0.nodes
    }

    /// The keys of lock `name`.
    pub fn keys(&self, name: &str) -> LockKeys {
        lock_keys(&self.0.prefix, name)
    }

    /// Resets the TTL if `token` still holds the lock. `false` means the lock is not ours (on
    /// Redlock: not ours on enough primaries for a majority). An error means no majority
    /// answered either way. Sent in the node's next renewal batch.
    pub async fn extend(&self, keys: &LockKeys, token: &Token, ttl: Duration) -> Result<bool> {
        let renewals = &self.0.renewals;
        let answers = self
            .0
            .nodes
            .gather(
                |node, _| {
                    renewals[node].extend(
                        keys.lock(),
                        keys.kept_with.as_deref(),
                        token.secret(),
                        ttl,
                    )
                },
                // Settled by what decides the answer: a majority renewed, or enough said "not
                // ours". Counting a primary that failed (one down answers at once) towards the
                // second settled a lost lease as unknown whenever its failure came first, so
                // the holder heard of a deleted (revoked) key only at a later retry.
                |answers| {
                    let yes = answers.count(|&extended| extended);
                    let no = answers.ok.len() - yes;
                    answers.is_majority(yes) || answers.rules_out_majority(no)
                },
            )
            .await;
        let yes = answers.count(|&extended| extended);
        if answers.is_majority(yes) {
            Ok(true)
        } else if answers.rules_out_majority(answers.ok.len() - yes) {
            Ok(false)
        } else {
            Err(answers.into_error("extend"))
        }
    }

    /// A unary `Extend`: resets the TTL if `token` still holds the lock, never past the lease's
    /// max-hold ceiling, and renews its lock-delay key if it has one. Sent on its own, not
    /// batched: the stream's renewals ([`Locks::extend`]) need neither (their server knows both).
    /// `Some(ttl set)` when extended (less than `ttl` near the ceiling); `None` when not ours, or
    /// the ceiling is reached. Redlock: a majority must extend it; the shortest TTL they set.
    pub async fn extend_capped(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl: Duration,
    ) -> Result<Option<Duration>> {
        const CONTEXT: &str = "extend";
        let answers = self
            .0
            .nodes
            .gather(
                |_, connection| {
                    // Extended only once the replicas have it (see `replication`).
                    let extended = |set: &i64| *set > 0;
                    connection.eval_vouched(
                        &self.0.scripts.extend.one,
                        CONTEXT,
                        ttl,
                        extended,
                        move || {
                            let mut script_keys = permit_script_keys(keys);
                            script_keys.push(keys.delay());
                            (
                                script_keys,
                                vec![
                                    Value::from(token.secret()),
                                    Value::from(millis(ttl)),
                                    Value::from("1"),
                                ],
                            )
                        },
                    )
                },
                |answers| {
                    let yes = answers.count(|&set| set > 0);
                    answers.is_majority(yes) || answers.rules_out_majority(answers.ok.len() - yes)
                },
            )
            .await;
        let yes = answers.count(|&set| set > 0);
        if answers.is_majority(yes) {
            let shortest = answers
                .ok
                .iter()
                .map(|(_, set)| *set)
                .filter(|&set| set > 0)
                .min();
            Ok(shortest
                .and_then(|ms| u64::try_from(ms).ok())
                .map(Duration::from_millis))
        } else if answers.rules_out_majority(answers.ok.len() - yes) {
            Ok(None)
        } else {
            Err(answers.into_error(CONTEXT))
        }
    }

    /// Extends a group of leases at once (a session's round), one answer each, in order: on
    /// one node (or a cluster) as one request to its batches; with Redlock each lease still
    /// needs its own majority.
    pub async fn extend_all(
        &self,
        leases: &[(&LockKeys, &Token)],
        ttl: Duration,
    ) -> Vec<Result<bool>> {
        if let [renewals] = self.0.renewals.as_slice() {
            let leases = leases
                .iter()
                .map(|(keys, token)| {
                    let kept_with = keys.kept_with.clone().unwrap_or_default();
                    (keys.lock().to_owned(), kept_with, token.secret().to_owned())
                })
                .collect();
            return renewals.extend_all(leases, ttl).await;
        }
        let each = leases
            .iter()
            .map(|(keys, token)| self.extend(keys, token, ttl));
        futures_util::future::join_all(each).await
    }

    /// Deletes the lock if `token` still holds it, and wakes the waiters. `false` means it was
    /// already gone or not ours. Redlock: on every primary, waiting for all their answers.
    /// `clean`: the holder's own release, which frees the name at once; otherwise (a stream
    /// that ended without one, a server shutting down) the lease's lock-delay runs from now.
    pub async fn release(&self, keys: &LockKeys, token: &Token, clean: bool) -> Result<bool> {
        let answers = self
            .on_every_node("release", |connection| {
                connection.eval::<i64>(&self.0.scripts.release, "release", move || {
                    (
                        // The name's other keys are derived in the script (fewer arguments).
                        vec![keys.lock().to_owned()],
                        vec![
                            Value::from(token.secret()),
                            Value::from(if clean { "1" } else { "0" }),
                        ],
                    )
                })
            })
            .await?;
        Ok(answers.count(|&reply| reply == 1) > 0)
    }

    /// Takes `waiter_id` out of line (empty: nobody) and wakes the line if the lock is free.
    pub async fn leave(&self, keys: &LockKeys, waiter_id: &str) -> Result<()> {
        self.on_every_node("leave", |connection| {
            connection.eval::<i64>(&self.0.scripts.leave, "leave", move || {
                (
                    line_keys(keys),
                    vec![Value::from(waiter_id), Value::from(keys.channel().as_str())],
                )
            })
        })
        .await?;
        Ok(())
    }

    /// Vouches for this server's `waiters` of one lock for another `waiter_ttl`, drops waiters no
    /// server vouches for, and wakes the line if the lock is free.
    pub async fn refresh_line(
        &self,
        keys: &LockKeys,
        waiters: &[String],
        waiter_ttl: Duration,
    ) -> Result<()> {
        self.on_every_node("refresh line", |connection| {
            connection.eval::<i64>(&self.0.scripts.refresh, "refresh line", move || {
                let mut args = vec![
                    Value::from(keys.channel().as_str()),
                    Value::from(millis(waiter_ttl)),
                ];
                args.extend(waiters.iter().map(|w| Value::from(w.as_str())));
                (line_keys(keys), args)
            })
        })
        .await?;
        Ok(())
    }

    /// Runs `call` on every node and waits for all their answers: done if any node answered
    /// (a release lets go wherever the lock is ours; each primary keeps its own line, and one
    /// that missed an update catches up at the next refresh).
    async fn on_every_node<'a, Fut>(
        &'a self,
        context: &'static str,
        call: impl Fn(&'a Connection) -> Fut,
    ) -> Result<Answers<i64>>
    where
        Fut: std::future::Future<Output = Result<i64>> + 'a,
    {
        let answers = self
            .0
            .nodes
            .gather(|_, connection| call(connection), |_| false)
            .await;
        if answers.ok.is_empty() {
            return Err(answers.into_error(context));
        }
        Ok(answers)
    }

    /// Takes a waiter out of line without waiting (empty id: nobody), waking the line if the lock
    /// is free: for waiters that went away, and for expiries this server sees.
    pub fn leave_in_background(&self, keys: LockKeys, waiter_id: String) {
        let span = tracing::info_span!("leave line");
        let locks = self.clone();
        self.connection().in_background(
            span,
            "could not update the line; waiters rely on their timers",
            async move { locks.leave(&keys, &waiter_id).await },
        );
    }

    /// Reattaches the lease `token` holds (its stream broke, the client came back within the
    /// grace): renewed for `ttl` again and counted as a new attachment. `None`: no lease of this
    /// name holds the token (expired, released, or never issued). Redlock: a majority must hold
    /// it; the token is the highest they recorded.
    pub async fn resume(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl: Duration,
    ) -> Result<Option<Resumed>> {
        const CONTEXT: &str = "resume";
        let answers = self
            .0
            .nodes
            .gather(
                |_, connection| async move {
                    let resumed = |reply: &Vec<i64>| reply.len() == 4;
                    let reply: Vec<i64> = connection
                        .eval_vouched(&self.0.scripts.resume, CONTEXT, ttl, resumed, move || {
                            let mut script_keys = permit_script_keys(keys);
                            script_keys.push(keys.delay());
                            (
                                script_keys,
                                vec![Value::from(token.secret()), Value::from(millis(ttl))],
                            )
                        })
                        .await?;
                    Ok(match reply.as_slice() {
                        [fencing_token, attachment, ceiling, delayed] => Some(Resumed {
                            fencing_token: u64::try_from(*fencing_token).unwrap_or(0),
                            attachment: u64::try_from(*attachment).unwrap_or(0),
                            ceiling: u64::try_from(*ceiling).ok().map(Duration::from_millis),
                            delayed: *delayed == 1,
                        }),
                        _ => None,
                    })
                },
                |_| false,
            )
            .await;
        let resumed: Vec<Resumed> = answers.ok.iter().filter_map(|(_, r)| *r).collect();
        if answers.is_majority(resumed.len()) {
            // The nearest ceiling any of them keeps: never vouched past.
            let ceiling = resumed.iter().filter_map(|r| r.ceiling).min();
            let delayed = resumed.iter().any(|r| r.delayed);
            return Ok(resumed
                .into_iter()
                .max_by_key(|r| r.fencing_token)
                .map(|r| Resumed {
                    ceiling,
                    delayed,
                    ..r
                }));
        }
        if answers.is_majority(answers.ok.len()) {
            return Ok(None);
        }
        Err(answers.into_error(CONTEXT))
    }

    /// A resumable lease's stream broke: the lease now ends after `grace` unless it is resumed,
    /// and is left alone if it was resumed elsewhere since `attachment`.
    pub async fn detach(
        &self,
        keys: &LockKeys,
        token: &Token,
        grace: Duration,
        attachment: u64,
    ) -> Result<()> {
        self.on_every_node("detach", |connection| {
            connection.eval::<i64>(&self.0.scripts.detach, "detach", move || {
                (
                    vec![
                        keys.lock().to_owned(),
                        keys.holders(),
                        keys.permits(),
                        keys.watched(),
                        keys.delay(),
                    ],
                    vec![
                        Value::from(token.secret()),
                        Value::from(millis(grace)),
                        Value::from(attachment.to_string()),
                    ],
                )
            })
        })
        .await?;
        Ok(())
    }
}

/// The keys of the scripts that see a lease wherever it lives: the lock, or a permit.
fn permit_script_keys(keys: &LockKeys) -> Vec<String> {
    vec![keys.lock().to_owned(), keys.holders(), keys.permits()]
}

/// The keys of the line's scripts (leave.lua, refresh.lua): the lock, its line, the waiters'
/// deadlines, the holders and the watched mark.
fn line_keys(keys: &LockKeys) -> Vec<String> {
    vec![
        keys.lock().to_owned(),
        keys.line(),
        keys.deadlines(),
        keys.holders(),
        keys.watched(),
    ]
}

/// A `PTTL` reply as a duration; negative values mean no expiry (or no key).
fn pttl(value: &Value) -> Option<Duration> {
    let ms = value.as_i64()?;
    u64::try_from(ms).ok().map(Duration::from_millis)
}

fn bad_reply(context: &'static str, reply: &[Value]) -> Error {
    Error::BadReply {
        context,
        detail: format!("{reply:?}"),
    }
}
