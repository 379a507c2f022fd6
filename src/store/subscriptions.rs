//! The sharded pub/sub channels one server listens to: each subscribed while it has an entry.
//!
//! Shared by the waiting room (lock wake-ups) and the election observers. The owner is a single
//! task ([`listen`]), so a subscribe and an unsubscribe for one channel can never overtake each
//! other; it closes the connection when the server stops.

use std::collections::HashMap;
use std::future::Future;

use fred::clients::SubscriberClient;
use fred::prelude::*;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};
use tracing::{info, warn};

use super::connection::Connection;
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
    let tasks = channels.connection.tasks().clone();
    let stopping = tasks.clone();
    tasks.spawn(async move {
        let mut messages = channels.subscriber.message_rx();
        let mut reconnects = channels.subscriber.reconnect_rx();
        loop {
            let next_due = listener.next_due(&channels);
            tokio::select! {
                () = stopping.stopping() => break,
                command = inbox.recv() => match command {
                    Some(command) => listener.command(&mut channels, command).await,
                    None => break, // Every handle is gone.
                },
                message = messages.recv() => match message {
                    Ok(message) => listener.message(&mut channels, &message.channel, &message.value).await,
                    Err(broadcast::error::RecvError::Lagged(_)) => listener.missed(&mut channels).await,
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                reconnect = reconnects.recv() => {
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

/// Per-channel entries of type `T`, each backed by a subscription on one connection.
pub struct Subscriptions<T> {
    connection: Connection,
    subscriber: SubscriberClient,
    /// fred's task that re-subscribes every channel after a reconnect.
    resubscriber: JoinHandle<()>,
    entries: HashMap<String, T>,
}

impl<T> Subscriptions<T> {
    /// Opens a subscriber connection that re-subscribes its channels after a reconnect.
    pub async fn open(connection: &Connection) -> Result<Self> {
        let subscriber = connection.subscriber().await?;
        let resubscriber = subscriber.manage_subscriptions();
        Ok(Subscriptions {
            connection: connection.clone(),
            subscriber,
            resubscriber,
            entries: HashMap::new(),
        })
    }

    /// Closes the subscriber connection: for the owner's exit at shutdown.
    async fn close(&self) {
        self.resubscriber.abort();
        let _ = self
            .connection
            .bounded("quit subscriber", self.subscriber.quit())
            .await;
    }

    /// The connection, for its message and reconnect streams.
    pub fn subscriber(&self) -> &SubscriberClient {
        &self.subscriber
    }

    /// The entry of `channel`, subscribing first (and then creating it with `new`) when there is
    /// none. Subscribed before this returns, so no later message on the channel is missed.
    pub async fn entry(&mut self, channel: &str, new: impl FnOnce() -> T) -> Result<&mut T> {
        if !self.entries.contains_key(channel) {
            self.connection
                .bounded("subscribe", self.subscriber.ssubscribe(channel.to_owned()))
                .await?;
        }
        Ok(self.entries.entry(channel.to_owned()).or_insert_with(new))
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
        if let Err(error) = self
            .connection
            .bounded("unsubscribe", self.subscriber.sunsubscribe(channel))
            .await
        {
            warn!(%error, "unsubscribe failed");
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
