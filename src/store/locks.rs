//! The lock key space: one lock's keys and the Lua scripts that change them atomically.
//!
//! Scripts are loaded once (`SCRIPT LOAD`) when the key space is opened and run by `EVALSHA`; a
//! Redis that lost its script cache answers `NOSCRIPT` and the script is loaded again.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use fred::prelude::*;
use fred::types::scripts::Script;

use super::connection::Connection;
use super::keys::{LockKeys, lock_key_pattern, lock_keys, lock_name};
use super::quorum::{Answers, Nodes, drift};
use super::renewals::{ExtendScripts, RenewalBatches};
use super::token::Token;
use crate::error::{Error, Result};

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
    /// When the waiter arrived, in microseconds since the Unix epoch by this server's clock.
    /// Used as its place in line on Redlock's primaries, so that every primary orders the same
    /// waiters the same way; one Redis orders them by its own clock.
    pub arrival_us: u64,
    /// What it asks for: a plain lock, a permit, a shared hold.
    pub mode: Mode,
}

/// How many may hold one name at once, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Up to `limit` holders, each with its own token and expiry: 1 is a plain lock (and the
    /// writer of a read-write lock), more is a counting semaphore.
    Exclusive { limit: u32 },
    /// A reader of a read-write lock: readers hold together; a writer excludes them all.
    Shared,
}

impl Mode {
    /// A plain lock.
    pub const LOCK: Mode = Mode::Exclusive { limit: 1 };

    /// How the scripts spell it (`permits.lua`), and errors' details name it: the limit, or
    /// `shared`.
    pub fn kind(self) -> String {
        match self {
            Mode::Exclusive { limit } => limit.to_string(),
            Mode::Shared => "shared".to_owned(),
        }
    }

    fn from_kind(kind: &str) -> Option<Mode> {
        match kind {
            "shared" => Some(Mode::Shared),
            limit => limit.parse().ok().map(|limit| Mode::Exclusive { limit }),
        }
    }

    /// A new waiter's id in the line: its first letter tells the scripts what it waits for (a
    /// waiting writer, `x`, keeps later readers out).
    pub fn waiter_id(self) -> String {
        let kind = match self {
            Mode::LOCK => 'x',
            Mode::Exclusive { .. } => 'p',
            Mode::Shared => 's',
        };
        format!("{kind}{:016x}", rand::random::<u64>())
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mode::Exclusive { limit } => write!(f, "limit {limit}"),
            Mode::Shared => f.write_str("shared (a read-write lock, limit 1)"),
        }
    }
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
    /// The name is held in another mode (another limit, or shared against a semaphore).
    Mismatch { held: Mode },
    /// Redlock: no holder has a majority, but neither did this attempt (the primaries split
    /// between contenders, or answered too late to leave enough validity). What it took was given
    /// back; retry after a random delay, so that contenders do not split again.
    NoMajority,
}

/// A lock's state as `Describe` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockState {
    Free,
    Held {
        mode: Mode,
        /// Every holder, oldest fencing token first; one for a plain lock.
        holders: Vec<HolderState>,
    },
}

/// One holder of a lock, a permit or a shared hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderState {
    pub holder: String,
    /// `None` when the key has no expiry (set by hand, not by us).
    pub ttl_remaining: Option<Duration>,
    pub fencing_token: u64,
}

/// A lease reattached by its token (see [`Locks::resume`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resumed {
    pub fencing_token: u64,
    /// Counts the lease's attachments: the server holding the newest one is the only one that
    /// may shorten it to its grace when its stream breaks.
    pub attachment: u64,
}

/// Redlock: each primary's answer to an acquire is awaited at most ttl / this...
const NODE_TIMEOUT_SHARE: u32 = 10;
/// ...but never less than this (a loopback round trip under load).
const MIN_NODE_TIMEOUT: Duration = Duration::from_millis(10);

/// Keys asked of Redis per `SCAN` call when listing held locks.
const SCAN_PAGE: u32 = 1_000;
/// `SCAN` calls at most per listing: 1,000,000 keys looked at.
pub const MAX_SCAN_PAGES: usize = 1_000;

/// A script of its own `.lua` file beside this module, after the permits' helpers.
macro_rules! with_permits {
    ($file:literal) => {
        Script::from_lua(concat!(
            include_str!("locks/permits.lua"),
            include_str!(concat!("locks/", $file))
        ))
    };
}

/// The lock's scripts, each in its own `.lua` file beside this module.
struct Scripts {
    acquire: Script,
    /// Shared with the renewal batches.
    extend: Arc<ExtendScripts>,
    release: Script,
    describe: Script,
    leave: Script,
    refresh: Script,
    raise_fence: Script,
    resume: Script,
    detach: Script,
}

impl Scripts {
    fn new() -> Self {
        Scripts {
            acquire: with_permits!("acquire.lua"),
            extend: Arc::new(ExtendScripts {
                one: with_permits!("extend.lua"),
                many: Script::from_lua(include_str!("locks/extend_many.lua")),
            }),
            release: with_permits!("release.lua"),
            describe: with_permits!("describe.lua"),
            leave: with_permits!("leave.lua"),
            refresh: with_permits!("refresh.lua"),
            raise_fence: Script::from_lua(include_str!("locks/raise_fence.lua")),
            resume: with_permits!("resume.lua"),
            detach: with_permits!("detach.lua"),
        }
    }

    fn all(&self) -> [&Script; 10] {
        [
            &self.resume,
            &self.detach,
            &self.raise_fence,
            &self.extend.many,
            &self.acquire,
            &self.extend.one,
            &self.release,
            &self.describe,
            &self.leave,
            &self.refresh,
        ]
    }
}

/// The locks under one key prefix. Cheap to clone: one pointer.
#[derive(Clone)]
pub struct Locks(Arc<Shared>);

struct Shared {
    nodes: Nodes,
    /// One renewal batcher per node, in the nodes' order.
    renewals: Vec<RenewalBatches>,
    scripts: Scripts,
    prefix: String,
}

impl Locks {
    /// Opens the key space under `prefix` on `nodes`, loading its scripts into each.
    pub async fn open(nodes: &Nodes, prefix: &str) -> Result<Self> {
        let scripts = Scripts::new();
        for connection in nodes.all() {
            for script in scripts.all() {
                connection.load(script).await?;
            }
        }
        let renewals = nodes
            .all()
            .iter()
            .map(|connection| RenewalBatches::start(connection, scripts.extend.clone()))
            .collect();
        Ok(Locks(Arc::new(Shared {
            nodes: nodes.clone(),
            renewals,
            scripts,
            prefix: prefix.to_owned(),
        })))
    }

    /// The home node's connection: the server's tasks and metrics.
    pub fn connection(&self) -> &Connection {
        self.0.nodes.home()
    }

    /// Every node the locks live on (one, or Redlock's primaries).
    pub fn nodes(&self) -> &Nodes {
        &self.0.nodes
    }

    /// The keys of lock `name`.
    pub fn keys(&self, name: &str) -> LockKeys {
        lock_keys(&self.0.prefix, name)
    }

    /// One atomic `SET NX PX` (or one permit, in `mode`), only if the line lets this waiter go;
    /// on success also issues the next fencing token. If taken, a fair waiter keeps (or takes) its
    /// place in line.
    ///
    /// On Redlock's primaries the script runs on all at once: the lock is ours with a majority
    /// and more than half the TTL of validity left (measured from before the first command
    /// left); the token is then the highest any of them issued, written back to the counters so
    /// that every later majority sees it. Short of that, whatever was taken is given back.
    pub async fn try_acquire(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl: Duration,
        holder: &str,
        waiter: &Waiter<'_>,
    ) -> Result<AcquireOutcome> {
        let nodes = &self.0.nodes;
        if let (true, Mode::Exclusive { limit: 2.. }) = (nodes.is_quorum(), waiter.mode) {
            // Each primary admits `limit` holders, but majorities of different holders need
            // not overlap on one primary: 3 holders of a limit of 2 can each win 3 of 5.
            return Err(Error::FailedPrecondition(
                "semaphores (limit above 1) are not offered with Redlock: a majority per permit \
                 cannot keep the holders within the limit; use one Redis, Sentinel or a Cluster"
                    .into(),
            ));
        }
        let started = Instant::now();
        let arrival = nodes.is_quorum().then_some(waiter.arrival_us);
        let won = |outcome: &AcquireOutcome| matches!(outcome, AcquireOutcome::Acquired { .. });
        // Redlock: a primary slower than a tenth of the TTL counts as failed for this attempt,
        // so one slow primary cannot eat the validity the others just granted.
        let node_timeout = nodes
            .is_quorum()
            .then(|| (ttl / NODE_TIMEOUT_SHARE).max(MIN_NODE_TIMEOUT));
        let mut answers = nodes
            .gather(
                |_, connection| async move {
                    let attempt =
                        self.try_acquire_on(connection, keys, token, ttl, holder, waiter, arrival);
                    match node_timeout {
                        None => attempt.await,
                        Some(timeout) => tokio::time::timeout(timeout, attempt).await.unwrap_or(
                            Err(Error::RedisTimeout {
                                context: "acquire",
                                timeout,
                            }),
                        ),
                    }
                },
                // Short of a win, every answer is awaited: what this attempt took anywhere
                // must be given back.
                |answers| answers.is_majority(answers.count(won)),
            )
            .await;
        if !nodes.is_quorum() {
            // One node: at most one answer.
            return match answers.ok.pop() {
                Some((_, outcome)) => Ok(outcome),
                None => Err(answers.into_error("acquire")),
            };
        }
        let fences: Vec<u64> = answers
            .ok
            .iter()
            .filter_map(|(_, outcome)| match outcome {
                AcquireOutcome::Acquired { fencing_token } => Some(*fencing_token),
                _ => None,
            })
            .collect();
        let validity_left = ttl.saturating_sub(started.elapsed() + drift(ttl));
        if answers.is_majority(fences.len()) && validity_left > ttl / 2 {
            let fencing_token = fences.iter().copied().max().unwrap_or_default();
            match self.raise_fence(keys, token, fencing_token).await {
                Ok(()) => {
                    if fences.len() < nodes.all().len() && waiter.join_line {
                        // The primaries that did not grant it still have this waiter in line,
                        // at its head: it would block the line there until its deadline.
                        self.leave_in_background(keys.clone(), waiter.id.to_owned());
                    }
                    return Ok(AcquireOutcome::Acquired { fencing_token });
                }
                Err(error) => {
                    self.release(keys, token).await?;
                    return Err(error);
                }
            }
        }
        if !fences.is_empty() || !answers.failed.is_empty() {
            // Given back (also where the answer was lost but the command may have landed)
            // before the next attempt, which reuses the token.
            self.release(keys, token).await?;
        }
        if answers.unreachable() {
            return Err(answers.into_error("acquire"));
        }
        // No mismatch to weigh: Redlock holds only locks and readers (semaphores are refused
        // above), and those two never mismatch.
        Ok(held_by_majority(&answers).unwrap_or(AcquireOutcome::NoMajority))
    }

    /// One node's acquire script; `arrival` is the waiter's place in line (Redlock), or the
    /// node's own clock when `None`.
    #[allow(clippy::too_many_arguments)]
    async fn try_acquire_on(
        &self,
        connection: &Connection,
        keys: &LockKeys,
        token: &Token,
        ttl: Duration,
        holder: &str,
        waiter: &Waiter<'_>,
        arrival: Option<u64>,
    ) -> Result<AcquireOutcome> {
        const CONTEXT: &str = "acquire";
        let flag = |on: bool| Value::from(if on { "1" } else { "0" });
        let reply: Vec<Value> = connection
            .eval(
                &self.0.scripts.acquire,
                CONTEXT,
                vec![
                    keys.lock.clone(),
                    keys.owner.clone(),
                    keys.fence.clone(),
                    keys.line.clone(),
                    keys.deadlines.clone(),
                    keys.holders.clone(),
                    keys.permits.clone(),
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
                    Value::from(arrival.map(|us| us.to_string()).unwrap_or_default()),
                    Value::from(waiter.mode.kind()),
                ],
            )
            .await?;
        match reply.as_slice() {
            [acquired, fence] if acquired.as_i64() == Some(1) => {
                let fencing_token = fence.as_u64().ok_or_else(|| bad_reply(CONTEXT, &reply))?;
                Ok(AcquireOutcome::Acquired { fencing_token })
            }
            [mismatch, held] if mismatch.as_i64() == Some(2) => held
                .as_str()
                .and_then(|kind| Mode::from_kind(&kind))
                .map(|held| AcquireOutcome::Mismatch { held })
                .ok_or_else(|| bad_reply(CONTEXT, &reply)),
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

    /// Redlock: raises every primary's fencing counter to `fence` (counters only grow) and
    /// records it as the holder's token where the lock is ours. Needs a majority, so that every
    /// later majority includes a primary whose counter is at least `fence`.
    async fn raise_fence(&self, keys: &LockKeys, token: &Token, fence: u64) -> Result<()> {
        let answers = self
            .0
            .nodes
            .gather(
                |_, connection| {
                    connection.eval::<i64>(
                        &self.0.scripts.raise_fence,
                        "raise fence",
                        vec![
                            keys.lock.clone(),
                            keys.owner.clone(),
                            keys.fence.clone(),
                            keys.holders.clone(),
                            keys.permits.clone(),
                        ],
                        vec![Value::from(token.secret()), Value::from(fence.to_string())],
                    )
                },
                |answers| answers.is_majority(answers.ok.len()),
            )
            .await;
        if answers.is_majority(answers.ok.len()) {
            Ok(())
        } else {
            Err(answers.into_error("raise fence"))
        }
    }

    /// Resets the TTL if `token` still holds the lock. `false` means the lock is not ours (on
    /// Redlock: not ours on enough primaries for a majority). An error means no majority
    /// answered either way. Sent in the node's next renewal batch.
    pub async fn extend(&self, keys: &LockKeys, token: &Token, ttl: Duration) -> Result<bool> {
        let renewals = &self.0.renewals;
        let answers = self
            .0
            .nodes
            .gather(
                |node, _| renewals[node].extend(&keys.lock, &keys.owner, token.secret(), ttl),
                |answers| {
                    let yes = answers.count(|&extended| extended);
                    let no = answers.ok.len() - yes;
                    answers.is_majority(yes)
                        || answers.rules_out_majority(no + answers.failed.len())
                },
            )
            .await;
        let yes = answers.count(|&extended| extended);
        if answers.is_majority(yes) {
            Ok(true)
        } else if answers.rules_out_majority(answers.ok.len() - yes) {
            Ok(false)
        } else {
            Err(answers.into_error("extend"))
        }
    }

    /// Deletes the lock if `token` still holds it, and wakes the waiters. `false` means it was
    /// already gone or not ours. Redlock: on every primary, waiting for all their answers.
    pub async fn release(&self, keys: &LockKeys, token: &Token) -> Result<bool> {
        let answers = self
            .on_every_node("release", |connection| {
                connection.eval::<i64>(
                    &self.0.scripts.release,
                    "release",
                    vec![
                        keys.lock.clone(),
                        keys.owner.clone(),
                        keys.line.clone(),
                        keys.holders.clone(),
                        keys.permits.clone(),
                    ],
                    vec![
                        Value::from(token.secret()),
                        Value::from(keys.channel.as_str()),
                    ],
                )
            })
            .await?;
        Ok(answers.count(|&reply| reply == 1) > 0)
    }

    /// Takes `waiter_id` out of line (empty: nobody) and wakes the line if the lock is free.
    pub async fn leave(&self, keys: &LockKeys, waiter_id: &str) -> Result<()> {
        self.on_every_node("leave", |connection| {
            connection.eval::<i64>(
                &self.0.scripts.leave,
                "leave",
                vec![
                    keys.lock.clone(),
                    keys.line.clone(),
                    keys.deadlines.clone(),
                    keys.holders.clone(),
                ],
                vec![Value::from(waiter_id), Value::from(keys.channel.as_str())],
            )
        })
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
        self.on_every_node("refresh line", |connection| {
            connection.eval::<i64>(
                &self.0.scripts.refresh,
                "refresh line",
                vec![
                    keys.lock.clone(),
                    keys.line.clone(),
                    keys.deadlines.clone(),
                    keys.holders.clone(),
                ],
                args.clone(),
            )
        })
        .await?;
        Ok(())
    }

    /// Runs `call` on every node and waits for all their answers: done if any node answered
    /// (a release lets go wherever the lock is ours; each primary keeps its own line, and one
    /// that missed an update catches up at the next refresh).
    async fn on_every_node<'a, Fut>(
        &'a self,
        context: &'static str,
        call: impl Fn(&'a Connection) -> Fut,
    ) -> Result<Answers<i64>>
    where
        Fut: std::future::Future<Output = Result<i64>> + 'a,
    {
        let answers = self
            .0
            .nodes
            .gather(|_, connection| call(connection), |_| false)
            .await;
        if answers.ok.is_empty() {
            return Err(answers.into_error(context));
        }
        Ok(answers)
    }

    /// Takes a waiter out of line without waiting (empty id: nobody), waking the line if the lock
    /// is free: for waiters that went away, and for expiries this server sees.
    pub fn leave_in_background(&self, keys: LockKeys, waiter_id: String) {
        let span = tracing::info_span!("leave line");
        let locks = self.clone();
        self.connection().in_background(
            span,
            "could not update the line; waiters rely on their timers",
            async move { locks.leave(&keys, &waiter_id).await },
        );
    }

    /// The locks held under this prefix, at most `limit`, found by `SCAN` (at most
    /// [`MAX_SCAN_PAGES`] pages of [`SCAN_PAGE`] keys in all, so a huge key space bounds the
    /// time, not only the answer). On a cluster every primary is scanned, since each holds only
    /// its own slots' keys. `true`: more locks may be held than returned.
    pub async fn held(&self, limit: usize) -> Result<(Vec<(String, LockState)>, bool)> {
        let mut names = Vec::new();
        let mut pages = 0;
        let mut complete = true;
        for connection in self.0.nodes.all() {
            let client = connection.client();
            if client.is_clustered() {
                let primaries = client
                    .cached_cluster_state()
                    .map(|state| state.unique_primary_nodes())
                    .unwrap_or_default();
                for primary in primaries {
                    let node = client.with_cluster_node(primary);
                    complete &= self.scan(&node, limit, &mut pages, &mut names).await?;
                }
            } else {
                complete &= self.scan(client, limit, &mut pages, &mut names).await?;
            }
        }
        // Redlock's primaries each hold a copy of every lock.
        let mut seen = HashSet::new();
        names.retain(|name| seen.insert(name.clone()));
        let truncated = !complete || names.len() > limit;
        let mut held = Vec::with_capacity(names.len().min(limit));
        for name in names.into_iter().take(limit) {
            // Released since the scan saw it: not held any more, so not listed.
            if let state @ LockState::Held { .. } = self.describe(&self.keys(&name)).await? {
                held.push((name, state));
            }
        }
        Ok((held, truncated))
    }

    /// Scans one node for lock keys into `names`, counting `pages` against the budget; `true`
    /// if the node's scan ran to its end.
    async fn scan(
        &self,
        node: &impl KeysInterface,
        limit: usize,
        pages: &mut usize,
        names: &mut Vec<String>,
    ) -> Result<bool> {
        let pattern = lock_key_pattern(&self.0.prefix);
        let mut cursor = "0".to_owned();
        loop {
            if *pages >= MAX_SCAN_PAGES || names.len() > limit {
                return Ok(false);
            }
            *pages += 1;
            let scan = node.scan_page(cursor, pattern.as_str(), Some(SCAN_PAGE), None);
            let (next, keys): (String, Vec<String>) =
                self.connection().bounded("scan", scan).await?;
            names.extend(keys.iter().filter_map(|key| lock_name(&self.0.prefix, key)));
            cursor = next;
            if cursor == "0" {
                return Ok(true);
            }
        }
    }

    /// Reads who holds the lock: on Redlock, held when a majority of primaries say so (with the
    /// highest token among them), free when enough answered to rule that out.
    pub async fn describe(&self, keys: &LockKeys) -> Result<LockState> {
        let answers = self
            .0
            .nodes
            .gather(
                |_, connection| self.describe_on(connection, keys),
                |_| false,
            )
            .await;
        let held = answers.count(|state| matches!(state, LockState::Held { .. }));
        if answers.is_majority(held) {
            let newest = answers
                .ok
                .into_iter()
                .map(|(_, state)| state)
                .filter(|state| matches!(state, LockState::Held { .. }))
                .max_by_key(|state| match state {
                    LockState::Held { holders, .. } => {
                        holders.iter().map(|h| h.fencing_token).max().unwrap_or(0)
                    }
                    LockState::Free => 0,
                });
            return Ok(newest.unwrap_or(LockState::Free));
        }
        if answers.is_majority(answers.ok.len()) {
            return Ok(LockState::Free);
        }
        Err(answers.into_error("describe"))
    }

    async fn describe_on(&self, connection: &Connection, keys: &LockKeys) -> Result<LockState> {
        const CONTEXT: &str = "describe";
        let reply: Vec<Value> = connection
            .eval(
                &self.0.scripts.describe,
                CONTEXT,
                permit_script_keys(keys),
                Vec::<Value>::new(),
            )
            .await?;
        let Some((kind, held)) = reply.split_first() else {
            return Ok(LockState::Free);
        };
        let mode = kind
            .as_str()
            .and_then(|kind| Mode::from_kind(&kind))
            .ok_or_else(|| bad_reply(CONTEXT, &reply))?;
        if held.is_empty() || held.len() % 3 != 0 {
            return Err(bad_reply(CONTEXT, &reply));
        }
        let mut holders: Vec<HolderState> = held
            .chunks_exact(3)
            .map(|holder| HolderState {
                ttl_remaining: pttl(&holder[0]),
                holder: holder[1].as_string().unwrap_or_default(),
                fencing_token: holder[2].as_u64().unwrap_or(0),
            })
            .collect();
        holders.sort_by_key(|holder| holder.fencing_token);
        Ok(LockState::Held { mode, holders })
    }

    /// Reattaches the lease `token` holds (its stream broke, the client came back within the
    /// grace): renewed for `ttl` again and counted as a new attachment. `None`: no lease of this
    /// name holds the token (expired, released, or never issued). Redlock: a majority must hold
    /// it; the token is the highest they recorded.
    pub async fn resume(
        &self,
        keys: &LockKeys,
        token: &Token,
        ttl: Duration,
    ) -> Result<Option<Resumed>> {
        const CONTEXT: &str = "resume";
        let answers = self
            .0
            .nodes
            .gather(
                |_, connection| async move {
                    let reply: Vec<u64> = connection
                        .eval(
                            &self.0.scripts.resume,
                            CONTEXT,
                            permit_script_keys(keys),
                            vec![Value::from(token.secret()), Value::from(millis(ttl))],
                        )
                        .await?;
                    Ok(match reply.as_slice() {
                        [fencing_token, attachment] => Some(Resumed {
                            fencing_token: *fencing_token,
                            attachment: *attachment,
                        }),
                        _ => None,
                    })
                },
                |_| false,
            )
            .await;
        let resumed: Vec<Resumed> = answers.ok.iter().filter_map(|(_, r)| *r).collect();
        if answers.is_majority(resumed.len()) {
            return Ok(resumed.into_iter().max_by_key(|r| r.fencing_token));
        }
        if answers.is_majority(answers.ok.len()) {
            return Ok(None);
        }
        Err(answers.into_error(CONTEXT))
    }

    /// A resumable lease's stream broke: the lease now ends after `grace` unless it is resumed,
    /// and is left alone if it was resumed elsewhere since `attachment`.
    pub async fn detach(
        &self,
        keys: &LockKeys,
        token: &Token,
        grace: Duration,
        attachment: u64,
    ) -> Result<()> {
        self.on_every_node("detach", |connection| {
            connection.eval::<i64>(
                &self.0.scripts.detach,
                "detach",
                permit_script_keys(keys),
                vec![
                    Value::from(token.secret()),
                    Value::from(millis(grace)),
                    Value::from(attachment.to_string()),
                ],
            )
        })
        .await?;
        Ok(())
    }
}

/// Redlock: the lock as the primaries that refused this attempt see it, if a majority refused
/// (held, or others ahead in line). The latest expiry and the farthest place in line, since the
/// lock is only free once a majority lets go.
fn held_by_majority(answers: &Answers<AcquireOutcome>) -> Option<AcquireOutcome> {
    let refusals: Vec<_> = answers
        .ok
        .iter()
        .filter_map(|(_, outcome)| match outcome {
            AcquireOutcome::Held {
                holder,
                ttl_remaining,
                position,
            } => Some((holder, ttl_remaining, position)),
            _ => None,
        })
        .collect();
    if !answers.is_majority(refusals.len()) {
        return None;
    }
    Some(AcquireOutcome::Held {
        holder: refusals
            .iter()
            .map(|(holder, _, _)| holder.as_str())
            .find(|holder| !holder.is_empty())
            .unwrap_or_default()
            .to_owned(),
        ttl_remaining: refusals.iter().filter_map(|(_, ttl, _)| **ttl).max(),
        position: refusals
            .iter()
            .map(|(_, _, position)| **position)
            .max()
            .unwrap_or(0),
    })
}

/// The keys of the scripts that see a lease wherever it lives: the lock, or a permit.
fn permit_script_keys(keys: &LockKeys) -> Vec<String> {
    vec![
        keys.lock.clone(),
        keys.owner.clone(),
        keys.holders.clone(),
        keys.permits.clone(),
    ]
}

pub(super) fn millis(duration: Duration) -> i64 {
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
