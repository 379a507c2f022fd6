//! The `Campaign` stream: a candidacy held for the life of the stream, as a [`LeaseStream`] kind.
//!
//! A candidate waits in the election's fair line for its lease exactly as a lock's waiter does,
//! then announces itself; `proclaim` publishes a new value while it leads. Letting go releases
//! the lease and retires the announcement ([`Leadership`]), so no exit leaves a stale leader.

use std::time::Duration;

use tracing::info;

use super::auth::Scope;
use super::lease_stream::{Held, LeaseStream, Move, Step, Tell, Words, lost};
use crate::error::{Error, Result};
use crate::lease::held::Leadership;
use crate::lease::life::Vouched;
use crate::lease::spec::{self, LeaseSpec, LockName, MAX_WAIT};
use crate::pb::{
    self, CampaignRequest, CampaignResponse, campaign_request::Action, campaign_response::Event,
};

/// How a candidate appears to `Describe` on the election's lease.
const CANDIDATE: &str = "election candidate";

fn response(event: Event) -> CampaignResponse {
    CampaignResponse { event: Some(event) }
}

/// One candidacy: the value it publishes, and its term once elected.
pub struct Campaign {
    value: Vec<u8>,
    term: u64,
}

impl Campaign {
    /// The candidacy asked for, for `ttl`; `resume_grace` as checked where it was stated (a
    /// session states it once for all its leases).
    pub fn ask(
        election: String,
        value: Vec<u8>,
        resume_token: String,
        ttl: Duration,
        resume_grace: Result<Option<Duration>>,
    ) -> Result<(LeaseSpec, Self)> {
        let spec = LeaseSpec {
            more_names: Vec::new(),
            name: LockName::parse_election(election)?,
            ttl,
            wait: MAX_WAIT,
            holder: CANDIDATE.to_owned(),
            fair: true,
            mode: spec::Mode::LOCK,
            resume_grace: resume_grace?,
            limits: Default::default(),
            resume: match resume_token {
                token if token.is_empty() => None,
                token => Some(spec::token(token)?),
            },
        };
        let value = spec::election_value(value)?;
        Ok((spec, Campaign { value, term: 0 }))
    }

    /// The value it publishes.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// Publishes the leadership with the current value; `Lost(lost)` if the lease is no longer
    /// ours, else `answer`.
    async fn announce(
        &self,
        held: &Held<'_, Leadership>,
        lost: &str,
        answer: Event,
    ) -> Result<Step<CampaignResponse>> {
        let Leadership {
            elections,
            election,
            ..
        } = held.lease.holding();
        let (token, ttl) = (held.lease.token(), held.ttl);
        if elections
            .announce(election, token, self.term, ttl, &self.value)
            .await?
        {
            Ok(Step::Reply(response(answer)))
        } else {
            Ok(Step::Lost(lost.to_owned()))
        }
    }
}

impl LeaseStream for Campaign {
    type Request = CampaignRequest;
    type Response = CampaignResponse;
    /// Candidates wait as long as they live: after the longest wait they rejoin the line.
    const WAITS_AGAIN: bool = true;
    const WORDS: Words = Words::new(
        "campaign",
        "start",
        "resign",
        "start, proclaim or resign",
        "leadership",
    );
    const SCOPE: Scope = Scope::Election;
    type Start = pb::CampaignStart;
    /// `proclaim`'s new value.
    type Message = Vec<u8>;
    type Holding = Leadership;

    fn read(request: CampaignRequest) -> Move<pb::CampaignStart, Vec<u8>> {
        match request.action {
            None => Move::NoAction,
            Some(Action::Start(start)) => Move::Start(start),
            Some(Action::Proclaim(proclaim)) => Move::Other(proclaim.value),
            Some(Action::Resign(_)) => Move::Release,
        }
    }

    fn message_name(_: &Vec<u8>) -> &'static str {
        "proclaim"
    }

    fn open(start: pb::CampaignStart) -> Result<(LeaseSpec, Self)> {
        let ttl = spec::ttl(start.ttl_ms)?;
        let grace = spec::resume_grace(start.resume_grace_ms, ttl);
        Campaign::ask(start.election, start.value, start.resume_token, ttl, grace)
    }

    fn refuse_while_waiting(_: Vec<u8>) -> Error {
        Error::FailedPrecondition(
            "proclaim before being elected: only the leader can proclaim; wait for elected".into(),
        )
    }

    /// Elected: announce it before telling the candidate, so observers never lag the leader. A
    /// resumed leadership is elected again with its term and value: observers, who never see one
    /// state twice in a row, see no change.
    async fn acquired(
        &mut self,
        held: &Held<'_, Leadership>,
        vouched: Vouched,
    ) -> Result<Step<CampaignResponse>> {
        // The term is the lease's fencing token: larger for every new leader.
        self.term = held.fencing_token;
        let elected = Event::Elected(pb::Elected {
            term: self.term,
            valid_for_ms: pb::millis(vouched.valid_for),
            token: held.lease.token().secret().to_owned(),
            valid_to_ms: pb::millis_u64(vouched.valid_to),
        });
        let lost = "the leadership lease was lost before it could be announced";
        let step = self.announce(held, lost, elected).await?;
        if let Step::Reply(_) = step {
            info!(term = self.term, "elected");
        }
        Ok(step)
    }

    async fn handle(
        &mut self,
        value: Vec<u8>,
        held: &Held<'_, Leadership>,
    ) -> Result<Step<CampaignResponse>> {
        self.value = spec::election_value(value)?;
        let proclaimed = Event::Proclaimed(pb::Proclaimed {
            value: self.value.clone(),
        });
        let lost = "the leadership lease was deleted or taken behind the server's back";
        self.announce(held, lost, proclaimed).await
    }

    /// Candidates hear only the outcome: no place in line, and renewals only if they asked for a
    /// resume grace (to know how long to believe in their leadership between streams).
    fn tell(event: Tell<'_>) -> Option<CampaignResponse> {
        match event {
            Tell::Waiting(_)
            | Tell::Extended {
                resumable: false, ..
            } => None,
            Tell::Extended { ttl, vouched, .. } => Some(response(Event::Extended(pb::Extended {
                ttl_ms: pb::millis(ttl),
                valid_for_ms: pb::millis(vouched.valid_for),
                valid_to_ms: pb::millis_u64(vouched.valid_to),
            }))),
            Tell::Released { was_held } => Some(response(Event::Resigned(pb::Resigned {
                was_leader: was_held,
            }))),
            Tell::Lost(reason, code) => Some(response(Event::Lost(lost(reason, code)))),
        }
    }
}
