//! The waiting room: how one server's waiters learn that a lock may be free, without polling.
//!
//! Every release (and every expiry a server sees) publishes on the lock's sharded pub/sub channel,
//! from the Lua script itself. Each server keeps one subscriber connection and subscribes to a
//! lock's channel while it has local waiters for it. One task owns the subscriptions, so a
//! subscribe and an unsubscribe for one channel can never overtake each other.
//!
//! The same task keeps the server's fair waiters in line: every `waiter_ttl / 3` it vouches for
//! all of them with one script call per lock, which also drops waiters no server vouches for any
//! more (their server died) and wakes the line if the lock is free (a wake-up may have been lost).
//! When the subscriber connection reconnects, every local waiter is woken, since messages may
//! have been missed meanwhile.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fred::prelude::*;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tracing::info;

use crate::error::{Error, Result};
use crate::store::subscriptions::Subscriptions;
use crate::store::{LockKeys, Locks};
use crate::tasks::Tasks;

/// Settings of the waiting room.
#[derive(Clone, Debug)]
pub struct WaitConfig {
    /// How long the line keeps a waiter whose server stopped vouching for it (crashed, frozen,
    /// cut off). Such a waiter at the head blocks the line this long: keep it short, but well
    /// above a Redis round trip, since servers vouch every `waiter_ttl / 3`.
    pub waiter_ttl: Duration,
    /// Waiters this server accepts at once; past it, RESOURCE_EXHAUSTED.
    pub max_waiters: usize,
}

impl Default for WaitConfig {
    fn default() -> Self {
        WaitConfig {
            waiter_ttl: Duration::from_secs(10),
            max_waiters: 10_000,
        }
    }
}

/// Fair waiters behind the head are woken this much later than the head (to learn their new
/// place in line), so the head's attempt is not queued behind theirs.
const BEHIND_HEAD_DELAY: Duration = Duration::from_millis(5);
/// ...and at most this often: under heavy churn their place is refreshed a few times a second,
/// not once per hand-off (which would cost one script per waiter per hand-off).
const FOLLOWER_REFRESH: Duration = Duration::from_millis(250);

enum Command {
    Join {
        keys: LockKeys,
        waiter_id: String,
        fair: bool,
        reply: oneshot::Sender<Result<watch::Receiver<()>>>,
    },
    Leave {
        channel: String,
        waiter_id: String,
    },
}

/// Handle to the waiting room of one server. Cheap to clone.
#[derive(Clone)]
pub struct WaitRoom {
    commands: mpsc::UnboundedSender<Command>,
    waiters: Arc<AtomicUsize>,
    config: WaitConfig,
}

impl WaitRoom {
    /// Opens the subscriber connection and starts the task that owns it.
    pub async fn start(locks: &Locks, config: WaitConfig) -> Result<Self> {
        let by_lock = Subscriptions::open(locks.connection()).await?;
        let (commands, inbox) = mpsc::unbounded_channel();
        let task = WaitRoomTask {
            locks: locks.clone(),
            by_lock,
            waiter_ttl: config.waiter_ttl,
        };
        let tasks = locks.connection().tasks();
        tasks.spawn(task.run(inbox, tasks.clone()));
        Ok(WaitRoom {
            commands,
            waiters: Arc::default(),
            config,
        })
    }

    pub fn waiter_ttl(&self) -> Duration {
        self.config.waiter_ttl
    }

    /// Registers a waiter: subscribed to the lock's wake-ups before this returns, so no release
    /// after the caller's next attempt can go unnoticed. Leaving is by dropping the ticket.
    pub async fn join(&self, keys: &LockKeys, waiter_id: &str, fair: bool) -> Result<WaitTicket> {
        let admitted = self.waiters.fetch_add(1, Ordering::SeqCst);
        let place = WaiterPlace(self.waiters.clone());
        if admitted >= self.config.max_waiters {
            return Err(Error::TooManyWaiters {
                limit: self.config.max_waiters,
            });
        }
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Join {
                keys: keys.clone(),
                waiter_id: waiter_id.to_owned(),
                fair,
                reply,
            })
            .map_err(|_| Error::ShuttingDown)?;
        let wakes = answer.await.map_err(|_| Error::ShuttingDown)??;
        Ok(WaitTicket {
            commands: self.commands.clone(),
            channel: keys.channel.clone(),
            waiter_id: waiter_id.to_owned(),
            wakes,
            _place: place,
        })
    }
}

/// Counts a waiter against the server's limit while it lives.
struct WaiterPlace(Arc<AtomicUsize>);

impl Drop for WaiterPlace {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A waiter's registration. Dropping it leaves the room (and the line in Redis).
pub struct WaitTicket {
    commands: mpsc::UnboundedSender<Command>,
    channel: String,
    waiter_id: String,
    wakes: watch::Receiver<()>,
    _place: WaiterPlace,
}

impl WaitTicket {
    /// Completes at the next wake-up for this waiter. Never completes if the room is gone;
    /// callers always race it against a timer.
    pub async fn woken(&mut self) {
        if self.wakes.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for WaitTicket {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Leave {
            channel: std::mem::take(&mut self.channel),
            waiter_id: std::mem::take(&mut self.waiter_id),
        });
    }
}

/// One local waiter.
struct Member {
    fair: bool,
    wake: Arc<watch::Sender<()>>,
}

/// This server's waiters of one lock.
struct LockWaiters {
    keys: LockKeys,
    /// By waiter id.
    members: HashMap<String, Member>,
    /// When the waiters behind the head were last woken to learn their place.
    followers_woken: Option<tokio::time::Instant>,
}

/// The task that owns the waiting room's subscriptions.
struct WaitRoomTask {
    locks: Locks,
    /// By the lock's wake-up channel.
    by_lock: Subscriptions<LockWaiters>,
    waiter_ttl: Duration,
}

impl WaitRoomTask {
    async fn run(mut self, mut inbox: mpsc::UnboundedReceiver<Command>, tasks: Tasks) {
        let mut messages = self.by_lock.subscriber().message_rx();
        let mut reconnects = self.by_lock.subscriber().reconnect_rx();
        let mut refresh = tokio::time::interval(self.waiter_ttl / 3);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = tasks.stopping() => break,
                command = inbox.recv() => match command {
                    Some(command) => self.handle(command).await,
                    None => break, // Every handle is gone.
                },
                message = messages.recv() => match message {
                    Ok(message) => self.wake(&message.channel, message.value.as_string().filter(|h| !h.is_empty()), &tasks),
                    Err(broadcast::error::RecvError::Lagged(_)) => self.wake_all(),
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                reconnect = reconnects.recv() => {
                    if reconnect.is_ok() {
                        info!("pub/sub connection re-established; waking every waiter");
                    }
                    // Messages may have been missed while disconnected.
                    self.wake_all();
                }
                _ = refresh.tick() => self.refresh_lines(),
            }
        }
        self.by_lock.close().await;
    }

    async fn handle(&mut self, command: Command) {
        match command {
            Command::Join {
                keys,
                waiter_id,
                fair,
                reply,
            } => {
                let channel = keys.channel.clone();
                let new_lock = || LockWaiters {
                    keys,
                    members: HashMap::new(),
                    followers_woken: None,
                };
                match self.by_lock.entry(&channel, new_lock).await {
                    Ok(lock) => {
                        let (wake, wakes) = watch::channel(());
                        lock.members.insert(
                            waiter_id,
                            Member {
                                fair,
                                wake: Arc::new(wake),
                            },
                        );
                        let _ = reply.send(Ok(wakes));
                    }
                    Err(error) => {
                        let _ = reply.send(Err(error));
                    }
                }
            }
            Command::Leave { channel, waiter_id } => {
                // (The waiter's own `LinePlace` takes it out of the Redis line.)
                self.by_lock
                    .leave(channel, |lock| {
                        lock.members.remove(&waiter_id);
                        lock.members.is_empty()
                    })
                    .await;
            }
        }
    }

    /// A release or expiry on `channel`: the head of the line (and racers) try at once; the
    /// other fair waiters cannot take the lock, so they are woken a moment later and at most every
    /// `FOLLOWER_REFRESH`, only to learn their new place. Without a named head (a lost message,
    /// an empty line) everyone tries at once.
    fn wake(&mut self, channel: &str, head: Option<String>, tasks: &Tasks) {
        let Some(lock) = self.by_lock.get_mut(channel) else {
            return;
        };
        let now = tokio::time::Instant::now();
        let refresh_followers = lock
            .followers_woken
            .is_none_or(|at| now.duration_since(at) >= FOLLOWER_REFRESH);
        let mut later = Vec::new();
        for (id, member) in &lock.members {
            if head.is_none() || !member.fair || head.as_ref() == Some(id) {
                member.wake.send_replace(());
            } else if refresh_followers {
                later.push(member.wake.clone());
            }
        }
        if !later.is_empty() {
            lock.followers_woken = Some(now);
            tasks.spawn(async move {
                tokio::time::sleep(BEHIND_HEAD_DELAY).await;
                for wake in later {
                    wake.send_replace(());
                }
            });
        }
    }

    fn wake_all(&self) {
        for member in self.by_lock.values().flat_map(|lock| lock.members.values()) {
            member.wake.send_replace(());
        }
    }

    /// Vouches for this server's fair waiters, one script call per lock, in the background.
    fn refresh_lines(&self) {
        for lock in self.by_lock.values() {
            let waiters: Vec<String> = lock
                .members
                .iter()
                .filter(|(_, member)| member.fair)
                .map(|(id, _)| id.clone())
                .collect();
            if waiters.is_empty() {
                continue;
            }
            let (locks, keys, ttl) = (self.locks.clone(), lock.keys.clone(), self.waiter_ttl);
            self.locks.connection().in_background(
                tracing::info_span!("vouch for waiters"),
                "could not vouch for waiters; they retry on their own",
                async move { locks.refresh_line(&keys, &waiters, ttl).await },
            );
        }
    }
}
