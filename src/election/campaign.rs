//! One task per `Campaign` stream: Waiting -> Leading -> Resigned | Lost.
//!
//! A candidate waits in the election's fair line for its lease, exactly as a `Lease` stream
//! waits for a lock, then announces itself and keeps the lease alive while the stream lives.
//! Every way out goes through [`Leadership`], which releases the lease and retires the
//! announcement (in that order), so no branch can leave a stale leader behind.

use tokio::time::Instant;
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tracing::{Instrument, debug, info, info_span, warn};

use super::store::ElectionKeys;
use crate::acquire::{self, Acquisition};
use crate::admission::LeaseSlot;
use crate::error::{Error, Result};
use crate::lease::{Events, HeldLock, Renewal};
use crate::pb::{
    self, CampaignRequest, CampaignResponse, campaign_request::Action, campaign_response::Event,
};
use crate::renew::{RenewalClock, RenewalTrigger};
use crate::store::Store;
use crate::token::Token;
use crate::validate::{self, LeaseSpec, LockName, MAX_WAIT, millis_u32};
use crate::waiting::WaitRoom;

/// How a candidate appears to `Describe` on the election's lease.
const CANDIDATE: &str = "election candidate";

/// What the candidate did, as far as the campaign is concerned.
enum CandidateMove {
    Start(pb::CampaignStart),
    Proclaim(Vec<u8>),
    Resign,
    NoAction,
    HalfClosed,
    Broken(Status),
}

impl CandidateMove {
    fn of(message: Option<Result<CampaignRequest, Status>>) -> Self {
        match message {
            None => CandidateMove::HalfClosed,
            Some(Err(status)) => CandidateMove::Broken(status),
            Some(Ok(CampaignRequest { action: None })) => CandidateMove::NoAction,
            Some(Ok(CampaignRequest {
                action: Some(action),
            })) => match action {
                Action::Start(start) => CandidateMove::Start(start),
                Action::Proclaim(proclaim) => CandidateMove::Proclaim(proclaim.value),
                Action::Resign(_) => CandidateMove::Resign,
            },
        }
    }
}

fn second_start() -> Error {
    Error::invalid(
        "start sent twice on one stream: one stream is one candidacy; open another stream to run again",
    )
}

fn no_action() -> Error {
    Error::invalid("request has no action: set start, proclaim or resign")
}

fn response(event: Event) -> CampaignResponse {
    CampaignResponse { event: Some(event) }
}

fn resigned(was_leader: bool) -> CampaignResponse {
    response(Event::Resigned(pb::Resigned { was_leader }))
}

/// A validated `start`.
struct Candidacy {
    spec: LeaseSpec,
    value: Vec<u8>,
}

impl Candidacy {
    fn parse(start: pb::CampaignStart) -> Result<Self> {
        Ok(Candidacy {
            spec: LeaseSpec {
                name: LockName::parse_election(start.election)?,
                ttl: validate::ttl(start.ttl_ms)?,
                // Candidates wait as long as the server allows, then rejoin the line.
                wait: MAX_WAIT,
                holder: CANDIDATE.to_owned(),
                fair: true,
            },
            value: validate::election_value(start.value)?,
        })
    }
}

/// How the waiting phase ended.
enum Waited {
    Elected(Acquisition),
    /// The longest wait passed: wait again.
    StillWaiting,
    /// The candidate resigned or half-closed before being elected.
    Resigned,
    /// The client went away.
    Gone,
}

/// The leadership this task holds. Dropping it without [`Leadership::resign`] releases the
/// lease and retires the announcement in the background.
struct Leadership {
    lock: HeldLock,
    keys: ElectionKeys,
}

impl Leadership {
    /// Steps down now: the lease is released (the next candidate is woken), then the
    /// announcement retired unless a successor already replaced it. `Ok(false)`: the lease was
    /// no longer ours.
    async fn resign(&mut self) -> Result<bool> {
        let was_held = self.lock.release().await?;
        self.lock
            .store()
            .election_state(&self.keys)
            .await
            .map(|_| was_held)
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if self.lock.hand_over() {
            self.lock
                .store()
                .resign_in_background(self.keys.clone(), self.lock.token.clone());
        }
    }
}

/// The task behind one `Campaign` stream.
pub struct CampaignTask<S> {
    store: Store,
    room: Option<WaitRoom>,
    inbound: S,
    events: Events<CampaignResponse>,
    shutdown: CancellationToken,
}

impl<S> CampaignTask<S>
where
    S: Stream<Item = Result<CampaignRequest, Status>> + Unpin + Send,
{
    pub fn new(
        store: Store,
        room: Option<WaitRoom>,
        inbound: S,
        events: Events<CampaignResponse>,
        shutdown: CancellationToken,
    ) -> Self {
        CampaignTask {
            store,
            room,
            inbound,
            events,
            shutdown,
        }
    }

    /// Runs the stream to its end; an error becomes the stream's final status. `slot` counts
    /// this stream against its connection's limit until the task ends.
    pub async fn run(mut self, slot: Option<LeaseSlot>) {
        if let Err(error) = self.drive().await {
            debug!(%error, "campaign stream ends with an error");
            self.events.essential(Err(error.into()));
        }
        drop(slot);
    }

    async fn drive(&mut self) -> Result<()> {
        let Some(candidacy) = Box::pin(self.first_request()).await? else {
            return Ok(());
        };
        let token = Token::random();
        let span = info_span!(
            "campaign",
            election = %candidacy.spec.name,
            lease = token.lease_id()
        );
        self.campaign(candidacy, token).instrument(span).await
    }

    /// Waits for the first message, which must be a valid `start`.
    async fn first_request(&mut self) -> Result<Option<Candidacy>> {
        let message = tokio::select! {
            message = self.inbound.next() => message,
            () = self.events.closed() => return Ok(None),
            () = self.shutdown.cancelled() => return Err(Error::ShuttingDown),
        };
        match CandidateMove::of(message) {
            CandidateMove::HalfClosed => Ok(None),
            CandidateMove::Broken(status) => Err(Error::Unreadable(status)),
            CandidateMove::NoAction => Err(no_action()),
            CandidateMove::Proclaim(_) | CandidateMove::Resign => Err(Error::invalid(
                "the first message of a campaign must be start",
            )),
            CandidateMove::Start(start) => Candidacy::parse(start).map(Some),
        }
    }

    async fn campaign(&mut self, candidacy: Candidacy, token: Token) -> Result<()> {
        let Candidacy { spec, mut value } = candidacy;
        let keys = self.store.election_keys(&spec.name);
        // Boxed: a leader should not carry the waiting phase's state for its whole term.
        let acquisition = loop {
            match Box::pin(self.wait_for_leadership(&spec, &keys, &token)).await? {
                Waited::Elected(acquisition) => break acquisition,
                Waited::StillWaiting => continue,
                Waited::Resigned => {
                    self.events.essential(Ok(resigned(false)));
                    return Ok(());
                }
                Waited::Gone => return Ok(()),
            }
        };
        let term = acquisition.fencing_token;
        let mut leadership = Leadership {
            lock: HeldLock::new(self.store.clone(), keys.lease.clone(), token),
            keys,
        };
        let mut clock = RenewalClock::new(spec.ttl, acquisition.sent_at);
        let announced = self
            .store
            .announce(
                &leadership.keys,
                &leadership.lock.token,
                term,
                spec.ttl,
                &value,
            )
            .await?;
        if !announced {
            self.lost("the leadership lease was lost before it could be announced".into());
            return Ok(());
        }
        info!(term, "elected");
        let elected = Event::Elected(pb::Elected {
            term,
            valid_for_ms: millis_u32(clock.valid_for(Instant::now())),
        });
        if !self.events.essential(Ok(response(elected))) {
            return Ok(()); // The client left; `leadership` steps down on drop.
        }
        let mut renewals = RenewalTrigger::new(&self.store);
        loop {
            tokio::select! {
                biased;
                () = self.shutdown.cancelled() => {
                    let reason = match Box::pin(leadership.resign()).await {
                        Ok(_) => "server shutting down; the leadership was released".to_owned(),
                        Err(error) => format!("server shutting down; release failed ({error}), the leadership expires by its TTL"),
                    };
                    info!("stepped down for shutdown");
                    self.lost(reason);
                    return Ok(());
                }
                message = self.inbound.next() => match CandidateMove::of(message) {
                    CandidateMove::Proclaim(new_value) => {
                        value = validate::election_value(new_value)?;
                        let announce = self.store.announce(&leadership.keys, &leadership.lock.token, term, spec.ttl, &value);
                        if !Box::pin(announce).await? {
                            warn!("lease lost while proclaiming");
                            self.lost("the leadership lease was deleted or taken behind the server's back".into());
                            return Ok(());
                        }
                        self.events.essential(Ok(response(Event::Proclaimed(pb::Proclaimed { value: value.clone() }))));
                    }
                    CandidateMove::Resign | CandidateMove::HalfClosed => {
                        let was_leader = Box::pin(leadership.resign()).await?;
                        info!(was_leader, "resigned");
                        self.events.essential(Ok(resigned(was_leader)));
                        return Ok(());
                    }
                    CandidateMove::Broken(status) => {
                        info!(code = ?status.code(), message = status.message(), "candidate stream broke; stepping down");
                        return Err(Error::Unreadable(status));
                    }
                    CandidateMove::Start(_) => return Err(second_start()),
                    CandidateMove::NoAction => return Err(no_action()),
                },
                () = self.events.closed() => {
                    info!("candidate went away; stepping down");
                    return Ok(());
                }
                due = renewals.due(&clock) => {
                    if let Renewal::Lost(reason) = Box::pin(leadership.lock.renew(spec.ttl, &mut clock)).await {
                        warn!(%reason, ?due, "leadership lost");
                        self.lost(due.explain(reason));
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Waits in the election's line until elected, or until the candidate gives up.
    async fn wait_for_leadership(
        &mut self,
        spec: &LeaseSpec,
        keys: &ElectionKeys,
        token: &Token,
    ) -> Result<Waited> {
        let waiting = acquire::acquire(
            &self.store,
            &keys.lease,
            token,
            spec,
            self.room.as_ref(),
            |_| {},
        );
        tokio::select! {
            acquired = waiting => match acquired {
                Ok(acquisition) => Ok(Waited::Elected(acquisition)),
                Err(Error::WaitExpired { .. }) => Ok(Waited::StillWaiting),
                Err(error) => {
                    // An attempt that timed out may still land in Redis: do not strand it.
                    self.store.release_in_background(keys.lease.clone(), token.clone());
                    Err(error)
                }
            },
            gave_up = Self::gives_up(&mut self.inbound, &self.events, &self.shutdown) => {
                // The attempt in flight may have won just as the candidate left.
                self.store.resign_in_background(keys.clone(), token.clone());
                gave_up
            }
        }
    }

    /// While waiting: completes when the candidate resigns, leaves, or breaks the protocol,
    /// or the server stops.
    async fn gives_up(
        inbound: &mut S,
        events: &Events<CampaignResponse>,
        shutdown: &CancellationToken,
    ) -> Result<Waited> {
        tokio::select! {
            message = inbound.next() => match CandidateMove::of(message) {
                CandidateMove::Resign | CandidateMove::HalfClosed => Ok(Waited::Resigned),
                CandidateMove::Proclaim(_) => Err(Error::FailedPrecondition(
                    "proclaim before being elected: only the leader can proclaim; wait for elected".into(),
                )),
                CandidateMove::Start(_) => Err(second_start()),
                CandidateMove::NoAction => Err(no_action()),
                CandidateMove::Broken(status) => Err(Error::Unreadable(status)),
            },
            () = events.closed() => Ok(Waited::Gone),
            () = shutdown.cancelled() => Err(Error::ShuttingDown),
        }
    }

    fn lost(&self, reason: String) {
        self.events
            .essential(Ok(response(Event::Lost(pb::Lost { reason }))));
    }
}
