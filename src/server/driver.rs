//! The one driver of every stream that holds a lease (`Lease`, `Campaign`; semaphores next).
//!
//! A stream is one lease: Waiting -> Held -> Released | Lost. The driver owns everything such
//! streams share: admission, the first message, waiting (and giving up), the hold loop (shutdown,
//! client message, client gone, a loss the server's renewal scheduler found), and letting go on
//! every way out through [`HeldLease`]. Renewals never wake the stream's task: the scheduler
//! renews and tells the client `extended` itself. A kind of stream ([`LeaseStream`]) only says what its messages mean, what it
//! holds, and what it answers; it never repeats the lifecycle.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};
use tracing::{Instrument, debug, info, info_span, warn};

use super::admission::{ConnectionLimits, LeaseSlot};
use super::auth::{Caller, Role, Scope};
use super::events::{Events, ResponseStream};
use crate::error::{Error, Result};
use crate::lease::acquire::{Acquisition, WaitingState, acquire, resume};
use crate::lease::held::{HeldLease, Holding};
use crate::lease::renewal::RenewalClock;
use crate::lease::scheduler::{Lost, Scheduled, Scheduler};
use crate::lease::spec::LeaseSpec;
use crate::lease::waiting::WaitRoom;
use crate::metrics::{Metrics, Outcome};
use crate::store::{Store, Token};
use crate::tasks::Tasks;

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

/// A client message, as the driver sees it.
pub enum Move<S, M> {
    /// The message that opens the lease (`acquire`, `start`).
    Start(S),
    /// Let go (`release`, `resign`).
    Release,
    /// A message of this kind of stream alone (`proclaim`).
    Other(M),
    NoAction,
    HalfClosed,
    /// The request could not be read, or the transport failed.
    Broken(Status),
}

/// What a stream-specific step came to.
pub enum Step<R> {
    /// Still held; send this.
    Reply(R),
    /// The lease is gone, for this reason.
    Lost(String),
}

/// How a kind of stream names its parts, in logs and in the errors its clients read.
#[derive(Clone, Copy)]
pub struct Words {
    /// The stream: "lease", "campaign".
    pub stream: &'static str,
    /// Its first message: "acquire", "start".
    pub start: &'static str,
    /// Its letting go: "release", "resign".
    pub release: &'static str,
    /// Every action a request may set.
    pub actions: &'static str,
    /// What it holds: "lock", "leadership".
    pub held: &'static str,
}

impl Words {
    /// The words in the order the fields list them.
    pub const fn new(
        stream: &'static str,
        start: &'static str,
        release: &'static str,
        actions: &'static str,
        held: &'static str,
    ) -> Self {
        Words {
            stream,
            start,
            release,
            actions,
            held,
        }
    }
}

/// How long the server vouches for a held lease, said two ways: `valid_for` from the moment the
/// message is built, and `valid_to` after the stream opened, which a client can trust even when
/// the message is held up on its way (a healed partition delivers old messages late; see
/// `Acquired.valid_to_ms`).
#[derive(Clone, Copy, Debug)]
pub struct Vouched {
    pub valid_for: Duration,
    pub valid_to: Duration,
}

impl Vouched {
    /// Vouched for `valid_for` from now, on a stream opened at `opened`.
    pub fn now(valid_for: Duration, opened: Instant) -> Self {
        let valid_to = (Instant::now() + valid_for).saturating_duration_since(opened);
        Vouched {
            valid_for,
            valid_to,
        }
    }
}

/// Something the driver tells the client; each kind says it in its own message, or not at all
/// (progress it does not report).
pub enum Tell<'a> {
    /// Still waiting: the holder and the place in line.
    Waiting(&'a WaitingState),
    /// Renewed: vouched for this long. `resumable`: the client asked for a resume grace (and so
    /// needs to know how long it may believe in the lease between streams).
    Extended {
        ttl: Duration,
        vouched: Vouched,
        resumable: bool,
    },
    /// Let go at the client's request; `false` if it was not held (any more).
    Released { was_held: bool },
    /// Gone, for this reason.
    Lost(String),
}

/// A held lease, as a kind of stream sees it.
pub struct Held<'a, H: Holding> {
    pub lease: &'a HeldLease<H>,
    pub spec: &'a LeaseSpec,
    pub fencing_token: u64,
}

/// One kind of held-lease stream: its messages, what it holds, and its answers.
pub trait LeaseStream: Sized + Send + 'static {
    type Request: Send + 'static;
    type Response: Send + 'static;
    /// The first message's content.
    type Start: Send;
    /// Messages of this kind alone ([`Infallible`] for none).
    type Message: Send;
    type Holding: Holding;

    const WORDS: Words;
    /// Which names this kind holds, for authorisation.
    const SCOPE: Scope;
    /// After the longest wait, wait again (candidates) instead of giving up (locks).
    const WAITS_AGAIN: bool = false;

    fn read(request: Self::Request) -> Move<Self::Start, Self::Message>;
    /// The name of a stream-specific message, for errors.
    fn message_name(message: &Self::Message) -> &'static str;
    /// Checks the first message: the lease it asks for, and this stream's own state.
    fn open(start: Self::Start) -> Result<(LeaseSpec, Self)>;
    /// Why a stream-specific message is refused while the lease is not held yet.
    fn refuse_while_waiting(message: Self::Message) -> Error;

    /// The lease was just taken, vouched for as `vouched` says: the answer to send, once the
    /// stream's own work is done.
    fn acquired(
        &mut self,
        held: &Held<'_, Self::Holding>,
        vouched: Vouched,
    ) -> impl Future<Output = Result<Step<Self::Response>>> + Send;
    /// A stream-specific message while held.
    fn handle(
        &mut self,
        message: Self::Message,
        held: &Held<'_, Self::Holding>,
    ) -> impl Future<Output = Result<Step<Self::Response>>> + Send;

    /// This kind's message for what the driver has to tell; `None` for progress it does not
    /// report. `Released` and `Lost` must be told.
    fn tell(event: Tell<'_>) -> Option<Self::Response>;
}

/// Admits a new stream of kind `K` and starts its driver as a task of the server.
pub fn open<K: LeaseStream>(
    streams: &Arc<Streams>,
    request: Request<Streaming<K::Request>>,
) -> Result<Response<ResponseStream<K::Response>>, Status> {
    let (slot, caller) = admit(streams, &request)?;
    let (events, responses) = Events::channel();
    let driver = Driver::<K, _> {
        streams: streams.clone(),
        opened: Instant::now(),
        caller,
        inbound: request.into_inner(),
        events,
    };
    streams.tasks().spawn(Box::new(driver).run(slot));
    Ok(Response::new(responses))
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

/// Takes `lease` as `spec` asks (or resumes it by its token), counting the attempt in the
/// metrics; `on_waiting` hears the waiter's state. A refusal (Redis said someone else holds it)
/// disarms the lease: nothing of ours to let go; except a wait that merely passed when the
/// caller `waits_again` (a candidate), whose lease is tried again. Any other error leaves it
/// armed: an attempt whose outcome is unknown may have landed, and is let go on drop.
pub async fn take<H: Holding>(
    streams: &Streams,
    lease: &mut HeldLease<H>,
    spec: &LeaseSpec,
    waits_again: bool,
    mut on_waiting: impl FnMut(&WaitingState),
) -> Result<Acquisition> {
    if spec.resume.is_some() {
        let resumed = resume(lease, spec).await;
        if resumed.is_err() {
            // Not ours (or unknown, if no answer came): never release a lease this stream did
            // not get back; a resume that landed unanswered expires by its TTL.
            lease.disarm();
        }
        return resumed;
    }
    let metrics = streams.metrics();
    let asked = Instant::now();
    let mut counted = None;
    let attempt = acquire(lease, spec, streams.room.as_ref(), |state| {
        counted.get_or_insert_with(|| metrics.waiting());
        on_waiting(state);
    })
    .await;
    metrics.acquisition(spec.name.as_str(), Outcome::of(&attempt), asked.elapsed());
    match &attempt {
        Err(Error::WaitExpired { .. }) if waits_again => {}
        Err(Error::LockHeld { .. } | Error::WaitExpired { .. } | Error::ModeMismatch { .. }) => {
            lease.disarm();
        }
        _ => {}
    }
    attempt
}

/// How the waiting phase ended.
enum Waited {
    Acquired(Acquisition),
    /// The longest wait passed and this kind waits again.
    StillWaiting,
    /// The client let go (or half-closed) before the lease was taken.
    GaveUp,
    /// The client went away.
    Gone,
}

/// The task behind one stream.
struct Driver<K: LeaseStream, S> {
    streams: Arc<Streams>,
    /// When the stream opened: what `Vouched::valid_to` counts from.
    opened: Instant,
    /// Who opened the stream: checked against the name of its first message.
    caller: Caller,
    inbound: S,
    events: Events<K::Response>,
}

impl<K, S> Driver<K, S>
where
    K: LeaseStream,
    S: Stream<Item = Result<K::Request, Status>> + Unpin + Send,
{
    /// Runs the stream to its end; an error becomes the stream's final status. `slot` counts
    /// the stream against its connection's limit until then. Boxed, so the task's future holds
    /// one pointer to the driver rather than copies of it.
    async fn run(mut self: Box<Self>, slot: LeaseSlot) {
        let _open = self.streams.metrics().open_stream(K::WORDS.stream);
        if let Err(error) = self.drive().await {
            debug!(%error, stream = K::WORDS.stream, "stream ends with an error");
            self.events.essential(Err(error.into()));
        }
        drop(slot);
    }

    async fn drive(&mut self) -> Result<()> {
        let Some((spec, mut stream)) = Box::pin(self.first_request()).await? else {
            return Ok(());
        };
        let holding = K::Holding::at(&self.streams.store, &spec.name);
        // A resumed lease is the one its token already holds.
        let token = match &spec.resume {
            Some(secret) => Token::from_client(secret.clone()),
            None => Token::random(),
        };
        let mut lease = HeldLease::claim(holding, token);
        let span = info_span!(
            "lease",
            stream = K::WORDS.stream,
            lock = %spec.name,
            lease = lease.token().lease_id()
        );
        self.lease(&spec, &mut stream, &mut lease)
            .instrument(span)
            .await
    }

    /// Waits for the first message, which must open the lease.
    async fn first_request(&mut self) -> Result<Option<(LeaseSpec, K)>> {
        let message = tokio::select! {
            message = self.inbound.next() => message,
            () = self.events.closed() => return Ok(None),
            () = self.streams.tasks().stopping() => return Err(Error::ShuttingDown),
        };
        match read::<K>(message) {
            Move::Start(start) => {
                let (spec, stream) = K::open(start)?;
                // Before any Redis command: a refused name is never touched.
                self.caller
                    .allow(K::SCOPE, spec.name.as_str(), Role::Hold)?;
                Ok(Some((spec, stream)))
            }
            Move::HalfClosed => Ok(None),
            Move::Broken(status) => Err(self.broken(status)),
            Move::NoAction => Err(no_action::<K>()),
            Move::Release => Err(before_start::<K>(K::WORDS.release)),
            Move::Other(message) => Err(before_start::<K>(K::message_name(&message))),
        }
    }

    /// Takes the lease, then holds it. Arguments by reference and locals scoped: an async fn's
    /// future keeps a slot for every by-value argument and every local that lives across an
    /// await, for the whole lease.
    async fn lease(
        &mut self,
        spec: &LeaseSpec,
        stream: &mut K,
        lease: &mut HeldLease<K::Holding>,
    ) -> Result<()> {
        let (fencing_token, attachment, clock, held_for) = {
            // Boxed: a held lease should not carry the waiting phase's state for its lifetime.
            let acquisition = loop {
                match Box::pin(self.wait(spec, lease)).await? {
                    Waited::Acquired(acquisition) => break acquisition,
                    Waited::StillWaiting => continue,
                    Waited::GaveUp => {
                        self.essential(Tell::Released { was_held: false });
                        return Ok(());
                    }
                    Waited::Gone => return Ok(()),
                }
            };
            let Acquisition {
                fencing_token,
                attachment,
                ..
            } = acquisition;
            let clock = RenewalClock::resumable(spec.ttl, spec.resume_grace, acquisition.sent_at);
            info!(fencing_token, resumed = attachment > 0, "acquired");
            if spec.resume.is_some() {
                self.streams.metrics().moved("resumed");
            }
            // Counts the lease as held, and its hold time, from here to the end of the stream.
            let metrics = self.streams.metrics();
            let held_for = (
                metrics.held(spec.name.as_str()),
                matches!(K::SCOPE, Scope::Election).then(|| metrics.leading()),
            );
            let held = Held {
                lease,
                spec,
                fencing_token,
            };
            let vouched = Vouched::now(clock.valid_for(Instant::now()), self.opened);
            let answer = match Box::pin(stream.acquired(&held, vouched)).await {
                Ok(answer) => answer,
                // A resumed lease's client still believes in it: an error here (Redis slow)
                // must not release it under the client, which resumes it elsewhere.
                Err(error) if spec.resume.is_some() => {
                    Box::pin(keep_if_resumable(
                        (spec.ttl, spec.resume_grace),
                        None,
                        lease,
                        attachment,
                    ))
                    .await;
                    return Err(error);
                }
                Err(error) => return Err(error),
            };
            match answer {
                Step::Reply(answer) => {
                    if !self.events.essential(Ok(answer)) {
                        // The client left. A resumed lease's client may still believe in it,
                        // from what its earlier stream vouched for: kept for its grace. Any
                        // other was never told it holds: `lease` lets go on drop.
                        if spec.resume.is_some() {
                            let keep = (spec.ttl, spec.resume_grace);
                            Box::pin(keep_if_resumable(keep, None, lease, attachment)).await;
                        }
                        return Ok(());
                    }
                }
                Step::Lost(reason) => {
                    warn!(%reason, "lease lost");
                    self.lost(reason);
                    return Ok(());
                }
            }
            (fencing_token, attachment, clock, held_for)
        };
        let held = self
            .hold(stream, spec, (fencing_token, attachment), lease, clock)
            .await;
        drop(held_for);
        held
    }

    /// Waits for the lease as `spec` allows, unless the client gives up first.
    async fn wait(
        &mut self,
        spec: &LeaseSpec,
        lease: &mut HeldLease<K::Holding>,
    ) -> Result<Waited> {
        if spec.resume.is_some() {
            return take(&self.streams, lease, spec, false, |_| {})
                .await
                .map(Waited::Acquired);
        }
        let events = &self.events;
        let waiting = take(&self.streams, lease, spec, K::WAITS_AGAIN, |state| {
            if let Some(progress) = K::tell(Tell::Waiting(state)) {
                events.progress(progress);
            }
        });
        let attempt = tokio::select! {
            acquired = waiting => acquired,
            // A give-up leaves `lease` armed: the attempt in flight may have won just then.
            gave_up = Self::gives_up(&mut self.inbound, events, self.streams.tasks(), self.streams.max_message_bytes) => return gave_up,
        };
        match attempt {
            Ok(acquisition) => Ok(Waited::Acquired(acquisition)),
            Err(Error::WaitExpired { .. }) if K::WAITS_AGAIN => Ok(Waited::StillWaiting),
            Err(error) => Err(error),
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
            () = events.closed() => Ok(Waited::Gone),
            () = tasks.stopping() => Err(Error::ShuttingDown),
        }
    }

    /// Keeps the lease alive until the client lets go, the lease is lost, or the server stops.
    async fn hold(
        &mut self,
        stream: &mut K,
        spec: &LeaseSpec,
        (fencing_token, attachment): (u64, u64),
        lease: &mut HeldLease<K::Holding>,
        clock: RenewalClock,
    ) -> Result<()> {
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
        let mut renewals =
            self.streams
                .scheduler
                .schedule(lease.renewable(), ttl, clock, on_renewed);
        loop {
            tokio::select! {
                biased;
                () = self.streams.tasks().stopping() => {
                    renewals.stop();
                    if let Some(grace) = spec.resume_grace {
                        // Hand the lease over: the client hears it first, so it moves at once;
                        // the lease is then kept for its grace.
                        let held = K::WORDS.held;
                        self.events.essential(Err(Error::HandedOver { held, grace_ms: grace.as_millis() }.into()));
                        Box::pin(keep_if_resumable((spec.ttl, spec.resume_grace), Some(&mut renewals), lease, attachment)).await;
                        info!("kept for its client to resume elsewhere");
                        self.streams.metrics().moved("handed_over");
                        return Ok(());
                    }
                    let released = Box::pin(lease.release()).await;
                    let held = K::WORDS.held;
                    let reason = match released {
                        Ok(_) => format!("server shutting down; the {held} was released"),
                        Err(error) => format!("server shutting down; release failed ({error}), the {held} expires by its TTL"),
                    };
                    info!("released for shutdown");
                    self.streams.metrics().lost("shutdown");
                    self.lost(reason);
                    return Ok(());
                }
                message = self.inbound.next() => match read::<K>(message) {
                    // tonic reports a request stream cut off by a dead connection (a keepalive
                    // timeout, a reset) as a half-close: a resumable lease's client may still
                    // believe in it, so only an explicit release (`release`, `resign`) lets it
                    // go at once; every client of the project sends one. (Found by the
                    // robustness checker: a frozen client's lock was taken over while its last
                    // confirmed validity still ran; then with real processes, a frozen leader
                    // replaced 9.8 s before its validity ended, issue 38.)
                    Move::HalfClosed if spec.resume_grace.is_some() => {
                        info!("stream ended without a release; kept for its grace");
                        Box::pin(keep_if_resumable((spec.ttl, spec.resume_grace), Some(&mut renewals), lease, attachment)).await;
                        return Ok(());
                    }
                    Move::Release | Move::HalfClosed => {
                        renewals.stop();
                        let was_held = Box::pin(lease.release()).await?;
                        info!(was_held, "released");
                        self.essential(Tell::Released { was_held });
                        return Ok(());
                    }
                    Move::Other(message) => match Box::pin(stream.handle(message, &Held { lease, spec, fencing_token })).await {
                        // The client believes in the lease: an error (Redis slow) keeps a
                        // resumable one for it to resume elsewhere, as a broken stream does.
                        Err(error) => {
                            Box::pin(keep_if_resumable((spec.ttl, spec.resume_grace), Some(&mut renewals), lease, attachment)).await;
                            return Err(error);
                        }
                        Ok(step) => match step {
                        Step::Reply(answer) => {
                            self.events.essential(Ok(answer));
                        }
                        Step::Lost(reason) => {
                            renewals.stop();
                            warn!(%reason, "lease lost");
                            self.streams.metrics().lost("superseded");
                            self.lost(reason);
                            return Ok(());
                        }
                    }},
                    // A transport failure or an unreadable message: let go (on drop, unless
                    // resumable) and say why, in case the client can still hear it.
                    Move::Broken(status) => {
                        info!(code = ?status.code(), message = status.message(), "client stream broke");
                        Box::pin(keep_if_resumable((spec.ttl, spec.resume_grace), Some(&mut renewals), lease, attachment)).await;
                        return Err(self.broken(status));
                    }
                    Move::Start(_) => return Err(second_start::<K>()),
                    Move::NoAction => return Err(no_action::<K>()),
                },
                () = self.events.closed() => {
                    info!("client went away");
                    Box::pin(keep_if_resumable((spec.ttl, spec.resume_grace), Some(&mut renewals), lease, attachment)).await;
                    return Ok(());
                }
                Lost { cause, reason, due } = renewals.lost() => {
                    warn!(%reason, ?due, "lease lost");
                    lease.lost();
                    self.streams.metrics().lost(cause);
                    self.lost(due.explain(reason));
                    return Ok(());
                }
            }
        }
    }

    fn lost(&self, reason: String) {
        self.essential(Tell::Lost(reason));
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

/// The client went away without letting go, or the server stops under it: a resumable lease is
/// kept for its grace instead of released (any other is released when `lease` drops). A grace
/// of the whole TTL needs no command: renewed at most a TTL ago, the key already ends within
/// the grace, and its client was never told more (the attachment check is moot: nothing is
/// shortened). Only a shorter grace shortens the key, so a deploy of a replica costs Redis
/// nothing per lease with the clients' default grace.
pub async fn keep_if_resumable<H: Holding>(
    (ttl, grace): (Duration, Option<Duration>),
    renewals: Option<&mut Scheduled>,
    lease: &mut HeldLease<H>,
    attachment: u64,
) {
    if let Some(grace) = grace {
        if let Some(renewals) = renewals {
            renewals.stop();
        }
        if grace >= ttl {
            lease.disarm();
            info!("kept until its TTL runs out, for its client to resume");
        } else {
            lease.detach(grace, attachment).await;
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

/// For kinds without messages of their own.
pub fn no_message(message: &Infallible) -> ! {
    match *message {}
}
