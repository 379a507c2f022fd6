//! A session's leases, one [`Life`] of the lease layer each: a request checked and started,
//! its wait a future in the session's task, its holder told and the lease joined to the
//! session's renewal group; and each let go, lost or superseded alone, by the client's id.

use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{info, warn};

use super::{MAX_LEASES_PER_SESSION, Session, Terms, response};
use crate::error::{Error, Result};
use crate::lease::acquire::{Acquisition, WaitingState};
use crate::lease::group::RenewalGroup;
use crate::lease::held::{Holding, Leadership, Lock};
use crate::lease::life::{End, Life, LostCode, Told, Vouched};
use crate::lease::renewal::RenewalClock;
use crate::lease::scheduler::{NOT_HELD, REVOKED};
use crate::lease::spec::{LeaseSpec, LockName};
use crate::lease::waiting::WaitRoom;
use crate::metrics::{Counted, HeldFor};
use crate::pb::{self, session_response::Event};
use crate::server::admission::LeaseSlot;
use crate::server::auth::{Role, Scope};
use crate::server::campaign::Campaign;
use crate::server::lease_stream::{Held, LeaseStream, Step};
use crate::server::lock_stream::{self, LockAsk};
use crate::store::Token;

/// One lease of the session, by the client's id.
pub(super) enum Slot {
    /// Waiting for its lock: dropping `_give_up` ends the wait (the lease is let go).
    Waiting {
        serial: u64,
        _give_up: oneshot::Sender<()>,
    },
    Held(Box<Member>),
}

/// A held lease of the session.
pub(super) struct Member {
    /// The session's own key for it (ids are reused; serials are not).
    serial: u64,
    kind: Kind,
    fencing_token: u64,
    /// Counted against the connection's and the server's lease limit while held.
    _slot: LeaseSlot,
    _held: (HeldFor, Option<Counted>),
}

impl Member {
    /// Ends the lease as its life says; the session tells the client.
    pub(super) async fn end(&mut self, end: End) -> Result<Told> {
        self.kind.end(end).await
    }
}

/// What a session lease holds, through its life.
pub(super) enum Kind {
    Lock(Life<Lock>),
    /// A leadership, with its campaign (value, term) and what it asked for (for `proclaim`).
    Campaign(Life<Leadership>, Campaign, Box<LeaseSpec>),
}

impl Kind {
    fn token(&self) -> &Token {
        match self {
            Kind::Lock(life) => life.token(),
            Kind::Campaign(life, ..) => life.token(),
        }
    }

    fn granted(&mut self, acquisition: &Acquisition) -> RenewalClock {
        match self {
            Kind::Lock(life) => life.granted(acquisition),
            Kind::Campaign(life, ..) => life.granted(acquisition),
        }
    }

    fn join(&mut self, group: &Arc<RenewalGroup>, key: u64, clock: &RenewalClock) {
        match self {
            Kind::Lock(life) => life.join(group, key, clock),
            Kind::Campaign(life, ..) => life.join(group, key, clock),
        }
    }

    /// Ends the lease as its life says; the session tells the client.
    async fn end(&mut self, end: End) -> Result<Told> {
        match self {
            Kind::Lock(life) => life.end(end, |_| {}).await,
            Kind::Campaign(life, ..) => life.end(end, |_| {}).await,
        }
    }
}

/// A lease to take: what it will hold.
pub(super) enum Start {
    Lock(Life<Lock>),
    Campaign(Life<Leadership>, Campaign),
}

/// How a wait ended: `None` if the client gave up first (the lease is let go on drop).
pub(super) struct Waited {
    id: u64,
    serial: u64,
    /// The lock's or election's name, for logs and metrics.
    name: String,
    outcome: Option<(Kind, Result<Acquisition>)>,
    slot: LeaseSlot,
}

/// Takes `life`'s lease unless the client releases its id first (`gave_up`): then it ends as
/// a release asked for before it was held, as its life says. A wait is given up (an attempt in
/// flight may have taken the lease just then: dropped armed, it is let go); a resume lets go
/// of the lease its holder no longer wants. (The session's own end drops the wait instead: a
/// lease in flight is let go, a resume never.)
async fn take<H: Holding>(
    life: &mut Life<H>,
    spec: &LeaseSpec,
    room: Option<&WaitRoom>,
    waits_again: bool,
    on_waiting: impl FnMut(&WaitingState),
    gave_up: oneshot::Receiver<()>,
) -> Option<Result<Acquisition>> {
    let taken = tokio::select! {
        taken = life.take(spec, room, waits_again, on_waiting) => Some(taken),
        _ = gave_up => None,
    };
    if taken.is_none() {
        if let Err(error) = life.end(End::ReleaseAsked, |_| {}).await {
            warn!(%error, "could not let go of a lease given up while resuming; it expires by its TTL");
        }
    }
    taken
}

impl Session {
    pub(super) fn check_id(&self, id: u64) -> Result<()> {
        if self.leases.contains_key(&id) {
            return Err(Error::invalid(format!(
                "id {id} is already in use on this session: each lease needs an id of its own until it is released, lost or failed"
            )));
        }
        Ok(())
    }

    /// Answers a lease that could not even start.
    pub(super) async fn started(&mut self, id: u64, started: Result<()>) {
        if let Err(error) = started {
            self.failed(id, error).await;
        }
    }

    /// Checks a lock request and starts taking it.
    pub(super) fn start_lock(&mut self, acquire: pb::SessionAcquire, terms: &Terms) -> Result<()> {
        let id = acquire.id;
        let holder = match acquire.holder {
            holder if holder.is_empty() => terms.holder.clone(),
            holder => holder,
        };
        let ask = LockAsk {
            more_names: acquire.more_names,
            name: acquire.name,
            wait_ms: acquire.wait_ms,
            holder,
            fair: acquire.fair,
            limit: acquire.limit,
            mode: acquire.mode,
            resume_token: acquire.resume_token,
            lock_delay_ms: acquire.lock_delay_ms,
            max_hold_ms: acquire.max_hold_ms,
        };
        let spec = ask.spec(terms.ttl, Ok(terms.grace))?;
        for name in spec.names() {
            self.caller.allow(Scope::Lock, name.as_str(), Role::Hold)?;
        }
        let life = Life::claim(Lock::of(&self.streams.store, &spec), &spec);
        self.start(id, spec, Start::Lock(life))
    }

    /// Checks a campaign and starts waiting in its election's line.
    pub(super) fn start_campaign(
        &mut self,
        campaign: pb::SessionCampaign,
        terms: &Terms,
    ) -> Result<()> {
        crate::server::election::available(&self.streams.store)?;
        let (spec, stream) = Campaign::ask(
            campaign.election,
            campaign.value,
            campaign.resume_token,
            terms.ttl,
            Ok(terms.grace),
        )?;
        self.caller
            .allow(Scope::Election, spec.name.as_str(), Role::Hold)?;
        let life = Life::claim(Leadership::at(&self.streams.store, &spec.name), &spec);
        self.start(campaign.id, spec, Start::Campaign(life, stream))
    }

    /// Admits a lease and waits for it in the session's task.
    fn start(&mut self, id: u64, spec: LeaseSpec, start: Start) -> Result<()> {
        if self.leases.len() >= MAX_LEASES_PER_SESSION {
            return Err(Error::TooManyOnSession {
                limit: MAX_LEASES_PER_SESSION,
            });
        }
        let slot = self.streams.limits.admit(self.peer)?;
        let serial = self.next_serial;
        self.next_serial += 1;
        let (give_up, gave_up) = oneshot::channel();
        self.leases.insert(
            id,
            Slot::Waiting {
                serial,
                _give_up: give_up,
            },
        );
        let (streams, events) = (self.streams.clone(), self.events.clone());
        let name = spec.name.as_str().to_owned();
        self.waits.push(Box::pin(async move {
            let on_waiting = |state: &WaitingState| {
                events.progress(response(Event::Waiting(pb::SessionWaiting {
                    id,
                    holder: state.holder.clone(),
                    holder_ttl_remaining_ms: state.holder_ttl.map(pb::millis).unwrap_or(0),
                    position: state.position,
                })));
            };
            let room = streams.room.as_ref();
            let outcome = match start {
                Start::Lock(mut life) => {
                    let taken = take(&mut life, &spec, room, false, on_waiting, gave_up).await;
                    taken.map(|outcome| (Kind::Lock(life), outcome))
                }
                // Candidates wait as long as the session lives, as on a Campaign stream.
                Start::Campaign(mut life, stream) => {
                    let taken = take(&mut life, &spec, room, true, on_waiting, gave_up).await;
                    taken.map(|outcome| (Kind::Campaign(life, stream, Box::new(spec)), outcome))
                }
            };
            Waited {
                id,
                serial,
                name,
                outcome,
                slot,
            }
        }));
        Ok(())
    }

    /// A wait ended: hold the lease, or say why not.
    pub(super) async fn waited(&mut self, waited: Waited, group: &Arc<RenewalGroup>) {
        let Waited {
            id,
            serial,
            name,
            outcome,
            slot,
        } = waited;
        let Some((kind, outcome)) = outcome else {
            return;
        };
        // Given up meanwhile (its id released, perhaps reused): the lease drops, armed.
        if !matches!(self.leases.get(&id), Some(Slot::Waiting { serial: s, .. }) if *s == serial) {
            return;
        }
        let acquisition = match outcome {
            Ok(acquisition) => acquisition,
            Err(error) => {
                self.leases.remove(&id);
                self.failed(id, error).await;
                return;
            }
        };
        let mut kind = kind;
        let clock = kind.granted(&acquisition);
        let Acquisition {
            fencing_token,
            attachment,
            more_fences,
            ..
        } = acquisition;
        let vouched = Vouched::now(clock.valid_for(Instant::now()), self.opened);
        let metrics = self.streams.metrics();
        if let Kind::Campaign(life, stream, spec) = &mut kind {
            let held = Held::of(life.lease(), spec, fencing_token, &[]);
            let end = match stream.acquired(&held, vouched).await {
                Ok(Step::Reply(_)) => None,
                Ok(Step::Lost(reason)) => Some((End::Superseded(reason), None)),
                // Redis slow: the lease ends as a broken stream's does.
                Err(error) => Some((End::Broken, Some(error))),
            };
            if let Some((end, error)) = end {
                self.leases.remove(&id);
                let told = kind.end(end).await;
                match (error, told) {
                    (Some(error), _) => self.failed(id, error).await,
                    (None, Ok(Told::Lost(reason, code))) => self.lease_lost(id, reason, code).await,
                    (None, _) => {}
                }
                return;
            }
        }
        let leading = matches!(kind, Kind::Campaign(..)).then(|| metrics.leading());
        info!(id, lock = %name, lease = kind.token().lease_id(), fencing_token, resumed = attachment > 0, "acquired on the session");
        kind.join(group, serial, &clock);
        let token = kind.token().secret().to_owned();
        let fences = match &kind {
            Kind::Lock(life) => fences(life.lease().holding(), &name, fencing_token, &more_fences),
            // A leadership's fencing token is its own field alone.
            Kind::Campaign(..) => Vec::new(),
        };
        self.leases.insert(
            id,
            Slot::Held(Box::new(Member {
                serial,
                kind,
                fencing_token,
                _slot: slot,
                _held: (metrics.held(&name), leading),
            })),
        );
        self.send(Event::Acquired(pb::SessionAcquired {
            id,
            token,
            fencing_token,
            valid_for_ms: pb::millis(vouched.valid_for),
            valid_to_ms: pb::millis_u64(vouched.valid_to),
            fences,
        }))
        .await;
    }

    /// Publishes a leadership's new value.
    pub(super) async fn proclaim(&mut self, proclaim: pb::SessionProclaim) -> Result<()> {
        let id = proclaim.id;
        let member = match self.leases.get_mut(&id) {
            Some(Slot::Held(member)) => member,
            // Gone while the request was on its way (lost, failed): say so, nothing else.
            None => {
                let error = Error::FailedPrecondition(format!(
                    "proclaim for id {id}, which holds no lease on this session (released, lost or failed)"
                ));
                self.failed(id, error).await;
                return Ok(());
            }
            Some(Slot::Waiting { .. }) => {
                return Err(Error::FailedPrecondition(format!(
                    "proclaim for id {id} before being elected: only the leader can proclaim; wait for acquired"
                )));
            }
        };
        let Kind::Campaign(life, stream, spec) = &mut member.kind else {
            return Err(Error::FailedPrecondition(format!(
                "proclaim for id {id}, a lock: only a campaign's leader can proclaim"
            )));
        };
        let held = Held::of(life.lease(), spec, member.fencing_token, &[]);
        match stream.handle(proclaim.value, &held).await? {
            Step::Reply(_) => {
                let value = stream.value().to_vec();
                self.send(Event::Proclaimed(pb::SessionProclaimed { id, value }))
                    .await;
            }
            Step::Lost(reason) => {
                if let Some(Slot::Held(mut member)) = self.leases.remove(&id) {
                    self.ended(id, &mut member, End::Superseded(reason)).await;
                }
            }
        }
        Ok(())
    }

    /// Lets one lease go at the client's request. An id that names nothing was lost or failed
    /// while the request was on its way: it is answered as not held.
    pub(super) async fn release(&mut self, id: u64) {
        let was_held = match self.leases.remove(&id) {
            None | Some(Slot::Waiting { .. }) => false,
            Some(Slot::Held(mut member)) => match member.kind.end(End::ReleaseAsked).await {
                Ok(Told::Released { was_held }) => was_held,
                Ok(_) => false,
                // Dropped still armed, the lease is released in the background.
                Err(error) => {
                    warn!(%error, id, "release failed; retried in the background");
                    false
                }
            },
        };
        info!(id, was_held, "released on the session");
        self.send(Event::Released(pb::SessionReleased { id, was_held }))
            .await;
    }

    /// A renewal found a member no longer ours (taken, or revoked): that lease alone is lost.
    pub(super) async fn member_lost(&mut self, serial: u64, code: LostCode) {
        let found = self.leases.iter().find_map(|(&id, slot)| match slot {
            Slot::Held(member) if member.serial == serial => Some(id),
            _ => None,
        });
        let Some(id) = found else {
            return;
        };
        if let Some(Slot::Held(mut member)) = self.leases.remove(&id) {
            let (cause, reason) = match code {
                LostCode::Revoked => ("revoked", REVOKED),
                LostCode::MaxHold => ("max_hold", crate::lease::scheduler::MAX_HOLD),
                _ => ("not_held", NOT_HELD),
            };
            let reason = match &member.kind {
                Kind::Lock(life) => life.lease().holding().lost_reason(reason.to_owned()),
                Kind::Campaign(..) => reason.to_owned(),
            };
            let end = End::Lost {
                cause,
                reason,
                code,
            };
            self.ended(id, &mut member, end).await;
        }
    }

    /// One lease ends alone as its life says (lost, superseded): the client hears of it by id.
    async fn ended(&mut self, id: u64, member: &mut Member, end: End) {
        if let Ok(Told::Lost(reason, code)) = member.kind.end(end).await {
            self.lease_lost(id, reason, code).await;
        }
    }
}

/// A session lock's fencing token per name: `name` first, then `more_names` in the order asked.
fn fences(lock: &Lock, name: &str, fencing_token: u64, more_fences: &[u64]) -> Vec<pb::NameFence> {
    match &lock.more {
        None => lock_stream::fences([name], fencing_token, more_fences),
        Some(more) => {
            let names = more.names.iter().map(LockName::as_str);
            lock_stream::fences(names, fencing_token, more_fences)
        }
    }
}
