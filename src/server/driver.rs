//! The one driver of every stream that holds a lease (`Lease`, `Campaign`; semaphores next).
//!
//! A stream is one lease, whose life is a [`Life`] of the lease layer: the driver translates
//! between the stream's messages and that machine, and decides nothing about the lease itself.
//! It owns what such streams share: admission, the first message, waiting (and giving up), and
//! the hold, which reads shutdown, a client message, a client gone or a loss the server's
//! renewal scheduler found as the lease's [`End`] and tells the client what the machine answers.
//! No task of its own: the stream's response stream drives it (`hold.rs`, which also says what a
//! client that stops reading costs). Renewals never poll the hold: the scheduler renews and
//! tells the client `extended` itself. A kind of stream ([`LeaseStream`]) only says what its messages mean, what it holds,
//! and what it answers; it never repeats the lifecycle.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};
use tracing::{Instrument, Span, debug, info, info_span};

use super::admission::{ConnectionLimits, LeaseSlot};
use super::auth::{Caller, Role, Scope};
use super::events::{EVENT_BUFFER, Events, ResponseStream};
use super::lease_stream::{Held, LeaseStream, Move, Step, Tell, Words};
use crate::error::{Error, Result};
use crate::lease::acquire::Acquisition;
use crate::lease::held::Holding;
use crate::lease::life::{End, Life, LostCode, Told, Vouched};
use crate::lease::renewal::RenewalClock;
use crate::lease::scheduler::Scheduler;
use crate::lease::spec::{LeaseSpec, LockName};
use crate::lease::waiting::WaitRoom;
use crate::metrics::{Counted, HeldFor, Metrics};
use crate::store::Store;
use crate::tasks::Tasks;

mod hold;

use hold::Drive;

/// What every held-lease stream of one server shares; each stream keeps one pointer to it.
pub struct Streams {
    pub store: Store,
    /// Wake-ups and the fair line; `None` when wake-ups are disabled (waiters poll).
    pub room: Option<WaitRoom>,
    /// Renews every held lease of the server.
    pub scheduler: Scheduler,
    pub limits: ConnectionLimits,
    /// Largest request message (`--max-message-bytes`), to name it when a stream breaks on it.
    pub max_message_bytes: usize,
}

impl Streams {
    pub fn tasks(&self) -> &Tasks {
        self.store.connection().tasks()
    }

    pub fn metrics(&self) -> &Metrics {
        self.store.connection().metrics()
    }
}

/// Admits a new stream of kind `K`: its response stream drives it (no task of its own).
pub fn open<K: LeaseStream>(
    streams: &Arc<Streams>,
    request: Request<Streaming<K::Request>>,
) -> Result<Response<ResponseStream<K::Response>>, Status> {
    let (slot, caller) = admit(streams, &request)?;
    let (events, responses) = Events::pair(EVENT_BUFFER);
    let driver = Driver::<K, _> {
        streams: streams.clone(),
        opened: Instant::now(),
        caller,
        inbound: request.into_inner(),
        events,
        _slot: slot,
    };
    Ok(Response::new(Box::pin(Drive::new(
        Box::new(driver),
        responses,
    ))))
}

/// Admits a stream that holds leases (a `Lease`, a `Campaign`, a `Session`): refused while the
/// server stops, and counted against its connection's and the server's limit while the slot
/// lives. Also says who opened it.
pub fn admit<T>(streams: &Streams, request: &Request<T>) -> Result<(LeaseSlot, Caller), Status> {
    if streams.tasks().is_stopping() {
        return Err(Error::ShuttingDown.into());
    }
    let slot = streams.limits.admit(request.remote_addr())?;
    Ok((slot, Caller::of(request)))
}

/// How the waiting phase ended.
enum Waited {
    Acquired(Acquisition),
    /// The client let go (or half-closed) before the lease was taken.
    GaveUp,
    /// The client went away.
    Gone,
}

/// What one stream's lease is driven with: what the taking needs, and the hold after it.
struct Driver<K: LeaseStream, S> {
    streams: Arc<Streams>,
    /// When the stream opened: what `Vouched::valid_to` counts from.
    opened: Instant,
    /// Who opened the stream: checked against the name of its first message.
    caller: Caller,
    inbound: S,
    events: Events<K::Response>,
    /// Counts the stream against its connection's limit until the driver drops.
    _slot: LeaseSlot,
}

/// What the hold keeps of a lease taken and told, beside the driver.
struct Taken<K: LeaseStream> {
    /// What the hold keeps of the spec (not the whole spec: its holder, wait, resume token and
    /// limits served the taking).
    name: LockName,
    more_names: Vec<LockName>,
    ttl: Duration,
    stream: K,
    life: Life<K::Holding>,
    fencing_token: u64,
    /// Counts the lease as held, and its hold time, until the stream ends.
    _held_for: (HeldFor, Option<Counted>),
}

impl<K: LeaseStream> Taken<K> {
    /// The lease's span, made again for a step of the hold (a message, the end): not kept
    /// while the lease is held (with the text log its fields are formatted when it is made:
    /// 0.36 KB per held lease).
    fn span(&self) -> Span {
        lease_span::<K, _>(&self.name, &self.life)
    }
}

/// The span of a lease's log lines: its stream, lock and lease id.
fn lease_span<K: LeaseStream, H: Holding>(name: &LockName, life: &Life<H>) -> Span {
    info_span!(
        "lease",
        stream = K::WORDS.stream,
        lock = %name,
        lease = life.token().lease_id()
    )
}

impl<K, S> Driver<K, S>
where
    K: LeaseStream,
    S: Stream<Item = Result<K::Request, Status>> + Unpin + Send,
{
    /// The taking, owning the driver: [`Drive`] polls it, and hands the driver on to the hold.
    async fn taking(mut self: Box<Self>) -> (Box<Self>, Result<Option<Taken<K>>>) {
        let taken = self.take().await;
        (self, taken)
    }

    /// The stream ends with `error` as its final status.
    fn fail(&self, error: Error) {
        debug!(%error, stream = K::WORDS.stream, "stream ends with an error");
        self.events.essential(Err(error.into()));
    }

    /// Reads the first message and takes the lease; `None` if the stream ended first (or the
    /// lease did, told as its life says).
    async fn take(&mut self) -> Result<Option<Taken<K>>> {
        let Some((spec, mut stream)) = self.first_request().await? else {
            return Ok(None);
        };
        let holding = K::Holding::of(&self.streams.store, &spec);
        let mut life = Life::claim(holding, &spec);
        let span = lease_span::<K, _>(&spec.name, &life);
        let taken = self
            .lease(&spec, &mut stream, &mut life)
            .instrument(span)
            .await?;
        let LeaseSpec {
            name,
            more_names,
            ttl,
            ..
        } = spec;
        Ok(taken.map(|(fencing_token, held_for)| Taken {
            name,
            more_names,
            ttl,
            stream,
            life,
            fencing_token,
            _held_for: held_for,
        }))
    }

    /// Waits for the first message, which must open the lease.
    async fn first_request(&mut self) -> Result<Option<(LeaseSpec, K)>> {
        let message = tokio::select! {
            message = self.inbound.next() => message,
            () = self.events.gone() => return Ok(None),
            () = self.streams.tasks().stopping() => return Err(Error::ShuttingDown),
        };
        match read::<K>(message) {
            Move::Start(start) => {
                let (spec, stream) = K::open(start)?;
                // Before any Redis command: a refused name is never touched.
                for name in spec.names() {
                    self.caller.allow(K::SCOPE, name.as_str(), Role::Hold)?;
                }
                Ok(Some((spec, stream)))
            }
            Move::HalfClosed => Ok(None),
            Move::Broken(status) => Err(self.broken(status)),
            Move::NoAction => Err(no_action::<K>()),
            Move::Release => Err(before_start::<K>(K::WORDS.release)),
            Move::Other(message) => Err(before_start::<K>(K::message_name(&message))),
        }
    }

    /// Takes the lease and tells the client, and starts its renewals: its fencing token and
    /// hold counters, or `None` if it ended meanwhile (told as its life says).
    async fn lease(
        &mut self,
        spec: &LeaseSpec,
        stream: &mut K,
        life: &mut Life<K::Holding>,
    ) -> Result<Option<(u64, (HeldFor, Option<Counted>))>> {
        let (fencing_token, clock, held_for) = {
            let acquisition = match Box::pin(self.wait(spec, life)).await? {
                Waited::Acquired(acquisition) => acquisition,
                Waited::GaveUp => return self.end(life, End::ReleaseAsked).await.map(|_| None),
                Waited::Gone => return Ok(None),
            };
            let clock = life.granted(&acquisition);
            let Acquisition {
                fencing_token,
                attachment,
                more_fences,
                ..
            } = acquisition;
            info!(fencing_token, resumed = attachment > 0, "acquired");
            // Counts the lease as held, and its hold time, from here to the end of the stream.
            let metrics = self.streams.metrics();
            let held_for = (
                metrics.held(spec.name.as_str()),
                matches!(K::SCOPE, Scope::Election).then(|| metrics.leading()),
            );
            let held = Held::of(life.lease(), spec, fencing_token, &more_fences);
            let vouched = Vouched::now(clock.valid_for(Instant::now()), self.opened);
            let end = match Box::pin(stream.acquired(&held, vouched)).await {
                // Redis slow: the lease ends as a broken stream's does.
                Err(error) => {
                    let _ = self.end(life, End::Broken).await;
                    return Err(error);
                }
                // The client left before it was told.
                Ok(Step::Reply(answer)) => {
                    (!self.events.essential(Ok(answer))).then_some(End::Broken)
                }
                Ok(Step::Lost(reason)) => Some(End::Superseded(reason)),
            };
            if let Some(end) = end {
                return self.end(life, end).await.map(|_| None);
            }
            (fencing_token, clock, held_for)
        };
        self.renew(spec, life, clock);
        Ok(Some((fencing_token, held_for)))
    }

    /// Hands the lease to the server's renewal scheduler, which tells the client each renewal.
    fn renew(&self, spec: &LeaseSpec, life: &mut Life<K::Holding>, clock: RenewalClock) {
        let events = self.events.clone();
        let (ttl, resumable, opened) = (spec.ttl, spec.resume_grace.is_some(), self.opened);
        let on_renewed = Box::new(move |valid_for| {
            if let Some(progress) = K::tell(Tell::Extended {
                ttl,
                vouched: Vouched::now(valid_for, opened),
                resumable,
            }) {
                events.progress(progress);
            }
        });
        life.hold(&self.streams.scheduler, clock, on_renewed);
    }

    /// Waits for the lease as `spec` allows, unless the client gives up first.
    async fn wait(&mut self, spec: &LeaseSpec, life: &mut Life<K::Holding>) -> Result<Waited> {
        let room = self.streams.room.as_ref();
        if spec.resume.is_some() {
            return life
                .take(spec, room, false, |_| {})
                .await
                .map(Waited::Acquired);
        }
        let events = &self.events;
        let waiting = life.take(spec, room, K::WAITS_AGAIN, |state| {
            if let Some(progress) = K::tell(Tell::Waiting(state)) {
                events.progress(progress);
            }
        });
        tokio::select! {
            acquired = waiting => acquired.map(Waited::Acquired),
            // A give-up leaves the lease armed: the attempt in flight may have won just then.
            gave_up = Self::gives_up(&mut self.inbound, events, self.streams.tasks(), self.streams.max_message_bytes) => gave_up,
        }
    }

    /// While waiting: completes when the client gives up or breaks the protocol, or the server
    /// stops.
    async fn gives_up(
        inbound: &mut S,
        events: &Events<K::Response>,
        tasks: &Tasks,
        max_message_bytes: usize,
    ) -> Result<Waited> {
        tokio::select! {
            message = inbound.next() => match read::<K>(message) {
                Move::Release | Move::HalfClosed => Ok(Waited::GaveUp),
                Move::Other(message) => Err(K::refuse_while_waiting(message)),
                Move::Start(_) => Err(second_start::<K>()),
                Move::NoAction => Err(no_action::<K>()),
                Move::Broken(status) => Err(broken(status, max_message_bytes)),
            },
            () = events.gone() => Ok(Waited::Gone),
            () = tasks.stopping() => Err(Error::ShuttingDown),
        }
    }

    /// Ends the lease as its life says, telling the client. Boxed: the taking's future should
    /// not carry the release's or detach's state while it waits (the hold's end is a phase of
    /// its own, `hold.rs`).
    async fn end(&self, life: &mut Life<K::Holding>, end: End) -> Result<Told> {
        Box::pin(life.end(end, |told| self.tell(told))).await
    }

    /// Tells the client what its lease's life answered.
    fn tell(&self, told: &Told) {
        let held = K::WORDS.held;
        match told {
            Told::Nothing => {}
            Told::Released { was_held } => self.essential(Tell::Released {
                was_held: *was_held,
            }),
            Told::Lost(reason, code) => self.essential(Tell::Lost(reason.clone(), *code)),
            // The client hears it before the lease is kept, so it moves at once.
            Told::HandedOver { grace } => {
                let grace_ms = grace.as_millis();
                self.events
                    .essential(Err(Error::HandedOver { held, grace_ms }.into()));
            }
            Told::ShutDown(Ok(_)) => self.essential(Tell::Lost(
                format!("server shutting down; the {held} was released"),
                LostCode::Shutdown,
            )),
            Told::ShutDown(Err(error)) => self.essential(Tell::Lost(
                format!(
                    "server shutting down; release failed ({error}), the {held} expires by its TTL"
                ),
                LostCode::Shutdown,
            )),
        }
    }

    fn broken(&self, status: Status) -> Error {
        broken(status, self.streams.max_message_bytes)
    }

    fn essential(&self, event: Tell<'_>) {
        if let Some(answer) = K::tell(event) {
            self.events.essential(Ok(answer));
        }
    }
}

fn read<K: LeaseStream>(message: Option<Result<K::Request, Status>>) -> Move<K::Start, K::Message> {
    match message {
        None => Move::HalfClosed,
        Some(Err(status)) => Move::Broken(status),
        Some(Ok(request)) => K::read(request),
    }
}

/// Why a stream's request could not be read: a message above the size limit is named as such
/// (tonic reports it as OUT_OF_RANGE; it is a limit, RESOURCE_EXHAUSTED).
pub fn broken(status: Status, max_message_bytes: usize) -> Error {
    match super::message_size::oversized(&status, max_message_bytes) {
        Some(error) => error,
        None => Error::Unreadable(status),
    }
}

fn second_start<K: LeaseStream>() -> Error {
    let Words { start, stream, .. } = K::WORDS;
    Error::invalid(format!(
        "{start} sent twice on one stream: one stream is one {stream}; open another stream for another"
    ))
}

fn no_action<K: LeaseStream>() -> Error {
    Error::invalid(format!("request has no action: set {}", K::WORDS.actions))
}

fn before_start<K: LeaseStream>(what: &str) -> Error {
    let Words { start, stream, .. } = K::WORDS;
    Error::invalid(format!(
        "{what} sent before {start}: the first message of a {stream} stream must be {start}"
    ))
}
