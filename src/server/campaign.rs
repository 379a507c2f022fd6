//! The `Campaign` stream: a candidacy held for the life of the stream, as a [`LeaseStream`] kind.
//!
//! A candidate waits in the election's fair line for its lease exactly as a lock's waiter does,
//! then announces itself; `proclaim` publishes a new value while it leads. Letting go releases
//! the lease and retires the announcement ([`Leadership`]), so no exit leaves a stale leader.

use std::time::Duration;

use tracing::info;

use super::driver::{LeaseStream, Move, Opened, Step, Words};
use crate::error::{Error, Result};
use crate::lease::acquire::{Acquisition, WaitingState};
use crate::lease::held::{HeldLease, Leadership};
use crate::lease::spec::{self, LeaseSpec, LockName, MAX_WAIT};
use crate::pb::{
    self, CampaignRequest, CampaignResponse, campaign_request::Action, campaign_response::Event,
};
use crate::store::Store;

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
    /// Publishes the leadership with the current value. `Lost` if the lease is no longer ours.
    async fn announce(
        &self,
        lease: &HeldLease<Leadership>,
        spec: &LeaseSpec,
        lost: &str,
    ) -> Result<Option<String>> {
        let Leadership { elections, keys } = lease.holding();
        let announced = elections
            .announce(keys, lease.token(), self.term, spec.ttl, &self.value)
            .await?;
        Ok((!announced).then(|| lost.to_owned()))
    }
}

impl LeaseStream for Campaign {
    type Request = CampaignRequest;
    type Response = CampaignResponse;
    type Start = pb::CampaignStart;
    /// `proclaim`'s new value.
    type Message = Vec<u8>;
    type Holding = Leadership;

    const WORDS: Words = Words {
        stream: "campaign",
        start: "start",
        release: "resign",
        actions: "start, proclaim or resign",
        held: "leadership",
    };
    /// Candidates wait as long as they live: after the longest wait they rejoin the line.
    const WAITS_AGAIN: bool = true;

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

    fn open(start: pb::CampaignStart, store: &Store) -> Result<Opened<Self>> {
        let spec = LeaseSpec {
            name: LockName::parse_election(start.election)?,
            ttl: spec::ttl(start.ttl_ms)?,
            wait: MAX_WAIT,
            holder: CANDIDATE.to_owned(),
            fair: true,
        };
        let value = spec::election_value(start.value)?;
        let holding = Leadership {
            elections: store.elections.clone(),
            keys: store.elections.keys(spec.name.as_str()),
        };
        Ok(Opened {
            spec,
            holding,
            stream: Campaign { value, term: 0 },
        })
    }

    fn refuse_while_waiting(_: Vec<u8>) -> Error {
        Error::FailedPrecondition(
            "proclaim before being elected: only the leader can proclaim; wait for elected".into(),
        )
    }

    async fn acquired(
        &mut self,
        lease: &HeldLease<Leadership>,
        spec: &LeaseSpec,
        acquisition: &Acquisition,
        valid_for: Duration,
    ) -> Result<Step<CampaignResponse>> {
        // The term is the lease's fencing token: larger for every new leader.
        self.term = acquisition.fencing_token;
        let lost = "the leadership lease was lost before it could be announced";
        if let Some(reason) = self.announce(lease, spec, lost).await? {
            return Ok(Step::Lost(reason));
        }
        info!(term = self.term, "elected");
        Ok(Step::Reply(response(Event::Elected(pb::Elected {
            term: self.term,
            valid_for_ms: pb::millis(valid_for),
        }))))
    }

    async fn handle(
        &mut self,
        value: Vec<u8>,
        lease: &HeldLease<Leadership>,
        spec: &LeaseSpec,
    ) -> Result<Step<CampaignResponse>> {
        self.value = spec::election_value(value)?;
        let lost = "the leadership lease was deleted or taken behind the server's back";
        if let Some(reason) = self.announce(lease, spec, lost).await? {
            return Ok(Step::Lost(reason));
        }
        Ok(Step::Reply(response(Event::Proclaimed(pb::Proclaimed {
            value: self.value.clone(),
        }))))
    }

    fn waiting(_: &WaitingState) -> Option<CampaignResponse> {
        None
    }

    fn extended(_: &LeaseSpec, _: Duration) -> Option<CampaignResponse> {
        None
    }

    fn released(was_leader: bool) -> CampaignResponse {
        response(Event::Resigned(pb::Resigned { was_leader }))
    }

    fn lost(reason: String) -> CampaignResponse {
        response(Event::Lost(pb::Lost { reason }))
    }
}
