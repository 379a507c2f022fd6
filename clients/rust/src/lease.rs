//! Holding a lock through the `Lease` stream, as a guard that knows when the lock is gone.

use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep_until, timeout_at};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status, Streaming};

use crate::client::moves_on;
use crate::pb::lease_request::Action;
use crate::pb::lease_response::Event;
use crate::pb::lock_service_client::LockServiceClient;
use crate::pb::{self, LeaseRequest, LeaseResponse, millis};
use crate::replicas::Replica;
use crate::{Client, ClientError};

/// Options of one lease; finish with [`LeaseBuilder::acquire`].
#[derive(Debug)]
pub struct LeaseBuilder {
    client: Client,
    name: String,
    ttl: Duration,
    wait: Duration,
    holder: String,
    fair: Option<bool>,
    limit: u32,
    shared: bool,
    resume_grace: Duration,
    resume_token: String,
    auto_resume: bool,
}

impl LeaseBuilder {
    pub(crate) fn new(client: Client, name: String) -> Self {
        LeaseBuilder {
            client,
            name,
            ttl: Duration::from_secs(30),
            wait: Duration::ZERO,
            holder: String::new(),
            fair: None,
            limit: 0,
            shared: false,
            resume_grace: Duration::ZERO,
            resume_token: String::new(),
            auto_resume: true,
        }
    }

    /// The lock's time to live in Redis (default 30 s): how long others wait if this process dies
    /// with its server.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long to wait for a taken lock (default: fail at once).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// A description of this holder shown to others.
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = holder.into();
        self
    }

    /// Wait in line (the default, `true`) or race for the lock whenever it frees (`false`).
    pub fn fair(mut self, fair: bool) -> Self {
        self.fair = Some(fair);
        self
    }

    /// Up to `limit` leases hold the name at once (a counting semaphore; default 1, a plain
    /// lock). Every holder of one name must ask for the same limit.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }

    /// Hold the name shared, with other shared leases (a reader); an exclusive lease (a writer)
    /// excludes them all.
    pub fn shared(mut self) -> Self {
        self.shared = true;
        self
    }

    /// Keep the lease this long (at most the TTL) after its stream breaks or its server shuts
    /// down, so that it can be resumed: by this guard on its own, or by
    /// [`LeaseBuilder::resume`] with [`LeaseGuard::token`]. Default: the TTL while
    /// [`LeaseBuilder::auto_resume`] is on, else released the moment the stream ends. A shorter
    /// grace frees a crashed holder's lock sooner, and costs renewals every third of it.
    pub fn resume_grace(mut self, grace: Duration) -> Self {
        self.resume_grace = grace;
        self
    }

    /// Whether the guard resumes the lease on its own, on this or another server, when its
    /// stream breaks (the server was stopped or crashed, the connection failed). On by default:
    /// the guard then reports `lost` only if it could not resume within the validity last
    /// confirmed. Off: a broken stream is `lost` at once, as before, and the lease is kept only
    /// for an explicit [`LeaseBuilder::resume_grace`].
    pub fn auto_resume(mut self, on: bool) -> Self {
        self.auto_resume = on;
        self
    }

    /// Reattach to the lease `token` holds (kept after its stream broke) instead of taking a
    /// new one: same token, fencing token and place. `NOT_FOUND` if it is gone.
    pub fn resume(mut self, token: impl Into<String>) -> Self {
        self.resume_token = token.into();
        self
    }

    /// Takes the lock, waiting as configured. A taken lock is `ClientError::Status` with `ABORTED`.
    pub async fn acquire(self) -> Result<LeaseGuard, ClientError> {
        self.acquire_with_progress(|_| {}).await
    }

    /// As [`LeaseBuilder::acquire`], telling `on_waiting` about each `Waiting` event (the holder
    /// and the place in line) while the lock is taken.
    pub async fn acquire_with_progress(
        self,
        mut on_waiting: impl FnMut(&pb::Waiting),
    ) -> Result<LeaseGuard, ClientError> {
        let resume_grace = match (self.auto_resume, self.resume_grace) {
            (true, grace) if grace.is_zero() => self.ttl,
            (_, grace) => grace,
        };
        let acquire = pb::LeaseAcquire {
            name: self.name,
            ttl_ms: millis(self.ttl),
            wait_ms: millis(self.wait),
            holder: self.holder,
            fair: self.fair,
            limit: self.limit,
            mode: if self.shared {
                pb::LeaseMode::Shared
            } else {
                pb::LeaseMode::Exclusive
            }
            .into(),
            resume_token: self.resume_token,
            resume_grace_ms: millis(resume_grace),
        };
        let client = self.client;
        // A server that is unreachable or shutting down before the lease is taken: the attempt
        // moves to the next replica (a waiter there joins the line anew), within the wait.
        let deadline = Instant::now() + self.wait;
        let mut tries = client.replicas().len();
        let Opened {
            opened,
            valid_until,
            requests,
            events,
            acquired,
            replica,
        } = loop {
            let mut attempt = acquire.clone();
            attempt.wait_ms = millis(deadline.saturating_duration_since(Instant::now()));
            match open(&client, attempt, &mut on_waiting).await {
                Err(Opening::Moved(_)) if tries > 1 => tries -= 1,
                Err(Opening::Moved(status) | Opening::Refused(status)) => return Err(status.into()),
                Err(Opening::Broken(message)) => return Err(ClientError::Protocol(message)),
                Ok(opened) => break opened,
            }
        };
        let (state_tx, state) = watch::channel(LeaseState::Held);
        let (let_go, let_go_rx) = mpsc::channel(1);
        let resumes = (self.auto_resume && resume_grace > Duration::ZERO).then(|| {
            let mut acquire = acquire.clone();
            acquire.resume_token = acquired.token.clone();
            Resumes {
                client: client.clone(),
                acquire,
                fencing_token: acquired.fencing_token,
            }
        });
        let outages = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (confirmed, valid) = watch::channel(valid_until);
        let watcher = Watcher {
            replica,
            outages: outages.clone(),
            confirmed,
            requests: Some(requests),
            opened,
            valid_until,
            state: state_tx,
            let_go: let_go_rx,
            releasing: false,
            resumes,
            name: acquire.name.clone(),
            token: acquired.token.clone(),
            client,
        };
        // Waiting events no longer matter; the watcher reads the rest.
        tokio::spawn(watcher.run(events));
        Ok(LeaseGuard {
            fencing_token: acquired.fencing_token,
            token: acquired.token,
            let_go: Some(let_go),
            outages,
            valid,
            state,
        })
    }
}

/// A stream that got to `acquired`, and the replica it runs on.
struct Opened {
    /// When the stream was opened: what `valid_to_ms` counts from.
    opened: Instant,
    /// Until when `acquired` vouches for the lease (see [`vouched_until`]).
    valid_until: Instant,
    requests: mpsc::Sender<LeaseRequest>,
    events: Streaming<LeaseResponse>,
    acquired: pb::Acquired,
    replica: Replica,
}

/// Why a stream did not get to `acquired`.
enum Opening {
    /// The server was unreachable or going away: another replica may do.
    Moved(Status),
    /// The server's answer (the lock is taken, bad input, ...).
    Refused(Status),
    /// The server broke the protocol.
    Broken(String),
}

/// Opens a `Lease` stream on the replica in use and reads up to `acquired`.
async fn open(
    client: &Client,
    acquire: pb::LeaseAcquire,
    on_waiting: &mut impl FnMut(&pb::Waiting),
) -> Result<Opened, Opening> {
    let (requests, outbox) = mpsc::channel(2);
    let request = LeaseRequest {
        action: Some(Action::Acquire(acquire)),
    };
    requests
        .send(request)
        .await
        .map_err(|_| Opening::Broken("request stream closed".into()))?;
    let replica = client.replicas().current();
    let sort = |status: Status| {
        if moves_on(&status) {
            client.replicas().failed(&replica);
            Opening::Moved(status)
        } else {
            Opening::Refused(status)
        }
    };
    let opened = Instant::now();
    let mut events = LockServiceClient::new(replica.transport.clone())
        .lease(ReceiverStream::new(outbox))
        .await
        .map_err(sort)?
        .into_inner();
    loop {
        match events.message().await.map_err(sort)? {
            Some(LeaseResponse {
                event: Some(Event::Acquired(acquired)),
            }) => {
                let valid_until =
                    vouched_until(opened, acquired.valid_for_ms, acquired.valid_to_ms);
                if valid_until <= Instant::now() {
                    // Held up on its way (a healed partition): the lease may be someone
                    // else's by now. Dropping the stream lets go of it (or keeps it only for
                    // its grace).
                    return Err(Opening::Broken(
                        "acquired, but the news arrived after its validity had run out".into(),
                    ));
                }
                return Ok(Opened {
                    opened,
                    valid_until,
                    requests,
                    events,
                    acquired,
                    replica,
                });
            }
            Some(LeaseResponse {
                event: Some(Event::Waiting(waiting)),
            }) => on_waiting(&waiting),
            other => {
                return Err(Opening::Broken(format!("expected acquired, got {other:?}")));
            }
        }
    }
}

/// Until when a message vouches for a lease (or a leadership): `valid_for_ms` from its receipt,
/// and never past `valid_to_ms` after the client opened the stream (the server counts it from
/// when the stream reached it, which is later), which still holds when the message was held up
/// on its way: a healed partition delivers old messages late, and one read as fresh would keep
/// its client believing past the key. (`valid_to_ms` 0: a server that predates it.)
pub(crate) fn vouched_until(opened: Instant, valid_for_ms: u32, valid_to_ms: u64) -> Instant {
    let from_receipt = Instant::now() + Duration::from_millis(valid_for_ms.into());
    if valid_to_ms == 0 {
        return from_receipt;
    }
    from_receipt.min(opened + Duration::from_millis(valid_to_ms))
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LeaseState {
    Held,
    Lost(String),
    Released { was_held: bool },
}

/// Waits for `state` to say the lease is lost, and says why; also when its watcher stopped
/// without a verdict (nothing vouches for the lease any more).
pub(crate) async fn lost_reason(state: &watch::Receiver<LeaseState>) -> String {
    let mut state = state.clone();
    let reason = match state.wait_for(|s| matches!(s, LeaseState::Lost(_))).await {
        Ok(lost) => match &*lost {
            LeaseState::Lost(reason) => Some(reason.clone()),
            _ => None,
        },
        Err(_) => None,
    };
    reason.unwrap_or_else(|| "lease watcher stopped".into())
}

/// How a lease resumes on its own: the request that takes it back, and what it must be.
struct Resumes {
    client: Client,
    /// The original acquire, with the lease's token as `resume_token`.
    acquire: pb::LeaseAcquire,
    fencing_token: u64,
}

/// Whether a broken stream may be resumed: the transport failed or the server went away, rather
/// than the server saying no.
pub(crate) fn resumable(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable
            | Code::Unknown
            | Code::Internal
            | Code::Cancelled
            | Code::DeadlineExceeded
    )
}

/// Longest one resume attempt may take before the next replica is tried.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);
/// Backoff between resume attempts: short, since the lease's validity is running.
const FIRST_RETRY: Duration = Duration::from_millis(20);
const LAST_RETRY: Duration = Duration::from_millis(500);

/// Follows the server's events and the guard's wishes; decides on its own clock when the lease
/// can no longer be trusted; resumes it elsewhere when its stream breaks.
struct Watcher {
    /// The stream's request side; dropping it half-closes, which releases.
    requests: Option<mpsc::Sender<LeaseRequest>>,
    /// When the current stream was opened (see [`vouched_until`]).
    opened: Instant,
    valid_until: Instant,
    state: watch::Sender<LeaseState>,
    /// Every resume so far, shared with the guard.
    outages: Outages,
    /// `valid_until`, as the guard reads it.
    confirmed: watch::Sender<Instant>,
    /// Where the stream runs: a break that says the server is going away moves the client on.
    replica: Replica,
    /// `Some(())`: release now; closed: the guard was dropped (release too).
    let_go: mpsc::Receiver<()>,
    releasing: bool,
    /// `None`: a broken stream is the end (auto-resume off, or no grace).
    resumes: Option<Resumes>,
    name: String,
    token: String,
    client: Client,
}

impl Watcher {
    async fn run(mut self, mut events: Streaming<LeaseResponse>) {
        let end = loop {
            let broke = tokio::select! {
                message = events.next() => match message {
                    Some(Ok(LeaseResponse { event: Some(Event::Extended(extended)) })) => {
                        self.confirm(extended.valid_for_ms, extended.valid_to_ms);
                        continue;
                    }
                    Some(Ok(LeaseResponse { event: Some(Event::Lost(lost)) })) => break LeaseState::Lost(lost.reason),
                    Some(Ok(LeaseResponse { event: Some(Event::Released(released)) })) => {
                        break LeaseState::Released { was_held: released.was_held };
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(status)) if resumable(&status) => {
                        // Going away (draining, unreachable): do not try it first.
                        if moves_on(&status) {
                            self.client.replicas().failed(&self.replica);
                        }
                        format!("lease stream failed: {status}")
                    }
                    Some(Err(status)) => break LeaseState::Lost(format!("lease stream failed: {status}")),
                    None => "the server ended the lease stream".to_owned(),
                },
                () = sleep_until(self.valid_until) => {
                    break LeaseState::Lost("no renewal confirmed before the lease ran out (server silent)".into());
                }
                wish = self.let_go.recv(), if !self.releasing => {
                    self.releasing = true;
                    // Released or dropped: an explicit release (a bare half-close keeps a
                    // resumable lease for its grace, as a dead connection does), then the
                    // half-close once dropped.
                    if let Some(requests) = &self.requests {
                        let release = LeaseRequest { action: Some(Action::Release(pb::LeaseRelease {})) };
                        // A closed stream means it already ended; its events say how.
                        let _ = requests.try_send(release);
                    }
                    if wish.is_none() {
                        self.requests = None;
                    }
                    continue;
                }
            };
            if self.releasing {
                break self.release_by_token(&broke).await;
            }
            if self.resumes.is_none() {
                break LeaseState::Lost(broke);
            }
            match self.resume(broke).await {
                Ok(resumed) => events = resumed,
                Err(end) => break end,
            }
        };
        self.state.send_replace(end);
    }

    /// The server vouched for the lease (see [`vouched_until`]).
    fn confirm(&mut self, valid_for_ms: u32, valid_to_ms: u64) {
        self.vouched(vouched_until(self.opened, valid_for_ms, valid_to_ms));
    }

    /// The lease is now vouched for until `valid_until`, as the guard reads it too.
    fn vouched(&mut self, valid_until: Instant) {
        self.valid_until = valid_until;
        self.confirmed.send_replace(valid_until);
    }

    /// The stream broke while the guard was letting go: release by token on any replica.
    async fn release_by_token(&self, broke: &str) -> LeaseState {
        let released = timeout_at(
            self.valid_until.max(Instant::now() + LAST_RETRY),
            self.client.release(self.name.clone(), self.token.clone()),
        )
        .await;
        match released {
            Ok(Ok(was_held)) => LeaseState::Released { was_held },
            Ok(Err(error)) => {
                LeaseState::Lost(format!("{broke}; release by token failed: {error}"))
            }
            Err(_) => LeaseState::Lost(format!("{broke}; release by token timed out")),
        }
    }

    /// Takes the lease back on a new stream (any replica) before its validity ends.
    async fn resume(&mut self, broke: String) -> Result<Streaming<LeaseResponse>, LeaseState> {
        let Some(Resumes {
            client,
            acquire,
            fencing_token,
        }) = self.resumes.as_ref().map(|r| Resumes {
            client: r.client.clone(),
            acquire: r.acquire.clone(),
            fencing_token: r.fencing_token,
        })
        else {
            return Err(LeaseState::Lost(broke));
        };
        let mut no_waiting = |_: &pb::Waiting| {};
        tracing::info!(lock = %self.name, reason = %broke, "lease stream broke; resuming");
        let broke_at = Instant::now();
        let mut last = broke;
        let mut backoff = FIRST_RETRY;
        loop {
            if Instant::now() >= self.valid_until {
                return Err(LeaseState::Lost(format!(
                    "could not resume before the lease's validity ran out: {last}"
                )));
            }
            let attempt = open(&client, acquire.clone(), &mut no_waiting);
            // One attempt may not spend the whole validity on a replica that hangs.
            let trying = client.replicas().current();
            let attempt_ends = (Instant::now() + ATTEMPT_TIMEOUT).min(self.valid_until);
            let outcome = tokio::select! {
                outcome = timeout_at(attempt_ends, attempt) => outcome,
                wish = self.let_go.recv() => {
                    // Letting go while between streams: release by token.
                    let _ = wish;
                    self.releasing = true;
                    return Err(self.release_by_token(&last).await);
                }
            };
            match outcome {
                Ok(Ok(Opened {
                    opened,
                    valid_until,
                    requests,
                    events,
                    acquired,
                    replica,
                })) => {
                    if acquired.fencing_token != fencing_token {
                        return Err(LeaseState::Lost(format!(
                            "resumed with fencing token {}, not {fencing_token}",
                            acquired.fencing_token
                        )));
                    }
                    self.opened = opened;
                    self.vouched(valid_until);
                    self.requests = Some(requests);
                    self.replica = replica;
                    tracing::info!(lock = %self.name, "lease resumed");
                    let outage = Outage {
                        broke_at,
                        resumed_at: Instant::now(),
                    };
                    self.outages
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(outage);
                    return Ok(events);
                }
                Ok(Err(Opening::Moved(status))) => last = status.to_string(),
                Ok(Err(Opening::Refused(status))) if resumable(&status) => {
                    last = status.to_string();
                }
                Ok(Err(Opening::Refused(status))) => {
                    return Err(LeaseState::Lost(format!(
                        "could not resume the lease: {status}"
                    )));
                }
                Ok(Err(Opening::Broken(message))) => {
                    return Err(LeaseState::Lost(format!(
                        "could not resume the lease: {message}"
                    )));
                }
                Err(_) => {
                    client.replicas().failed(&trying);
                    last = "no answer from the server within the attempt's time".into();
                    continue;
                }
            }
            let jitter = rand::random_range(0..=backoff.as_millis() as u64 / 2);
            let pause = backoff / 2 + Duration::from_millis(jitter);
            sleep_until((Instant::now() + pause).min(self.valid_until)).await;
            backoff = (backoff * 2).min(LAST_RETRY);
        }
    }
}

/// One time a held lease's stream broke and the guard resumed it: from when the break was
/// noticed to when the lease was held again on a new stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outage {
    pub broke_at: Instant,
    pub resumed_at: Instant,
}

impl Outage {
    /// How long the lease was between streams.
    pub fn duration(&self) -> Duration {
        self.resumed_at.saturating_duration_since(self.broke_at)
    }
}

type Outages = std::sync::Arc<std::sync::Mutex<Vec<Outage>>>;

/// A held lock. Dropping it releases the lock (the stream half-closes).
#[derive(Debug)]
pub struct LeaseGuard {
    fencing_token: u64,
    token: String,
    /// To the watcher: a message releases, dropping releases too.
    let_go: Option<mpsc::Sender<()>>,
    state: watch::Receiver<LeaseState>,
    outages: Outages,
    valid: watch::Receiver<Instant>,
}

impl LeaseGuard {
    /// The fencing token of this acquisition: pass it to the resource the lock protects.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The acquisition's secret (for the unary `Extend`/`Release` calls; never log it).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Completes with the reason once the lock is lost: the server said `Lost`, the stream broke
    /// and could not be resumed (or auto-resume is off), or the last confirmed validity ran out
    /// by this process's clock.
    pub async fn lost(&self) -> String {
        lost_reason(&self.state).await
    }

    /// Every time the lease's stream broke and the guard resumed it (on this or another
    /// server), oldest first: for a holder's own metrics of deploys and crashes.
    pub fn outages(&self) -> Vec<Outage> {
        self.outages
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Until when the server last vouched for the lease, by this process's clock: the guard
    /// believes in it no longer than this without another confirmation (resumed or not).
    pub fn valid_until(&self) -> Instant {
        *self.valid.borrow()
    }

    /// Whether the lock is known to be lost already.
    pub fn is_lost(&self) -> bool {
        matches!(&*self.state.borrow(), LeaseState::Lost(_))
    }

    /// Releases the lock and waits for the server to confirm. `Ok(false)`: the lock had already
    /// been lost.
    pub async fn release(mut self) -> Result<bool, ClientError> {
        if let Some(let_go) = self.let_go.take() {
            // A closed watcher means the lease already ended; the state below says how.
            let _ = let_go.send(()).await;
        }
        let mut state = self.state.clone();
        let end = state
            .wait_for(|s| !matches!(s, LeaseState::Held))
            .await
            .map(|s| s.clone())
            .map_err(|_| ClientError::Protocol("lease watcher stopped".into()))?;
        Ok(matches!(end, LeaseState::Released { was_held: true }))
    }
}
