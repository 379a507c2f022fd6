//! The Redis primaries a key space lives on, and the majority rule that joins their answers.
//!
//! With one Redis (single, Sentinel or Cluster) there is one node and a majority of one, so every
//! operation is exactly that node's answer. With `--redlock` there are N independent primaries
//! (odd, at least 3): each command goes to all of them at once, and an outcome counts only when
//! a majority agree (Redlock). Two majorities always share a node, which is what makes a lock
//! held on a majority exclusive and its fencing token monotonic.

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use std::future::Future;
use std::time::Duration;

use super::connection::Connection;
use crate::error::{Error, Result};

/// Clock-drift allowance: Redis and this process may measure a TTL slightly differently.
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The nodes of a key space. Cheap to clone.
#[derive(Clone)]
pub struct Nodes {
    connections: Vec<Connection>,
}

impl Nodes {
    /// One Redis (or one Sentinel- or Cluster-managed Redis): a majority of one.
    pub fn single(connection: Connection) -> Self {
        Nodes {
            connections: vec![connection],
        }
    }

    /// Independent primaries for Redlock: an odd number, at least three, so that a majority
    /// survives the loss of a minority.
    pub fn quorum(connections: Vec<Connection>) -> Result<Self> {
        let count = connections.len();
        if count < 3 || count % 2 == 0 {
            return Err(Error::invalid(format!(
                "Redlock needs an odd number of independent Redis primaries, at least 3 (got {count})"
            )));
        }
        Ok(Nodes { connections })
    }

    /// The node whose connection carries the server's tasks and metrics (they are shared by
    /// every node's connection), and whose reconnects leases watch.
    pub fn home(&self) -> &Connection {
        // `single` and `quorum` never build an empty set.
        &self.connections[0]
    }

    pub fn all(&self) -> &[Connection] {
        &self.connections
    }

    /// More than one node: Redlock.
    pub fn is_quorum(&self) -> bool {
        self.connections.len() > 1
    }

    /// Answers needed for an outcome: a majority.
    pub fn majority(&self) -> usize {
        self.connections.len() / 2 + 1
    }

    /// Runs `call` on every node at once and collects the answers as they arrive, stopping as
    /// soon as `settled` says those so far decide the outcome (the calls still running are
    /// dropped: a command already sent may still land, which every caller allows for), or when
    /// every node has answered.
    pub async fn gather<'a, T, F, Fut>(
        &'a self,
        call: F,
        settled: impl Fn(&Answers<T>) -> bool,
    ) -> Answers<T>
    where
        F: Fn(usize, &'a Connection) -> Fut,
        Fut: Future<Output = Result<T>> + 'a,
    {
        let mut answers = Answers {
            ok: Vec::with_capacity(self.connections.len()),
            failed: Vec::new(),
            nodes: self.connections.len(),
            majority: self.majority(),
        };
        if let [connection] = self.connections.as_slice() {
            // One node: its answer is the outcome, with nothing to race.
            match call(0, connection).await {
                Ok(value) => answers.ok.push((0, value)),
                Err(error) => answers.failed.push(error),
            }
            return answers;
        }
        let mut pending: FuturesUnordered<_> = self
            .connections
            .iter()
            .enumerate()
            .map(|(node, connection)| {
                let answer = call(node, connection);
                async move { (node, answer.await) }
            })
            .collect();
        while let Some((node, answer)) = pending.next().await {
            match answer {
                Ok(value) => answers.ok.push((node, value)),
                Err(error) => answers.failed.push(error),
            }
            if settled(&answers) {
                break;
            }
        }
        answers
    }
}

/// What the nodes answered so far.
#[derive(Debug)]
pub struct Answers<T> {
    /// (node index, answer) in arrival order.
    pub ok: Vec<(usize, T)>,
    pub failed: Vec<Error>,
    nodes: usize,
    majority: usize,
}

impl<T> Answers<T> {
    /// Answers that satisfy `test`.
    pub fn count(&self, test: impl Fn(&T) -> bool) -> usize {
        self.ok.iter().filter(|(_, answer)| test(answer)).count()
    }

    /// Whether `count` answers make a majority.
    pub fn is_majority(&self, count: usize) -> bool {
        count >= self.majority
    }

    /// Whether `count` answers make a majority impossible for the others.
    pub fn rules_out_majority(&self, count: usize) -> bool {
        count > self.nodes - self.majority
    }

    /// Too many nodes failed for any outcome to reach a majority.
    pub fn unreachable(&self) -> bool {
        self.rules_out_majority(self.failed.len())
    }

    /// The error for an outcome no majority decided: with one node, its own error (a timeout
    /// stays a timeout); with several, how many answered out of how many were needed.
    pub fn into_error(mut self, context: &'static str) -> Error {
        if self.nodes == 1 {
            if let Some(error) = self.failed.pop() {
                return error;
            }
        }
        Error::NoQuorum {
            context,
            answered: self.ok.len(),
            nodes: self.nodes,
            needed: self.majority,
            first_error: self
                .failed
                .first()
                .map_or_else(|| "none".to_owned(), ToString::to_string),
        }
    }
}
