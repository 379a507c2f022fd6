//! Holding a lock through the `Lease` stream, as a guard that knows when the lock is gone: the
//! lease's options, its messages as a `Kind` of the one held-stream core (`stream.rs`),
//! and the task that follows it for the guard.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, timeout_at};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use crate::held::{Belief, LeaseState, Loss, MaxHold};
use crate::pb::lease_request::Action;
use crate::pb::lease_response::Event;
use crate::pb::lock_service_client::LockServiceClient;
use crate::pb::{self, LeaseRequest, LeaseResponse, millis};
use crate::stream::{Heard, HeldStream, Kind, LAST_RETRY, Next, Opening};
use crate::{Client, ClientError, Transport};

/// Options of one lease; finish with [`LeaseBuilder::acquire`].
#[derive(Debug)]
pub struct LeaseBuilder {
    client: Client,
    name: String,
    more_names: Vec<String>,
    lock_delay: Duration,
    max_hold: Duration,
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
            more_names: Vec::new(),
            lock_delay: Duration::ZERO,
            max_hold: Duration::ZERO,
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

    /// Hold these names too, together with the first, all or none: the lease is acquired once
    /// every name is taken (waiting, with [`LeaseBuilder::wait`], while holding none of them),
    /// with one fencing token per name ([`LeaseGuard::fences`]), and lost as a whole when any
    /// is (the others then expire by their TTL, never released while this process may still
    /// believe in them). Two leases asking for overlapping names in any order cannot deadlock.
    /// Plain exclusive locks only; at most 32 names in all.
    ///
    /// ```no_run
    /// # async fn example(client: leasehold_client::Client) -> Result<(), leasehold_client::ClientError> {
    /// let both = client.lease("account-17").more_names(["account-42"]).acquire().await?;
    /// for (name, fencing_token) in both.fences() {
    ///     println!("{name}: fencing token {fencing_token}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn more_names<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.more_names.extend(names.into_iter().map(Into::into));
        self
    }

    /// Lock-delay (Chubby's; Consul's): if this lease is lost (it expired, was revoked, or its
    /// stream broke and its grace ran out), its names cannot be taken for this long after, so
    /// that a resource without fencing is not written by the next holder while this one may
    /// still be writing. A release frees them at once. Default: none; at most 1 hour.
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }

    /// A ceiling on the hold, from its acquisition: the server stops renewing the lease then
    /// and the guard is lost with [`crate::LostReason::MaxHold`] (never resumed). The guard's
    /// validity never reaches past it, counted on this process's clock from when the acquire was
    /// sent (or later, for a lease that waited). Default: none; at least the TTL, at most 7
    /// days.
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = max_hold;
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
            more_names: self.more_names,
            lock_delay_ms: millis(self.lock_delay),
            max_hold_ms: millis(self.max_hold),
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
        let mut on_waiting = |event: Event| {
            if let Event::Waiting(waiting) = event {
                on_waiting(&waiting);
            }
        };
        // A server that is unreachable or shutting down before the lease is taken: the attempt
        // moves to the next replica (a waiter there joins the line anew), within the wait.
        let deadline = Instant::now() + self.wait;
        let mut tries = client.replicas().len();
        let mut stream = loop {
            let mut attempt = acquire.clone();
            attempt.wait_ms = millis(deadline.saturating_duration_since(Instant::now()));
            match HeldStream::acquire(&client, Lease(attempt), &mut on_waiting).await {
                Err(Opening::Moved(_)) if tries > 1 => tries -= 1,
                Err(Opening::Moved(status) | Opening::Refused(status)) => return Err(status.into()),
                Err(Opening::Broken(message)) => return Err(ClientError::Protocol(message)),
                Ok(stream) => break stream,
            }
        };
        // A resume asks for the lease as first asked (its whole wait), by its token.
        stream.kind = Lease(acquire);
        let (Some(belief), Some(holding)) = (stream.belief(), stream.holding.as_ref()) else {
            return Err(ClientError::Protocol("acquired, but not held".into()));
        };
        let (token, fencing_token) = (holding.token.clone(), holding.fencing_token);
        let fences = fences_or_first(&stream.kind.0.name, fencing_token, &holding.fences);
        let (let_go, let_go_rx) = mpsc::channel(1);
        let outages = Arc::new(Mutex::new(Vec::new()));
        let watcher = Watcher {
            stream,
            outages: outages.clone(),
            let_go: let_go_rx,
            releasing: false,
            resumes: self.auto_resume && resume_grace > Duration::ZERO,
        };
        tokio::spawn(watcher.run());
        Ok(LeaseGuard {
            fencing_token,
            fences,
            token,
            let_go: Some(let_go),
            outages,
            belief,
        })
    }
}

/// The `Lease` stream's messages, for the held-stream core; holds the acquire it asks with.
struct Lease(pb::LeaseAcquire);

impl Kind for Lease {
    type Request = LeaseRequest;
    type Response = LeaseResponse;
    type Event = Event;
    const WHAT: &'static str = "lease";
    const STREAM: &'static str = "lease";
    const HELD: &'static str = "acquired";

    async fn call(
        transport: Transport,
        requests: ReceiverStream<LeaseRequest>,
    ) -> Result<tonic::Response<Streaming<LeaseResponse>>, Status> {
        LockServiceClient::new(transport).lease(requests).await
    }

    fn start(&self, resume_token: Option<&str>) -> LeaseRequest {
        let mut acquire = self.0.clone();
        if let Some(token) = resume_token {
            acquire.resume_token = token.to_owned();
        }
        LeaseRequest {
            action: Some(Action::Acquire(acquire)),
        }
    }

    fn name(&self) -> &str {
        &self.0.name
    }

    fn max_hold(&self) -> Option<MaxHold> {
        MaxHold::of(self.0.ttl_ms, self.0.max_hold_ms)
    }

    fn stop(&self) -> LeaseRequest {
        LeaseRequest {
            action: Some(Action::Release(pb::LeaseRelease {})),
        }
    }

    fn hear(&self, response: LeaseResponse) -> Heard<Event> {
        match response.event {
            Some(Event::Acquired(acquired)) => Heard::Held {
                token: acquired.token.clone(),
                fencing_token: acquired.fencing_token,
                fences: fences(&acquired.fences),
                valid_for_ms: acquired.valid_for_ms,
                valid_to_ms: acquired.valid_to_ms,
                event: Event::Acquired(acquired),
            },
            Some(Event::Extended(extended)) => Heard::Extended {
                valid_for_ms: extended.valid_for_ms,
                valid_to_ms: extended.valid_to_ms,
            },
            Some(Event::Lost(lost)) => Heard::Lost(Loss::told(lost)),
            Some(event @ Event::Waiting(_)) => Heard::Waiting(event),
            Some(event) => Heard::Other(event),
            None => Heard::Nothing,
        }
    }
}

/// Follows the server's events and the guard's wishes for one lease; ends its belief once.
struct Watcher {
    stream: HeldStream<Lease>,
    /// Every resume so far, shared with the guard.
    outages: Outages,
    /// `Some(())`: release now; closed: the guard was dropped (release too).
    let_go: mpsc::Receiver<()>,
    releasing: bool,
    /// Whether a broken stream is resumed (auto-resume on, with a grace).
    resumes: bool,
}

impl Watcher {
    async fn run(mut self) {
        let end = loop {
            let broke = tokio::select! {
                next = self.stream.next() => match next {
                    Next::Event(Event::Released(released)) => {
                        break LeaseState::Released { was_held: released.was_held };
                    }
                    Next::Event(_) => continue,
                    Next::Lost(reason) => break LeaseState::Lost(reason),
                    Next::Failed(status) => break LeaseState::Lost(format!("lease stream failed: {status}").into()),
                    Next::Broke(broke) => broke,
                },
                wish = self.let_go.recv(), if !self.releasing => {
                    self.releasing = true;
                    // Released or dropped: an explicit release (a bare half-close keeps a
                    // resumable lease for its grace, as a dead connection does), then the
                    // half-close once dropped.
                    self.stream.send_stop();
                    if wish.is_none() {
                        self.stream.half_close();
                    }
                    continue;
                }
            };
            if self.releasing {
                break self.release_by_token(&broke).await;
            }
            if !self.resumes {
                break LeaseState::Lost(broke.into());
            }
            let broke_at = Instant::now();
            let resumed = tokio::select! {
                resumed = self.stream.resume(broke.clone()) => resumed,
                _ = self.let_go.recv() => {
                    // Letting go while between streams: release by token.
                    self.releasing = true;
                    break self.release_by_token(&broke).await;
                }
            };
            match resumed {
                Ok(()) => {
                    let outage = Outage {
                        broke_at,
                        resumed_at: Instant::now(),
                    };
                    self.outages
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(outage);
                }
                Err(reason) => break LeaseState::Lost(reason.into()),
            }
        };
        if let Some(holding) = &self.stream.holding {
            holding.keeper.end(end);
        }
    }

    /// The stream broke while the guard was letting go: release by token on any replica.
    async fn release_by_token(&self, broke: &str) -> LeaseState {
        let Some(holding) = &self.stream.holding else {
            return LeaseState::Lost(broke.to_owned().into());
        };
        let valid_until = holding.keeper.valid_until();
        let acquire = &self.stream.kind.0;
        let mut names = vec![acquire.name.clone()];
        names.extend(acquire.more_names.iter().cloned());
        let released = timeout_at(
            valid_until.max(Instant::now() + LAST_RETRY),
            self.stream
                .client()
                .release_all(names, holding.token.clone()),
        )
        .await;
        match released {
            Ok(Ok(was_held)) => LeaseState::Released { was_held },
            Ok(Err(error)) => {
                LeaseState::Lost(format!("{broke}; release by token failed: {error}").into())
            }
            Err(_) => LeaseState::Lost(format!("{broke}; release by token timed out").into()),
        }
    }
}

/// The protocol's `fences` as (name, fencing token) pairs.
pub(crate) fn fences(fences: &[pb::NameFence]) -> Vec<(String, u64)> {
    fences
        .iter()
        .map(|fence| (fence.name.clone(), fence.fencing_token))
        .collect()
}

/// `fences`, or the one name's own pair from a server that predates them.
pub(crate) fn fences_or_first(
    name: &str,
    fencing_token: u64,
    fences: &[(String, u64)],
) -> Vec<(String, u64)> {
    match fences.is_empty() {
        true => vec![(name.to_owned(), fencing_token)],
        false => fences.to_vec(),
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

type Outages = Arc<Mutex<Vec<Outage>>>;

/// A held lock. Dropping it releases the lock (the stream half-closes).
#[derive(Debug)]
pub struct LeaseGuard {
    fencing_token: u64,
    fences: Vec<(String, u64)>,
    token: String,
    /// To the watcher: a message releases, dropping releases too.
    let_go: Option<mpsc::Sender<()>>,
    belief: Belief,
    outages: Outages,
}

impl LeaseGuard {
    /// The fencing token of this acquisition: pass it to the resource the lock protects.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// Each name's fencing token, in the order asked (the first name's is
    /// [`LeaseGuard::fencing_token`]): one pair for a lease on one name.
    pub fn fences(&self) -> &[(String, u64)] {
        &self.fences
    }

    /// The acquisition's secret (for the unary `Extend`/`Release` calls; never log it).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Completes with the reason once the lock is lost: the server said `Lost`, the stream broke
    /// and could not be resumed (or auto-resume is off), or the last confirmed validity ran out
    /// by this process's clock.
    pub async fn lost(&self) -> String {
        self.belief.lost().await
    }

    /// As [`LeaseGuard::lost`], with why typed: [`LostReason::Revoked`] when an operator
    /// revoked it, [`crate::LostReason::MaxHold`] when its max hold was reached.
    pub async fn loss(&self) -> Loss {
        self.belief.loss().await
    }

    /// Every time the lease's stream broke and the guard resumed it (on this or another
    /// server), oldest first: for a holder's own metrics of deploys and crashes.
    pub fn outages(&self) -> Vec<Outage> {
        self.outages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Until when the server last vouched for the lease, by this process's clock: the guard
    /// believes in it no longer than this without another confirmation (resumed or not).
    pub fn valid_until(&self) -> Instant {
        self.belief.valid_until()
    }

    /// Whether the lock is known to be lost already.
    pub fn is_lost(&self) -> bool {
        self.belief.is_lost()
    }

    /// Releases the lock and waits for the server to confirm. `Ok(false)`: the lock had already
    /// been lost.
    pub async fn release(mut self) -> Result<bool, ClientError> {
        if let Some(let_go) = self.let_go.take() {
            // A closed watcher means the lease already ended; the state below says how.
            let _ = let_go.send(()).await;
        }
        let end = self
            .belief
            .ended()
            .await
            .ok_or_else(|| ClientError::Protocol("lease watcher stopped".into()))?;
        Ok(matches!(end, LeaseState::Released { was_held: true }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_are_read_in_the_order_sent_and_default_to_the_first_name() {
        let sent = [("b", 12), ("a", 7)].map(|(name, fencing_token)| pb::NameFence {
            name: name.to_owned(),
            fencing_token,
        });
        let read = fences(&sent);
        assert_eq!(read, [("b".to_owned(), 12), ("a".to_owned(), 7)]);
        assert_eq!(fences_or_first("b", 12, &read), read);
        assert_eq!(fences_or_first("job", 3, &[]), [("job".to_owned(), 3)]);
    }
}
