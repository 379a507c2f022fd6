//! Acquiring: one script on one node, or on Redlock's primaries at once, with the majority's
//! rules (validity, the highest token, giving back what a failed attempt took).

use tokio::time::Instant;

use std::time::Duration;

use fred::prelude::*;

use super::types::{AcquireOutcome, Mode, Waiter};
use super::{Locks, bad_reply, pttl};
use crate::error::{Error, Result};
use crate::store::connection::{Connection, millis};
use crate::store::keys::LockKeys;
use crate::store::quorum::{Answers, drift};
use crate::store::token::Token;

/// Redlock: each primary's answer to an acquire is awaited at most ttl / this...
const NODE_TIMEOUT_SHARE: u32 = 10;
/// ...but never less than this (a loopback round trip under load).
const MIN_NODE_TIMEOUT: Duration = Duration::from_millis(10);

impl Locks {
    /// One atomic `SET NX PX` (or one permit, in `mode`), only if the line lets this waiter go;
    /// on success also issues the next fencing token. If taken, a fair waiter keeps (or takes) its
    /// place in line.
    ///
    /// On Redlock's primaries the script runs on all at once: the lock is ours with a majority
    /// and more than half the TTL of validity left (measured from before the first command
    /// left); the token is then the highest any of them issued, written back to the counters so
    /// that every later majority sees it. Short of that, whatever was taken is given back.
    pub async fn try_acquire(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl: Duration,
        holder: &str,
        waiter: &Waiter<'_>,
    ) -> Result<AcquireOutcome> {
        let nodes = &self.0.nodes;
        if let (true, Mode::Exclusive { limit: 2.. }) = (nodes.is_quorum(), waiter.mode) {
            // Each primary admits `limit` holders, but majorities of different holders need
            // not overlap on one primary: 3 holders of a limit of 2 can each win 3 of 5.
            return Err(Error::FailedPrecondition(
                "semaphores (limit above 1) are not offered with Redlock: a majority per permit \
                 cannot keep the holders within the limit; use one Redis, Sentinel or a Cluster"
                    .into(),
            ));
        }
        let started = Instant::now();
        let arrival = nodes.is_quorum().then_some(waiter.arrival_us);
        let won = |outcome: &AcquireOutcome| matches!(outcome, AcquireOutcome::Acquired { .. });
        // Redlock: a primary slower than a tenth of the TTL counts as failed for this attempt,
        // so one slow primary cannot eat the validity the others just granted.
        let node_timeout = nodes
            .is_quorum()
            .then(|| (ttl / NODE_TIMEOUT_SHARE).max(MIN_NODE_TIMEOUT));
        let mut answers = nodes
            .gather(
                |_, connection| async move {
                    let attempt =
                        self.try_acquire_on(connection, keys, token, ttl, holder, waiter, arrival);
                    match node_timeout {
                        None => attempt.await,
                        Some(timeout) => tokio::time::timeout(timeout, attempt).await.unwrap_or(
                            Err(Error::RedisTimeout {
                                context: "acquire",
                                timeout,
                            }),
                        ),
                    }
                },
                // Short of a win, every answer is awaited: what this attempt took anywhere
                // must be given back.
                |answers| answers.is_majority(answers.count(won)),
            )
            .await;
        if !nodes.is_quorum() {
            // One node: at most one answer.
            return match answers.ok.pop() {
                Some((_, outcome)) => Ok(outcome),
                None => Err(answers.into_error("acquire")),
            };
        }
        let fences: Vec<u64> = answers
            .ok
            .iter()
            .filter_map(|(_, outcome)| match outcome {
                AcquireOutcome::Acquired { fencing_token } => Some(*fencing_token),
                _ => None,
            })
            .collect();
        let validity_left = ttl.saturating_sub(started.elapsed() + drift(ttl));
        if answers.is_majority(fences.len()) && validity_left > ttl / 2 {
            let fencing_token = fences.iter().copied().max().unwrap_or_default();
            match self.raise_fence(keys, token, fencing_token).await {
                Ok(()) => {
                    if fences.len() < nodes.all().len() && waiter.join_line {
                        // The primaries that did not grant it still have this waiter in line,
                        // at its head: it would block the line there until its deadline.
                        self.leave_in_background(keys.clone(), waiter.id.to_owned());
                    }
                    return Ok(AcquireOutcome::Acquired { fencing_token });
                }
                Err(error) => {
                    self.release(keys, token, true).await?;
                    return Err(error);
                }
            }
        }
        if !fences.is_empty() || !answers.failed.is_empty() {
            // Given back (also where the answer was lost but the command may have landed)
            // before the next attempt, which reuses the token.
            self.release(keys, token, true).await?;
        }
        if answers.unreachable() {
            return Err(answers.into_error("acquire"));
        }
        // No mismatch to weigh: Redlock holds only locks and readers (semaphores are refused
        // above), and those two never mismatch.
        Ok(held_by_majority(&answers).unwrap_or(AcquireOutcome::NoMajority))
    }

    /// One node's acquire script; `arrival` is the waiter's place in line (Redlock), or the
    /// node's own clock when `None`.
    #[allow(clippy::too_many_arguments)]
    async fn try_acquire_on(
        &self,
        connection: &Connection,
        keys: &LockKeys,
        token: &Token,
        ttl: Duration,
        holder: &str,
        waiter: &Waiter<'_>,
        arrival: Option<u64>,
    ) -> Result<AcquireOutcome> {
        const CONTEXT: &str = "acquire";
        // A node that may evict the lock vouches for no new lease: with one Redis the caller
        // hears why; with Redlock it counts as a failed primary, and a majority of the others
        // may still grant it.
        if let Some(refusal) = connection.eviction_refusal() {
            return Err(refusal);
        }
        // Nor one without the replicas `--redis-replicas` asks for, or that came back empty.
        if let Some(refusal) = connection.replication_refusal(keys.lock()) {
            return Err(refusal);
        }
        // A lease with limits writes them: acquire.lua's.
        if waiter.first_attempt && waiter.mode == Mode::LOCK && waiter.limits.is_none() {
            // Not granted until the replicas have it: a failover must not lose it. On failure
            // the caller's guard gives the lock back.
            let took = |reply: &Value| matches!(reply, Value::String(_) | Value::Bytes(_));
            let reply: Value = connection
                .eval_vouched(&self.0.scripts.take, CONTEXT, ttl, took, move || {
                    (
                        // The name's other keys are derived in the script (fewer arguments).
                        vec![keys.lock().to_owned(), keys.fence()],
                        vec![
                            Value::from(token.secret()),
                            Value::from(millis(ttl)),
                            Value::from(holder),
                        ],
                    )
                })
                .await?;
            // The fencing token (a string) when it acquired; 0 when acquire.lua must decide.
            if let Value::String(_) | Value::Bytes(_) = reply {
                let fencing_token = reply
                    .as_u64()
                    .ok_or_else(|| bad_reply(CONTEXT, std::slice::from_ref(&reply)))?;
                return Ok(AcquireOutcome::Acquired { fencing_token });
            }
        }
        let flag = |on: bool| Value::from(if on { "1" } else { "0" });
        let acquired = |reply: &Vec<Value>| reply.first().and_then(Value::as_i64) == Some(1);
        let reply: Vec<Value> = connection
            .eval_vouched(&self.0.scripts.acquire, CONTEXT, ttl, acquired, move || {
                (
                    vec![
                        keys.lock().to_owned(),
                        keys.fence(),
                        keys.line(),
                        keys.deadlines(),
                        keys.holders(),
                        keys.permits(),
                        keys.watched(),
                        keys.delay(),
                    ],
                    vec![
                        Value::from(token.secret()),
                        Value::from(millis(ttl)),
                        Value::from(holder),
                        Value::from(waiter.id),
                        flag(waiter.fair),
                        flag(waiter.join_line),
                        Value::from(millis(waiter.ttl)),
                        Value::from(keys.channel().as_str()),
                        Value::from(arrival.map(|us| us.to_string()).unwrap_or_default()),
                        Value::from(waiter.mode.kind()),
                        Value::from(waiter.limits.lock_delay.map_or(0, millis)),
                        Value::from(waiter.limits.max_hold.map_or(0, millis)),
                    ],
                )
            })
            .await?;
        match reply.as_slice() {
            [acquired, fence] if acquired.as_i64() == Some(1) => {
                let fencing_token = fence.as_u64().ok_or_else(|| bad_reply(CONTEXT, &reply))?;
                Ok(AcquireOutcome::Acquired { fencing_token })
            }
            [mismatch, held] if mismatch.as_i64() == Some(2) => held
                .as_str()
                .and_then(|kind| Mode::from_kind(&kind))
                .map(|held| AcquireOutcome::Mismatch { held })
                .ok_or_else(|| bad_reply(CONTEXT, &reply)),
            [acquired, ttl, holder, position] if acquired.as_i64() == Some(0) => {
                Ok(AcquireOutcome::Held {
                    holder: holder.as_string().unwrap_or_default(),
                    // -2: no key; the lock is free but others are ahead in line.
                    ttl_remaining: match ttl.as_i64() {
                        Some(-2) => Some(Duration::ZERO),
                        _ => pttl(ttl),
                    },
                    position: position
                        .as_u64()
                        .and_then(|p| u32::try_from(p).ok())
                        .unwrap_or(0),
                })
            }
            _ => Err(bad_reply(CONTEXT, &reply)),
        }
    }

    /// Redlock: raises every primary's fencing counter to `fence` (counters only grow) and
    /// records it as the holder's token where the lock is ours. Needs a majority, so that every
    /// later majority includes a primary whose counter is at least `fence`.
    async fn raise_fence(&self, keys: &LockKeys, token: &Token, fence: u64) -> Result<()> {
        let answers = self
            .0
            .nodes
            .gather(
                |_, connection| {
                    connection.eval::<i64>(&self.0.scripts.raise_fence, "raise fence", move || {
                        (
                            vec![
                                keys.lock().to_owned(),
                                keys.fence(),
                                keys.holders(),
                                keys.permits(),
                            ],
                            vec![Value::from(token.secret()), Value::from(fence.to_string())],
                        )
                    })
                },
                |answers| answers.is_majority(answers.ok.len()),
            )
            .await;
        if answers.is_majority(answers.ok.len()) {
            Ok(())
        } else {
            Err(answers.into_error("raise fence"))
        }
    }
}

/// Redlock: the lock as the primaries that refused this attempt see it, if a majority refused
/// (held, or others ahead in line). The latest expiry and the farthest place in line, since the
/// lock is only free once a majority lets go.
fn held_by_majority(answers: &Answers<AcquireOutcome>) -> Option<AcquireOutcome> {
    let refusals: Vec<_> = answers
        .ok
        .iter()
        .filter_map(|(_, outcome)| match outcome {
            AcquireOutcome::Held {
                holder,
                ttl_remaining,
                position,
            } => Some((holder, ttl_remaining, position)),
            _ => None,
        })
        .collect();
    if !answers.is_majority(refusals.len()) {
        return None;
    }
    Some(AcquireOutcome::Held {
        holder: refusals
            .iter()
            .map(|(holder, _, _)| holder.as_str())
            .find(|holder| !holder.is_empty())
            .unwrap_or_default()
            .to_owned(),
        ttl_remaining: refusals.iter().filter_map(|(_, ttl, _)| **ttl).max(),
        position: refusals
            .iter()
            .map(|(_, _, position)| **position)
            .max()
            .unwrap_or(0),
    })
}
