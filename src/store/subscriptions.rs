//! The sharded pub/sub channels one server listens to: each subscribed while it has an entry.
//!
//! Shared by the waiting room (lock wake-ups) and the election observers. The owner is a single
//! task ([`listen`]), so a subscribe and an unsubscribe for one channel can never overtake each
//! other; it closes the connections when the server stops. On Redlock's primaries there is one
//! subscriber connection per primary and a channel counts as subscribed on a majority: a release
//! publishes on every primary where the lock was held (a majority), so a waiter always hears it.

use std::collections::HashMap;
use std::future::Future;

use fred::clients::SubscriberClient;
use fred::prelude::*;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};
use tracing::{info, warn};

use futures_util::future::select_all;

use super::connection::Connection;
use super::quorum::Nodes;
use crate::error::Result;

/// What the task that owns a [`Subscriptions`] does: with its handles' commands, with each
/// message on its channels, when messages may have been missed, and on a timer of its own.
/// [`listen`] runs the task and lends it the channels' entries.
pub trait Listener: Send + 'static {
    type Entry: Send + Sync;
    type Command: Send + 'static;

    fn command(
        &mut self,
        channels: &mut Subscriptions<Self::Entry>,
        command: Self::Command,
    ) -> impl Future<Output = ()> + Send;
    fn message(
        &mut self,
        channels: &mut Subscriptions<Self::Entry>,
        channel: &str,
        payload: &Value,
    ) -> impl Future<Output = ()> + Send;
    /// Messages may have been missed: the connection dropped, or this task fell behind.
    fn missed(
        &mut self,
        channels: &mut Subscriptions<Self::Entry>,
    ) -> impl Future<Output = ()> + Send;
    /// When [`Listener::due`] should run next, if at all.
    fn next_due(&self, channels: &Subscriptions<Self::Entry>) -> Option<Instant>;
    fn due(&mut self, channels: &mut Subscriptions<Self::Entry>)
    -> impl Future<Output = ()> + Send;
}

/// Starts `listener` as a task of the server, owning `channels`; its handles send commands on
/// the returned sender. It runs until the server stops (or every handle is gone), then closes
/// the subscriber connection.
pub fn listen<L: Listener>(
    mut listener: L,
    mut channels: Subscriptions<L::Entry>,
) -> mpsc::UnboundedSender<L::Command> {
    let (commands, mut inbox) = mpsc::unbounded_channel();
    let tasks = channels.nodes.home().tasks().clone();
    let stopping = tasks.clone();
    tasks.spawn(async move {
        let mut messages: Vec<_> = channels
            .subscribers
            .iter()
            .map(|node| node.subscriber.message_rx())
            .collect();
        let mut reconnects: Vec<_> = channels
            .subscribers
            .iter()
            .map(|node| node.subscriber.reconnect_rx())
            .collect();
        // On a cluster, a slot that moves takes its shard channels' subscriptions with it:
        // Redis ends them with a `sunsubscribe` that fred drops. The command connections learn
        // of every move (a `MOVED` reply re-reads the slot map), so each change re-subscribes.
        let mut moves: Vec<_> = channels
            .nodes
            .all()
            .iter()
            .filter(|node| node.client().is_clustered())
            .map(|node| node.client().cluster_change_rx())
            .collect();
        loop {
            let next_due = listener.next_due(&channels);
            tokio::select! {
                () = stopping.stopping() => break,
                command = inbox.recv() => match command {
                    Some(command) => listener.command(&mut channels, command).await,
                    None => break, // Every handle is gone.
                },
                message = first_of(&mut messages) => match message {
                    Ok(message) => listener.message(&mut channels, &message.channel, &message.value).await,
                    Err(broadcast::error::RecvError::Lagged(_)) => listener.missed(&mut channels).await,
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                moved = first_of(&mut moves), if !moves.is_empty() => {
                    if let Err(broadcast::error::RecvError::Closed) = moved {
                        moves.clear();
                        continue;
                    }
                    info!("the cluster's slots moved; subscribing again and catching up on missed messages");
                    channels.resubscribe().await;
                    listener.missed(&mut channels).await;
                }
                reconnect = first_of(&mut reconnects) => {
                    if reconnect.is_ok() {
                        info!("pub/sub connection re-established; catching up on missed messages");
                    }
                    listener.missed(&mut channels).await;
                }
                () = sleep_until(next_due.unwrap_or_else(Instant::now)), if next_due.is_some() => {
                    listener.due(&mut channels).await;
                }
            }
        }
        channels.close().await;
    });
    commands
}

/// The first message from any of `receivers` (each of them cancel-safe, so none is lost when
/// another wins).
async fn first_of<T: Clone>(
    receivers: &mut [broadcast::Receiver<T>],
) -> Result<T, broadcast::error::RecvError> {
    let waiting = receivers
        .iter_mut()
        .map(|receiver| Box::pin(receiver.recv()));
    select_all(waiting).await.0
}

/// Per-channel entries of type `T`, each backed by a subscription on every node.
pub struct Subscriptions<T> {
    nodes: Nodes,
    subscribers: Vec<NodeSubscriber>,
    entries: HashMap<String, T>,
}

/// One node's subscriber connection.
struct NodeSubscriber {
    connection: Connection,
    subscriber: SubscriberClient,
    /// fred's task that re-subscribes every channel after a reconnect.
    resubscriber: JoinHandle<()>,
}

impl<T> Subscriptions<T> {
    /// Opens a subscriber connection to each node that re-subscribes its channels after a
    /// reconnect.
    pub async fn open(nodes: &Nodes) -> Result<Self> {
        let mut subscribers = Vec::with_capacity(nodes.all().len());
        for connection in nodes.all() {
            let subscriber = connection.subscriber().await?;
            let resubscriber = subscriber.manage_subscriptions();
            subscribers.push(NodeSubscriber {
                connection: connection.clone(),
                subscriber,
                resubscriber,
            });
        }
        Ok(Subscriptions {
            nodes: nodes.clone(),
            subscribers,
            entries: HashMap::new(),
        })
    }

    /// Closes the subscriber connections: for the owner's exit at shutdown.
    async fn close(&self) {
        for node in &self.subscribers {
            node.resubscriber.abort();
            let _ = node
                .connection
                .bounded("quit subscriber", node.subscriber.quit())
                .await;
        }
    }

    /// The entry of `channel`, subscribing first (and then creating it with `new`) when there is
    /// none. Subscribed (on a majority of nodes) before this returns, so no later message on the
    /// channel is missed.
    pub async fn entry(&mut self, channel: &str, new: impl FnOnce() -> T) -> Result<&mut T> {
        if !self.entries.contains_key(channel) {
            let subscribers = &self.subscribers;
            let answers = self
                .nodes
                .gather(
                    |node, connection| {
                        let subscribe = subscribers[node].subscriber.ssubscribe(channel.to_owned());
                        connection.bounded("subscribe", subscribe)
                    },
                    |answers| answers.is_majority(answers.ok.len()),
                )
                .await;
            if !answers.is_majority(answers.ok.len()) {
                return Err(answers.into_error("subscribe"));
            }
        }
        Ok(self.entries.entry(channel.to_owned()).or_insert_with(new))
    }

    /// Subscribes again to every channel with an entry, on every node: each goes to the node
    /// that serves its slot now. Subscribing twice is harmless. The subscriber connection learns
    /// the new slot map from its first failed attempt, so each channel gets a few.
    async fn resubscribe(&self) {
        const ATTEMPTS: usize = 3;
        for node in &self.subscribers {
            for channel in self.entries.keys() {
                for attempt in 1..=ATTEMPTS {
                    let subscribe = node.subscriber.ssubscribe(channel.clone());
                    match node.connection.bounded("subscribe", subscribe).await {
                        Ok(()) => break,
                        Err(error) if attempt == ATTEMPTS => {
                            warn!(%error, "subscribing again after a slot move failed; waiters rely on their timers")
                        }
                        Err(_) => {}
                    }
                }
            }
        }
    }

    /// Lets `leave` update `channel`'s entry; when it says nobody needs the entry any more, the
    /// entry goes and the channel is unsubscribed.
    pub async fn leave(&mut self, channel: String, leave: impl FnOnce(&mut T) -> bool) {
        let Some(entry) = self.entries.get_mut(&channel) else {
            return;
        };
        if !leave(entry) {
            return;
        }
        self.entries.remove(&channel);
        for node in &self.subscribers {
            let unsubscribe = node.subscriber.sunsubscribe(channel.clone());
            if let Err(error) = node.connection.bounded("unsubscribe", unsubscribe).await {
                warn!(%error, "unsubscribe failed");
            }
        }
    }

    pub fn get_mut(&mut self, channel: &str) -> Option<&mut T> {
        self.entries.get_mut(channel)
    }

    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.entries.values()
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.entries.values_mut()
    }
}
