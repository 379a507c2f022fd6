//! Revoking holdings by force (`revoke.lua`), and the one channel per key prefix on which every
//! server hears of it.
//!
//! A revocation deletes what it ends, so the next waiter is granted at once and the revoked
//! token can neither be renewed nor resumed. The holder's own server learns of it from the
//! message the script publishes (the lock's key, on `<prefix>revoked`): a plain `PUBLISH`,
//! which a Cluster carries to every node, so one subscription per server hears every name. A
//! server that misses the message learns at its next renewal, which finds the key gone. Held
//! leases cost nothing for this: no key and no channel of their own.

use std::collections::BTreeMap;

use fred::prelude::*;
use tracing::{info, warn};

use super::types::HolderState;
use super::{Locks, bad_reply, pttl};
use crate::error::Result;
use crate::store::keys::LockKeys;
use crate::store::token::Token;

/// The channel's name under the key prefix.
const REVOKED_CHANNEL: &str = "revoked";

impl Locks {
    /// Where revocations of every lock (and election) under this prefix are announced.
    pub fn revocations_channel(&self) -> String {
        [self.0.prefix.as_str(), REVOKED_CHANNEL].concat()
    }

    /// Ends every holding of the lock (`fencing_token` 0), or the one with that fencing token:
    /// deleted, the waiters woken, every server told. Returns what was ended, oldest fencing
    /// token first; empty if nothing was held (or nothing with that fencing token). Redlock: on
    /// every primary, what any of them ended.
    pub async fn revoke(&self, keys: &LockKeys, fencing_token: u64) -> Result<Vec<HolderState>> {
        const CONTEXT: &str = "revoke";
        let channel = &self.revocations_channel();
        let answers = self
            .0
            .nodes
            .gather(
                |_, connection| {
                    connection.eval::<Vec<Value>>(&self.0.scripts.revoke, CONTEXT, move || {
                        (
                            vec![
                                keys.lock().to_owned(),
                                keys.line(),
                                keys.deadlines(),
                                keys.holders(),
                                keys.permits(),
                                keys.watched(),
                                keys.revoked(),
                                keys.delay(),
                            ],
                            vec![
                                Value::from(fencing_token.to_string()),
                                Value::from(keys.channel().as_str()),
                                Value::from(channel.as_str()),
                            ],
                        )
                    })
                },
                |_| false,
            )
            .await;
        if answers.ok.is_empty() {
            return Err(answers.into_error(CONTEXT));
        }
        let mut ended = BTreeMap::new();
        for (_, reply) in &answers.ok {
            if reply.len() % 3 != 0 {
                return Err(bad_reply(CONTEXT, reply));
            }
            for holding in reply.chunks_exact(3) {
                let state = HolderState {
                    holder: holding[0].as_string().unwrap_or_default(),
                    fencing_token: holding[1].as_u64().unwrap_or(0),
                    ttl_remaining: pttl(&holding[2]),
                };
                ended.entry(state.fencing_token).or_insert(state);
            }
        }
        Ok(ended.into_values().collect())
    }

    /// Whether `token`'s holding of the lock was revoked lately (any node says so): read only
    /// when a renewal found the key gone before its server heard of a revocation, to tell the
    /// holder why.
    pub async fn was_revoked(&self, keys: &LockKeys, token: &Token) -> Result<bool> {
        let answers = self
            .0
            .nodes
            .gather(
                |_, connection| {
                    let set = keys.revoked();
                    let ask = connection
                        .client()
                        .sismember::<bool, _, _>(set, token.secret());
                    connection.bounded("was revoked", ask)
                },
                |answers| answers.ok.iter().any(|(_, yes)| *yes),
            )
            .await;
        if answers.ok.is_empty() {
            return Err(answers.into_error("was revoked"));
        }
        Ok(answers.ok.iter().any(|(_, yes)| *yes))
    }

    /// Calls `revoked` with the lock key of every revocation announced under this prefix, from
    /// any server, until the server stops: one subscriber connection per node (Redlock's
    /// primaries each announce it; a repeat is harmless to `revoked`). Subscribed before this
    /// returns.
    pub async fn on_revocation(&self, revoked: impl Fn(&str) + Send + 'static) -> Result<()> {
        let channel = &self.revocations_channel();
        let mut subscribers = Vec::new();
        for connection in self.0.nodes.all() {
            let subscriber = connection.subscriber().await?;
            let resubscriber = subscriber.manage_subscriptions();
            let subscribe = subscriber.subscribe(channel.clone());
            if let Err(error) = connection.bounded("subscribe", subscribe).await {
                // Redlock: a primary down at start; fred subscribes it once it connects.
                warn!(%error, "could not subscribe to revocations on a node yet");
            }
            subscribers.push((connection.clone(), subscriber, resubscriber));
        }
        let tasks = self.connection().tasks().clone();
        let mut messages: Vec<_> = subscribers
            .iter()
            .map(|(_, subscriber, _)| subscriber.message_rx())
            .collect();
        self.connection().tasks().spawn(async move {
            loop {
                let waiting = messages.iter_mut().map(|rx| Box::pin(rx.recv()));
                tokio::select! {
                    () = tasks.stopping() => break,
                    (message, _, _) = futures_util::future::select_all(waiting) => match message {
                        Ok(message) => match message.value.as_string() {
                            Some(lock) => {
                                info!(lock, "revocation heard");
                                revoked(&lock);
                            }
                            None => warn!("unreadable revocation message"),
                        },
                        // Missed some: their leases learn at their next renewal.
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                    },
                }
            }
            for (connection, subscriber, resubscriber) in subscribers {
                resubscriber.abort();
                let _ = connection
                    .bounded("quit subscriber", subscriber.quit())
                    .await;
            }
        });
        Ok(())
    }
}
