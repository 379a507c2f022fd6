//! The Rust client's side of elections: run for leader, ask who leads, follow every change.
//!
//! ```no_run
//! # async fn serve_as_leader(_term: u64) {}
//! # async fn example() -> Result<(), leasehold_client::ClientError> {
//! use std::time::Duration;
//! use leasehold_client::Client;
//!
//! let client = Client::connect("http://127.0.0.1:50051").await?;
//! let mut candidate = client
//!     .campaign("scheduler", "host-a:8080", Duration::from_secs(5))
//!     .await?;
//! let term = candidate.elected().await?; // Waits in line until elected.
//! tokio::select! {
//!     reason = candidate.lost() => eprintln!("leadership lost, stopping: {reason}"),
//!     () = serve_as_leader(term) => {}
//! }
//! candidate.resign().await?; // Dropping the candidate resigns too.
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use crate::held::{Loss, LostReason};
use crate::pb::campaign_request::Action;
use crate::pb::campaign_response::Event;
use crate::pb::election_service_client::ElectionServiceClient;
use crate::pb::{self, CampaignRequest, CampaignResponse, millis};
use crate::stream::{Heard, HeldStream, Kind, Next};
use crate::{Client, ClientError, Transport};

/// An election's leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// The leadership term (the lease's fencing token): larger for every new leader.
    pub term: u64,
    /// What the leader published.
    pub value: Vec<u8>,
}

pub(crate) fn leader(has_leader: bool, term: u64, value: Vec<u8>) -> Option<Leader> {
    has_leader.then_some(Leader { term, value })
}

impl Client {
    /// Joins `election` as a candidate publishing `value`. Returns at once; wait for
    /// [`Candidate::elected`]. `ttl` bounds how long the election stays leaderless if this
    /// process's server dies while it leads. Once elected, the leadership resumes on another
    /// server on its own when its stream breaks (same term; observers see no change).
    pub async fn campaign(
        &self,
        election: impl Into<String>,
        value: impl Into<Vec<u8>>,
        ttl: Duration,
    ) -> Result<Candidate, ClientError> {
        self.campaign_with(election, value, ttl, true).await
    }

    /// As [`Client::campaign`]; `auto_resume: false` ends the leadership when its stream
    /// breaks, as before.
    pub async fn campaign_with(
        &self,
        election: impl Into<String>,
        value: impl Into<Vec<u8>>,
        ttl: Duration,
        auto_resume: bool,
    ) -> Result<Candidate, ClientError> {
        let start = pb::CampaignStart {
            election: election.into(),
            value: value.into(),
            ttl_ms: millis(ttl),
            resume_token: String::new(),
            resume_grace_ms: if auto_resume { millis(ttl) } else { 0 },
        };
        let stream = HeldStream::start(self, Campaign(start)).await?;
        Ok(Candidate {
            stream,
            proclaiming: None,
            resigning: false,
        })
    }

    /// The current leader of `election`, if any.
    pub async fn leader(&self, election: impl Into<String>) -> Result<Option<Leader>, ClientError> {
        let request = pb::LeaderRequest {
            election: election.into(),
        };
        let answer = self
            .idempotent(|transport| {
                let request = request.clone();
                async move { ElectionServiceClient::new(transport).leader(request).await }
            })
            .await?
            .into_inner();
        Ok(leader(answer.has_leader, answer.term, answer.value))
    }

    /// Ends `election`'s leadership by force (an operator's call; needs the `admin` role):
    /// whichever leads, or only `term`. The leader is told it is lost
    /// ([`crate::LostReason::Revoked`]) and the next candidate is elected with a larger term.
    /// Returns the leader ended, if any.
    pub async fn revoke_leader(
        &self,
        election: impl Into<String>,
        term: Option<u64>,
    ) -> Result<Option<Leader>, ClientError> {
        let request = pb::ElectionServiceRevokeRequest {
            election: election.into(),
            term: term.unwrap_or(0),
        };
        let answer = self
            .idempotent(|transport| {
                let request = request.clone();
                async move { ElectionServiceClient::new(transport).revoke(request).await }
            })
            .await?
            .into_inner();
        Ok(leader(answer.revoked, answer.term, answer.value))
    }
}

/// A candidacy in an election. Dropping it steps down (or leaves the line): it sends `resign`,
/// as [`Candidate::resign`] does without waiting for the answer. (A stream that merely ends
/// keeps a resumable leadership for its grace, since the server cannot tell it from a frozen
/// or cut-off leader.)
///
/// Its events are read when it is asked for one (`elected`, `proclaim`, `lost`, `resign`): keep
/// [`Candidate::lost`] polled while leading (as in the example above), so a broken stream is
/// resumed on another server while the leadership is still valid.
pub struct Candidate {
    /// Its campaign on the held-stream core; the kind holds what resumes the leadership: the
    /// start, with the value last published. A grace of 0: never resumed.
    stream: HeldStream<Campaign>,
    /// A `proclaim` not yet answered: a resume publishes this value instead, and answers it.
    proclaiming: Option<Vec<u8>>,
    /// A `resign` sent: a resume sends it again on the new stream.
    resigning: bool,
}

/// The `Campaign` stream's messages, for the held-stream core; holds the start it asks with.
struct Campaign(pb::CampaignStart);

impl Kind for Campaign {
    type Request = CampaignRequest;
    type Response = CampaignResponse;
    type Event = Event;
    const WHAT: &'static str = "leadership";
    const STREAM: &'static str = "campaign";
    const HELD: &'static str = "elected";

    async fn call(
        transport: Transport,
        requests: ReceiverStream<CampaignRequest>,
    ) -> Result<tonic::Response<Streaming<CampaignResponse>>, Status> {
        ElectionServiceClient::new(transport)
            .campaign(requests)
            .await
    }

    fn start(&self, resume_token: Option<&str>) -> CampaignRequest {
        let mut start = self.0.clone();
        if let Some(token) = resume_token {
            start.resume_token = token.to_owned();
        }
        CampaignRequest {
            action: Some(Action::Start(start)),
        }
    }

    fn name(&self) -> &str {
        &self.0.election
    }

    fn stop(&self) -> CampaignRequest {
        CampaignRequest {
            action: Some(Action::Resign(pb::Resign {})),
        }
    }

    fn hear(&self, response: CampaignResponse) -> Heard<Event> {
        match response.event {
            Some(Event::Elected(elected)) => Heard::Held {
                token: elected.token.clone(),
                fencing_token: elected.term,
                fences: Vec::new(),
                valid_for_ms: elected.valid_for_ms,
                valid_to_ms: elected.valid_to_ms,
                event: Event::Elected(elected),
            },
            Some(Event::Extended(extended)) => Heard::Extended {
                valid_for_ms: extended.valid_for_ms,
                valid_to_ms: extended.valid_to_ms,
            },
            Some(Event::Lost(lost)) => Heard::Lost(Loss::told(lost)),
            Some(event) => Heard::Other(event),
            None => Heard::Nothing,
        }
    }

    /// Only a leader that asked for a grace hears renewals; one that did not keeps the old rule
    /// (its server tells it `lost`).
    fn clocked(&self) -> bool {
        self.0.resume_grace_ms > 0
    }
}

impl Candidate {
    /// The next event the caller should see: renewals are absorbed, and a broken stream of a
    /// leader is resumed on another server (the caller sees nothing of it, unless it fails).
    async fn next_event(&mut self) -> Result<Event, ClientError> {
        loop {
            let broke = match self.stream.next().await {
                Next::Event(event) => return Ok(event),
                Next::Lost(loss) => return Ok(Event::Lost(lost(loss))),
                Next::Failed(status) => return Err(status.into()),
                Next::Broke(broke) => broke,
            };
            if self.stream.holding.is_none() || self.stream.kind.0.resume_grace_ms == 0 {
                return Err(ClientError::Protocol(broke));
            }
            if let Some(value) = &self.proclaiming {
                self.stream.kind.0.value = value.clone();
            }
            if let Err(reason) = self.stream.resume(broke).await {
                return Ok(Event::Lost(lost(reason.into())));
            }
            if self.resigning {
                let _ = self.send(Action::Resign(pb::Resign {})).await;
                continue;
            }
            // The resumed leadership published the value a pending `proclaim` asked for.
            if let Some(value) = self.proclaiming.take() {
                return Ok(Event::Proclaimed(pb::Proclaimed { value }));
            }
        }
    }

    async fn send(&self, action: Action) -> Result<(), ClientError> {
        let request = CampaignRequest {
            action: Some(action),
        };
        if self.stream.send(request).await {
            Ok(())
        } else {
            Err(ClientError::Protocol("campaign stream closed".into()))
        }
    }

    /// Until when the server last vouched for the leadership, by this process's clock (`None`
    /// before it was elected): [`Candidate::lost`] completes then at the latest, when no
    /// confirmation (a renewal, or a resume elsewhere) came in time. A candidate without a
    /// resume grace hears no renewals: this is then its `elected`'s validity only.
    pub fn valid_until(&self) -> Option<Instant> {
        self.stream.valid_until()
    }

    /// [`Candidate::valid_until`] as it moves (`None` before it was elected): readable while
    /// [`Candidate::lost`] is awaited, which borrows the candidate for as long as it leads (a
    /// process that kills its work by the end of the leadership's validity watches this).
    pub fn validity(&self) -> Option<watch::Receiver<Instant>> {
        self.stream.holding.as_ref().map(|h| h.keeper.validity())
    }

    /// Waits until this candidate leads; returns its term.
    pub async fn elected(&mut self) -> Result<u64, ClientError> {
        match self.next_event().await? {
            Event::Elected(elected) => Ok(elected.term),
            other => Err(ClientError::Protocol(format!(
                "expected elected, got {other:?}"
            ))),
        }
    }

    /// Publishes a new value while leading.
    pub async fn proclaim(&mut self, value: impl Into<Vec<u8>>) -> Result<(), ClientError> {
        let value = value.into();
        self.proclaiming = Some(value.clone());
        // A stream that just broke refuses it; the resume then publishes the value (below).
        let _ = self
            .send(Action::Proclaim(pb::Proclaim {
                value: value.clone(),
            }))
            .await;
        match self.next_event().await? {
            Event::Proclaimed(_) => {
                // A resumed leadership publishes this value again.
                self.proclaiming = None;
                self.stream.kind.0.value = value;
                Ok(())
            }
            Event::Lost(lost) => Err(ClientError::Protocol(format!(
                "leadership lost: {}",
                lost.reason
            ))),
            other => Err(ClientError::Protocol(format!(
                "expected proclaimed, got {other:?}"
            ))),
        }
    }

    /// Completes when the leadership is lost, with the reason. Call it only while leading.
    pub async fn lost(&mut self) -> String {
        self.loss().await.reason
    }

    /// As [`Candidate::lost`], with why typed: [`LostReason::Revoked`] when an operator revoked
    /// the leadership.
    pub async fn loss(&mut self) -> Loss {
        loop {
            match self.next_event().await {
                Ok(Event::Lost(lost)) => return Loss::told(lost),
                Ok(_) => continue,
                Err(error) => return Loss::from(error.to_string()),
            }
        }
    }

    /// Steps down now. `Ok(true)`: this candidate was leading.
    pub async fn resign(mut self) -> Result<bool, ClientError> {
        self.resigning = true;
        // A stream that just broke refuses it; the resume sends it again (above).
        let _ = self.send(Action::Resign(pb::Resign {})).await;
        loop {
            match self.next_event().await? {
                Event::Resigned(resigned) => return Ok(resigned.was_leader),
                Event::Lost(_) => return Ok(false),
                Event::Elected(_) | Event::Proclaimed(_) | Event::Extended(_) => continue,
            }
        }
    }
}

impl Drop for Candidate {
    /// Resigns: the next candidate is elected at once rather than after the grace. The stream is
    /// read to its end (the server's `resigned`) in the background, within the TTL: dropped at
    /// once, it would be cancelled, and the cancel can overtake the `resign` (h2 discards data
    /// not yet sent when a stream is reset), leaving a stream that merely ended. Outside a
    /// runtime the `resign` is sent, best effort.
    fn drop(&mut self) {
        if self.resigning {
            return;
        }
        let resign = CampaignRequest {
            action: Some(Action::Resign(pb::Resign {})),
        };
        // Closed: the stream already ended.
        let Some(requests) = self.stream.line.requests.clone() else {
            return;
        };
        let sent = requests.try_send(resign);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let responses = self.stream.line.responses.take();
        let ttl = Duration::from_millis(u64::from(self.stream.kind.0.ttl_ms));
        runtime.spawn(async move {
            let _ = tokio::time::timeout(ttl, async move {
                // Full (the transport is behind): sent once there is room.
                if let Err(mpsc::error::TrySendError::Full(resign)) = sent {
                    let _ = requests.send(resign).await;
                }
                drop(requests);
                if let Some(mut responses) = responses {
                    while let Ok(Some(_)) = responses.message().await {}
                }
            })
            .await;
        });
    }
}

/// A loss as a `lost` event (the candidate's events are the protocol's).
fn lost(loss: Loss) -> pb::Lost {
    let code = match loss.code {
        LostReason::Taken => pb::LostReason::Taken,
        LostReason::Unreachable => pb::LostReason::Unreachable,
        LostReason::Shutdown => pb::LostReason::Shutdown,
        LostReason::Revoked => pb::LostReason::Revoked,
        LostReason::MaxHold => pb::LostReason::MaxHold,
        LostReason::Unspecified => pb::LostReason::Unspecified,
    };
    pb::Lost {
        reason: loss.reason,
        code: code.into(),
    }
}
