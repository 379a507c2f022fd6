//! Observers: every change of an election, in order, to every `Observe` stream.
//!
//! Each server keeps one subscriber connection for elections and subscribes to an election's
//! channel while it has observers of it; one task owns the subscriptions (as in the waiting
//! room). Changes come only from the channel, published by the scripts that make them, so every
//! observer on every server sees the same sequence. The task also notices a leader whose lease
//! ran out with nobody to say so (its server died): when the lease's TTL has passed, it reads
//! the election, which retires such a leader and publishes that there is none.

use fred::prelude::*;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::time::{Duration, Instant};
use tracing::warn;

use crate::error::{Error, Result};
use crate::store::elections::{Snapshot, parse_event};
use crate::store::subscriptions::{Listener, Subscriptions, listen};
use crate::store::{ElectionKeys, Elections, Nodes};

/// Changes an observer may fall behind by before it is resynchronised with the newest state.
const BACKLOG: usize = 64;
/// Margin after a lease's TTL before checking whether it ran out.
const EXPIRY_MARGIN: Duration = Duration::from_millis(20);

enum Command {
    Watch {
        /// Boxed: an election's keys are most of a command's size.
        keys: Box<ElectionKeys>,
        reply: oneshot::Sender<Result<broadcast::Receiver<Snapshot>>>,
    },
    Unwatch {
        channel: String,
    },
}

/// Handle to the server's observer hub. Cheap to clone.
#[derive(Clone)]
pub struct Observers {
    commands: mpsc::UnboundedSender<Command>,
}

/// An observer's subscription: changes arrive on `changes`; dropping it unsubscribes.
pub struct Watch {
    pub changes: broadcast::Receiver<Snapshot>,
    commands: mpsc::UnboundedSender<Command>,
    channel: String,
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Unwatch {
            channel: std::mem::take(&mut self.channel),
        });
    }
}

impl Observers {
    /// Opens the subscriber connection and starts the task that owns it.
    pub async fn start(elections: &Elections) -> Result<Self> {
        let watched = Subscriptions::open(&Nodes::single(elections.connection().clone())).await?;
        let hub = Hub {
            elections: elections.clone(),
        };
        let commands = listen(hub, watched);
        Ok(Observers { commands })
    }

    /// Subscribes to the election's changes; subscribed before this returns, so a state read
    /// afterwards misses no later change.
    pub async fn watch(&self, keys: &ElectionKeys) -> Result<Watch> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Watch {
                keys: Box::new(keys.clone()),
                reply,
            })
            .map_err(|_| Error::ShuttingDown)?;
        let changes = answer.await.map_err(|_| Error::ShuttingDown)??;
        Ok(Watch {
            changes,
            commands: self.commands.clone(),
            channel: keys.events.clone(),
        })
    }
}

/// One watched election.
struct Watched {
    keys: ElectionKeys,
    changes: broadcast::Sender<Snapshot>,
    observers: usize,
    /// When to check whether the leader's lease ran out; `None` without a leader.
    check_at: Option<Instant>,
}

/// The watched elections, by their events channel.
type Watching = Subscriptions<Watched>;

/// The task that follows the watched elections: it owns the subscriptions (by the election's
/// events channel), through [`listen`].
struct Hub {
    elections: Elections,
}

impl Listener for Hub {
    type Entry = Watched;
    type Command = Command;

    /// A change published on `channel`: to every observer, and schedule the expiry check.
    async fn message(&mut self, watched: &mut Watching, channel: &str, payload: &Value) {
        let Some(election) = watched.get_mut(channel) else {
            return;
        };
        let Some(change) = payload.as_bytes().and_then(parse_event) else {
            warn!(channel, "unreadable election event");
            return;
        };
        election.check_at = change
            .lease_ttl
            .map(|ttl| Instant::now() + ttl + EXPIRY_MARGIN);
        let _ = election.changes.send(change);
    }

    async fn command(&mut self, watched: &mut Watching, command: Command) {
        match command {
            Command::Watch { keys, reply } => {
                let channel = keys.events.clone();
                let new_election = || Watched {
                    keys: *keys,
                    changes: broadcast::channel(BACKLOG).0,
                    observers: 0,
                    // Learn the current leader's lease TTL at once.
                    check_at: Some(Instant::now()),
                };
                let election = watched.entry(&channel, new_election).await;
                let _ = reply.send(election.map(|election| {
                    election.observers += 1;
                    election.changes.subscribe()
                }));
            }
            Command::Unwatch { channel } => {
                let unwatch = |election: &mut Watched| {
                    election.observers = election.observers.saturating_sub(1);
                    election.observers == 0
                };
                watched.leave(channel, unwatch).await;
            }
        }
    }

    /// Changes may have been missed: send every observer the newest state (observers skip what
    /// they already have by revision).
    async fn missed(&mut self, watched: &mut Watching) {
        for election in watched.values_mut() {
            match self.elections.retire_stale_leader(&election.keys).await {
                Ok(state) => {
                    election.check_at = state
                        .lease_ttl
                        .map(|ttl| Instant::now() + ttl + EXPIRY_MARGIN);
                    let _ = election.changes.send(state);
                }
                Err(error) => {
                    warn!(%error, "could not re-read an election after a reconnect");
                    election.check_at = Some(Instant::now() + Duration::from_secs(1));
                }
            }
        }
    }

    /// The next check for a leader whose lease may have run out.
    fn next_due(&self, watched: &Watching) -> Option<Instant> {
        watched.values().filter_map(|e| e.check_at).min()
    }

    /// Reads every election whose leader's lease may have run out. Reading retires such a
    /// leader and publishes the change, which arrives on the channel like any other.
    async fn due(&mut self, watched: &mut Watching) {
        let now = Instant::now();
        for election in watched.values_mut() {
            if election.check_at.is_none_or(|at| at > now) {
                continue;
            }
            election.check_at = match self.elections.retire_stale_leader(&election.keys).await {
                Ok(state) => state
                    .lease_ttl
                    .map(|ttl| Instant::now() + ttl + EXPIRY_MARGIN),
                Err(error) => {
                    warn!(%error, "could not check the election's leader; retrying");
                    Some(Instant::now() + Duration::from_secs(1))
                }
            };
        }
    }
}
