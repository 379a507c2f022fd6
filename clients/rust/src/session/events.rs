//! What the session's task does with each message of the server.

use tokio::sync::oneshot;
use tokio::time::Instant;
use tonic::Status;

use super::Ask;
use super::leases::{Entry, Held, Phase, Taken, lock};
use super::task::{Stop, Stream, Task};
use crate::ClientError;
use crate::held::{LeaseState, Loss, LostReason, MaxHold, vouched_until};
use crate::lease::{fences, fences_or_first};
use crate::pb;
use crate::pb::session_request::Action;
use crate::pb::session_response::Event;

impl Task {
    /// One message of the server.
    pub(super) fn event(
        &mut self,
        stream: &Stream,
        event: Event,
        closing: &mut Option<Option<oneshot::Sender<u32>>>,
    ) -> Option<Stop> {
        let mut state = lock(&self.shared);
        match event {
            Event::Waiting(_) => {}
            Event::Acquired(acquired) => {
                let id = acquired.id;
                let valid_until =
                    vouched_until(stream.opened, acquired.valid_for_ms, acquired.valid_to_ms);
                let Some(entry) = state.leases.get_mut(&id) else {
                    // Given up meanwhile.
                    stream.send(Action::Release(pb::SessionRelease { id }));
                    return None;
                };
                let stale = valid_until <= Instant::now();
                match &mut entry.phase {
                    Phase::Held(held) => {
                        held.resuming = false;
                        if acquired.fencing_token != held.fencing_token || stale {
                            let reason = format!(
                                "resumed with fencing token {} (was {}), or too late to believe",
                                acquired.fencing_token, held.fencing_token
                            );
                            if let Some(Entry {
                                phase: Phase::Held(held),
                                ..
                            }) = state.leases.remove(&id)
                            {
                                held.end(LeaseState::Lost(reason.into()), Ok(false));
                            }
                            stream.send(Action::Release(pb::SessionRelease { id }));
                        } else {
                            held.vouch(valid_until);
                            // The resume published the newest value.
                            if let Some(reply) = held.proclaiming.take() {
                                let _ = reply.send(Ok(()));
                            }
                            if held.letting_go {
                                stream.send(Action::Release(pb::SessionRelease { id }));
                            }
                        }
                    }
                    Phase::Pending(_) if stale => {
                        // Held up on its way: the lease may be someone else's by now.
                        if let Some(Entry {
                            phase: Phase::Pending(reply),
                            ..
                        }) = state.leases.remove(&id)
                        {
                            let _ = reply.send(Err(ClientError::Protocol(
                                "acquired, but the news arrived after its validity had run out"
                                    .into(),
                            )));
                        }
                        stream.send(Action::Release(pb::SessionRelease { id }));
                    }
                    phase @ Phase::Pending(_) => {
                        // The max hold counts from when it was asked for at the earliest (see
                        // MaxHold::ceiling).
                        let (name, max_hold) = match &entry.ask {
                            Ask::Lock(ask) => {
                                (&ask.name, MaxHold::of(self.open.ttl_ms, ask.max_hold_ms))
                            }
                            Ask::Campaign(campaign) => (&campaign.election, None),
                        };
                        let asked_at = entry.asked_at.unwrap_or(stream.opened);
                        let ceiling = max_hold.map(|max_hold| {
                            max_hold.ceiling(asked_at, stream.opened, acquired.valid_to_ms)
                        });
                        let fences = fences_or_first(
                            name,
                            acquired.fencing_token,
                            &fences(&acquired.fences),
                        );
                        let (held, belief) = Held::new(
                            acquired.token.clone(),
                            acquired.fencing_token,
                            valid_until,
                            ceiling,
                        );
                        let held = Phase::Held(held);
                        if let Phase::Pending(reply) = std::mem::replace(phase, held) {
                            let taken = Taken {
                                fencing_token: acquired.fencing_token,
                                fences,
                                token: acquired.token,
                                belief,
                            };
                            if reply.send(Ok(taken)).is_err() {
                                // Its caller went away: let it go.
                                state.leases.remove(&id);
                                stream.send(Action::Release(pb::SessionRelease { id }));
                            }
                        }
                    }
                }
            }
            Event::KeptAlive(kept) => {
                let valid_until = vouched_until(stream.opened, kept.valid_for_ms, kept.valid_to_ms);
                for entry in state.leases.values_mut() {
                    // A lease being released is not renewed once the server has its release.
                    if let Phase::Held(held) = &mut entry.phase
                        && !held.resuming
                        && !held.letting_go
                    {
                        held.vouch(valid_until);
                    }
                }
            }
            Event::Proclaimed(proclaimed) => {
                if let Some(Entry {
                    phase: Phase::Held(held),
                    ..
                }) = state.leases.get_mut(&proclaimed.id)
                    && let Some(reply) = held.proclaiming.take()
                {
                    let _ = reply.send(Ok(()));
                }
            }
            Event::Released(released) => {
                if let Some(Entry {
                    phase: Phase::Held(held),
                    ..
                }) = state.leases.remove(&released.id)
                {
                    let was_held = released.was_held;
                    held.end(LeaseState::Released { was_held }, Ok(was_held));
                }
            }
            Event::LeaseLost(lost) => {
                if let Some(Entry {
                    phase: Phase::Held(held),
                    ..
                }) = state.leases.remove(&lost.id)
                {
                    let loss = Loss {
                        code: LostReason::from_code(lost.code),
                        reason: lost.reason,
                    };
                    held.end(LeaseState::Lost(loss), Ok(false));
                }
            }
            Event::Failed(failed) => {
                let status = Status::with_details(
                    tonic::Code::from(failed.code),
                    failed.message,
                    failed.status.into(),
                );
                match state
                    .leases
                    .get_mut(&failed.id)
                    .map(|entry| &mut entry.phase)
                {
                    Some(Phase::Pending(_)) => {
                        if let Some(Entry {
                            phase: Phase::Pending(reply),
                            ..
                        }) = state.leases.remove(&failed.id)
                        {
                            let _ = reply.send(Err(status.into()));
                        }
                    }
                    // Not held any more: lost, or released by the server whose answer to a release
                    // the broken stream lost.
                    Some(Phase::Held(held)) if held.resuming => {
                        if let Some(Entry {
                            phase: Phase::Held(held),
                            ..
                        }) = state.leases.remove(&failed.id)
                        {
                            held.end(
                                LeaseState::Lost(
                                    format!("could not resume the lease: {status}").into(),
                                ),
                                Ok(false),
                            );
                        }
                    }
                    Some(Phase::Held(held)) => {
                        if let Some(reply) = held.proclaiming.take() {
                            let _ = reply.send(Err(status.into()));
                        }
                    }
                    None => {}
                }
            }
            Event::Closed(closed) => {
                for (_, entry) in state.leases.drain() {
                    if let Phase::Held(held) = entry.phase {
                        held.end(LeaseState::Released { was_held: true }, Ok(true));
                    }
                }
                if let Some(Some(reply)) = closing.take() {
                    let _ = reply.send(closed.released);
                }
                return Some(Stop::Ended("session closed".into()));
            }
            Event::Lost(lost) => return Some(Stop::Ended(lost.reason)),
        }
        None
    }
}
