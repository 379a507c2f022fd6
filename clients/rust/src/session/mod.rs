//! Many leases on one `Session` stream (etcd's `concurrency.Session`): open a session, then take
//! any number of locks, permits, shared holds and leaderships on it.
//!
//! ```no_run
//! # async fn example(client: leasehold_client::Client) -> Result<(), leasehold_client::ClientError> {
//! let session = client.session().ttl(std::time::Duration::from_secs(10)).open().await?;
//! let shard = session.lock("shard-7").acquire().await?;
//! let leader = session.campaign("scheduler", b"host-a".to_vec()).await?;
//! tokio::select! {
//!     reason = shard.lost() => eprintln!("shard lost: {reason}"),
//!     reason = leader.lost() => eprintln!("no longer leader: {reason}"),
//! }
//! session.close().await?;
//! # Ok(()) }
//! ```
//!
//! One task per session reads the stream and keeps, for every lease, until when the server last
//! vouched for it (as every held thing does, `held.rs`: from its `acquired`, then from every later
//! `kept_alive`); a lease that passes that instant unconfirmed is lost by this process's clock.
//! When the stream breaks (its server stopped or crashed) and the session has a resume grace, the
//! task opens a new session on any replica and takes every lease back by its token, with the
//! same ids, tokens and fencing tokens; a lease it cannot take back in time is lost alone.
//!
//! Here: the session, and how a lease is asked for on it. `holds`: a lease and a leadership
//! held on it, as their holders use them; `task`: the task behind the session (`events`: what it
//! does with each message of the server); `leases`: the leases as the task knows them.

mod events;
mod holds;
mod leases;
mod task;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use crate::client::moves_on;
use crate::pb::{self, millis};
use crate::{Client, ClientError};
use leases::{Entry, Phase, Releasing, Shared, lock};
use task::{Stream, Task};

pub use holds::{SessionLeader, SessionLease};

/// Options of a session; finish with [`SessionBuilder::open`].
#[derive(Debug)]
pub struct SessionBuilder {
    client: Client,
    ttl: Duration,
    resume_grace: Option<Duration>,
    holder: String,
}

impl SessionBuilder {
    pub(crate) fn new(client: Client) -> Self {
        SessionBuilder {
            client,
            ttl: Duration::from_secs(30),
            resume_grace: None,
            holder: String::new(),
        }
    }

    /// The TTL of every lease on the session (default 30 s).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long the session's leases outlive a broken stream, so that the session resumes them
    /// on another server (default: the TTL; zero: released when the stream ends, never
    /// resumed).
    pub fn resume_grace(mut self, grace: Duration) -> Self {
        self.resume_grace = Some(grace);
        self
    }

    /// The holder description of the session's locks.
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = holder.into();
        self
    }

    /// Opens the session on the replica in use (the next, while one is unreachable).
    pub async fn open(self) -> Result<Session, ClientError> {
        let open = pb::SessionOpen {
            ttl_ms: millis(self.ttl),
            resume_grace_ms: millis(self.resume_grace.unwrap_or(self.ttl)),
            holder: self.holder,
        };
        let mut tries = self.client.replicas().len();
        let stream = loop {
            match Stream::open(&self.client, &open).await {
                Err(status) if moves_on(&status) && tries > 1 => tries -= 1,
                Err(status) => return Err(status.into()),
                Ok(stream) => break stream,
            }
        };
        let shared = Arc::new(Shared::new());
        let (commands, inbox) = mpsc::unbounded_channel();
        let (ended_tx, ended) = watch::channel(None);
        let task = Task {
            client: self.client,
            open,
            shared: shared.clone(),
            generation: 0,
            ended: ended_tx,
        };
        tokio::spawn(task.run(stream, inbox));
        Ok(Session {
            shared,
            commands,
            ended,
        })
    }
}

impl Client {
    /// Starts building a session: many leases on one stream.
    pub fn session(&self) -> SessionBuilder {
        SessionBuilder::new(self.clone())
    }
}

/// An open session. Dropping it releases every lease on it (as [`Session::close`], without
/// waiting).
pub struct Session {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedSender<Command>,
    ended: watch::Receiver<Option<String>>,
}

/// Options of one lease on a session; finish with [`SessionLockBuilder::acquire`].
pub struct SessionLockBuilder<'a> {
    session: &'a Session,
    request: pb::SessionAcquire,
}

impl SessionLockBuilder<'_> {
    /// How long to wait for a taken lock (default: fail at once).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.request.wait_ms = millis(wait);
        self
    }

    /// A description of this holder (default: the session's).
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.request.holder = holder.into();
        self
    }

    /// Up to `limit` leases hold the name at once (a semaphore).
    pub fn limit(mut self, limit: u32) -> Self {
        self.request.limit = limit;
        self
    }

    /// Hold the name shared, with other shared leases (a reader).
    pub fn shared(mut self) -> Self {
        self.request.mode = pb::LeaseMode::Shared.into();
        self
    }

    /// Wait in line (the default) or race for the lock whenever it frees.
    pub fn fair(mut self, fair: bool) -> Self {
        self.request.fair = Some(fair);
        self
    }

    /// Hold these names too, all or none (as [`crate::LeaseBuilder::more_names`]).
    pub fn more_names<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.request
            .more_names
            .extend(names.into_iter().map(Into::into));
        self
    }

    /// Lock-delay after a loss (as [`crate::LeaseBuilder::lock_delay`]).
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.request.lock_delay_ms = millis(delay);
        self
    }

    /// A ceiling on this lease's hold (as [`crate::LeaseBuilder::max_hold`]): at it, this lease
    /// alone is lost with [`crate::LostReason::MaxHold`].
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.request.max_hold_ms = millis(max_hold);
        self
    }

    /// Takes the lock, waiting as configured. A taken lock is `ClientError::Status` with
    /// `ABORTED`, its details as [`ClientError::refusal`] reads them. Dropping the future while
    /// it waits gives up.
    pub async fn acquire(self) -> Result<SessionLease, ClientError> {
        self.session.take(Ask::Lock(self.request)).await
    }
}

impl Session {
    /// Starts building a lease on `name` held by this session.
    pub fn lock(&self, name: impl Into<String>) -> SessionLockBuilder<'_> {
        SessionLockBuilder {
            session: self,
            request: pb::SessionAcquire {
                name: name.into(),
                ..Default::default()
            },
        }
    }

    /// Runs for leader of `election` on this session, waiting in line until elected (or until
    /// the session ends).
    pub async fn campaign(
        &self,
        election: impl Into<String>,
        value: impl Into<Vec<u8>>,
    ) -> Result<SessionLeader, ClientError> {
        let lease = self
            .take(Ask::Campaign(pb::SessionCampaign {
                election: election.into(),
                value: value.into(),
                ..Default::default()
            }))
            .await?;
        Ok(SessionLeader { lease })
    }

    /// Whether the whole session ended (lost, or closed): a new one must be opened for more.
    pub fn is_ended(&self) -> bool {
        self.ended.borrow().is_some()
    }

    /// Completes with the reason once the whole session ended (lost, or closed).
    pub async fn ended(&self) -> String {
        let mut ended = self.ended.clone();
        match ended.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone().unwrap_or_default(),
            Err(_) => "session task stopped".into(),
        }
    }

    /// Releases every lease of the session and ends it; how many were still held.
    pub async fn close(self) -> Result<u32, ClientError> {
        let (reply, released) = oneshot::channel();
        let _ = self.commands.send(Command::Close(Some(reply)));
        released
            .await
            .map_err(|_| ClientError::Protocol("the session ended before its close".into()))
    }

    async fn take(&self, ask: Ask) -> Result<SessionLease, ClientError> {
        let (reply, answer) = oneshot::channel();
        let id = {
            let mut state = lock(&self.shared);
            if let Some(reason) = &state.ended {
                return Err(ClientError::Protocol(format!(
                    "the session ended: {reason}"
                )));
            }
            let id = state.next_id;
            state.next_id += 1;
            state.leases.insert(
                id,
                Entry {
                    ask,
                    phase: Phase::Pending(reply),
                    sent: None,
                    asked_at: None,
                },
            );
            id
        };
        let _ = self.commands.send(Command::Sync(id));
        // Dropped while waiting: give up (the task releases it if it was taken meanwhile).
        let mut give_up = GiveUp {
            id,
            commands: Some(self.commands.clone()),
        };
        let answer = answer
            .await
            .map_err(|_| ClientError::Protocol("the session ended".into()))?;
        give_up.commands = None;
        let taken = answer?;
        Ok(SessionLease {
            id,
            fencing_token: taken.fencing_token,
            fences: taken.fences,
            token: taken.token,
            belief: taken.belief,
            commands: self.commands.clone(),
            released: false,
        })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Close(None));
    }
}

/// Gives up a wait whose caller went away.
struct GiveUp {
    id: u64,
    commands: Option<mpsc::UnboundedSender<Command>>,
}

impl Drop for GiveUp {
    fn drop(&mut self) {
        if let Some(commands) = &self.commands {
            let _ = commands.send(Command::Release(self.id, None));
        }
    }
}

/// What the session's task is asked to do.
enum Command {
    /// The entry of this id changed: tell the server.
    Sync(u64),
    Release(u64, Option<Releasing>),
    Proclaim(u64, Vec<u8>, oneshot::Sender<Result<(), ClientError>>),
    /// Release everything and end (with how many were held).
    Close(Option<oneshot::Sender<u32>>),
}

/// What a lease asked for.
#[derive(Clone)]
enum Ask {
    Lock(pb::SessionAcquire),
    Campaign(pb::SessionCampaign),
}
