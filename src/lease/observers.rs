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
use tokio::time::{Duration, Instant, sleep_until};
use tracing::{info, warn};

use crate::error::{Error, Result};
use crate::store::elections::{Snapshot, parse_event};
use crate::store::subscriptions::Subscriptions;
use crate::store::{ElectionKeys, Elections};
use crate::tasks::Tasks;

/// Changes an observer may fall behind by before it is resynchronised with the newest state.
const BACKLOG: usize = 64;
/// Margin after a lease's TTL before checking whether it ran out.
const EXPIRY_MARGIN: Duration = Duration::from_millis(20);

enum Command {
    Watch {
        keys: ElectionKeys,
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
        let connection = elections.locks().connection();
        let watched = Subscriptions::open(connection).await?;
        let (commands, inbox) = mpsc::unbounded_channel();
        let hub = Hub {
            elections: elections.clone(),
            watched,
        };
        connection
            .tasks()
            .spawn(hub.run(inbox, connection.tasks().clone()));
        Ok(Observers { commands })
    }

    /// Subscribes to the election's changes; subscribed before this returns, so a state read
    /// afterwards misses no later change.
    pub async fn watch(&self, keys: &ElectionKeys) -> Result<Watch> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Watch {
                keys: keys.clone(),
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

struct Hub {
    elections: Elections,
    /// By the election's events channel.
    watched: Subscriptions<Watched>,
}

impl Hub {
    async fn run(mut self, mut inbox: mpsc::UnboundedReceiver<Command>, tasks: Tasks) {
        let mut messages = self.watched.subscriber().message_rx();
        let mut reconnects = self.watched.subscriber().reconnect_rx();
        loop {
            let next_check = self.watched.values().filter_map(|e| e.check_at).min();
            tokio::select! {
                () = tasks.stopping() => break,
                command = inbox.recv() => match command {
                    Some(command) => self.handle(command).await,
                    None => break, // Every handle is gone.
                },
                message = messages.recv() => match message {
                    Ok(message) => self.publish(&message.channel, message.value.as_bytes().and_then(parse_event)),
                    Err(broadcast::error::RecvError::Lagged(_)) => self.resync_all().await,
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                reconnect = reconnects.recv() => {
                    if reconnect.is_ok() {
                        info!("election pub/sub connection re-established; re-reading elections");
                    }
                    // Changes may have been missed while disconnected.
                    self.resync_all().await;
                }
                () = sleep_until(next_check.unwrap_or_else(Instant::now)), if next_check.is_some() => {
                    self.check_due().await;
                }
            }
        }
        self.watched.close().await;
    }

    async fn handle(&mut self, command: Command) {
        match command {
            Command::Watch { keys, reply } => {
                let channel = keys.events.clone();
                let new_election = || Watched {
                    keys,
                    changes: broadcast::channel(BACKLOG).0,
                    observers: 0,
                    // Learn the current leader's lease TTL at once.
                    check_at: Some(Instant::now()),
                };
                let watched = self.watched.entry(&channel, new_election).await;
                let _ = reply.send(watched.map(|election| {
                    election.observers += 1;
                    election.changes.subscribe()
                }));
            }
            Command::Unwatch { channel } => {
                self.watched
                    .leave(channel, |election| {
                        election.observers = election.observers.saturating_sub(1);
                        election.observers == 0
                    })
                    .await;
            }
        }
    }

    /// A change published on `channel`: to every observer, and schedule the expiry check.
    fn publish(&mut self, channel: &str, change: Option<Snapshot>) {
        let Some(election) = self.watched.get_mut(channel) else {
            return;
        };
        let Some(change) = change else {
            warn!(channel, "unreadable election event");
            return;
        };
        election.check_at = change
            .lease_ttl
            .map(|ttl| Instant::now() + ttl + EXPIRY_MARGIN);
        let _ = election.changes.send(change);
    }

    /// Reads every election whose leader's lease may have run out. Reading retires such a
    /// leader and publishes the change, which arrives on the channel like any other.
    async fn check_due(&mut self) {
        let now = Instant::now();
        for election in self.watched.values_mut() {
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

    /// After missed messages: send every observer the newest state (observers skip what they
    /// already have by revision).
    async fn resync_all(&mut self) {
        for election in self.watched.values_mut() {
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
}
