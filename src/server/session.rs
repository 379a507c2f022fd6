//! The `Session` stream: many leases on one stream, renewed and confirmed together.
//!
//! A session is etcd's `concurrency.Session` on our leases: one stream, one TTL and grace, any
//! number of locks, permits, shared holds and campaigns, each answered by the client's id. It is
//! the stream driver's lifecycle many times over, built from the driver's parts rather than a
//! copy of them: admission ([`driver::admit`]), taking a lease ([`driver::take`]), keeping one
//! for its client to resume ([`driver::keep_if_resumable`]), a held lease's exit guard
//! ([`HeldLease`]), and each kind's own rules (a lock's spec, a [`Campaign`]'s announcement).
//!
//! What differs is the cost of a held lease. Its leases are one entry of the server's renewal
//! scheduler (a [`RenewalGroup`]): renewed in one round, confirmed to the client by one
//! `kept_alive`, with no task, timer or channel of their own. A waiting lease is a future in the
//! session's task. A member's loss (a `0` from Redis) ends that lease alone; a round that cannot
//! be confirmed before the group's validity ends loses the session, and every lease with it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{BoxFuture, join_all};
use futures_util::stream::FuturesUnordered;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};
use tracing::{Instrument, debug, info, info_span, warn};

use super::admission::LeaseSlot;
use super::auth::{Caller, Role, Scope};
use super::campaign::Campaign;
use super::driver::{self, Held, LeaseStream, Step, Streams, Vouched, keep_if_resumable, take};
use super::events::{Events, ResponseStream};
use crate::error::{Error, Result};
use crate::lease::acquire::Acquisition;
use crate::lease::group::RenewalGroup;
use crate::lease::held::{HeldLease, Holding, Leadership, Lock};
use crate::lease::renewal::RenewalClock;
use crate::lease::scheduler::{NOT_HELD, Scheduled};
use crate::lease::spec::{self, LeaseSpec};
use crate::metrics::{Counted, HeldFor};
use crate::pb::{
    self, SessionRequest, SessionResponse, session_request::Action, session_response::Event,
    session_service_server::SessionService,
};
use crate::store::Token;

/// Most leases (waiting or held) on one session: each is an entry its task walks when the
/// session ends, and a session's end releases them all.
pub const MAX_LEASES_PER_SESSION: usize = 10_000;
/// Room for a session's answers not yet read. Its answers (acquired, released, lost) wait for
/// room; renewals never do (a `kept_alive` is dropped for a slow reader, like `extended`).
const SESSION_EVENT_BUFFER: usize = 64;

fn response(event: Event) -> SessionResponse {
    SessionResponse { event: Some(event) }
}

/// Serves `Session` streams.
#[derive(Clone)]
pub struct SessionServer {
    streams: Arc<Streams>,
}

impl SessionServer {
    pub fn new(streams: Arc<Streams>) -> Self {
        SessionServer { streams }
    }
}

#[tonic::async_trait]
impl SessionService for SessionServer {
    type SessionStream = ResponseStream<SessionResponse>;

    async fn session(
        &self,
        request: Request<Streaming<SessionRequest>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let (slot, caller) = driver::admit(&self.streams, &request)?;
        let (events, responses) = Events::with_room(SESSION_EVENT_BUFFER);
        let session = Session {
            streams: self.streams.clone(),
            opened: Instant::now(),
            caller,
            peer: request.remote_addr(),
            inbound: request.into_inner(),
            events,
            leases: HashMap::new(),
            next_serial: 0,
            waits: FuturesUnordered::new(),
        };
        self.streams.tasks().spawn(Box::new(session).run(slot));
        Ok(Response::new(responses))
    }
}

/// What the session's `open` asked for, shared by every lease on it.
#[derive(Clone)]
struct Terms {
    ttl: Duration,
    grace: Option<Duration>,
    holder: String,
}

impl Terms {
    fn parse(open: pb::SessionOpen) -> Result<Self> {
        let ttl = spec::ttl(open.ttl_ms)?;
        Ok(Terms {
            ttl,
            grace: spec::resume_grace(open.resume_grace_ms, ttl)?,
            holder: spec::holder(open.holder)?,
        })
    }

    fn keep(&self) -> (Duration, Option<Duration>) {
        (self.ttl, self.grace)
    }
}

/// One lease of the session, by the client's id.
enum Slot {
    /// Waiting for its lock: dropping `_give_up` ends the wait (the lease is let go).
    Waiting {
        serial: u64,
        _give_up: oneshot::Sender<()>,
    },
    Held(Box<Member>),
}

/// A held lease of the session.
struct Member {
    /// The session's own key for it (ids are reused; serials are not).
    serial: u64,
    kind: Kind,
    fencing_token: u64,
    attachment: u64,
    /// Counted against the connection's and the server's lease limit while held.
    _slot: LeaseSlot,
    _held: (HeldFor, Option<Counted>),
}

/// What a session lease holds.
enum Kind {
    Lock(HeldLease<Lock>),
    /// A leadership, with its campaign (value, term) and what it asked for (for `proclaim`).
    Campaign(HeldLease<Leadership>, Campaign, Box<LeaseSpec>),
}

impl Kind {
    fn token(&self) -> &Token {
        match self {
            Kind::Lock(lease) => lease.token(),
            Kind::Campaign(lease, ..) => lease.token(),
        }
    }

    fn renewable(&self) -> Arc<dyn crate::lease::scheduler::Renewable> {
        match self {
            Kind::Lock(lease) => lease.renewable(),
            Kind::Campaign(lease, ..) => lease.renewable(),
        }
    }

    async fn release(&mut self) -> Result<bool> {
        match self {
            Kind::Lock(lease) => lease.release().await,
            Kind::Campaign(lease, ..) => lease.release().await,
        }
    }

    fn lost(&mut self) {
        match self {
            Kind::Lock(lease) => lease.lost(),
            Kind::Campaign(lease, ..) => lease.lost(),
        }
    }

    async fn keep(&mut self, terms: (Duration, Option<Duration>), attachment: u64) {
        match self {
            Kind::Lock(lease) => keep_if_resumable(terms, None, lease, attachment).await,
            Kind::Campaign(lease, ..) => keep_if_resumable(terms, None, lease, attachment).await,
        }
    }
}

/// A lease to take: what it will hold.
enum Start {
    Lock(HeldLease<Lock>),
    Campaign(HeldLease<Leadership>, Campaign),
}

/// How a wait ended: `None` if the client gave up first (the lease is let go on drop).
struct Waited {
    id: u64,
    serial: u64,
    /// The lock's or election's name, for logs and metrics.
    name: String,
    outcome: Option<(Kind, Result<Acquisition>)>,
    slot: LeaseSlot,
}

/// The task behind one session.
struct Session {
    streams: Arc<Streams>,
    /// When the session opened: what `valid_to` counts from.
    opened: Instant,
    caller: Caller,
    /// Whose connection: each lease is counted against its limit.
    peer: Option<SocketAddr>,
    inbound: Streaming<SessionRequest>,
    events: Events<SessionResponse>,
    leases: HashMap<u64, Slot>,
    next_serial: u64,
    waits: FuturesUnordered<BoxFuture<'static, Waited>>,
}

/// How the session ends.
enum End {
    /// The client closed it: release everything.
    Close,
    /// The stream ended without `close`: release, or keep for the grace.
    Gone,
    /// The stream breaks with an error: release (said by the error), or keep for the grace.
    Broken,
    /// The whole session is lost.
    Lost(&'static str, String),
    /// The server stops.
    Shutdown,
}

impl Session {
    async fn run(mut self: Box<Self>, slot: LeaseSlot) {
        let _open = self.streams.metrics().open_stream("session");
        let span = info_span!("session", session = %Token::random().lease_id());
        if let Err(error) = self.drive().instrument(span).await {
            debug!(%error, stream = "session", "stream ends with an error");
            self.events.send(Err(error.into())).await;
        }
        drop(slot);
    }

    async fn drive(&mut self) -> Result<()> {
        let message = tokio::select! {
            message = self.inbound.next() => message,
            () = self.events.closed() => return Ok(()),
            () = self.streams.tasks().stopping() => return Err(Error::ShuttingDown),
        };
        let terms = match message {
            None => return Ok(()),
            Some(Err(status)) => return Err(self.broken(status)),
            Some(Ok(SessionRequest {
                action: Some(Action::Open(open)),
            })) => Terms::parse(open)?,
            Some(Ok(SessionRequest { action: None })) => return Err(no_action()),
            Some(Ok(_)) => {
                return Err(Error::invalid(
                    "the first message of a session must be open",
                ));
            }
        };
        info!(ttl_ms = terms.ttl.as_millis(), "session opened");
        let (group, mut losses) = RenewalGroup::new();
        let clock = RenewalClock::resumable(terms.ttl, terms.grace, self.opened);
        let on_renewed = {
            let (events, group, ttl, opened) =
                (self.events.clone(), group.clone(), terms.ttl, self.opened);
            Box::new(move |valid_for: Duration| {
                // Vouch for the earliest member: one acquired while the round was in flight is
                // covered by its own acquisition only.
                let now = Instant::now();
                let valid_for = group.valid_for(now).map_or(valid_for, |v| v.min(valid_for));
                let vouched = Vouched::now(valid_for, opened);
                events.progress(response(Event::KeptAlive(pb::SessionKeptAlive {
                    ttl_ms: pb::millis(ttl),
                    valid_for_ms: pb::millis(vouched.valid_for),
                    valid_to_ms: pb::millis_u64(vouched.valid_to),
                })));
            })
        };
        let mut renewals =
            self.streams
                .scheduler
                .schedule(group.clone(), terms.ttl, clock, on_renewed);
        let end = loop {
            tokio::select! {
                biased;
                () = self.streams.tasks().stopping() => break End::Shutdown,
                lost = renewals.lost() => break End::Lost(lost.cause, lost.due.explain(lost.reason)),
                Some(serial) = losses.recv() => self.member_lost(serial).await,
                message = self.inbound.next() => match message {
                    None => break End::Gone,
                    Some(Err(status)) => {
                        info!(code = ?status.code(), message = status.message(), "client stream broke");
                        let _ = self.end(End::Broken, &terms, &mut renewals).await;
                        return Err(self.broken(status));
                    }
                    Some(Ok(request)) => match request.action {
                        Some(Action::Close(_)) => break End::Close,
                        Some(action) => {
                            if let Err(error) = self.handle(action, &terms, &group).await {
                                let _ = self.end(End::Broken, &terms, &mut renewals).await;
                                return Err(error);
                            }
                        }
                        None => {
                            let _ = self.end(End::Broken, &terms, &mut renewals).await;
                            return Err(no_action());
                        }
                    },
                },
                Some(waited) = self.waits.next(), if !self.waits.is_empty() => {
                    self.waited(waited, &terms, &group).await;
                }
                () = self.events.closed() => {
                    info!("client went away");
                    break End::Gone;
                }
            }
        };
        self.end(end, &terms, &mut renewals).await
    }

    /// A request after `open`.
    async fn handle(
        &mut self,
        action: Action,
        terms: &Terms,
        group: &Arc<RenewalGroup>,
    ) -> Result<()> {
        match action {
            Action::Open(_) => Err(Error::invalid(
                "open sent twice on one session: one stream is one session",
            )),
            Action::Acquire(acquire) => {
                let id = acquire.id;
                self.check_id(id)?;
                let started = self.start_lock(acquire, terms);
                self.started(id, started).await;
                Ok(())
            }
            Action::Campaign(campaign) => {
                let id = campaign.id;
                self.check_id(id)?;
                let started = self.start_campaign(campaign, terms);
                self.started(id, started).await;
                Ok(())
            }
            Action::Proclaim(proclaim) => self.proclaim(proclaim).await,
            Action::Release(release) => {
                self.release(release.id, group).await;
                Ok(())
            }
            Action::Close(_) => Ok(()),
        }
    }

    fn check_id(&self, id: u64) -> Result<()> {
        if self.leases.contains_key(&id) {
            return Err(Error::invalid(format!(
                "id {id} is already in use on this session: each lease needs an id of its own until it is released, lost or failed"
            )));
        }
        Ok(())
    }

    /// Answers a lease that could not even start.
    async fn started(&mut self, id: u64, started: Result<()>) {
        if let Err(error) = started {
            self.failed(id, error).await;
        }
    }

    /// Checks a lock request and starts taking it.
    fn start_lock(&mut self, acquire: pb::SessionAcquire, terms: &Terms) -> Result<()> {
        let id = acquire.id;
        let holder = match acquire.holder {
            holder if holder.is_empty() => terms.holder.clone(),
            holder => holder,
        };
        let spec = LeaseSpec::try_from(pb::LeaseAcquire {
            name: acquire.name,
            ttl_ms: pb::millis(terms.ttl),
            wait_ms: acquire.wait_ms,
            holder,
            fair: acquire.fair,
            limit: acquire.limit,
            mode: acquire.mode,
            resume_token: acquire.resume_token,
            resume_grace_ms: terms.grace.map_or(0, pb::millis),
        })?;
        self.caller
            .allow(Scope::Lock, spec.name.as_str(), Role::Hold)?;
        let lease = HeldLease::claim(Lock::at(&self.streams.store, &spec.name), token_for(&spec));
        self.start(id, spec, Start::Lock(lease))
    }

    /// Checks a campaign and starts waiting in its election's line.
    fn start_campaign(&mut self, campaign: pb::SessionCampaign, terms: &Terms) -> Result<()> {
        super::election::available(&self.streams.store)?;
        let (spec, stream) = Campaign::open(pb::CampaignStart {
            election: campaign.election,
            value: campaign.value,
            ttl_ms: pb::millis(terms.ttl),
            resume_grace_ms: terms.grace.map_or(0, pb::millis),
            resume_token: campaign.resume_token,
        })?;
        self.caller
            .allow(Scope::Election, spec.name.as_str(), Role::Hold)?;
        let holding = Leadership::at(&self.streams.store, &spec.name);
        let lease = HeldLease::claim(holding, token_for(&spec));
        let id = campaign.id;
        self.start(id, spec, Start::Campaign(lease, stream))
    }

    /// Admits a lease and waits for it in the session's task.
    fn start(&mut self, id: u64, spec: LeaseSpec, start: Start) -> Result<()> {
        if self.leases.len() >= MAX_LEASES_PER_SESSION {
            return Err(Error::TooManyOnSession {
                limit: MAX_LEASES_PER_SESSION,
            });
        }
        let slot = self.streams.limits.admit(self.peer)?;
        let serial = self.next_serial;
        self.next_serial += 1;
        let (give_up, gave_up) = oneshot::channel();
        self.leases.insert(
            id,
            Slot::Waiting {
                serial,
                _give_up: give_up,
            },
        );
        let (streams, events) = (self.streams.clone(), self.events.clone());
        let name = spec.name.as_str().to_owned();
        self.waits.push(Box::pin(async move {
            let on_waiting = |state: &crate::lease::acquire::WaitingState| {
                events.progress(response(Event::Waiting(pb::SessionWaiting {
                    id,
                    holder: state.holder.clone(),
                    holder_ttl_remaining_ms: state.holder_ttl.map(pb::millis).unwrap_or(0),
                    position: state.position,
                })));
            };
            let taken = async {
                match start {
                    Start::Lock(mut lease) => {
                        let outcome = take(&streams, &mut lease, &spec, false, on_waiting).await;
                        (Kind::Lock(lease), outcome)
                    }
                    // Candidates wait as long as the session lives, as on a Campaign stream.
                    Start::Campaign(mut lease, stream) => {
                        let outcome = loop {
                            match take(&streams, &mut lease, &spec, true, on_waiting).await {
                                Err(Error::WaitExpired { .. }) => continue,
                                outcome => break outcome,
                            }
                        };
                        (Kind::Campaign(lease, stream, Box::new(spec)), outcome)
                    }
                }
            };
            let outcome = tokio::select! {
                taken = taken => Some(taken),
                // Given up: a lease in flight may have been taken just then; dropped armed, it
                // is let go.
                _ = gave_up => None,
            };
            Waited {
                id,
                serial,
                name,
                outcome,
                slot,
            }
        }));
        Ok(())
    }

    /// A wait ended: hold the lease, or say why not.
    async fn waited(&mut self, waited: Waited, terms: &Terms, group: &Arc<RenewalGroup>) {
        let Waited {
            id,
            serial,
            name,
            outcome,
            slot,
        } = waited;
        let Some((kind, outcome)) = outcome else {
            return;
        };
        // Given up meanwhile (its id released, perhaps reused): the lease drops, armed.
        if !matches!(self.leases.get(&id), Some(Slot::Waiting { serial: s, .. }) if *s == serial) {
            return;
        }
        let acquisition = match outcome {
            Ok(acquisition) => acquisition,
            Err(error) => {
                self.leases.remove(&id);
                self.failed(id, error).await;
                return;
            }
        };
        let Acquisition {
            fencing_token,
            sent_at,
            attachment,
        } = acquisition;
        let clock = RenewalClock::resumable(terms.ttl, terms.grace, sent_at);
        let vouched = Vouched::now(clock.valid_for(Instant::now()), self.opened);
        let metrics = self.streams.metrics();
        let kind = match kind {
            Kind::Lock(lease) => Kind::Lock(lease),
            Kind::Campaign(lease, mut stream, spec) => {
                let held = Held {
                    lease: &lease,
                    spec: &spec,
                    fencing_token,
                };
                match stream.acquired(&held, vouched).await {
                    Ok(Step::Reply(_)) => {}
                    Ok(Step::Lost(reason)) => {
                        self.leases.remove(&id);
                        warn!(%reason, election = %spec.name, "leadership lost");
                        self.lease_lost(id, reason).await;
                        return;
                    }
                    Err(error) => {
                        self.leases.remove(&id);
                        let mut kind = Kind::Campaign(lease, stream, spec);
                        kind.keep(terms.keep(), attachment).await;
                        self.failed(id, error).await;
                        return;
                    }
                }
                Kind::Campaign(lease, stream, spec)
            }
        };
        let leading = matches!(kind, Kind::Campaign(..)).then(|| metrics.leading());
        info!(id, lock = %name, lease = kind.token().lease_id(), fencing_token, resumed = attachment > 0, "acquired on the session");
        if attachment > 0 {
            metrics.moved("resumed");
        }
        group.join(serial, kind.renewable(), clock.valid_until());
        let token = kind.token().secret().to_owned();
        self.leases.insert(
            id,
            Slot::Held(Box::new(Member {
                serial,
                kind,
                fencing_token,
                attachment,
                _slot: slot,
                _held: (metrics.held(&name), leading),
            })),
        );
        self.send(Event::Acquired(pb::SessionAcquired {
            id,
            token,
            fencing_token,
            valid_for_ms: pb::millis(vouched.valid_for),
            valid_to_ms: pb::millis_u64(vouched.valid_to),
        }))
        .await;
    }

    /// Publishes a leadership's new value.
    async fn proclaim(&mut self, proclaim: pb::SessionProclaim) -> Result<()> {
        let id = proclaim.id;
        let member = match self.leases.get_mut(&id) {
            Some(Slot::Held(member)) => member,
            // Gone while the request was on its way (lost, failed): say so, nothing else.
            None => {
                let error = Error::FailedPrecondition(format!(
                    "proclaim for id {id}, which holds no lease on this session (released, lost or failed)"
                ));
                self.failed(id, error).await;
                return Ok(());
            }
            Some(Slot::Waiting { .. }) => {
                return Err(Error::FailedPrecondition(format!(
                    "proclaim for id {id} before being elected: only the leader can proclaim; wait for acquired"
                )));
            }
        };
        let Kind::Campaign(lease, stream, spec) = &mut member.kind else {
            return Err(Error::FailedPrecondition(format!(
                "proclaim for id {id}, a lock: only a campaign's leader can proclaim"
            )));
        };
        let held = Held {
            lease,
            spec,
            fencing_token: member.fencing_token,
        };
        match stream.handle(proclaim.value, &held).await? {
            Step::Reply(_) => {
                let value = stream.value().to_vec();
                self.send(Event::Proclaimed(pb::SessionProclaimed { id, value }))
                    .await;
            }
            Step::Lost(reason) => {
                // Dropped armed: released, as a Campaign stream does.
                self.leases.remove(&id);
                self.streams.metrics().lost("superseded");
                self.lease_lost(id, reason).await;
            }
        }
        Ok(())
    }

    /// Lets one lease go at the client's request. An id that names nothing was lost or failed
    /// while the request was on its way: it is answered as not held.
    async fn release(&mut self, id: u64, group: &RenewalGroup) {
        let was_held = match self.leases.remove(&id) {
            None | Some(Slot::Waiting { .. }) => false,
            Some(Slot::Held(mut member)) => {
                group.leave(member.serial);
                match member.kind.release().await {
                    Ok(was_held) => was_held,
                    // Dropped still armed, the lease is released in the background.
                    Err(error) => {
                        warn!(%error, id, "release failed; retried in the background");
                        false
                    }
                }
            }
        };
        info!(id, was_held, "released on the session");
        self.send(Event::Released(pb::SessionReleased { id, was_held }))
            .await;
    }

    /// A renewal found a member no longer ours: that lease alone is lost.
    async fn member_lost(&mut self, serial: u64) {
        let found = self.leases.iter().find_map(|(&id, slot)| match slot {
            Slot::Held(member) if member.serial == serial => Some(id),
            _ => None,
        });
        let Some(id) = found else {
            return;
        };
        if let Some(Slot::Held(mut member)) = self.leases.remove(&id) {
            warn!(id, lease = member.kind.token().lease_id(), "lease lost");
            member.kind.lost();
            self.streams.metrics().lost("not_held");
            self.lease_lost(id, NOT_HELD.to_owned()).await;
        }
    }

    /// Ends the session: every lease released, kept for its grace, or lost, as `end` says.
    async fn end(&mut self, end: End, terms: &Terms, renewals: &mut Scheduled) -> Result<()> {
        renewals.stop();
        // Waits end with their futures: a lease in flight is let go on drop.
        self.waits = FuturesUnordered::new();
        let members: Vec<Member> = self
            .leases
            .drain()
            .filter_map(|(_, slot)| match slot {
                Slot::Held(member) => Some(*member),
                Slot::Waiting { .. } => None,
            })
            .collect();
        match end {
            End::Gone | End::Broken if terms.grace.is_some() => {
                keep_all(members, terms).await;
                Ok(())
            }
            End::Broken => {
                release_all(members).await;
                Ok(())
            }
            End::Close | End::Gone => {
                let released = release_all(members).await;
                info!(released, "session closed");
                self.send(Event::Closed(pb::SessionClosed { released }))
                    .await;
                Ok(())
            }
            End::Lost(cause, reason) => {
                warn!(%reason, leases = members.len(), "session lost");
                let metrics = self.streams.metrics();
                for mut member in members {
                    member.kind.lost();
                    metrics.lost(cause);
                }
                self.send(Event::Lost(pb::Lost { reason })).await;
                Ok(())
            }
            End::Shutdown if terms.grace.is_some() => {
                let grace = terms.grace.map_or(0, |grace| grace.as_millis());
                let leases = members.len();
                keep_all(members, terms).await;
                info!(leases, "kept for its client to resume elsewhere");
                self.streams.metrics().moved("handed_over");
                Err(Error::HandedOver {
                    held: "session",
                    grace_ms: grace,
                })
            }
            End::Shutdown => {
                let metrics = self.streams.metrics();
                let count = members.len();
                let released = release_all(members).await;
                for _ in 0..count {
                    metrics.lost("shutdown");
                }
                let reason = format!(
                    "server shutting down; {released} of the session's {count} leases were released, the rest expire by their TTL"
                );
                self.send(Event::Lost(pb::Lost { reason })).await;
                Ok(())
            }
        }
    }

    async fn failed(&mut self, id: u64, error: Error) {
        debug!(id, %error, "lease failed");
        let status = Status::from(error);
        self.send(Event::Failed(pb::SessionFailed {
            id,
            code: status.code() as i32,
            message: status.message().to_owned(),
            status: status.details().to_vec(),
        }))
        .await;
    }

    async fn lease_lost(&mut self, id: u64, reason: String) {
        self.send(Event::LeaseLost(pb::SessionLeaseLost { id, reason }))
            .await;
    }

    /// Every answer about a lease must arrive: it waits for room (never for a renewal).
    async fn send(&mut self, event: Event) {
        self.events.send(Ok(response(event))).await;
    }

    fn broken(&self, status: Status) -> Error {
        driver::broken(status, self.streams.max_message_bytes)
    }
}

/// Keeps every lease for the client to resume the session elsewhere.
async fn keep_all(members: Vec<Member>, terms: &Terms) {
    join_all(members.into_iter().map(|mut member| async move {
        member.kind.keep(terms.keep(), member.attachment).await;
    }))
    .await;
}

/// Releases every lease at once; how many were still held.
async fn release_all(members: Vec<Member>) -> u32 {
    let released = join_all(members.into_iter().map(|mut member| async move {
        // On an error the lease, dropped armed, is released in the background.
        member.kind.release().await.unwrap_or(false)
    }))
    .await;
    u32::try_from(released.into_iter().filter(|&was_held| was_held).count()).unwrap_or(u32::MAX)
}

/// A resumed lease is the one its token already holds.
fn token_for(spec: &LeaseSpec) -> Token {
    match &spec.resume {
        Some(secret) => Token::from_client(secret.clone()),
        None => Token::random(),
    }
}

fn no_action() -> Error {
    Error::invalid("request has no action: set open, acquire, campaign, proclaim, release or close")
}
