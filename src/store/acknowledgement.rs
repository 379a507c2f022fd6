//! Acknowledgement: the `WAIT` (or `WAITAOF`) that tells a write is on the replicas (and disk),
//! and the rounds that let every write of one node share one.
//!
//! One `WAIT` covers every write sent before it on its connection, so the calls of one node
//! share them ([`Rounds`]): a call whose script has been answered waits for the next `WAIT` sent
//! after that moment, and at most one is in flight per node (Redis holds every later command of
//! a connection while a `WAIT` blocks it). A call that finds none in flight sends its own right
//! behind its script, in the same write ([`Plan::try_lead`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::prelude::*;
use fred::types::config::Server;
use fred::types::{ClusterHash, CustomCommand};
use tokio::sync::watch;
use tracing::warn;

use crate::error::{Error, Result};
use crate::metrics::Metrics;

/// What vouching for one write takes: which node, what to ask it, and the node's rounds.
pub struct Plan {
    pub(super) server: Server,
    pub(super) ask: Ask,
    pub(super) rounds: Arc<Rounds>,
    pub(super) context: &'static str,
    pub(super) metrics: Metrics,
}

impl Plan {
    /// Leads the node's next round now, if none is in flight: the caller then sends the `WAIT`
    /// ([`Plan::wait_command`]) right behind its script, in the same write (one round trip
    /// instead of two), and hands what it answered to [`Lead::finish`].
    pub fn try_lead(&self) -> Option<Lead> {
        self.rounds.try_lead()
    }

    /// The `WAIT` (or `WAITAOF`) of this plan as a command and its arguments, hashed to `slot`
    /// so that, on a Cluster, it goes to the node the script went to.
    pub fn wait_command(&self, slot: u16, timeout: Duration) -> (CustomCommand, Vec<Value>) {
        let millis = i64::try_from(timeout.as_millis())
            .unwrap_or(i64::MAX)
            .max(1);
        let hash = ClusterHash::Custom(slot);
        let replicas = i64::from(self.ask.replicas);
        if self.ask.local {
            let command = CustomCommand::new_static("WAITAOF", hash, true);
            (command, vec![1.into(), replicas.into(), millis.into()])
        } else {
            let command = CustomCommand::new_static("WAIT", hash, true);
            (command, vec![replicas.into(), millis.into()])
        }
    }

    /// A `WAIT`'s (or `WAITAOF`'s) reply as what it acknowledged.
    pub fn acked(&self, reply: &Value) -> Option<Acked> {
        let count = |value: &Value| value.as_u64().and_then(|n| u32::try_from(n).ok());
        match reply {
            Value::Array(counts) if self.ask.local => Some(Acked {
                local: counts.first().and_then(count).unwrap_or(0),
                replicas: counts.get(1).and_then(count).unwrap_or(0),
            }),
            reply => Some(Acked {
                replicas: count(reply)?,
                local: 0,
            }),
        }
    }

    /// The answer of the node's first round sent from now on (led by this call if none is in
    /// flight), within `limit` in all.
    pub async fn rounds_covering(
        &self,
        client: &Client,
        timeout: Duration,
        limit: Duration,
    ) -> Option<Acked> {
        let covering = self
            .rounds
            .covering(|| send_wait(client, self.server.clone(), self.ask, timeout));
        tokio::time::timeout(limit, covering).await.ok().flatten()
    }

    /// Whether `acked` is enough: [`Error::NotReplicated`] if not (counted in the metrics).
    pub fn check(&self, acked: Option<Acked>) -> Result<()> {
        match acked {
            Some(acked)
                if acked.replicas >= self.ask.replicas
                    && acked.local >= u32::from(self.ask.local) =>
            {
                Ok(())
            }
            other => {
                self.metrics.not_replicated();
                Err(Error::NotReplicated {
                    context: self.context,
                    acked: other.map_or(0, |acked| acked.replicas),
                    needed: self.ask.replicas,
                })
            }
        }
    }
}

/// What one `WAIT` (or `WAITAOF`) asks for.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ask {
    pub(super) replicas: u32,
    pub(super) local: bool,
}

/// What it answered.
#[derive(Clone, Copy, Debug)]
pub struct Acked {
    replicas: u32,
    local: u32,
}

/// Sends one `WAIT` (or `WAITAOF`) to `node`; `None` if it failed or did not answer.
async fn send_wait(client: &Client, node: Server, ask: Ask, timeout: Duration) -> Option<Acked> {
    let millis = i64::try_from(timeout.as_millis())
        .unwrap_or(i64::MAX)
        .max(1);
    // Redis answers once the count is reached or at its own timeout: a little more for the
    // round trip, then this side gives up too.
    let limit = timeout + timeout / 2 + Duration::from_millis(50);
    let call = async {
        let target = client
            .is_clustered()
            .then(|| client.with_cluster_node(node.clone()));
        if ask.local {
            let waitaof = CustomCommand::new_static("WAITAOF", ClusterHash::Random, true);
            let args: Vec<Value> = vec![1.into(), i64::from(ask.replicas).into(), millis.into()];
            let reply: Vec<i64> = match &target {
                Some(node) => node.custom(waitaof, args).await?,
                None => client.custom(waitaof, args).await?,
            };
            let count = |at: usize| reply.get(at).and_then(|n| u32::try_from(*n).ok());
            Ok::<_, fred::error::Error>(Acked {
                local: count(0).unwrap_or(0),
                replicas: count(1).unwrap_or(0),
            })
        } else {
            let replicas = i64::from(ask.replicas);
            let acked: i64 = match &target {
                Some(node) => node.wait(replicas, millis).await?,
                None => client.wait(replicas, millis).await?,
            };
            Ok(Acked {
                replicas: u32::try_from(acked).unwrap_or(0),
                local: 0,
            })
        }
    };
    match tokio::time::timeout(limit, call).await {
        Ok(Ok(acked)) => Some(acked),
        Ok(Err(error)) => {
            warn!(%error, %node, "WAIT failed");
            None
        }
        Err(_) => None,
    }
}

/// The `WAIT`s of one node, shared by every call on it: a call waits for the first one sent
/// after it asked (one sent earlier may not cover its write), and at most one is in flight.
#[derive(Default)]
pub(super) struct Rounds {
    state: Mutex<RoundState>,
    /// The last round done, and what it answered.
    done: watch::Sender<(u64, Option<Acked>)>,
}

#[derive(Default)]
struct RoundState {
    /// Rounds begun so far (the number of the last one sent).
    begun: u64,
    /// A round is in flight.
    leading: bool,
}

impl Rounds {
    /// The answer of a round sent after this call began: led by this call if none is in flight
    /// (with `send`), else by whoever leads the next one.
    async fn covering<F, Fut>(&self, send: F) -> Option<Acked>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Option<Acked>>,
    {
        let mut done = self.done.subscribe();
        let need = self.lock().begun + 1;
        let mut send = Some(send);
        loop {
            {
                let last = done.borrow_and_update();
                if last.0 >= need {
                    return last.1;
                }
            }
            let lead = {
                let mut state = self.lock();
                (!state.leading).then(|| {
                    state.leading = true;
                    state.begun += 1;
                    state.begun
                })
            };
            match (lead, send.take()) {
                (Some(round), Some(send)) => {
                    let _leading = Leading(self);
                    let acked = send().await;
                    self.done.send_replace((round, acked));
                    return acked;
                }
                (Some(_), None) => {
                    // Led once already, by a round that did not cover this call: impossible,
                    // as every round this call leads is at least `need`. Give the lead back.
                    drop(Leading(self));
                    return None;
                }
                (None, unused) => {
                    send = unused;
                    if done.changed().await.is_err() {
                        return None;
                    }
                }
            }
        }
    }

    /// The lead of the next round, if none is in flight.
    fn try_lead(self: &Arc<Self>) -> Option<Lead> {
        let mut state = self.lock();
        if state.leading {
            return None;
        }
        state.leading = true;
        state.begun += 1;
        Some(Lead {
            rounds: self.clone(),
            round: state.begun,
            finished: false,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RoundState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A round led by a call that sends its `WAIT` itself (behind its script): its answer is every
/// waiting call's once [`Lead::finish`]ed; dropped unfinished (a cancelled call, a script that
/// failed before its `WAIT`), it answers nobody and hands the lead on.
pub struct Lead {
    rounds: Arc<Rounds>,
    round: u64,
    finished: bool,
}

impl Lead {
    pub fn finish(mut self, acked: Option<Acked>) {
        self.finished = true;
        self.rounds.done.send_replace((self.round, acked));
    }
}

impl Drop for Lead {
    fn drop(&mut self) {
        if !self.finished {
            // Nobody may take an answer this round did not get: they wait for the next.
            self.rounds.done.send_modify(|_| {});
        }
        drop(Leading(&self.rounds));
    }
}

/// The lead of a round: given back when the round ends or its leader goes away (a cancelled
/// call), waking the others so that one of them leads the next.
struct Leading<'a>(&'a Rounds);

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        self.0.lock().leading = false;
        self.0.done.send_modify(|_| {});
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[tokio::test]
    async fn a_call_waits_for_a_round_sent_after_it_and_rounds_are_shared() {
        let rounds = Arc::new(Rounds::default());
        let sent = Arc::new(AtomicU64::new(0));
        let (release, gate) = watch::channel(false);
        // The first call leads a round that waits on the gate.
        let first = {
            let (rounds, sent, mut gate) = (rounds.clone(), sent.clone(), gate.clone());
            tokio::spawn(async move {
                rounds
                    .covering(|| async move {
                        sent.fetch_add(1, Ordering::SeqCst);
                        let _ = gate.wait_for(|open| *open).await;
                        Some(Acked {
                            replicas: 1,
                            local: 0,
                        })
                    })
                    .await
            })
        };
        while sent.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        // Three calls while it is in flight: none may take its answer; one next round serves all.
        let later: Vec<_> = (0..3)
            .map(|_| {
                let (rounds, sent) = (rounds.clone(), sent.clone());
                tokio::spawn(async move {
                    rounds
                        .covering(|| async move {
                            sent.fetch_add(1, Ordering::SeqCst);
                            Some(Acked {
                                replicas: 2,
                                local: 0,
                            })
                        })
                        .await
                })
            })
            .collect();
        tokio::task::yield_now().await;
        release.send_replace(true);
        assert_eq!(first.await.ok().flatten().map(|a| a.replicas), Some(1));
        for call in later {
            assert_eq!(call.await.ok().flatten().map(|a| a.replicas), Some(2));
        }
        assert_eq!(
            sent.load(Ordering::SeqCst),
            2,
            "one round for the three later calls"
        );
    }
}
