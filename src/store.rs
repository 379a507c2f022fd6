//! The Redis side of a lock: key layout, and the Lua scripts that change keys atomically.
//!
//! Scripts are loaded once at start (`SCRIPT LOAD`) and run by `EVALSHA`; a Redis that lost its
//! script cache (restart, `SCRIPT FLUSH`) answers `NOSCRIPT` and the script is loaded again.

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use fred::types::scripts::Script;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use tokio::sync::{broadcast, watch};
use tracing::{Instrument, info, warn};

use crate::error::{Error, Result};
use crate::token::Token;
use crate::validate::LockName;

/// Bytes of a lock name kept as they are in keys; everything else is percent-encoded, so a name
/// can never contain `{`, `}` (hash tags), `:` (our separators) or glob characters.
const KEPT_IN_KEYS: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'/')
    .remove(b'@');

/// The keys of one lock. They share the `{…}` hash tag, so one script can touch them all on a
/// Redis Cluster.
#[derive(Clone, Debug)]
pub struct LockKeys {
    /// String holding the current token; its TTL is the lock's.
    pub lock: String,
    /// Hash with the current holder's description and fencing token; same TTL as `lock`.
    pub owner: String,
    /// Counter behind the fencing tokens; it never expires so tokens only grow.
    pub fence: String,
    /// Fair waiters in arrival order (sorted set: waiter id -> arrival time in microseconds).
    pub line: String,
    /// When each waiter leaves the line unless its server vouches for it again (sorted set, ms).
    pub deadlines: String,
    /// Sharded pub/sub channel announcing that the lock may be free (same slot as the keys).
    pub channel: String,
}

/// How one acquire attempt relates to the line of waiters.
#[derive(Clone, Debug)]
pub struct Waiter<'a> {
    /// Identifies the waiter in the line; random, unrelated to the token.
    pub id: &'a str,
    /// Respect the line (`true`) or race for the lock.
    pub fair: bool,
    /// Join the line if the lock is taken (only for callers who will wait).
    pub join_line: bool,
    /// How long the line keeps this waiter without another attempt or refresh.
    pub ttl: Duration,
}

/// What an acquire attempt found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireOutcome {
    /// The lock is ours, with this fencing token.
    Acquired { fencing_token: u64 },
    /// Someone else holds it, or earlier waiters are in line.
    Held {
        holder: String,
        /// Zero when the lock is free but others are ahead in line; `None` when the key has no
        /// expiry (set by hand, not by us).
        ttl_remaining: Option<Duration>,
        /// Place in line, 1 being next; 0 when not in line.
        position: u32,
    },
}

/// A lock's state as `Describe` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockState {
    Free,
    Held {
        holder: String,
        ttl_remaining: Option<Duration>,
        fencing_token: u64,
    },
}

#[derive(Clone)]
pub(crate) struct Scripts {
    acquire: Script,
    extend: Script,
    release: Script,
    describe: Script,
    leave: Script,
    refresh: Script,
    /// Elections (see `election::store`).
    pub(crate) announce: Script,
    pub(crate) leader: Script,
}

impl Scripts {
    fn new() -> Self {
        Scripts {
            acquire: Script::from_lua(include_str!("scripts/acquire.lua")),
            extend: Script::from_lua(include_str!("scripts/extend.lua")),
            release: Script::from_lua(include_str!("scripts/release.lua")),
            describe: Script::from_lua(include_str!("scripts/describe.lua")),
            leave: Script::from_lua(include_str!("scripts/leave.lua")),
            refresh: Script::from_lua(include_str!("scripts/refresh.lua")),
            announce: Script::from_lua(include_str!("scripts/announce.lua")),
            leader: Script::from_lua(include_str!("scripts/leader.lua")),
        }
    }

    fn all(&self) -> [&Script; 8] {
        [
            &self.acquire,
            &self.extend,
            &self.release,
            &self.describe,
            &self.leave,
            &self.refresh,
            &self.announce,
            &self.leader,
        ]
    }
}

/// A connection to the Redis that holds the locks. Cheap to clone: one pointer, since every
/// lease task keeps a clone for its whole life.
#[derive(Clone)]
pub struct Store(Arc<Connection>);

/// What a [`Store`] shares among its clones.
pub struct Connection {
    client: Client,
    /// Kept to open the pub/sub connection with the same settings.
    config: Config,
    pub(crate) scripts: Scripts,
    pub(crate) prefix: String,
    command_timeout: Duration,
    /// Counts reconnections to Redis. Leases watch it and re-check their key at once, because a
    /// Redis that dropped the connection may have restarted empty or failed over.
    reconnects: watch::Receiver<u64>,
}

impl std::ops::Deref for Store {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        &self.0
    }
}

impl Store {
    /// Connects, and fails at once if Redis cannot be reached, so a misconfigured server refuses
    /// to start instead of refusing every request.
    pub async fn connect(url: &str, prefix: &str, command_timeout: Duration) -> Result<Self> {
        if prefix.contains(['{', '}']) {
            return Err(Error::invalid(format!(
                "key prefix {prefix:?} must not contain '{{' or '}}': they would break the hash tags"
            )));
        }
        let config = Config::from_url(url).map_err(Error::redis("url parse"))?;
        let client = Builder::from_config(config.clone())
            .with_connection_config(|c| {
                c.connection_timeout = command_timeout;
                c.internal_command_timeout = command_timeout;
                // A connection that stops answering (paused Redis, black-holed network) is
                // dropped and reconnected rather than trusted forever.
                c.unresponsive = fred::types::config::UnresponsiveConfig {
                    max_timeout: Some(command_timeout * 2),
                    interval: (command_timeout / 4).max(Duration::from_millis(10)),
                };
            })
            .set_policy(reconnect_policy())
            .build()
            .map_err(Error::redis("client setup"))?;
        client.init().await.map_err(Error::redis("connect"))?;
        let (reconnected, reconnects) = watch::channel(0);
        let store = Store(Arc::new(Connection {
            client,
            config,
            scripts: Scripts::new(),
            prefix: prefix.to_owned(),
            command_timeout,
            reconnects,
        }));
        let run_id = store.run_id().await?;
        info!(%run_id, "connected to Redis");
        tokio::spawn(store.clone().watch_reconnects(run_id, reconnected));
        for script in store.scripts.all() {
            store
                .bounded("script load", script.load(&store.client))
                .await?;
        }
        Ok(store)
    }

    /// A new connection for pub/sub (a subscribed connection can run nothing else), with the same
    /// settings as the command connection. Fails if Redis cannot be reached.
    pub async fn subscriber(&self) -> Result<fred::clients::SubscriberClient> {
        let subscriber = Builder::from_config(self.config.clone())
            .with_connection_config(|c| c.connection_timeout = self.command_timeout)
            .set_policy(reconnect_policy())
            .build_subscriber_client()
            .map_err(Error::redis("subscriber setup"))?;
        self.bounded("subscriber connect", subscriber.init())
            .await?;
        Ok(subscriber)
    }

    /// Changes after every reconnection to Redis: leases re-check their keys then.
    pub fn reconnects(&self) -> watch::Receiver<u64> {
        self.reconnects.clone()
    }

    /// Announces each reconnection, and says whether Redis restarted (its `run_id` changed),
    /// in which case it has probably lost every lock.
    async fn watch_reconnects(self, mut run_id: String, reconnected: watch::Sender<u64>) {
        let mut events = self.client.reconnect_rx();
        loop {
            match events.recv().await {
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            }
            match self.run_id().await {
                Ok(new) if new != run_id => {
                    warn!(old = %run_id, new = %new, "Redis restarted (new run_id): its locks may be gone; re-checking every lease");
                    run_id = new;
                }
                Ok(_) => info!("reconnected to Redis; re-checking every lease"),
                Err(error) => {
                    warn!(%error, "reconnected to Redis but could not read its run_id; re-checking every lease")
                }
            }
            reconnected.send_modify(|count| *count += 1);
        }
    }

    /// The Redis process's identity: it changes when Redis restarts.
    async fn run_id(&self) -> Result<String> {
        let info: String = self
            .bounded(
                "info",
                self.client.info(Some(fred::types::InfoKind::Server)),
            )
            .await?;
        Ok(info
            .lines()
            .find_map(|line| line.strip_prefix("run_id:"))
            .unwrap_or("unknown")
            .trim()
            .to_owned())
    }

    /// The keys of `name` under this store's prefix.
    pub fn keys(&self, name: &LockName) -> LockKeys {
        lock_keys(&self.prefix, name)
    }

    /// One atomic `SET NX PX` (only if the line lets this waiter go); on success also issues the
    /// next fencing token. If taken, a fair waiter keeps (or takes) its place in line.
    pub async fn try_acquire(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl: Duration,
        holder: &str,
        waiter: &Waiter<'_>,
    ) -> Result<AcquireOutcome> {
        const CONTEXT: &str = "acquire";
        let flag = |on: bool| Value::from(if on { "1" } else { "0" });
        let reply: Vec<Value> = self
            .eval(
                &self.scripts.acquire,
                CONTEXT,
                vec![
                    keys.lock.clone(),
                    keys.owner.clone(),
                    keys.fence.clone(),
                    keys.line.clone(),
                    keys.deadlines.clone(),
                ],
                vec![
                    Value::from(token.secret()),
                    Value::from(millis(ttl)),
                    Value::from(holder),
                    Value::from(waiter.id),
                    flag(waiter.fair),
                    flag(waiter.join_line),
                    Value::from(millis(waiter.ttl)),
                    Value::from(keys.channel.as_str()),
                ],
            )
            .await?;
        match reply.as_slice() {
            [acquired, fence] if acquired.as_i64() == Some(1) => {
                let fencing_token = fence.as_u64().ok_or_else(|| bad_reply(CONTEXT, &reply))?;
                Ok(AcquireOutcome::Acquired { fencing_token })
            }
            [acquired, ttl, holder, position] if acquired.as_i64() == Some(0) => {
                Ok(AcquireOutcome::Held {
                    holder: holder.as_string().unwrap_or_default(),
                    // -2: no key; the lock is free but others are ahead in line.
                    ttl_remaining: match ttl.as_i64() {
                        Some(-2) => Some(Duration::ZERO),
                        _ => pttl(ttl),
                    },
                    position: position
                        .as_u64()
                        .and_then(|p| u32::try_from(p).ok())
                        .unwrap_or(0),
                })
            }
            _ => Err(bad_reply(CONTEXT, &reply)),
        }
    }

    /// Resets the TTL if `token` still holds the lock. `false` means the lock is not ours.
    pub async fn extend(&self, keys: &LockKeys, token: &Token, ttl: Duration) -> Result<bool> {
        let reply: i64 = self
            .eval(
                &self.scripts.extend,
                "extend",
                vec![keys.lock.clone(), keys.owner.clone()],
                vec![Value::from(token.secret()), Value::from(millis(ttl))],
            )
            .await?;
        Ok(reply == 1)
    }

    /// Deletes the lock if `token` still holds it, and wakes the waiters. `false` means it was
    /// already gone or not ours.
    pub async fn release(&self, keys: &LockKeys, token: &Token) -> Result<bool> {
        let reply: i64 = self
            .eval(
                &self.scripts.release,
                "release",
                vec![keys.lock.clone(), keys.owner.clone(), keys.line.clone()],
                vec![
                    Value::from(token.secret()),
                    Value::from(keys.channel.as_str()),
                ],
            )
            .await?;
        Ok(reply == 1)
    }

    /// Takes `waiter_id` out of line (empty: nobody) and wakes the line if the lock is free.
    pub async fn leave(&self, keys: &LockKeys, waiter_id: &str) -> Result<()> {
        let _: i64 = self
            .eval(
                &self.scripts.leave,
                "leave",
                vec![keys.lock.clone(), keys.line.clone(), keys.deadlines.clone()],
                vec![Value::from(waiter_id), Value::from(keys.channel.as_str())],
            )
            .await?;
        Ok(())
    }

    /// Vouches for this server's `waiters` of one lock for another `waiter_ttl`, drops waiters no
    /// server vouches for, and wakes the line if the lock is free.
    pub async fn refresh_line(
        &self,
        keys: &LockKeys,
        waiters: &[String],
        waiter_ttl: Duration,
    ) -> Result<()> {
        let mut args = vec![
            Value::from(keys.channel.as_str()),
            Value::from(millis(waiter_ttl)),
        ];
        args.extend(waiters.iter().map(|w| Value::from(w.as_str())));
        let _: i64 = self
            .eval(
                &self.scripts.refresh,
                "refresh line",
                vec![keys.lock.clone(), keys.line.clone(), keys.deadlines.clone()],
                args,
            )
            .await?;
        Ok(())
    }

    /// Runs `call` in the background, for exits that cannot wait for Redis: a failure is only
    /// logged, with what it costs (`fallback`), since nobody is left to hear of it.
    pub(crate) fn in_background<F, Fut>(&self, span: tracing::Span, fallback: &'static str, call: F)
    where
        F: FnOnce(Store) -> Fut + Send + 'static,
        Fut: Future<Output = Result<()>> + Send + 'static,
    {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            span.in_scope(|| warn!("no runtime left; {fallback}"));
            return;
        };
        let store = self.clone();
        runtime.spawn(
            async move {
                if let Err(error) = call(store).await {
                    warn!(%error, "{fallback}");
                }
            }
            .instrument(span),
        );
    }

    /// Releases without waiting for the answer: for exits that cannot wait, and for attempts whose
    /// outcome is unknown (an acquire that timed out may still land in Redis).
    pub fn release_in_background(&self, keys: LockKeys, token: Token) {
        let span = tracing::info_span!("release", lease = token.lease_id());
        self.in_background(
            span,
            "release failed; the lock expires by its TTL",
            |store| async move { store.release(&keys, &token).await.map(|_| ()) },
        );
    }

    /// Takes a waiter out of line without waiting (empty id: nobody), waking the line if the lock
    /// is free: for waiters that went away, and for expiries this server sees.
    pub fn leave_in_background(&self, keys: LockKeys, waiter_id: String) {
        let span = tracing::info_span!("leave line");
        self.in_background(
            span,
            "could not update the line; waiters rely on their timers",
            |store| async move { store.leave(&keys, &waiter_id).await },
        );
    }

    /// Reads who holds the lock.
    pub async fn describe(&self, keys: &LockKeys) -> Result<LockState> {
        const CONTEXT: &str = "describe";
        let reply: Vec<Value> = self
            .eval(
                &self.scripts.describe,
                CONTEXT,
                vec![keys.lock.clone(), keys.owner.clone()],
                Vec::<Value>::new(),
            )
            .await?;
        match reply.as_slice() {
            [held] if held.as_i64() == Some(0) => Ok(LockState::Free),
            [held, ttl, holder, fence] if held.as_i64() == Some(1) => Ok(LockState::Held {
                holder: holder.as_string().unwrap_or_default(),
                ttl_remaining: pttl(ttl),
                fencing_token: fence.as_u64().unwrap_or(0),
            }),
            _ => Err(bad_reply(CONTEXT, &reply)),
        }
    }

    /// Runs a script by SHA, loading it again if Redis forgot it, within the command timeout.
    pub(crate) async fn eval<R: FromValue>(
        &self,
        script: &Script,
        context: &'static str,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<R> {
        self.bounded(
            context,
            script.evalsha_with_reload(&self.client, keys, args),
        )
        .await
    }

    /// Bounds a Redis call by the command timeout, so no caller waits on a dead connection.
    pub(crate) async fn bounded<T>(
        &self,
        context: &'static str,
        call: impl Future<Output = Result<T, fred::error::Error>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.command_timeout, call).await {
            Ok(result) => result.map_err(Error::redis(context)),
            Err(_) => Err(Error::RedisTimeout {
                context,
                timeout: self.command_timeout,
            }),
        }
    }
}

/// After start, lost connections are retried forever (50 ms doubling to 2 s); leases meanwhile
/// run on their own validity clocks and report `Lost` when it runs out.
fn reconnect_policy() -> ReconnectPolicy {
    ReconnectPolicy::new_exponential(0, 50, 2_000, 2)
}

/// The keys of `name` under `prefix`: `<prefix>{<encoded name>}:lock|owner|fence`.
pub fn lock_keys(prefix: &str, name: &LockName) -> LockKeys {
    keys_at(&key_base(prefix, name))
}

/// What every key of `name` under `prefix` starts with: `<prefix>{<encoded name>}`.
pub(crate) fn key_base(prefix: &str, name: &LockName) -> String {
    format!("{prefix}{{{}}}", hash_tag(name.as_str()))
}

/// A lock's keys below `base` (from [`key_base`]).
pub(crate) fn keys_at(base: &str) -> LockKeys {
    LockKeys {
        lock: format!("{base}:lock"),
        owner: format!("{base}:owner"),
        fence: format!("{base}:fence"),
        line: format!("{base}:line"),
        deadlines: format!("{base}:deadlines"),
        channel: format!("{base}:wake"),
    }
}

/// The name as it appears inside the `{…}` hash tag: injective, and free of `{`, `}` and `:`.
fn hash_tag(name: &str) -> String {
    utf8_percent_encode(name, KEPT_IN_KEYS).to_string()
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// A `PTTL` reply as a duration; negative values mean no expiry (or no key).
fn pttl(value: &Value) -> Option<Duration> {
    let ms = value.as_i64()?;
    u64::try_from(ms).ok().map(Duration::from_millis)
}

fn bad_reply(context: &'static str, reply: &[Value]) -> Error {
    Error::BadReply {
        context,
        detail: format!("{reply:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cannot_escape_their_hash_tag() {
        for name in ["a}b", "{x}", "a:b", "*", "a%7Db", "é", "a b"] {
            let tag = hash_tag(name);
            assert!(
                !tag.contains(['{', '}', ':', '*', ' ']),
                "{name:?} -> {tag:?}"
            );
        }
        // Encoding is injective: a name that spells another's escape keeps its own key.
        assert_ne!(hash_tag("a}b"), hash_tag("a%7Db"));
    }
}
