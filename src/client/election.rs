//! The Rust client's side of elections: run for leader, ask who leads, follow every change.
//!
//! ```no_run
//! # async fn serve_as_leader(_term: u64) {}
//! # async fn example() -> Result<(), leasehold::client::ClientError> {
//! use std::time::Duration;
//! use leasehold::client::Client;
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
//! candidate.resign().await?; // Dropping the candidate steps down too.
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use super::{Client, ClientError};
use crate::pb::campaign_request::Action;
use crate::pb::campaign_response::Event;
use crate::pb::election_service_client::ElectionServiceClient;
use crate::pb::{self, CampaignRequest, CampaignResponse, millis};

/// An election's leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// The leadership term (the lease's fencing token): larger for every new leader.
    pub term: u64,
    /// What the leader published.
    pub value: Vec<u8>,
}

fn leader(has_leader: bool, term: u64, value: Vec<u8>) -> Option<Leader> {
    has_leader.then_some(Leader { term, value })
}

impl Client {
    fn elections(&self) -> ElectionServiceClient<super::Transport> {
        ElectionServiceClient::new(self.transport.clone())
    }

    /// Joins `election` as a candidate publishing `value`. Returns at once; wait for
    /// [`Candidate::elected`]. `ttl` bounds how long the election stays leaderless if this
    /// process's server dies while it leads.
    pub async fn campaign(
        &self,
        election: impl Into<String>,
        value: impl Into<Vec<u8>>,
        ttl: Duration,
    ) -> Result<Candidate, ClientError> {
        let (requests, outbox) = mpsc::channel(4);
        let start = CampaignRequest {
            action: Some(Action::Start(pb::CampaignStart {
                election: election.into(),
                value: value.into(),
                ttl_ms: millis(ttl),
            })),
        };
        requests
            .send(start)
            .await
            .map_err(|_| ClientError::Protocol("campaign request channel closed".into()))?;
        let responses = self
            .elections()
            .campaign(ReceiverStream::new(outbox))
            .await?
            .into_inner();
        Ok(Candidate {
            requests,
            responses,
        })
    }

    /// The current leader of `election`, if any.
    pub async fn leader(&self, election: impl Into<String>) -> Result<Option<Leader>, ClientError> {
        let request = pb::LeaderRequest {
            election: election.into(),
        };
        let answer = self.elections().leader(request).await?.into_inner();
        Ok(leader(answer.has_leader, answer.term, answer.value))
    }

    /// Follows `election`: the first [`Observation::next`] is the current leader, each later
    /// one a change, in the order they happened.
    pub async fn observe(&self, election: impl Into<String>) -> Result<Observation, ClientError> {
        let request = pb::ObserveRequest {
            election: election.into(),
        };
        let responses = self.elections().observe(request).await?.into_inner();
        Ok(Observation { responses })
    }
}

/// A candidacy in an election. Dropping it steps down (or leaves the line).
pub struct Candidate {
    requests: mpsc::Sender<CampaignRequest>,
    responses: Streaming<CampaignResponse>,
}

impl Candidate {
    async fn next_event(&mut self) -> Result<Event, ClientError> {
        match self.responses.message().await? {
            Some(CampaignResponse { event: Some(event) }) => Ok(event),
            Some(CampaignResponse { event: None }) => Err(ClientError::Protocol(
                "campaign response without an event".into(),
            )),
            None => Err(ClientError::Protocol("campaign stream ended".into())),
        }
    }

    async fn send(&self, action: Action) -> Result<(), ClientError> {
        self.requests
            .send(CampaignRequest {
                action: Some(action),
            })
            .await
            .map_err(|_| ClientError::Protocol("campaign stream closed".into()))
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
        self.send(Action::Proclaim(pb::Proclaim {
            value: value.into(),
        }))
        .await?;
        match self.next_event().await? {
            Event::Proclaimed(_) => Ok(()),
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
        loop {
            match self.next_event().await {
                Ok(Event::Lost(lost)) => return lost.reason,
                Ok(_) => continue,
                Err(error) => return error.to_string(),
            }
        }
    }

    /// Steps down now. `Ok(true)`: this candidate was leading.
    pub async fn resign(mut self) -> Result<bool, ClientError> {
        self.send(Action::Resign(pb::Resign {})).await?;
        loop {
            match self.next_event().await? {
                Event::Resigned(resigned) => return Ok(resigned.was_leader),
                Event::Lost(_) => return Ok(false),
                Event::Elected(_) | Event::Proclaimed(_) => continue,
            }
        }
    }
}

/// A stream of an election's states.
pub struct Observation {
    responses: Streaming<pb::ObserveResponse>,
}

impl Observation {
    /// The next state: the leader, or `None` when there is none.
    pub async fn next(&mut self) -> Result<Option<Leader>, ClientError> {
        match self.responses.message().await? {
            Some(state) => Ok(leader(state.has_leader, state.term, state.value)),
            None => Err(ClientError::Protocol("observation ended".into())),
        }
    }
}
