//! The waiting room: how one server's waiters learn that a lock may be free, without polling.
//!
//! Every release (and every expiry a server sees) that someone waits for (a waiter has a deadline
//! in Redis) publishes on the lock's sharded pub/sub channel, from the Lua script itself. Each server keeps one subscriber connection and subscribes to a
//! lock's channel while it has local waiters for it. One task owns the subscriptions, so a
//! subscribe and an unsubscribe for one channel can never overtake each other.
//!
//! The same task keeps the server's waiters in line (fair ones by place, every one by its
//! deadline): every `waiter_ttl / 3` it vouches for all of them with one script call per lock, which also drops waiters no server vouches for any
//! more (their server died) and wakes the line if the lock is free (a wake-up may have been lost).
//! When the subscriber connection reconnects, every local waiter is woken, since messages may
//! have been missed meanwhile.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fred::prelude::*;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::store::subscriptions::{Listener, Subscriptions, listen};
use crate::store::{LockKeys, Locks};

/// Settings of the waiting room.
#[derive(Clone, Debug)]
pub struct WaitConfig {
    /// How long the line keeps a waiter whose server stopped vouching for it (crashed, frozen,
    /// cut off). Such a waiter at the head blocks the line this long: keep it short, but well
    /// above a Redis round trip, since servers vouch every `waiter_ttl / 3`.
    pub waiter_ttl: Duration,
    /// Waiters this server accepts at once; past it, RESOURCE_EXHAUSTED.
    pub max_waiters: usize,
    /// Waiters this server accepts for one lock; past it, RESOURCE_EXHAUSTED. (One hot lock must
    /// not take every place of `max_waiters`.)
    pub max_waiters_per_lock: usize,
}

impl Default for WaitConfig {
    fn default() -> Self {
        WaitConfig {
            waiter_ttl: Duration::from_secs(10),
            max_waiters: 10_000,
            max_waiters_per_lock: 1_000,
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
        let by_lock = Subscriptions::open(locks.nodes()).await?;
        let task = WaitRoomTask {
            locks: locks.clone(),
            waiter_ttl: config.waiter_ttl,
            max_per_lock: config.max_waiters_per_lock.max(1),
            next_refresh: Instant::now() + config.waiter_ttl / 3,
        };
        let commands = listen(task, by_lock);
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
            channel: keys.channel(),
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
    followers_woken: Option<Instant>,
}

/// This server's waiters, by the lock's wake-up channel.
type ByLock = Subscriptions<LockWaiters>;

/// The task that keeps the waiting room: it owns the subscriptions (by the lock's wake-up
/// channel), through [`listen`].
struct WaitRoomTask {
    locks: Locks,
    waiter_ttl: Duration,
    max_per_lock: usize,
    /// When to vouch for this server's waiters again.
    next_refresh: Instant,
}

impl Listener for WaitRoomTask {
    type Entry = LockWaiters;
    type Command = Command;

    async fn command(&mut self, by_lock: &mut ByLock, command: Command) {
        match command {
            Command::Join {
                keys,
                waiter_id,
                fair,
                reply,
            } => {
                let channel = keys.channel();
                let new_lock = || LockWaiters {
                    keys,
                    members: HashMap::new(),
                    followers_woken: None,
                };
                let limit = self.max_per_lock;
                let joined = by_lock.entry(&channel, new_lock).await.and_then(|lock| {
                    // A refused waiter leaves no empty entry: the limit is at least one.
                    if lock.members.len() >= limit {
                        return Err(Error::TooManyWaitersForLock { limit });
                    }
                    let (wake, wakes) = watch::channel(());
                    let wake = Arc::new(wake);
                    lock.members.insert(waiter_id, Member { fair, wake });
                    Ok(wakes)
                });
                let _ = reply.send(joined);
            }
            Command::Leave { channel, waiter_id } => {
                // (The waiter's own `LinePlace` takes it out of the Redis line.)
                let leave = |lock: &mut LockWaiters| {
                    lock.members.remove(&waiter_id);
                    lock.members.is_empty()
                };
                by_lock.leave(channel, leave).await;
            }
        }
    }

    /// A release or expiry on `channel`, naming the head of the line: the head (and racers) try
    /// at once; the other fair waiters cannot take the lock, so they are woken a moment later
    /// and at most every `FOLLOWER_REFRESH`, only to learn their new place. Without a named head
    /// (a lost message, an empty line) everyone tries at once.
    async fn message(&mut self, by_lock: &mut ByLock, channel: &str, payload: &Value) {
        let head = payload.as_string().filter(|head| !head.is_empty());
        let Some(lock) = by_lock.get_mut(channel) else {
            return;
        };
        let now = Instant::now();
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
            self.locks.connection().tasks().spawn(async move {
                tokio::time::sleep(BEHIND_HEAD_DELAY).await;
                for wake in later {
                    wake.send_replace(());
                }
            });
        }
    }

    /// Wake-ups may have been missed: every waiter tries again.
    async fn missed(&mut self, by_lock: &mut ByLock) {
        for member in by_lock.values().flat_map(|lock| lock.members.values()) {
            member.wake.send_replace(());
        }
    }

    fn next_due(&self, _: &ByLock) -> Option<Instant> {
        Some(self.next_refresh)
    }

    /// Vouches for this server's waiters, one script call per lock, in the background.
    async fn due(&mut self, by_lock: &mut ByLock) {
        self.next_refresh = Instant::now() + self.waiter_ttl / 3;
        for lock in by_lock.values() {
            // Every waiter, fair or not: each has a deadline, which is what tells a release
            // that someone waits.
            let waiters: Vec<String> = lock.members.keys().cloned().collect();
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
