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
//! vouched for it ([`crate::lease::vouched_until`]: from its `acquired`, then from every later
//! `kept_alive`); a lease that passes that instant unconfirmed is lost by this process's clock.
//! When the stream breaks (its server stopped or crashed) and the session has a resume grace, the
//! task opens a new session on any replica and takes every lease back by its token, with the
//! same ids, tokens and fencing tokens; a lease it cannot take back in time is lost alone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Instant, sleep_until, timeout_at};
use tokio_stream::StreamExt;
use tonic::{Status, Streaming};

use crate::client::moves_on;
use crate::lease::{LeaseState, lost_reason, resumable, vouched_until};
use crate::pb::session_request::Action;
use crate::pb::session_response::Event;
use crate::pb::session_service_client::SessionServiceClient;
use crate::pb::{self, SessionRequest, SessionResponse, millis};
use crate::{Client, ClientError};

/// Longest one attempt to open a session on a replica may take before the next is tried.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause between attempts to reopen a broken session.
const RETRY: Duration = Duration::from_millis(50);
/// How long a broken session without held leases keeps trying to reopen (for its waiters).
const REOPEN_WITHOUT_LEASES: Duration = Duration::from_secs(5);

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
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                next_id: 1,
                leases: HashMap::new(),
                ended: None,
            }),
        });
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
            token: taken.token,
            state: taken.state,
            valid: taken.valid,
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

/// A lease held on a session. Dropping it releases it.
pub struct SessionLease {
    id: u64,
    fencing_token: u64,
    token: String,
    state: watch::Receiver<LeaseState>,
    /// `valid_until`, as the session's task last set it.
    valid: watch::Receiver<Instant>,
    commands: mpsc::UnboundedSender<Command>,
    released: bool,
}

impl SessionLease {
    /// The fencing token of this acquisition (a leadership's term).
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The acquisition's secret (never log it).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Completes with the reason once this lease is lost: the server said so (its key was lost,
    /// or the whole session), the session could not be resumed in time, or the validity last
    /// confirmed ran out by this process's clock.
    pub async fn lost(&self) -> String {
        lost_reason(&self.state).await
    }

    /// Whether the lease is known to be lost already.
    pub fn is_lost(&self) -> bool {
        matches!(&*self.state.borrow(), LeaseState::Lost(_))
    }

    /// Until when the server last vouched for the lease (by its `acquired`, or the session's
    /// latest confirmation since), by this process's clock: the lease is believed no longer than
    /// this without another confirmation. Still the last such instant once the lease ended.
    pub fn valid_until(&self) -> Instant {
        *self.valid.borrow()
    }

    /// Releases the lease and waits for the server to confirm. `Ok(false)`: it was not held by
    /// then (lost; or released by a server that stopped before its answer arrived). A release
    /// in flight when the session's server stops or crashes is carried out on the resumed
    /// session. The wait never outlasts the lease's validity: unconfirmed by then, it ends with
    /// an error saying so (the lease is no longer held by then either way).
    pub async fn release(mut self) -> Result<bool, ClientError> {
        self.released = true;
        let (reply, mut answer) = oneshot::channel();
        let _ = self.commands.send(Command::Release(self.id, Some(reply)));
        if self.is_lost() {
            return Ok(false);
        }
        // The validity moves only if the lease is resumed on another server meanwhile (the task
        // stops vouching for a lease being released).
        let mut valid = self.valid.clone();
        let mut following = true;
        loop {
            let until = *valid.borrow_and_update();
            tokio::select! {
                biased;
                answer = &mut answer => {
                    return answer.unwrap_or_else(|_| {
                        Err(ClientError::Protocol("the session ended before the release".into()))
                    });
                }
                changed = valid.changed(), if following => following = changed.is_ok(),
                () = sleep_until(until) => return Err(unconfirmed_release()),
            }
        }
    }
}

/// A release not confirmed before the lease's validity ran out.
fn unconfirmed_release() -> ClientError {
    ClientError::Protocol(
        "the release was not confirmed before the lease's validity ran out (the lease is no longer held by then)"
            .into(),
    )
}

impl Drop for SessionLease {
    fn drop(&mut self) {
        if !self.released {
            let _ = self.commands.send(Command::Release(self.id, None));
        }
    }
}

impl std::fmt::Debug for SessionLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionLease")
            .field("id", &self.id)
            .field("fencing_token", &self.fencing_token)
            .finish_non_exhaustive()
    }
}

/// A leadership held on a session. Dropping it resigns.
#[derive(Debug)]
pub struct SessionLeader {
    lease: SessionLease,
}

impl SessionLeader {
    /// The leader's term: larger for every new leader of the election.
    pub fn term(&self) -> u64 {
        self.lease.fencing_token
    }

    /// Completes with the reason once the leadership is lost.
    pub async fn lost(&self) -> String {
        self.lease.lost().await
    }

    /// Publishes a new value.
    pub async fn proclaim(&self, value: impl Into<Vec<u8>>) -> Result<(), ClientError> {
        let (reply, answer) = oneshot::channel();
        let _ = self
            .lease
            .commands
            .send(Command::Proclaim(self.lease.id, value.into(), reply));
        answer
            .await
            .map_err(|_| ClientError::Protocol("the session ended before the proclaim".into()))?
    }

    /// Steps down; `Ok(false)` if it was no longer leader.
    pub async fn resign(self) -> Result<bool, ClientError> {
        self.lease.release().await
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

/// A lease as the task knows it.
struct Entry {
    ask: Ask,
    phase: Phase,
    /// The stream generation it was last asked for on (`None`: not yet).
    sent: Option<u64>,
}

/// What the caller of `take` gets.
struct Taken {
    fencing_token: u64,
    token: String,
    state: watch::Receiver<LeaseState>,
    valid: watch::Receiver<Instant>,
}

enum Phase {
    /// Asked for; the caller waits for the answer.
    Pending(oneshot::Sender<Result<Taken, ClientError>>),
    Held(Held),
}

struct Held {
    token: String,
    fencing_token: u64,
    valid_until: Instant,
    /// `valid_until`, as the lease's holder reads it (also after the lease ended).
    valid: watch::Sender<Instant>,
    state: watch::Sender<LeaseState>,
    /// Asked for again by its token on the current stream, not yet confirmed there.
    resuming: bool,
    /// Its holder let it go: released on the current stream once held there (a release in
    /// flight when a stream breaks is sent again once the lease is resumed on the next).
    letting_go: bool,
    releasing: Option<Releasing>,
    proclaiming: Option<oneshot::Sender<Result<(), ClientError>>>,
}

/// Whoever waits for a release's answer.
type Releasing = oneshot::Sender<Result<bool, ClientError>>;

struct Shared {
    state: Mutex<State>,
}

struct State {
    next_id: u64,
    leases: HashMap<u64, Entry>,
    /// Why the session ended, once it has.
    ended: Option<String>,
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One stream of the session.
struct Stream {
    requests: mpsc::UnboundedSender<SessionRequest>,
    events: Streaming<SessionResponse>,
    /// When `open` was sent: what `valid_to_ms` counts from.
    opened: Instant,
    replica: crate::replicas::Replica,
}

impl Held {
    /// The server now vouches for the lease until `valid_until`.
    fn vouch(&mut self, valid_until: Instant) {
        self.valid_until = valid_until;
        self.valid.send_replace(valid_until);
    }

    /// The lease ended as `state` says: its holder is told, and whoever waits on it answered
    /// (a release with `released`).
    fn end(self, state: LeaseState, released: Result<bool, ClientError>) {
        self.state.send_replace(state);
        if let Some(reply) = self.releasing {
            let _ = reply.send(released);
        }
        if let Some(reply) = self.proclaiming {
            let _ = reply.send(Err(ClientError::Protocol("the leadership is lost".into())));
        }
    }

    /// The lease's validity ran out unconfirmed: lost, by this process's clock.
    fn expired(self, reason: String) {
        let released = if self.releasing.is_some() {
            Err(unconfirmed_release())
        } else {
            Ok(false)
        };
        self.end(LeaseState::Lost(reason), released);
    }
}

impl Stream {
    async fn open(client: &Client, open: &pb::SessionOpen) -> Result<Self, Status> {
        let (requests, outbox) = mpsc::unbounded_channel();
        let _ = requests.send(SessionRequest {
            action: Some(Action::Open(open.clone())),
        });
        let replica = client.replicas().current();
        let opened = Instant::now();
        let answer = SessionServiceClient::new(replica.transport.clone())
            .session(tokio_stream::wrappers::UnboundedReceiverStream::new(outbox))
            .await;
        match answer {
            Ok(events) => Ok(Stream {
                requests,
                events: events.into_inner(),
                opened,
                replica,
            }),
            Err(status) => {
                if moves_on(&status) {
                    client.replicas().failed(&replica);
                }
                Err(status)
            }
        }
    }

    fn send(&self, action: Action) {
        let _ = self.requests.send(SessionRequest {
            action: Some(action),
        });
    }
}

/// The task behind one session: reads its stream, tells each lease, reopens a broken stream.
struct Task {
    client: Client,
    open: pb::SessionOpen,
    shared: Arc<Shared>,
    /// Which stream of the session is current.
    generation: u64,
    ended: watch::Sender<Option<String>>,
}

/// How a stream stopped.
enum Stop {
    /// The session is over, for this reason.
    Ended(String),
    /// The stream broke; the session may go on on another.
    Broke(String),
}

impl Task {
    async fn run(mut self, mut stream: Stream, mut inbox: mpsc::UnboundedReceiver<Command>) {
        let reason = loop {
            match self.follow(&mut stream, &mut inbox).await {
                Stop::Ended(reason) => break reason,
                Stop::Broke(broke) => {
                    if self.open.resume_grace_ms == 0 {
                        break broke;
                    }
                    match self.reopen(&broke).await {
                        Some(reopened) => stream = reopened,
                        None => break format!("could not resume the session: {broke}"),
                    }
                }
            }
        };
        self.end(reason);
    }

    /// Every lease ends with the session.
    fn end(&self, reason: String) {
        let mut state = lock(&self.shared);
        for (_, entry) in state.leases.drain() {
            match entry.phase {
                Phase::Pending(reply) => {
                    let _ = reply.send(Err(ClientError::Protocol(format!(
                        "the session ended: {reason}"
                    ))));
                }
                Phase::Held(held) => held.end(LeaseState::Lost(reason.clone()), Ok(false)),
            }
        }
        state.ended = Some(reason.clone());
        drop(state);
        self.ended.send_replace(Some(reason));
    }

    /// Follows one stream until it stops.
    async fn follow(
        &mut self,
        stream: &mut Stream,
        inbox: &mut mpsc::UnboundedReceiver<Command>,
    ) -> Stop {
        // Whatever the previous stream left unsaid: every lease is asked for on this one.
        let ids: Vec<u64> = lock(&self.shared).leases.keys().copied().collect();
        for id in ids {
            self.sync(stream, id);
        }
        let mut closing: Option<Option<oneshot::Sender<u32>>> = None;
        loop {
            let deadline = self.earliest_validity();
            tokio::select! {
                message = stream.events.next() => match message {
                    Some(Ok(SessionResponse { event: Some(event) })) => {
                        if let Some(stop) = self.event(stream, event, &mut closing) {
                            return stop;
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(status)) if resumable(&status) && closing.is_none() => {
                        if moves_on(&status) {
                            self.client.replicas().failed(&stream.replica);
                        }
                        return Stop::Broke(format!("session stream failed: {status}"));
                    }
                    Some(Err(status)) => return Stop::Ended(format!("session stream failed: {status}")),
                    None if closing.is_some() => return Stop::Ended("session closed".into()),
                    None => return Stop::Broke("the server ended the session stream".into()),
                },
                command = inbox.recv(), if closing.is_none() => match command {
                    Some(Command::Sync(id)) => self.sync(stream, id),
                    Some(Command::Release(id, reply)) => self.release(stream, id, reply),
                    Some(Command::Proclaim(id, value, reply)) => self.proclaim(stream, id, value, reply),
                    Some(Command::Close(reply)) => {
                        stream.send(Action::Close(pb::SessionClose {}));
                        closing = Some(reply);
                    }
                    None => {
                        stream.send(Action::Close(pb::SessionClose {}));
                        closing = Some(None);
                    }
                },
                () = sleep_until(deadline.unwrap_or_else(far_future)), if deadline.is_some() => {
                    self.expire(stream);
                }
            }
        }
    }

    /// Asks for a lease on `stream`, if it was not asked for there yet.
    fn sync(&mut self, stream: &Stream, id: u64) {
        let generation = self.generation;
        let mut state = lock(&self.shared);
        let Some(entry) = state.leases.get_mut(&id) else {
            return;
        };
        if entry.sent == Some(generation) {
            return;
        }
        entry.sent = Some(generation);
        // A held lease is taken back by its token; one still pending is asked for afresh.
        let resume_token = match &mut entry.phase {
            Phase::Held(held) => {
                held.resuming = true;
                held.token.clone()
            }
            Phase::Pending(_) => String::new(),
        };
        let action = match entry.ask.clone() {
            Ask::Lock(mut acquire) => {
                acquire.id = id;
                acquire.resume_token = resume_token;
                Action::Acquire(acquire)
            }
            Ask::Campaign(mut campaign) => {
                campaign.id = id;
                campaign.resume_token = resume_token;
                Action::Campaign(campaign)
            }
        };
        stream.send(action);
    }

    fn release(&mut self, stream: &Stream, id: u64, reply: Option<Releasing>) {
        let mut state = lock(&self.shared);
        let Some(entry) = state.leases.get_mut(&id) else {
            if let Some(reply) = reply {
                let _ = reply.send(Ok(false));
            }
            return;
        };
        match &mut entry.phase {
            Phase::Held(held) => {
                held.releasing = reply.or(held.releasing.take());
                held.letting_go = true;
                // Being taken back on this stream: released once it is (a release before the
                // resume is confirmed would find nothing to release there, and the resume
                // would then hold it again).
                if held.resuming {
                    return;
                }
            }
            Phase::Pending(_) => {
                // Given up: nobody waits for it any more.
                state.leases.remove(&id);
            }
        }
        stream.send(Action::Release(pb::SessionRelease { id }));
    }

    fn proclaim(
        &mut self,
        stream: &Stream,
        id: u64,
        value: Vec<u8>,
        reply: oneshot::Sender<Result<(), ClientError>>,
    ) {
        let mut state = lock(&self.shared);
        let Some(Entry {
            phase: Phase::Held(held),
            ask,
            ..
        }) = state.leases.get_mut(&id)
        else {
            let _ = reply.send(Err(ClientError::Protocol("the leadership is gone".into())));
            return;
        };
        // A resume publishes the newest value.
        if let Ask::Campaign(campaign) = ask {
            campaign.value = value.clone();
        }
        held.proclaiming = Some(reply);
        stream.send(Action::Proclaim(pb::SessionProclaim { id, value }));
    }

    /// One message of the server.
    fn event(
        &mut self,
        stream: &Stream,
        event: Event,
        closing: &mut Option<Option<oneshot::Sender<u32>>>,
    ) -> Option<Stop> {
        let mut state = lock(&self.shared);
        match event {
            Event::Waiting(_) => {}
            Event::Acquired(acquired) => {
                let id = acquired.id;
                let valid_until =
                    vouched_until(stream.opened, acquired.valid_for_ms, acquired.valid_to_ms);
                let Some(entry) = state.leases.get_mut(&id) else {
                    // Given up meanwhile.
                    stream.send(Action::Release(pb::SessionRelease { id }));
                    return None;
                };
                let stale = valid_until <= Instant::now();
                match &mut entry.phase {
                    Phase::Held(held) => {
                        held.resuming = false;
                        if acquired.fencing_token != held.fencing_token || stale {
                            let reason = format!(
                                "resumed with fencing token {} (was {}), or too late to believe",
                                acquired.fencing_token, held.fencing_token
                            );
                            if let Some(Entry {
                                phase: Phase::Held(held),
                                ..
                            }) = state.leases.remove(&id)
                            {
                                held.end(LeaseState::Lost(reason), Ok(false));
                            }
                            stream.send(Action::Release(pb::SessionRelease { id }));
                        } else {
                            held.vouch(valid_until);
                            // The resume published the newest value.
                            if let Some(reply) = held.proclaiming.take() {
                                let _ = reply.send(Ok(()));
                            }
                            if held.letting_go {
                                stream.send(Action::Release(pb::SessionRelease { id }));
                            }
                        }
                    }
                    Phase::Pending(_) if stale => {
                        // Held up on its way: the lease may be someone else's by now.
                        if let Some(Entry {
                            phase: Phase::Pending(reply),
                            ..
                        }) = state.leases.remove(&id)
                        {
                            let _ = reply.send(Err(ClientError::Protocol(
                                "acquired, but the news arrived after its validity had run out"
                                    .into(),
                            )));
                        }
                        stream.send(Action::Release(pb::SessionRelease { id }));
                    }
                    phase @ Phase::Pending(_) => {
                        let (tell, watch) = watch::channel(LeaseState::Held);
                        let (valid, valid_watch) = watch::channel(valid_until);
                        let held = Phase::Held(Held {
                            token: acquired.token.clone(),
                            fencing_token: acquired.fencing_token,
                            valid_until,
                            valid,
                            state: tell,
                            resuming: false,
                            letting_go: false,
                            releasing: None,
                            proclaiming: None,
                        });
                        if let Phase::Pending(reply) = std::mem::replace(phase, held) {
                            let taken = Taken {
                                fencing_token: acquired.fencing_token,
                                token: acquired.token,
                                state: watch,
                                valid: valid_watch,
                            };
                            if reply.send(Ok(taken)).is_err() {
                                // Its caller went away: let it go.
                                state.leases.remove(&id);
                                stream.send(Action::Release(pb::SessionRelease { id }));
                            }
                        }
                    }
                }
            }
            Event::KeptAlive(kept) => {
                let valid_until = vouched_until(stream.opened, kept.valid_for_ms, kept.valid_to_ms);
                for entry in state.leases.values_mut() {
                    // A lease being released is not renewed once the server has its release.
                    if let Phase::Held(held) = &mut entry.phase
                        && !held.resuming
                        && !held.letting_go
                    {
                        held.vouch(valid_until);
                    }
                }
            }
            Event::Proclaimed(proclaimed) => {
                if let Some(Entry {
                    phase: Phase::Held(held),
                    ..
                }) = state.leases.get_mut(&proclaimed.id)
                    && let Some(reply) = held.proclaiming.take()
                {
                    let _ = reply.send(Ok(()));
                }
            }
            Event::Released(released) => {
                if let Some(Entry {
                    phase: Phase::Held(held),
                    ..
                }) = state.leases.remove(&released.id)
                {
                    let was_held = released.was_held;
                    held.end(LeaseState::Released { was_held }, Ok(was_held));
                }
            }
            Event::LeaseLost(lost) => {
                if let Some(Entry {
                    phase: Phase::Held(held),
                    ..
                }) = state.leases.remove(&lost.id)
                {
                    held.end(LeaseState::Lost(lost.reason), Ok(false));
                }
            }
            Event::Failed(failed) => {
                let status = Status::with_details(
                    tonic::Code::from(failed.code),
                    failed.message,
                    failed.status.into(),
                );
                match state
                    .leases
                    .get_mut(&failed.id)
                    .map(|entry| &mut entry.phase)
                {
                    Some(Phase::Pending(_)) => {
                        if let Some(Entry {
                            phase: Phase::Pending(reply),
                            ..
                        }) = state.leases.remove(&failed.id)
                        {
                            let _ = reply.send(Err(status.into()));
                        }
                    }
                    // Not held any more: lost, or released by the server whose answer to a release
                    // the broken stream lost.
                    Some(Phase::Held(held)) if held.resuming => {
                        if let Some(Entry {
                            phase: Phase::Held(held),
                            ..
                        }) = state.leases.remove(&failed.id)
                        {
                            held.end(
                                LeaseState::Lost(format!("could not resume the lease: {status}")),
                                Ok(false),
                            );
                        }
                    }
                    Some(Phase::Held(held)) => {
                        if let Some(reply) = held.proclaiming.take() {
                            let _ = reply.send(Err(status.into()));
                        }
                    }
                    None => {}
                }
            }
            Event::Closed(closed) => {
                for (_, entry) in state.leases.drain() {
                    if let Phase::Held(held) = entry.phase {
                        held.end(LeaseState::Released { was_held: true }, Ok(true));
                    }
                }
                if let Some(Some(reply)) = closing.take() {
                    let _ = reply.send(closed.released);
                }
                return Some(Stop::Ended("session closed".into()));
            }
            Event::Lost(lost) => return Some(Stop::Ended(lost.reason)),
        }
        None
    }

    /// The earliest instant a held lease stops being vouched for.
    fn earliest_validity(&self) -> Option<Instant> {
        held_validities(&self.shared).into_iter().min()
    }

    /// Leases whose validity ran out unconfirmed are lost by this process's clock (and let go,
    /// in case the server still holds them).
    fn expire(&mut self, stream: &Stream) {
        let reason = "no renewal confirmed before the lease ran out (server silent)";
        for id in expire_due(&self.shared, reason) {
            stream.send(Action::Release(pb::SessionRelease { id }));
        }
    }

    /// Opens the session again on any replica before its leases' validity runs out.
    async fn reopen(&mut self, broke: &str) -> Option<Stream> {
        tracing::info!(reason = %broke, "session stream broke; resuming");
        let until = self
            .latest_validity()
            .unwrap_or_else(|| Instant::now() + REOPEN_WITHOUT_LEASES);
        loop {
            let now = Instant::now();
            if now >= until {
                return None;
            }
            let trying = self.client.replicas().current();
            match timeout_at(
                (now + ATTEMPT_TIMEOUT).min(until),
                Stream::open(&self.client, &self.open),
            )
            .await
            {
                Ok(Ok(stream)) => {
                    self.generation += 1;
                    return Some(stream);
                }
                Ok(Err(status)) if !resumable(&status) => return None,
                Ok(Err(_)) => {}
                Err(_) => self.client.replicas().failed(&trying),
            }
            sleep_until((Instant::now() + RETRY).min(until)).await;
            // Leases whose validity ran out meanwhile are lost, not resumed.
            let reason = format!("could not resume before the lease's validity ran out: {broke}");
            expire_due(&self.shared, &reason);
        }
    }

    fn latest_validity(&self) -> Option<Instant> {
        held_validities(&self.shared).into_iter().max()
    }
}

/// Until when each held lease is vouched for.
fn held_validities(shared: &Shared) -> Vec<Instant> {
    lock(shared)
        .leases
        .values()
        .filter_map(|entry| match &entry.phase {
            Phase::Held(held) => Some(held.valid_until),
            Phase::Pending(_) => None,
        })
        .collect()
}

/// Held leases whose validity ran out unconfirmed are lost for `reason` (a release waiting on
/// one is answered as unconfirmed); their ids.
fn expire_due(shared: &Shared, reason: &str) -> Vec<u64> {
    let now = Instant::now();
    let mut state = lock(shared);
    let due: Vec<u64> = state
        .leases
        .iter()
        .filter_map(|(&id, entry)| match &entry.phase {
            Phase::Held(held) if held.valid_until <= now => Some(id),
            _ => None,
        })
        .collect();
    for &id in &due {
        if let Some(Entry {
            phase: Phase::Held(held),
            ..
        }) = state.leases.remove(&id)
        {
            held.expired(reason.to_owned());
        }
    }
    due
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}
