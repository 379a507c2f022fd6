//! Watching a lock: its state read again whenever Redis announces a change, the newest one
//! handed to every watcher of this server, without polling.
//!
//! A watched name has one reader per server. Before its first read it subscribes to the name's
//! watch channel; each read also marks the name watched in Redis (a key with a TTL, renewed by
//! every read, see [`LockKeys::watched`]), and the lock scripts publish a notice on that channel
//! for every change while the mark exists: taken, released, revoked, a waiter joining or leaving,
//! waiters dropped, a lease shortened to its grace. So a change after a read is always followed
//! by another read. Two changes Redis makes inside one read's round trip are read as one (the
//! reader is notified once; it reads the newest state): watchers see the newest state, never a
//! stale one, but may not see every intermediate state.
//!
//! Redis announces nothing when a key expires, so the reader also reads when the first holder's
//! TTL, or the first waiter's deadline, runs out: a timer at a known instant, not a poll. When
//! the mark's renewal falls due without any change (every [`MARK_RENEWAL`]), that read renews it.
//! After the pub/sub connection reconnects (notices may have been missed) every reader reads
//! again. The mark goes with its TTL once no server watches the name.
//!
//! A watcher holds a `tokio::sync::watch` receiver: one slot, the newest state, whatever the
//! watcher's speed (a slow reader skips states, never queues them).

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::time::{Instant, sleep_until};
use tracing::warn;

use crate::error::{Error, Result};
use crate::store::locks::{Described, LockState};
use crate::store::subscriptions::{Listener, Subscriptions, listen};
use crate::store::{LockKeys, Locks};

/// How long the watched mark lives unless a reader renews it: how long the lock scripts keep
/// announcing changes after the last watcher went (a few messages nobody reads).
const MARK_TTL: Duration = Duration::from_secs(30);
/// How often a reader renews the mark (with a read) when nothing changes.
const MARK_RENEWAL: Duration = Duration::from_secs(10);
/// How soon a reader tries again after a failed read (Redis unreachable).
const RETRY: Duration = Duration::from_millis(500);
/// Read just after a TTL runs out, not just before.
const PAST_EXPIRY: Duration = Duration::from_millis(2);

/// The states one reader hands out: `None` until its first read.
type States = watch::Sender<Option<Described>>;

enum Command {
    Join {
        keys: LockKeys,
        reply: oneshot::Sender<Result<watch::Receiver<Option<Described>>>>,
    },
    Leave {
        channel: String,
    },
}

/// Handle to the watchers of one server. Cheap to clone.
#[derive(Clone)]
pub struct Watchers {
    commands: mpsc::UnboundedSender<Command>,
}

impl Watchers {
    /// Opens the subscriber connection for watch notices and starts the task that owns it.
    pub async fn start(locks: &Locks) -> Result<Self> {
        let by_name = Subscriptions::open(locks.nodes()).await?;
        let commands = listen(
            WatchersTask {
                locks: locks.clone(),
            },
            by_name,
        );
        Ok(Watchers { commands })
    }

    /// Starts watching the lock of `keys`: subscribed before this returns; the first state
    /// follows from the reader's first read.
    pub async fn watch(&self, keys: &LockKeys) -> Result<Watching> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Join {
                keys: keys.clone(),
                reply,
            })
            .map_err(|_| Error::ShuttingDown)?;
        let states = answer.await.map_err(|_| Error::ShuttingDown)??;
        Ok(Watching {
            states,
            shown: None,
            _ticket: Ticket {
                commands: self.commands.clone(),
                channel: keys.watched(),
            },
        })
    }
}

/// One watcher of a lock. Dropping it stops watching (the name's reader stops with the last).
pub struct Watching {
    // Declared before the ticket: dropped first, so the reader count is right when the ticket
    // tells the task.
    states: watch::Receiver<Option<Described>>,
    shown: Option<Described>,
    _ticket: Ticket,
}

impl Watching {
    /// The next state unlike the last one this returned (the first: the state at once, as soon
    /// as it is read). `None` when the server stops.
    pub async fn next(&mut self) -> Option<Described> {
        loop {
            let newest = self.states.borrow_and_update().clone();
            if let Some(state) = newest
                && self.shown.as_ref().is_none_or(|shown| !same(shown, &state))
            {
                self.shown = Some(state.clone());
                return Some(state);
            }
            self.states.changed().await.ok()?;
        }
    }
}

/// Two reads describe the same state: the same holders with the same fencing tokens, mode and
/// waiters. Time left is not part of it (it changes with every read).
pub fn same(a: &Described, b: &Described) -> bool {
    let holders = |d: &Described| match &d.state {
        LockState::Free => None,
        LockState::Held { mode, holders } => Some((
            *mode,
            holders
                .iter()
                .map(|h| (h.holder.clone(), h.fencing_token))
                .collect::<Vec<_>>(),
        )),
    };
    a.waiting == b.waiting && holders(a) == holders(b)
}

/// Tells the task that a watcher left.
struct Ticket {
    commands: mpsc::UnboundedSender<Command>,
    channel: String,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Leave {
            channel: std::mem::take(&mut self.channel),
        });
    }
}

/// A name watched on this server: its reader, and what wakes it.
struct Watched {
    states: Arc<States>,
    changed: Arc<Notify>,
    /// Dropped with the entry: the reader stops.
    _stop: oneshot::Sender<()>,
}

/// The task that owns the watch channels' subscriptions, through [`listen`].
struct WatchersTask {
    locks: Locks,
}

type ByName = Subscriptions<Watched>;

impl Listener for WatchersTask {
    type Entry = Watched;
    type Command = Command;

    async fn command(&mut self, by_name: &mut ByName, command: Command) {
        match command {
            Command::Join { keys, reply } => {
                let locks = &self.locks;
                let new_reader = || {
                    let (states, _) = watch::channel(None);
                    let states = Arc::new(states);
                    let changed = Arc::new(Notify::new());
                    let (stop, stopped) = oneshot::channel();
                    let reader = read_changes(
                        locks.clone(),
                        keys.clone(),
                        states.clone(),
                        changed.clone(),
                        stopped,
                    );
                    locks.connection().tasks().spawn(reader);
                    Watched {
                        states,
                        changed,
                        _stop: stop,
                    }
                };
                let joined = by_name
                    .entry(&keys.watched(), new_reader)
                    .await
                    .map(|watched| watched.states.subscribe());
                let _ = reply.send(joined);
            }
            Command::Leave { channel } => {
                by_name
                    .leave(channel, |watched| watched.states.receiver_count() == 0)
                    .await;
            }
        }
    }

    async fn message(&mut self, by_name: &mut ByName, channel: &str, _: &Value) {
        if let Some(watched) = by_name.get_mut(channel) {
            watched.changed.notify_one();
        }
    }

    /// Notices may have been missed: every reader reads again.
    async fn missed(&mut self, by_name: &mut ByName) {
        for watched in by_name.values() {
            watched.changed.notify_one();
        }
    }

    fn next_due(&self, _: &ByName) -> Option<Instant> {
        None
    }

    async fn due(&mut self, _: &mut ByName) {}
}

/// One name's reader: reads (marking the name watched) at once, then after every notice, when a
/// TTL runs out, and when the mark needs renewing; hands each new state to the watchers.
async fn read_changes(
    locks: Locks,
    keys: LockKeys,
    states: Arc<States>,
    changed: Arc<Notify>,
    mut stopped: oneshot::Receiver<()>,
) {
    let tasks = locks.connection().tasks().clone();
    // Said once per outage, not every retry.
    let mut failing = false;
    loop {
        let next_read = match locks.read_watched(&keys, MARK_TTL).await {
            Ok(state) => {
                failing = false;
                let wake = next_change(&state).map_or(MARK_RENEWAL, |at| at.min(MARK_RENEWAL));
                states.send_if_modified(|shown| {
                    let new = shown.as_ref().is_none_or(|shown| !same(shown, &state));
                    // The newest TTLs are kept even when nothing else changed.
                    *shown = Some(state);
                    new
                });
                Instant::now() + wake
            }
            Err(error) => {
                if !std::mem::replace(&mut failing, true) {
                    warn!(%error, "could not read a watched lock; trying again");
                }
                Instant::now() + RETRY
            }
        };
        tokio::select! {
            () = changed.notified() => {}
            () = sleep_until(next_read) => {}
            _ = &mut stopped => return,
            () = tasks.stopping() => return,
        }
    }
}

/// When the state changes without Redis announcing it: the first holder's TTL or the first
/// waiter's deadline runs out.
fn next_change(state: &Described) -> Option<Duration> {
    let expiry = match &state.state {
        LockState::Free => None,
        LockState::Held { holders, .. } => holders.iter().filter_map(|h| h.ttl_remaining).min(),
    };
    [expiry, state.first_waiter_leaves]
        .into_iter()
        .flatten()
        .min()
        .map(|at| at + PAST_EXPIRY)
}
