//! The `Session` stream: many leases on one stream, renewed and confirmed together.
//!
//! A session is etcd's `concurrency.Session` on our leases: one stream, one TTL and grace, any
//! number of locks, permits, shared holds and campaigns, each answered by the client's id. It is
//! a group of the lease layer's state machines, one [`Life`] per lease: the session translates
//! its messages into their [`End`]s and their answers into its own, as the stream driver does
//! for one lease, with the driver's admission ([`driver::admit`]) and each kind's own rules (a
//! lock's [`LockAsk`], a [`Campaign`]'s announcement).
//!
//! What differs is the cost of a held lease. Its leases are one entry of the server's renewal
//! scheduler (a [`RenewalGroup`]): renewed in one round, confirmed to the client by one
//! `kept_alive`, with no task, timer or channel of their own. A waiting lease is a future in the
//! session's task. A member's loss (a `0` from Redis) ends that lease alone; a round that cannot
//! be confirmed before the group's validity ends loses the session, and every lease with it.

mod members;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{BoxFuture, join_all};
use futures_util::stream::FuturesUnordered;
use tokio::time::Instant;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};
use tracing::{Instrument, debug, info, info_span, warn};

use super::admission::LeaseSlot;
use super::auth::Caller;
use super::driver::{self, Streams};
use super::events::{Events, ResponseStream};
use super::lease_stream::lost;
use crate::error::{Error, Result};
use crate::lease::group::RenewalGroup;
use crate::lease::life::Vouched;
use crate::lease::life::{End, Fate, LostCode, Phase, Told, fate};
use crate::lease::renewal::RenewalClock;
use crate::lease::scheduler::Scheduled;
use crate::lease::spec;
use crate::pb::{
    self, SessionRequest, SessionResponse, session_request::Action, session_response::Event,
    session_service_server::SessionService,
};
use crate::store::Token;
use members::{Member, Slot, Waited};

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
        self.streams
            .tasks()
            .spawn_in_current_span(Box::new(session).run(slot));
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
        // Why the stream ends with an error, if it does.
        let mut failure = None;
        let end = loop {
            tokio::select! {
                biased;
                () = self.streams.tasks().stopping() => break End::Shutdown,
                lost = renewals.lost() => break End::Lost { cause: lost.cause, reason: lost.due.explain(lost.reason), code: lost.code },
                Some((serial, code)) = losses.recv() => self.member_lost(serial, code).await,
                message = self.inbound.next() => match message {
                    None => break End::HalfClosed,
                    Some(Err(status)) => {
                        info!(code = ?status.code(), message = status.message(), "client stream broke");
                        failure = Some(self.broken(status));
                        break End::Broken;
                    }
                    Some(Ok(request)) => match request.action {
                        Some(Action::Close(_)) => break End::ReleaseAsked,
                        Some(action) => {
                            if let Err(error) = self.handle(action, &terms).await {
                                failure = Some(error);
                                break End::Broken;
                            }
                        }
                        None => {
                            failure = Some(no_action());
                            break End::Broken;
                        }
                    },
                },
                Some(waited) = self.waits.next(), if !self.waits.is_empty() => {
                    self.waited(waited, &group).await;
                }
                () = self.events.closed() => {
                    info!("client went away");
                    break End::HalfClosed;
                }
            }
        };
        let ended = self.end(end, &terms, &mut renewals).await;
        failure.map_or(ended, Err)
    }

    /// A request after `open`.
    async fn handle(&mut self, action: Action, terms: &Terms) -> Result<()> {
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
                self.release(release.id).await;
                Ok(())
            }
            Action::Close(_) => Ok(()),
        }
    }

    /// Ends the session: every lease ends as `end` says, and the client hears the session's
    /// fate, which is each of its leases' (a session is a lease held many times over).
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
        let leases = members.len();
        let session = fate(Phase::Held, end.clone(), terms.grace.is_some());
        let told = join_all(members.into_iter().map(|mut member| {
            let end = end.clone();
            // A member let go is released in the background when it drops, here.
            async move { member.end(end).await }
        }))
        .await;
        let count = |counts: fn(&Told) -> bool| {
            let counted = told.iter().flatten().filter(|told| counts(told)).count();
            u32::try_from(counted).unwrap_or(u32::MAX)
        };
        match session {
            Fate::Release => {
                let released = count(|told| matches!(told, Told::Released { was_held: true }));
                info!(released, "session closed");
                self.send(Event::Closed(pb::SessionClosed { released }))
                    .await;
            }
            Fate::Lose { reason, code, .. } => {
                warn!(%reason, leases, "session lost");
                self.send(Event::Lost(lost(reason, code))).await;
            }
            Fate::HandOver => {
                info!(leases, "kept for its client to resume elsewhere");
                self.streams.metrics().moved("handed_over");
                let grace_ms = terms.grace.map_or(0, |grace| grace.as_millis());
                let held = "session";
                return Err(Error::HandedOver { held, grace_ms });
            }
            Fate::ShutDown => {
                let released = count(|told| matches!(told, Told::ShutDown(Ok(true))));
                let reason = format!(
                    "server shutting down; {released} of the session's {leases} leases were released, the rest expire by their TTL"
                );
                self.send(Event::Lost(lost(reason, LostCode::Shutdown)))
                    .await;
            }
            Fate::Keep | Fate::LetGo | Fate::GiveUp | Fate::Supersede(_) => {}
        }
        Ok(())
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

    async fn lease_lost(&mut self, id: u64, reason: String, code: LostCode) {
        let code = lost(String::new(), code).code;
        self.send(Event::LeaseLost(pb::SessionLeaseLost { id, reason, code }))
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

fn no_action() -> Error {
    Error::invalid("request has no action: set open, acquire, campaign, proclaim, release or close")
}
