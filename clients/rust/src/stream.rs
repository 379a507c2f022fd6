//! The one held-stream core that a lock's lease ([`crate::lease`]) and a leadership
//! ([`crate::election`]) run on, as Node's `held.ts` is: a stream that holds it, renewals that
//! move its validity, this process's clock that ends the belief when they stop, and resumption
//! by its token on the next replica when the stream breaks, before that validity runs out.
//!
//! A [`Kind`] says what the stream's messages are and mean; [`HeldStream`] does the rest. The
//! caller asks for the [`HeldStream::next`] thing worth its attention and decides what a broken
//! stream means to it (resume, release by token, or give up).

use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until, timeout_at};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use crate::client::moves_on;
use crate::held::{Belief, Keeper, Loss, MaxHold, resumable, vouched_until};
use crate::replicas::Replica;
use crate::{Client, Transport};

/// Longest one resume attempt may take before the next replica is tried.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);
/// Backoff between resume attempts: short, since the validity is running.
const FIRST_RETRY: Duration = Duration::from_millis(20);
pub(crate) const LAST_RETRY: Duration = Duration::from_millis(500);

/// One kind of held stream: its messages, and what they mean.
pub(crate) trait Kind: Send + 'static {
    type Request: Send + 'static;
    type Response: Send + 'static;
    /// What the holder is told besides renewals (waiting, acquired, elected, proclaimed, ...).
    type Event;
    /// What messages call the held thing: "lease", "leadership".
    const WHAT: &'static str;
    /// What messages call its stream: "lease", "campaign".
    const STREAM: &'static str;
    /// What the server says once it is held: "acquired", "elected".
    const HELD: &'static str;

    /// Opens the stream on `transport`.
    fn call(
        transport: Transport,
        requests: ReceiverStream<Self::Request>,
    ) -> impl Future<Output = Result<tonic::Response<Streaming<Self::Response>>, Status>> + Send;
    /// The stream's first request: a new hold, or (`resume_token`) a hold taken back.
    fn start(&self, resume_token: Option<&str>) -> Self::Request;
    /// The lock's or the election's name, for logs.
    fn name(&self) -> &str;
    /// What lets it go on its stream (release, resign).
    fn stop(&self) -> Self::Request;
    /// What a message says.
    fn hear(&self, response: Self::Response) -> Heard<Self::Event>;
    /// Whether renewals are confirmed (`extended`), so that this process's clock ends the belief
    /// when they stop; without (a campaign with no resume grace) the server alone watches it.
    fn clocked(&self) -> bool {
        true
    }
    /// The max hold it was asked with, if any: its validity never reaches past it.
    fn max_hold(&self) -> Option<MaxHold> {
        None
    }
}

/// What a message says.
pub(crate) enum Heard<E> {
    /// It is held (acquired, elected).
    Held {
        token: String,
        fencing_token: u64,
        /// Each name's fencing token (a lease on several names), in the order asked.
        fences: Vec<(String, u64)>,
        valid_for_ms: u32,
        valid_to_ms: u64,
        event: E,
    },
    /// A renewal: the server vouches again.
    Extended {
        valid_for_ms: u32,
        valid_to_ms: u64,
    },
    /// Before it is held: in line.
    Waiting(E),
    Lost(Loss),
    /// Anything else for the holder (released, resigned, proclaimed).
    Other(E),
    /// A message without an event.
    Nothing,
}

/// What [`HeldStream::next`] found.
pub(crate) enum Next<E> {
    /// An event for the holder (its first `Held` included).
    Event(E),
    /// Lost: the server said so, the validity ran out by this process's clock, or the news that
    /// it was held came too late to believe.
    Lost(Loss),
    /// The stream broke (the transport failed, the server went away): it may be resumed.
    Broke(String),
    /// The server answered with an error status that no resume mends.
    Failed(Status),
}

/// Why a stream did not get to its `Held`.
pub(crate) enum Opening {
    /// The server was unreachable or going away: another replica may do.
    Moved(Status),
    /// The server's answer (the lock is taken, bad input, ...).
    Refused(Status),
    /// The server broke the protocol.
    Broken(String),
}

/// One stream, on one replica.
pub(crate) struct Line<K: Kind> {
    /// The request side; `None` once half-closed.
    pub(crate) requests: Option<mpsc::Sender<K::Request>>,
    /// `None` once taken (a dropped candidate reads it to its end).
    pub(crate) responses: Option<Streaming<K::Response>>,
    replica: Replica,
    /// When the stream was opened: what `valid_to_ms` counts from.
    opened: Instant,
}

/// It is held: its secret, its fencing tokens, and until when it is believed.
pub(crate) struct Holding {
    pub(crate) token: String,
    pub(crate) fencing_token: u64,
    /// Each name's fencing token, in the order asked (one pair for a single name).
    pub(crate) fences: Vec<(String, u64)>,
    pub(crate) keeper: Keeper,
}

/// What opening a stream found once it is held.
pub(crate) struct Attached {
    token: String,
    fencing_token: u64,
    fences: Vec<(String, u64)>,
    valid_until: Instant,
    /// The max hold's end, by this process's clock.
    ceiling: Option<Instant>,
}

/// A held (or to be held) thing on its stream, and what resumes it.
pub(crate) struct HeldStream<K: Kind> {
    pub(crate) kind: K,
    client: Client,
    pub(crate) line: Line<K>,
    /// `None` until held.
    pub(crate) holding: Option<Holding>,
    /// Its holder's side, made when it was first held, until [`HeldStream::belief`] takes it.
    belief: Option<Belief>,
}

impl<K: Kind> Line<K> {
    /// Opens a stream on the replica in use with `first`; a replica that is unreachable or
    /// going away is left for the next.
    async fn open(client: &Client, first: K::Request) -> Result<Self, Status> {
        let (requests, outbox) = mpsc::channel(4);
        // Room for it: the channel is new.
        let _ = requests.try_send(first);
        let replica = client.replicas().current();
        let opened = Instant::now();
        match K::call(replica.transport.clone(), ReceiverStream::new(outbox)).await {
            Ok(responses) => Ok(Line {
                requests: Some(requests),
                responses: Some(responses.into_inner()),
                replica,
                opened,
            }),
            Err(status) => {
                if moves_on(&status) {
                    client.replicas().failed(&replica);
                }
                Err(status)
            }
        }
    }
}

impl<K: Kind> HeldStream<K> {
    /// Opens its stream and returns at once (a candidate waits in line on it).
    pub(crate) async fn start(client: &Client, kind: K) -> Result<Self, Status> {
        let line = Line::open(client, kind.start(None)).await?;
        Ok(HeldStream {
            kind,
            client: client.clone(),
            line,
            holding: None,
            belief: None,
        })
    }

    /// Opens its stream and reads up to `Held`, telling `on_waiting` about each `Waiting`.
    pub(crate) async fn acquire(
        client: &Client,
        kind: K,
        on_waiting: &mut impl FnMut(K::Event),
    ) -> Result<Self, Opening> {
        let first = kind.start(None);
        let (line, attached) = attach(client, &kind, first, on_waiting).await?;
        let mut stream = HeldStream {
            kind,
            client: client.clone(),
            line,
            holding: None,
            belief: None,
        };
        stream.hold(attached);
        Ok(stream)
    }

    fn hold(&mut self, attached: Attached) {
        let (keeper, belief) = Keeper::new(attached.valid_until, attached.ceiling);
        self.holding = Some(Holding {
            token: attached.token,
            fencing_token: attached.fencing_token,
            fences: attached.fences,
            keeper,
        });
        self.belief = Some(belief);
    }

    /// The holder's side of the belief, once held (once).
    pub(crate) fn belief(&mut self) -> Option<Belief> {
        self.belief.take()
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// Until when the server last vouched for it (`None` before it is held).
    pub(crate) fn valid_until(&self) -> Option<Instant> {
        self.holding.as_ref().map(|h| h.keeper.valid_until())
    }

    /// Sends `request` on the stream, waiting for room; `false` if the stream is closed.
    pub(crate) async fn send(&self, request: K::Request) -> bool {
        match &self.line.requests {
            Some(requests) => requests.send(request).await.is_ok(),
            None => false,
        }
    }

    /// Asks to let it go on its stream, without waiting (a closed stream already ended).
    pub(crate) fn send_stop(&self) {
        if let Some(requests) = &self.line.requests {
            let _ = requests.try_send(self.kind.stop());
        }
    }

    /// Half-closes the stream.
    pub(crate) fn half_close(&mut self) {
        self.line.requests = None;
    }

    /// The next thing worth the holder's attention: renewals are absorbed, and the validity
    /// last confirmed ends the belief by this process's clock. Cancel-safe: nothing is lost
    /// when it is dropped between two messages.
    pub(crate) async fn next(&mut self) -> Next<K::Event> {
        loop {
            let believed = match &self.holding {
                Some(holding) if self.kind.clocked() => Some(holding.keeper.valid_until()),
                _ => None,
            };
            let Some(responses) = &mut self.line.responses else {
                return Next::Broke(format!("the {} stream was closed", K::STREAM));
            };
            let message = match believed {
                Some(valid_until) => tokio::select! {
                    message = responses.message() => message,
                    () = sleep_until(valid_until) => {
                        let silent = format!(
                            "no renewal confirmed before the {} ran out (server silent)",
                            K::WHAT
                        );
                        return Next::Lost(match &self.holding {
                            Some(holding) => holding.keeper.ran_out(silent),
                            None => Loss::from(silent),
                        });
                    }
                },
                None => responses.message().await,
            };
            let response = match message {
                Ok(Some(response)) => response,
                Err(status) if resumable(&status) => {
                    // Going away (draining, unreachable): do not try it first.
                    if moves_on(&status) {
                        self.client.replicas().failed(&self.line.replica);
                    }
                    return Next::Broke(format!("{} stream failed: {status}", K::STREAM));
                }
                Err(status) => return Next::Failed(status),
                Ok(None) => {
                    return Next::Broke(format!("the server ended the {} stream", K::STREAM));
                }
            };
            match self.kind.hear(response) {
                Heard::Extended {
                    valid_for_ms,
                    valid_to_ms,
                } => {
                    let until = vouched_until(self.line.opened, valid_for_ms, valid_to_ms);
                    if let Some(holding) = &mut self.holding {
                        holding.keeper.vouch(until);
                    }
                }
                Heard::Held {
                    token,
                    fencing_token,
                    fences,
                    valid_for_ms,
                    valid_to_ms,
                    event,
                } => {
                    let until = vouched_until(self.line.opened, valid_for_ms, valid_to_ms);
                    if until <= Instant::now() {
                        // Held up on its way (a healed partition): another may hold it by now.
                        return Next::Lost(late::<K>().into());
                    }
                    match &mut self.holding {
                        Some(holding) => holding.keeper.vouch(until),
                        None => {
                            let ceiling = self.kind.max_hold();
                            self.hold(Attached {
                                token,
                                fencing_token,
                                fences,
                                valid_until: until,
                                ceiling: ceiling.map(|c| {
                                    c.ceiling(self.line.opened, self.line.opened, valid_to_ms)
                                }),
                            });
                        }
                    }
                    return Next::Event(event);
                }
                Heard::Lost(reason) => return Next::Lost(reason),
                Heard::Waiting(event) | Heard::Other(event) => return Next::Event(event),
                Heard::Nothing => {}
            }
        }
    }

    /// Takes it back by its token on a new stream (any replica) before its validity runs out;
    /// the reason it is lost if it cannot. Cancel-safe between attempts: a dropped attempt's
    /// stream is cancelled, which leaves the hold to its grace.
    pub(crate) async fn resume(&mut self, broke: String) -> Result<(), String> {
        let Some(holding) = &self.holding else {
            return Err(broke);
        };
        let (token, fencing_token) = (holding.token.clone(), holding.fencing_token);
        tracing::info!(name = %self.kind.name(), stream = K::STREAM, reason = %broke, "held stream broke; resuming");
        let mut last = broke;
        let mut backoff = FIRST_RETRY;
        let mut no_waiting = |_: K::Event| {};
        loop {
            let valid_until = self.valid_until().unwrap_or_else(Instant::now);
            if Instant::now() >= valid_until {
                return Err(format!(
                    "could not resume before the {}'s validity ran out: {last}",
                    K::WHAT
                ));
            }
            // One attempt may not spend the whole validity on a replica that hangs.
            let trying = self.client.replicas().current();
            let attempt_ends = (Instant::now() + ATTEMPT_TIMEOUT).min(valid_until);
            let first = self.kind.start(Some(&token));
            let attempt = attach(&self.client, &self.kind, first, &mut no_waiting);
            match timeout_at(attempt_ends, attempt).await {
                Ok(Ok((line, resumed))) => {
                    let resumed_fencing = resumed.fencing_token;
                    if resumed_fencing != fencing_token {
                        return Err(format!(
                            "resumed with fencing token {resumed_fencing}, not {fencing_token}"
                        ));
                    }
                    self.line = line;
                    // The max hold counts from the first acquisition: its ceiling stays.
                    if let Some(holding) = &mut self.holding {
                        holding.keeper.vouch(resumed.valid_until);
                    }
                    tracing::info!(name = %self.kind.name(), stream = K::STREAM, "held stream resumed");
                    return Ok(());
                }
                Ok(Err(Opening::Moved(status))) => last = status.to_string(),
                Ok(Err(Opening::Refused(status))) if resumable(&status) => {
                    last = status.to_string();
                }
                Ok(Err(Opening::Refused(status))) => {
                    return Err(format!("could not resume the {}: {status}", K::WHAT));
                }
                Ok(Err(Opening::Broken(message))) => {
                    return Err(format!("could not resume the {}: {message}", K::WHAT));
                }
                Err(_) => {
                    self.client.replicas().failed(&trying);
                    last = "no answer from the server within the attempt's time".into();
                    continue;
                }
            }
            let jitter = rand::random_range(0..=backoff.as_millis() as u64 / 2);
            let pause = backoff / 2 + Duration::from_millis(jitter);
            sleep_until((Instant::now() + pause).min(valid_until)).await;
            backoff = (backoff * 2).min(LAST_RETRY);
        }
    }
}

/// The reason a hold heard of too late is not believed.
fn late<K: Kind>() -> String {
    format!(
        "{}, but the news arrived after its validity had run out",
        K::HELD
    )
}

/// Opens a stream with `first` and reads up to `Held`: the stream, and the hold's token,
/// fencing tokens and validity.
async fn attach<K: Kind>(
    client: &Client,
    kind: &K,
    first: K::Request,
    on_waiting: &mut impl FnMut(K::Event),
) -> Result<(Line<K>, Attached), Opening> {
    let sort = |status: Status| {
        if moves_on(&status) {
            Opening::Moved(status)
        } else {
            Opening::Refused(status)
        }
    };
    let mut line = Line::open(client, first).await.map_err(sort)?;
    let Some(responses) = &mut line.responses else {
        return Err(Opening::Broken("no response stream".into()));
    };
    loop {
        let message = match responses.message().await {
            Ok(message) => message,
            Err(status) => {
                if moves_on(&status) {
                    client.replicas().failed(&line.replica);
                }
                return Err(sort(status));
            }
        };
        let Some(response) = message else {
            return Err(Opening::Broken(format!(
                "expected {}, the stream ended",
                K::HELD
            )));
        };
        match kind.hear(response) {
            Heard::Held {
                token,
                fencing_token,
                fences,
                valid_for_ms,
                valid_to_ms,
                ..
            } => {
                let valid_until = vouched_until(line.opened, valid_for_ms, valid_to_ms);
                if valid_until <= Instant::now() {
                    // Held up on its way (a healed partition): it may be someone else's by
                    // now. Dropping the stream lets go of it (or keeps it only for its grace).
                    return Err(Opening::Broken(late::<K>()));
                }
                let ceiling = kind
                    .max_hold()
                    .map(|max_hold| max_hold.ceiling(line.opened, line.opened, valid_to_ms));
                let attached = Attached {
                    token,
                    fencing_token,
                    fences,
                    valid_until,
                    ceiling,
                };
                return Ok((line, attached));
            }
            Heard::Waiting(event) => on_waiting(event),
            Heard::Lost(reason) => {
                return Err(Opening::Broken(format!(
                    "expected {}, got lost: {reason}",
                    K::HELD
                )));
            }
            Heard::Extended { .. } | Heard::Other(_) | Heard::Nothing => {
                return Err(Opening::Broken(format!(
                    "expected {}, got another event",
                    K::HELD
                )));
            }
        }
    }
}
