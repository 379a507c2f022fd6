//! The sharded pub/sub channels one server listens to: each subscribed while it has an entry.
//!
//! Shared by the waiting room (lock wake-ups) and the election observers. The owner is a single
//! task, so a subscribe and an unsubscribe for one channel can never overtake each other. The
//! connection closes when the owner drops this.

use std::collections::HashMap;

use fred::clients::SubscriberClient;
use fred::prelude::*;
use tracing::warn;

use tokio::task::JoinHandle;

use super::connection::Connection;
use crate::error::Result;

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
    pub async fn close(self) {
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
