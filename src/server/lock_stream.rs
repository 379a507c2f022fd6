//! The `Lease` stream: a lock held for the life of the stream, as a [`LeaseStream`] kind.

use std::convert::Infallible;
use std::time::Duration;

use super::driver::{LeaseStream, Move, Opened, Step, Words, no_message};
use crate::error::{Error, Result};
use crate::lease::acquire::{Acquisition, WaitingState};
use crate::lease::held::{HeldLease, Lock};
use crate::lease::spec::{self, LeaseSpec, LockName};
use crate::pb::{self, LeaseRequest, LeaseResponse, lease_request::Action, lease_response::Event};
use crate::store::Store;

impl TryFrom<pb::LeaseAcquire> for LeaseSpec {
    type Error = Error;

    fn try_from(request: pb::LeaseAcquire) -> Result<Self> {
        Ok(LeaseSpec {
            name: LockName::parse(request.name)?,
            ttl: spec::ttl(request.ttl_ms)?,
            wait: spec::wait(request.wait_ms)?,
            holder: spec::holder(request.holder)?,
            fair: request.fair.unwrap_or(true),
        })
    }
}

impl TryFrom<pb::AcquireRequest> for LeaseSpec {
    type Error = Error;

    /// The unary call asks for the same lease as the stream's `acquire`.
    fn try_from(request: pb::AcquireRequest) -> Result<Self> {
        LeaseSpec::try_from(pb::LeaseAcquire {
            name: request.name,
            ttl_ms: request.ttl_ms,
            wait_ms: request.wait_ms,
            holder: request.holder,
            fair: request.fair,
        })
    }
}

fn response(event: Event) -> LeaseResponse {
    LeaseResponse { event: Some(event) }
}

/// A `Lease` stream holds a plain lock and has no messages of its own.
pub struct LockStream;

impl LeaseStream for LockStream {
    type Request = LeaseRequest;
    type Response = LeaseResponse;
    type Start = pb::LeaseAcquire;
    type Message = Infallible;
    type Holding = Lock;

    const WORDS: Words = Words {
        stream: "lease",
        start: "acquire",
        release: "release",
        actions: "acquire or release",
        held: "lock",
    };

    fn read(request: LeaseRequest) -> Move<pb::LeaseAcquire, Infallible> {
        match request.action {
            None => Move::NoAction,
            Some(Action::Acquire(acquire)) => Move::Start(acquire),
            Some(Action::Release(_)) => Move::Release,
        }
    }

    fn message_name(message: &Infallible) -> &'static str {
        no_message(message)
    }

    fn open(start: pb::LeaseAcquire, store: &Store) -> Result<Opened<Self>> {
        let spec = LeaseSpec::try_from(start)?;
        let holding = Lock {
            locks: store.locks.clone(),
            keys: store.locks.keys(spec.name.as_str()),
        };
        Ok(Opened {
            spec,
            holding,
            stream: LockStream,
        })
    }

    fn refuse_while_waiting(message: Infallible) -> Error {
        no_message(&message)
    }

    async fn acquired(
        &mut self,
        lease: &HeldLease<Lock>,
        spec: &LeaseSpec,
        acquisition: &Acquisition,
        valid_for: Duration,
    ) -> Result<Step<LeaseResponse>> {
        Ok(Step::Reply(response(Event::Acquired(pb::Acquired {
            token: lease.token().secret().to_owned(),
            fencing_token: acquisition.fencing_token,
            ttl_ms: pb::millis(spec.ttl),
            valid_for_ms: pb::millis(valid_for),
        }))))
    }

    async fn handle(
        &mut self,
        message: Infallible,
        _: &HeldLease<Lock>,
        _: &LeaseSpec,
    ) -> Result<Step<LeaseResponse>> {
        no_message(&message)
    }

    fn waiting(state: &WaitingState) -> Option<LeaseResponse> {
        Some(response(Event::Waiting(pb::Waiting {
            holder: state.holder.clone(),
            holder_ttl_remaining_ms: state.holder_ttl.map(pb::millis).unwrap_or(0),
            position: state.position,
        })))
    }

    fn extended(spec: &LeaseSpec, valid_for: Duration) -> Option<LeaseResponse> {
        Some(response(Event::Extended(pb::Extended {
            ttl_ms: pb::millis(spec.ttl),
            valid_for_ms: pb::millis(valid_for),
        })))
    }

    fn released(was_held: bool) -> LeaseResponse {
        response(Event::Released(pb::Released { was_held }))
    }

    fn lost(reason: String) -> LeaseResponse {
        response(Event::Lost(pb::Lost { reason }))
    }
}
