//! The leases of a session as its task knows them: what each asked for, whether it is held yet,
//! and the belief its holder reads.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::Ask;
use super::holds::unconfirmed_release;
use crate::ClientError;
use crate::held::{Belief, Keeper, LeaseState};

/// A lease as the task knows it.
pub(super) struct Entry {
    pub(super) ask: Ask,
    pub(super) phase: Phase,
    /// The stream generation it was last asked for on (`None`: not yet).
    pub(super) sent: Option<u64>,
    /// When it was last asked for while pending: it is taken no sooner (its max hold counts
    /// from then at the earliest).
    pub(super) asked_at: Option<Instant>,
}

/// What the caller of `take` gets.
pub(super) struct Taken {
    pub(super) fencing_token: u64,
    pub(super) fences: Vec<(String, u64)>,
    pub(super) token: String,
    pub(super) belief: Belief,
}

pub(super) enum Phase {
    /// Asked for; the caller waits for the answer.
    Pending(oneshot::Sender<Result<Taken, ClientError>>),
    Held(Held),
}

pub(super) struct Held {
    pub(super) token: String,
    pub(super) fencing_token: u64,
    /// Until when it is believed, as its holder reads it too (also after the lease ended).
    pub(super) keeper: Keeper,
    /// Asked for again by its token on the current stream, not yet confirmed there.
    pub(super) resuming: bool,
    /// Its holder let it go: released on the current stream once held there (a release in
    /// flight when a stream breaks is sent again once the lease is resumed on the next).
    pub(super) letting_go: bool,
    pub(super) releasing: Option<Releasing>,
    pub(super) proclaiming: Option<oneshot::Sender<Result<(), ClientError>>>,
}

/// Whoever waits for a release's answer.
pub(super) type Releasing = oneshot::Sender<Result<bool, ClientError>>;

/// The session's leases, shared by its holders and its task.
pub(super) struct Shared {
    pub(super) state: Mutex<State>,
}

pub(super) struct State {
    pub(super) next_id: u64,
    pub(super) leases: HashMap<u64, Entry>,
    /// Why the session ended, once it has.
    pub(super) ended: Option<String>,
}

impl Shared {
    /// A session without leases yet.
    pub(super) fn new() -> Self {
        Shared {
            state: Mutex::new(State {
                next_id: 1,
                leases: HashMap::new(),
                ended: None,
            }),
        }
    }
}

pub(super) fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Held {
    /// A lease just taken, vouched for until `valid_until` (never past `ceiling`, its max
    /// hold), and its holder's side.
    pub(super) fn new(
        token: String,
        fencing_token: u64,
        valid_until: Instant,
        ceiling: Option<Instant>,
    ) -> (Held, Belief) {
        let (keeper, belief) = Keeper::new(valid_until, ceiling);
        let held = Held {
            token,
            fencing_token,
            keeper,
            resuming: false,
            letting_go: false,
            releasing: None,
            proclaiming: None,
        };
        (held, belief)
    }

    /// The server now vouches for the lease until `valid_until`.
    pub(super) fn vouch(&mut self, valid_until: Instant) {
        self.keeper.vouch(valid_until);
    }

    /// The lease ended as `state` says: its holder is told, and whoever waits on it answered
    /// (a release with `released`).
    pub(super) fn end(self, state: LeaseState, released: Result<bool, ClientError>) {
        self.keeper.end(state);
        if let Some(reply) = self.releasing {
            let _ = reply.send(released);
        }
        if let Some(reply) = self.proclaiming {
            let _ = reply.send(Err(ClientError::Protocol("the leadership is lost".into())));
        }
    }

    /// The lease's validity ran out unconfirmed: lost, by this process's clock (at its max
    /// hold, or for `reason`).
    pub(super) fn expired(self, reason: String) {
        let released = if self.releasing.is_some() {
            Err(unconfirmed_release())
        } else {
            Ok(false)
        };
        let loss = self.keeper.ran_out(reason);
        self.end(LeaseState::Lost(loss), released);
    }
}

/// Until when each held lease is vouched for.
pub(super) fn held_validities(shared: &Shared) -> Vec<Instant> {
    lock(shared)
        .leases
        .values()
        .filter_map(|entry| match &entry.phase {
            Phase::Held(held) => Some(held.keeper.valid_until()),
            Phase::Pending(_) => None,
        })
        .collect()
}

/// Held leases whose validity ran out unconfirmed are lost for `reason` (a release waiting on
/// one is answered as unconfirmed); their ids.
pub(super) fn expire_due(shared: &Shared, reason: &str) -> Vec<u64> {
    let now = Instant::now();
    let mut state = lock(shared);
    let due: Vec<u64> = state
        .leases
        .iter()
        .filter_map(|(&id, entry)| match &entry.phase {
            Phase::Held(held) if held.keeper.valid_until() <= now => Some(id),
            _ => None,
        })
        .collect();
    for &id in &due {
        if let Some(Entry {
            phase: Phase::Held(held),
            ..
        }) = state.leases.remove(&id)
        {
            held.expired(reason.to_owned());
        }
    }
    due
}
