//! One task per `Lease` stream: Waiting -> Held -> Released | Lost.
//!
//! The task owns the lock while the stream lives. Every way out (release, half-close, cancel,
//! transport error, protocol error, server shutdown) goes through [`HeldLock`], whose `Drop`
//! releases the lock if nothing else did, so no branch can forget it.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, timeout_at};
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::acquire;
use crate::admission::LeaseSlot;
use crate::error::{Error, Result};
use crate::pb::{self, LeaseRequest, LeaseResponse, lease_request::Action, lease_response::Event};
use crate::renew::{RenewalClock, RenewalTrigger};
use crate::store::{LockKeys, Store};
use crate::token::Token;
use crate::validate::{LeaseSpec, millis_u32};
use crate::waiting::WaitRoom;

/// One message of a server stream: a response, or the status that ends the stream.
pub type StreamItem<T> = Result<T, Status>;

/// The response stream a streaming RPC hands to tonic.
pub type ResponseStream<T> = std::pin::Pin<Box<dyn Stream<Item = StreamItem<T>> + Send>>;

/// Room for events not yet read by the client. Two slots are kept for `Acquired` and the final
/// message; progress events (`Waiting`, `Extended`) are dropped when only those remain.
pub const EVENT_BUFFER: usize = 8;
const RESERVED_SLOTS: usize = 2;

/// What travels on a lease stream's channel. Boxed because tokio's channel allocates 32 slots
/// at once whatever its bound: 32 pointers instead of 32 items is 1 KiB less per held lease,
/// and the few events a lease sends can afford an allocation each.
pub type Boxed<T> = Box<StreamItem<T>>;

/// The sending side of a stream that holds a lease (`Lease`, `Campaign`). It never blocks:
/// renewal must not wait on a slow reader.
pub struct Events<T = LeaseResponse> {
    tx: mpsc::Sender<Boxed<T>>,
}

impl<T> Events<T> {
    pub fn new(tx: mpsc::Sender<Boxed<T>>) -> Self {
        Events { tx }
    }

    /// Best effort: a reader that falls behind misses progress, never the lease itself.
    pub(crate) fn progress(&self, item: T) {
        if self.tx.capacity() > RESERVED_SLOTS {
            let _ = self.tx.try_send(Box::new(Ok(item)));
        }
    }

    /// Fits in the reserved slots; `false` only if the client is gone.
    pub(crate) fn essential(&self, item: StreamItem<T>) -> bool {
        self.tx.try_send(Box::new(item)).is_ok()
    }

    /// Completes when the client stopped listening (cancelled call, broken connection).
    pub(crate) async fn closed(&self) {
        self.tx.closed().await
    }
}

fn response(event: Event) -> LeaseResponse {
    LeaseResponse { event: Some(event) }
}

/// What the client did, as far as the lease is concerned.
enum ClientMove {
    Release,
    Acquire(pb::LeaseAcquire),
    NoAction,
    HalfClosed,
    Broken(Status),
}

impl ClientMove {
    fn of(message: Option<Result<LeaseRequest, Status>>) -> Self {
        match message {
            None => ClientMove::HalfClosed,
            Some(Err(status)) => ClientMove::Broken(status),
            Some(Ok(LeaseRequest { action: None })) => ClientMove::NoAction,
            Some(Ok(LeaseRequest {
                action: Some(Action::Acquire(request)),
            })) => ClientMove::Acquire(request),
            Some(Ok(LeaseRequest {
                action: Some(Action::Release(_)),
            })) => ClientMove::Release,
        }
    }
}

fn second_acquire() -> Error {
    Error::invalid(
        "acquire sent twice on one stream: one stream holds one lease; open another stream for another lock",
    )
}

fn no_action() -> Error {
    Error::invalid("request has no action: set acquire or release")
}

/// A lock a task holds. Dropping it without [`HeldLock::release`] releases in the background.
pub(crate) struct HeldLock {
    store: Store,
    pub(crate) keys: LockKeys,
    pub(crate) token: Token,
    released: bool,
}

impl HeldLock {
    pub(crate) fn new(store: Store, keys: LockKeys, token: Token) -> Self {
        HeldLock {
            store,
            keys,
            token,
            released: false,
        }
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// The caller takes over releasing the lock (in its own way); `true` if that is still to do.
    pub(crate) fn hand_over(&mut self) -> bool {
        !std::mem::replace(&mut self.released, true)
    }

    /// Releases now. `Ok(false)`: the lock was no longer ours.
    pub(crate) async fn release(&mut self) -> Result<bool> {
        let was_held = self.store.release(&self.keys, &self.token).await?;
        self.released = true;
        Ok(was_held)
    }

    /// Keeps the lock alive once, if `clock` says it is time.
    pub(crate) async fn renew(&self, ttl: Duration, clock: &mut RenewalClock) -> Renewal {
        let sent_at = Instant::now();
        if clock.expired(sent_at) {
            return Renewal::Lost(
                "Redis could not be reached to renew the lock before it ran out".into(),
            );
        }
        let renewal = self.store.extend(&self.keys, &self.token, ttl);
        match timeout_at(clock.valid_until(), renewal).await {
            Ok(Ok(true)) => {
                clock.confirmed(sent_at);
                Renewal::Confirmed {
                    valid_for: clock.valid_for(Instant::now()),
                }
            }
            // Never retried into success: someone else may hold the lock now.
            Ok(Ok(false)) => {
                // An expiry this server saw: if the lock is free, wake the line.
                self.store
                    .leave_in_background(self.keys.clone(), String::new());
                Renewal::Lost(
                    "the lock key was deleted or taken by another holder behind the server's back"
                        .into(),
                )
            }
            Ok(Err(error)) => {
                debug!(%error, "renewal failed; retrying");
                clock.failed(Instant::now());
                Renewal::Retrying
            }
            Err(_) => Renewal::Lost(format!(
                "Redis did not confirm a renewal before the lease ran out ({} ms)",
                ttl.as_millis()
            )),
        }
    }
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        if !self.released {
            self.store
                .release_in_background(self.keys.clone(), self.token.clone());
        }
    }
}

/// What one renewal attempt came to.
pub(crate) enum Renewal {
    /// The lease is ours for this long from now.
    Confirmed { valid_for: Duration },
    /// No answer from Redis; the clock says when to try again.
    Retrying,
    /// The lease is gone, for this reason.
    Lost(String),
}

/// The task behind one `Lease` stream.
pub struct LeaseTask<S> {
    store: Store,
    room: Option<WaitRoom>,
    inbound: S,
    events: Events,
    shutdown: CancellationToken,
}

impl<S> LeaseTask<S>
where
    S: Stream<Item = Result<LeaseRequest, Status>> + Unpin + Send,
{
    pub fn new(
        store: Store,
        room: Option<WaitRoom>,
        inbound: S,
        events: Events,
        shutdown: CancellationToken,
    ) -> Self {
        LeaseTask {
            store,
            room,
            inbound,
            events,
            shutdown,
        }
    }

    /// Runs the stream to its end; an error becomes the stream's final status. `slot` counts
    /// this stream against its connection's limit until the task ends.
    /// Boxed, so the task's future holds one pointer to its state rather than copies of it.
    pub async fn run(mut self: Box<Self>, slot: Option<LeaseSlot>) {
        if let Err(error) = self.drive().await {
            debug!(%error, "lease stream ends with an error");
            self.events.essential(Err(error.into()));
        }
        drop(slot);
    }

    async fn drive(&mut self) -> Result<()> {
        let Some(spec) = Box::pin(self.first_request()).await? else {
            return Ok(());
        };
        let token = Token::random();
        let span = info_span!("lease", name = %spec.name, lease = token.lease_id());
        self.lease(&spec, &token).instrument(span).await
    }

    /// Waits for the first message, which must be a valid `acquire`.
    async fn first_request(&mut self) -> Result<Option<LeaseSpec>> {
        let message = tokio::select! {
            message = self.inbound.next() => message,
            () = self.events.closed() => return Ok(None),
            () = self.shutdown.cancelled() => return Err(Error::ShuttingDown),
        };
        match ClientMove::of(message) {
            ClientMove::HalfClosed => Ok(None),
            ClientMove::Broken(status) => Err(Error::Unreadable(status)),
            ClientMove::NoAction => Err(no_action()),
            ClientMove::Release => Err(Error::invalid(
                "release sent before acquire: this stream holds no lock to release",
            )),
            ClientMove::Acquire(request) => LeaseSpec::parse(
                request.name,
                request.ttl_ms,
                request.wait_ms,
                request.holder,
                request.fair,
            )
            .map(Some),
        }
    }

    /// Arguments by reference and locals scoped: an async fn's future keeps a slot for every
    /// by-value argument and every local that lives across an await, for the whole lease.
    async fn lease(&mut self, spec: &LeaseSpec, token: &Token) -> Result<()> {
        let (acquisition, mut lock) = {
            let keys = self.store.keys(&spec.name);
            // Boxed, like every Redis call below: a held lease should not carry the waiting
            // phase's state for its lifetime.
            let Some(acquisition) = Box::pin(self.wait_for_lock(spec, &keys, token)).await? else {
                return Ok(());
            };
            let lock = HeldLock::new(self.store.clone(), keys, token.clone());
            (acquisition, lock)
        };
        let mut clock = RenewalClock::new(spec.ttl, acquisition.sent_at);
        info!(fencing_token = acquisition.fencing_token, "acquired");
        let acquired = Event::Acquired(pb::Acquired {
            token: lock.token.secret().to_owned(),
            fencing_token: acquisition.fencing_token,
            ttl_ms: millis_u32(spec.ttl),
            valid_for_ms: millis_u32(clock.valid_for(Instant::now())),
        });
        if !self.events.essential(Ok(response(acquired))) {
            return Ok(()); // The client left; `lock` releases on drop.
        }
        self.hold(spec, &mut lock, &mut clock).await
    }

    /// Takes the lock, waiting as the request allows. `Ok(None)`: the client gave up first.
    async fn wait_for_lock(
        &mut self,
        spec: &LeaseSpec,
        keys: &LockKeys,
        token: &Token,
    ) -> Result<Option<acquire::Acquisition>> {
        let events = &self.events;
        let room = self.room.as_ref();
        let waiting = acquire::acquire(&self.store, keys, token, spec, room, |state| {
            events.progress(response(Event::Waiting(pb::Waiting {
                holder: state.holder.clone(),
                holder_ttl_remaining_ms: state.holder_ttl.map(millis_u32).unwrap_or(0),
                position: state.position,
            })))
        });
        tokio::select! {
            acquired = waiting => match acquired {
                Ok(acquisition) => Ok(Some(acquisition)),
                Err(error) => {
                    // An attempt that timed out may still land in Redis: do not strand it.
                    self.store.release_in_background(keys.clone(), token.clone());
                    Err(error)
                }
            },
            gave_up = Self::abandoned(&mut self.inbound, events, &self.shutdown) => {
                // The attempt in flight may have won just as the client left: do not strand it.
                self.store.release_in_background(keys.clone(), token.clone());
                if gave_up.is_ok() {
                    events.essential(Ok(response(Event::Released(pb::Released { was_held: false }))));
                }
                gave_up.map(|()| None)
            }
        }
    }

    /// While waiting: completes when the client gives up or the server stops.
    /// `Ok` means the client left or released; `Err` is the status to end the stream with.
    async fn abandoned(
        inbound: &mut S,
        events: &Events,
        shutdown: &CancellationToken,
    ) -> Result<()> {
        tokio::select! {
            message = inbound.next() => match ClientMove::of(message) {
                ClientMove::Acquire(_) => Err(second_acquire()),
                ClientMove::NoAction => Err(no_action()),
                ClientMove::Broken(status) => Err(Error::Unreadable(status)),
                ClientMove::Release | ClientMove::HalfClosed => Ok(()),
            },
            () = events.closed() => Ok(()),
            () = shutdown.cancelled() => Err(Error::ShuttingDown),
        }
    }

    /// Keeps the lock alive until the client lets go, the lock is lost, or the server stops.
    async fn hold(
        &mut self,
        spec: &LeaseSpec,
        lock: &mut HeldLock,
        clock: &mut RenewalClock,
    ) -> Result<()> {
        let mut renewals = RenewalTrigger::new(&self.store);
        loop {
            tokio::select! {
                biased;
                () = self.shutdown.cancelled() => {
                    let reason = match Box::pin(lock.release()).await {
                        Ok(_) => "server shutting down; the lock was released".to_owned(),
                        Err(error) => format!("server shutting down; release failed ({error}), the lock expires by its TTL"),
                    };
                    info!("released for shutdown");
                    self.lost(reason);
                    return Ok(());
                }
                message = self.inbound.next() => match ClientMove::of(message) {
                    ClientMove::Release | ClientMove::HalfClosed => {
                        let was_held = Box::pin(lock.release()).await?;
                        info!(was_held, "released");
                        self.events.essential(Ok(response(Event::Released(pb::Released { was_held }))));
                        return Ok(());
                    }
                    // A transport failure or an unreadable message: release (on drop) and say why,
                    // in case the client can still hear it.
                    ClientMove::Broken(status) => {
                        info!(code = ?status.code(), message = status.message(), "client stream broke; releasing");
                        return Err(Error::Unreadable(status));
                    }
                    ClientMove::Acquire(_) => return Err(second_acquire()),
                    ClientMove::NoAction => return Err(no_action()),
                },
                () = self.events.closed() => {
                    info!("client went away; releasing");
                    return Ok(());
                }
                due = renewals.due(clock) => {
                    if let Some(reason) = Box::pin(self.renew(spec, lock, clock)).await {
                        warn!(%reason, ?due, "lease lost");
                        self.lost(due.explain(reason));
                        return Ok(());
                    }
                }
            }
        }
    }

    /// One renewal, telling the client how long it is now valid. Returns the reason when the
    /// lease is lost.
    async fn renew(
        &self,
        spec: &LeaseSpec,
        lock: &HeldLock,
        clock: &mut RenewalClock,
    ) -> Option<String> {
        match lock.renew(spec.ttl, clock).await {
            Renewal::Confirmed { valid_for } => {
                self.events.progress(response(Event::Extended(pb::Extended {
                    ttl_ms: millis_u32(spec.ttl),
                    valid_for_ms: millis_u32(valid_for),
                })));
                None
            }
            Renewal::Retrying => None,
            Renewal::Lost(reason) => Some(reason),
        }
    }

    fn lost(&self, reason: String) {
        self.events
            .essential(Ok(response(Event::Lost(pb::Lost { reason }))));
    }
}
