//! The `Lease` stream: a lock held for the life of the stream, as a [`LeaseStream`] kind.

use std::convert::Infallible;
use std::time::Duration;

use super::auth::Scope;
use super::lease_stream::{Held, LeaseStream, Move, Step, Tell, Words, lost, no_message};
use crate::error::{Error, Result};
use crate::lease::held::Lock;
use crate::lease::life::Vouched;
use crate::lease::spec::{self, LeaseSpec, LockName};
use crate::pb::{self, LeaseRequest, LeaseResponse, lease_request::Action, lease_response::Event};

/// What a lock request asks for besides its TTL and resume grace: the fields a `Lease`
/// stream's `acquire`, a unary `Acquire` and a session's `acquire` share. A session states its
/// TTL and grace once, for all its leases, so each is checked once, where it is stated.
pub struct LockAsk {
    pub name: String,
    pub wait_ms: u32,
    pub holder: String,
    pub fair: Option<bool>,
    pub limit: u32,
    pub mode: i32,
    pub resume_token: String,
    /// Further names to hold with `name`, all or none.
    pub more_names: Vec<String>,
    pub lock_delay_ms: u32,
    pub max_hold_ms: u32,
}

impl LockAsk {
    /// The lease asked for, for `ttl`; `resume_grace` as checked where it was stated (its
    /// error, if any, reported after those of the name, wait, holder and limit, as ever).
    pub fn spec(self, ttl: Duration, resume_grace: Result<Option<Duration>>) -> Result<LeaseSpec> {
        let shared = match pb::LeaseMode::try_from(self.mode) {
            Ok(pb::LeaseMode::Unspecified | pb::LeaseMode::Exclusive) => false,
            Ok(pb::LeaseMode::Shared) => true,
            Err(_) => {
                return Err(Error::invalid(format!(
                    "mode is {}; it must be LEASE_MODE_EXCLUSIVE or LEASE_MODE_SHARED",
                    self.mode
                )));
            }
        };
        let resume = match self.resume_token {
            token if token.is_empty() => None,
            token => Some(spec::token(token)?),
        };
        let name = LockName::parse(self.name)?;
        let mode = spec::mode(self.limit, shared)?;
        Ok(LeaseSpec {
            more_names: spec::more_names(&name, self.more_names, mode)?,
            name,
            ttl,
            wait: spec::wait(self.wait_ms)?,
            holder: spec::holder(self.holder)?,
            fair: self.fair.unwrap_or(true),
            mode,
            resume_grace: resume_grace?,
            resume,
            limits: spec::HoldLimits {
                lock_delay: spec::lock_delay(self.lock_delay_ms, mode)?,
                max_hold: spec::max_hold(self.max_hold_ms, ttl)?,
            },
        })
    }
}

impl TryFrom<pb::LeaseAcquire> for LeaseSpec {
    type Error = Error;

    fn try_from(request: pb::LeaseAcquire) -> Result<Self> {
        let ttl = spec::ttl(request.ttl_ms)?;
        let ask = LockAsk {
            name: request.name,
            wait_ms: request.wait_ms,
            holder: request.holder,
            fair: request.fair,
            limit: request.limit,
            mode: request.mode,
            resume_token: request.resume_token,
            more_names: request.more_names,
            lock_delay_ms: request.lock_delay_ms,
            max_hold_ms: request.max_hold_ms,
        };
        ask.spec(ttl, spec::resume_grace(request.resume_grace_ms, ttl))
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
            limit: request.limit,
            mode: request.mode,
            more_names: request.more_names,
            lock_delay_ms: request.lock_delay_ms,
            max_hold_ms: request.max_hold_ms,
            ..Default::default()
        })
    }
}

/// Each name's fencing token, `name` first then `more_names` in the order asked (`Acquired`,
/// `AcquireResponse`, `SessionAcquired`).
pub fn fences<'a>(
    names: impl IntoIterator<Item = &'a str>,
    fencing_token: u64,
    more_fences: &[u64],
) -> Vec<pb::NameFence> {
    let tokens = std::iter::once(fencing_token).chain(more_fences.iter().copied());
    names
        .into_iter()
        .zip(tokens)
        .map(|(name, fencing_token)| pb::NameFence {
            name: name.to_owned(),
            fencing_token,
        })
        .collect()
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
    const WORDS: Words = Words::new("lease", "acquire", "release", "acquire or release", "lock");
    const SCOPE: Scope = Scope::Lock;

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

    fn open(start: pb::LeaseAcquire) -> Result<(LeaseSpec, Self)> {
        Ok((LeaseSpec::try_from(start)?, LockStream))
    }

    fn refuse_while_waiting(message: Infallible) -> Error {
        no_message(&message)
    }

    async fn acquired(
        &mut self,
        held: &Held<'_, Lock>,
        vouched: Vouched,
    ) -> Result<Step<LeaseResponse>> {
        Ok(Step::Reply(response(Event::Acquired(pb::Acquired {
            token: held.lease.token().secret().to_owned(),
            fencing_token: held.fencing_token,
            ttl_ms: pb::millis(held.ttl),
            valid_for_ms: pb::millis(vouched.valid_for),
            valid_to_ms: pb::millis_u64(vouched.valid_to),
            fences: fences(
                held.names().map(LockName::as_str),
                held.fencing_token,
                held.more_fences,
            ),
        }))))
    }

    async fn handle(
        &mut self,
        message: Infallible,
        _: &Held<'_, Lock>,
    ) -> Result<Step<LeaseResponse>> {
        no_message(&message)
    }

    /// A lock reports everything: its waiters see the holder and their place in line.
    fn tell(event: Tell<'_>) -> Option<LeaseResponse> {
        Some(response(match event {
            Tell::Waiting(state) => Event::Waiting(pb::Waiting {
                holder: state.holder.clone(),
                holder_ttl_remaining_ms: state.holder_ttl.map(pb::millis).unwrap_or(0),
                position: state.position,
            }),
            Tell::Extended { ttl, vouched, .. } => Event::Extended(pb::Extended {
                ttl_ms: pb::millis(ttl),
                valid_for_ms: pb::millis(vouched.valid_for),
                valid_to_ms: pb::millis_u64(vouched.valid_to),
            }),
            Tell::Released { was_held } => Event::Released(pb::Released { was_held }),
            Tell::Lost(reason, code) => Event::Lost(lost(reason, code)),
        }))
    }
}
