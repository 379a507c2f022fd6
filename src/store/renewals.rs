//! Renewals in batches: the extends that fall due together on one node go to Redis as one
//! script (`locks/extend_many.lua`), so holding many leases costs a few round trips per renewal
//! period instead of one command per lease.
//!
//! The lease layer schedules renewals on a shared grid ([`crate::lease::renewal`]), so leases of
//! one TTL fall due at the same instants. One task per node collects what arrives within
//! [`LINGER`] of the first request, groups it by the node that serves each key (on a cluster:
//! per the slot map; elsewhere: one group), and sends each group in scripts of at most
//! [`MAX_PER_SCRIPT`] leases, without waiting for one group's answer before sending the next.
//!
//! No lease pays for another's trouble: a script that fails (a slot moved, a node timed out) is
//! followed at once by one plain extend per lease of it, and each lease still bounds its own
//! wait by its own validity.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::prelude::*;
use fred::types::scripts::Script;
use tokio::sync::{mpsc, oneshot};
use tracing::debug;

use super::connection::Connection;
use super::connection::millis;
use super::keys::permit_keys;
use crate::error::{Error, Result};

/// How long the batch stays open after its first request: the leases due at the same instant
/// wake within it.
pub const LINGER: Duration = Duration::from_millis(2);
/// Leases per script: bounds the time Redis spends in one script (about a microsecond each).
pub const MAX_PER_SCRIPT: usize = 500;

/// One lease's extend.
pub struct Extend {
    pub lock: String,
    /// A key that outlives the lease by two TTLs, renewed with it (an election's state), or
    /// empty.
    pub kept_with: String,
    pub token: String,
    pub ttl_ms: i64,
    /// Where its answer goes.
    pub reply: Reply,
}

/// Where an extend's answer goes: `true`, extended; `false`, not ours.
pub enum Reply {
    /// To the one lease that asked.
    One(oneshot::Sender<Result<bool>>),
    /// Into its place among a group's answers ([`RenewalBatches::extend_all`]).
    Among(Among),
}

/// One place among a group's answers: answered as shutting down if dropped unanswered (a batch
/// never sent), so the group's round always completes.
pub struct Among {
    gathered: Arc<Gathered>,
    index: usize,
    answered: bool,
}

impl Drop for Among {
    fn drop(&mut self) {
        if !self.answered {
            self.gathered.answer(self.index, Err(Error::ShuttingDown));
        }
    }
}

impl Reply {
    fn send(self, answer: Result<bool>) {
        match self {
            Reply::One(reply) => {
                let _ = reply.send(answer);
            }
            Reply::Among(mut among) => {
                among.answered = true;
                among.gathered.answer(among.index, answer);
            }
        }
    }
}

/// A group's answers, gathered in order; sent on when the last arrives.
pub struct Gathered(Mutex<Gathering>);

struct Gathering {
    /// Each lease's answer, once it came.
    slots: Vec<Option<Result<bool>>>,
    /// Answers still to come.
    left: usize,
    /// Where the lot goes once the last arrives.
    done: Option<oneshot::Sender<Vec<Result<bool>>>>,
}

impl Gathered {
    fn answer(&self, index: usize, answer: Result<bool>) {
        let mut gathering = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let Gathering { slots, left, done } = &mut *gathering;
        if let Some(slot) = slots.get_mut(index)
            && slot.is_none()
        {
            *slot = Some(answer);
            *left -= 1;
        }
        if *left == 0
            && let Some(done) = done.take()
        {
            let all = slots
                .drain(..)
                .map(|slot| slot.unwrap_or(Err(Error::ShuttingDown)))
                .collect();
            let _ = done.send(all);
        }
    }
}

/// The batching queue of one node. Cheap to clone.
#[derive(Clone)]
pub struct RenewalBatches {
    queue: mpsc::UnboundedSender<Extend>,
}

/// The two scripts a batch may need.
pub struct ExtendScripts {
    pub many: Script,
    pub one: Script,
}

impl RenewalBatches {
    /// Starts the node's batching task; it ends with the server (or when every handle is gone).
    pub fn start(connection: &Connection, scripts: std::sync::Arc<ExtendScripts>) -> Self {
        let (queue, inbox) = mpsc::unbounded_channel();
        let batcher = Batcher {
            connection: connection.clone(),
            scripts,
        };
        connection.tasks().spawn(batcher.run(inbox));
        RenewalBatches { queue }
    }

    /// Extends one lease in the next batch.
    pub async fn extend(
        &self,
        lock: &str,
        kept_with: Option<&str>,
        token: &str,
        ttl: Duration,
    ) -> Result<bool> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Extend {
                lock: lock.to_owned(),
                kept_with: kept_with.unwrap_or_default().to_owned(),
                token: token.to_owned(),
                ttl_ms: millis(ttl),
                reply: Reply::One(reply),
            })
            .map_err(|_| Error::ShuttingDown)?;
        answer.await.map_err(|_| Error::ShuttingDown)?
    }

    /// Extends a group of leases (a session's round) in the next batch, with one answer for
    /// the lot rather than one per lease: `(lock, kept_with, token)` each, answered in order.
    pub async fn extend_all(
        &self,
        leases: Vec<(String, String, String)>,
        ttl: Duration,
    ) -> Vec<Result<bool>> {
        let count = leases.len();
        if count == 0 {
            return Vec::new();
        }
        let (done, all) = oneshot::channel();
        let gathered = Arc::new(Gathered(Mutex::new(Gathering {
            slots: (0..count).map(|_| None).collect(),
            left: count,
            done: Some(done),
        })));
        let ttl_ms = millis(ttl);
        for (index, (lock, kept_with, token)) in leases.into_iter().enumerate() {
            let extend = Extend {
                lock,
                kept_with,
                token,
                ttl_ms,
                reply: Reply::Among(Among {
                    gathered: gathered.clone(),
                    index,
                    answered: false,
                }),
            };
            // Not sent: dropped, its place is answered as shutting down.
            let _ = self.queue.send(extend);
        }
        all.await
            .unwrap_or_else(|_| (0..count).map(|_| Err(Error::ShuttingDown)).collect())
    }
}

/// A node's batching task, and (cloned) each script's worth of extends on its way.
#[derive(Clone)]
struct Batcher {
    connection: Connection,
    scripts: std::sync::Arc<ExtendScripts>,
}

impl Batcher {
    async fn run(self, mut inbox: mpsc::UnboundedReceiver<Extend>) {
        let tasks = self.connection.tasks().clone();
        loop {
            let first = tokio::select! {
                first = inbox.recv() => match first {
                    Some(first) => first,
                    None => return,
                },
                () = tasks.stopping() => return,
            };
            tokio::time::sleep(LINGER).await;
            // Chunks fill as the queue drains, one per node, each sent once full: no vector of
            // the whole batch (thousands of extends at once, grown by copying).
            let slots = self.slots();
            let mut open: HashMap<Option<String>, Vec<Extend>> = HashMap::new();
            let mut next = Some(first);
            while let Some(extend) = next.take().or_else(|| inbox.try_recv().ok()) {
                let node = slots.as_ref().and_then(|slots| {
                    let slot = fred::util::redis_keyslot(extend.lock.as_bytes());
                    slots.get_server(slot).map(|server| server.to_string())
                });
                let chunk = open
                    .entry(node)
                    .or_insert_with(|| Vec::with_capacity(MAX_PER_SCRIPT));
                chunk.push(extend);
                if chunk.len() == MAX_PER_SCRIPT {
                    let full = std::mem::replace(chunk, Vec::with_capacity(MAX_PER_SCRIPT));
                    tasks.spawn(self.clone().send(full));
                }
            }
            for chunk in open.into_values().filter(|chunk| !chunk.is_empty()) {
                tasks.spawn(self.clone().send(chunk));
            }
        }
    }

    /// On a cluster, the slot map: extends go to the node that serves their keys (keys of one
    /// lease share a slot); elsewhere `None`, all together.
    fn slots(&self) -> Option<fred::types::cluster::ClusterRouting> {
        let client = self.connection.client();
        client
            .is_clustered()
            .then(|| client.cached_cluster_state())
            .flatten()
    }

    /// Sends one chunk as one script (a single extend as the plain script).
    async fn send(self, chunk: Vec<Extend>) {
        if let [_] = chunk.as_slice() {
            return self.one_by_one(chunk).await;
        }
        let arguments = || {
            let mut args = Vec::with_capacity(chunk.len() * 4);
            for extend in &chunk {
                args.push(Value::from(extend.lock.as_str()));
                args.push(Value::from(extend.token.as_str()));
                args.push(Value::from(extend.ttl_ms));
                args.push(Value::from(extend.kept_with.as_str()));
            }
            (vec![chunk[0].lock.clone()], args)
        };
        // One acknowledgement for the whole batch (shared with any other writes of the node
        // meanwhile): extended only once the replicas have it.
        let ttl = Duration::from_millis(u64::try_from(chunk[0].ttl_ms).unwrap_or(0));
        let any = |replies: &Vec<i64>| replies.contains(&1);
        let replies: Result<Vec<i64>> = self
            .connection
            .eval_vouched(&self.scripts.many, "extend batch", ttl, any, arguments)
            .await;
        match replies {
            Ok(replies) if replies.len() == chunk.len() => {
                for (extend, reply) in chunk.into_iter().zip(replies) {
                    extend.reply.send(Ok(reply == 1));
                }
            }
            // Not acknowledged: retrying lease by lease would not change that.
            Err(error @ (Error::NotReplicated { .. } | Error::NotConnected { .. })) => {
                for extend in chunk {
                    extend.reply.send(Err(unacknowledged(&error)));
                }
            }
            // A moved slot, a timeout, an odd reply: each lease on its own, at once.
            other => {
                if let Err(error) = other {
                    debug!(%error, leases = chunk.len(), "renewal batch failed; renewing one by one");
                }
                self.one_by_one(chunk).await
            }
        }
    }

    async fn one_by_one(self, chunk: Vec<Extend>) {
        let this = &self;
        let singles = chunk.into_iter().map(|extend| async move {
            let ttl = Duration::from_millis(u64::try_from(extend.ttl_ms).unwrap_or(0));
            let extended = |reply: &i64| *reply == 1;
            let reply: Result<i64> = this
                .connection
                .eval_vouched(&this.scripts.one, "extend", ttl, extended, || {
                    let [holders, permits] = permit_keys(&extend.lock);
                    let mut keys = vec![extend.lock.clone(), holders, permits];
                    if !extend.kept_with.is_empty() {
                        keys.push(extend.kept_with.clone());
                    }
                    let args = vec![
                        Value::from(extend.token.as_str()),
                        Value::from(extend.ttl_ms),
                    ];
                    (keys, args)
                })
                .await;
            extend.reply.send(reply.map(|reply| reply == 1));
        });
        futures_util::future::join_all(singles).await;
    }
}

/// The failed acknowledgement of a batch, for each of its leases (an error is not `Clone`):
/// [`Connection::acknowledged`] fails only as not replicated or not connected.
fn unacknowledged(error: &Error) -> Error {
    match error {
        Error::NotReplicated { acked, needed, .. } => Error::NotReplicated {
            context: "extend batch",
            acked: *acked,
            needed: *needed,
        },
        _ => Error::NotConnected {
            context: "extend batch",
        },
    }
}
