//! A lease and a leadership held on a session, as their holders use them.

use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, sleep_until};

use super::Command;
use crate::ClientError;
use crate::held::Belief;

/// A lease held on a session. Dropping it releases it.
pub struct SessionLease {
    pub(super) id: u64,
    pub(super) fencing_token: u64,
    pub(super) fences: Vec<(String, u64)>,
    pub(super) token: String,
    /// Lost or not, and until when the session's task last had it vouched for.
    pub(super) belief: Belief,
    pub(super) commands: mpsc::UnboundedSender<Command>,
    pub(super) released: bool,
}

impl SessionLease {
    /// The fencing token of this acquisition (a leadership's term).
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// Each name's fencing token, in the order asked (as [`crate::LeaseGuard::fences`]).
    pub fn fences(&self) -> &[(String, u64)] {
        &self.fences
    }

    /// The acquisition's secret (never log it).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Completes with the reason once this lease is lost: the server said so (its key was lost,
    /// or the whole session), the session could not be resumed in time, or the validity last
    /// confirmed ran out by this process's clock.
    pub async fn lost(&self) -> String {
        self.belief.lost().await
    }

    /// As `lost`, with why typed: [`crate::LostReason::Revoked`] when an operator revoked it.
    pub async fn loss(&self) -> crate::Loss {
        self.belief.loss().await
    }

    /// Whether the lease is known to be lost already.
    pub fn is_lost(&self) -> bool {
        self.belief.is_lost()
    }

    /// Until when the server last vouched for the lease (by its `acquired`, or the session's
    /// latest confirmation since), by this process's clock: the lease is believed no longer than
    /// this without another confirmation. Still the last such instant once the lease ended.
    pub fn valid_until(&self) -> Instant {
        self.belief.valid_until()
    }

    /// Releases the lease and waits for the server to confirm. `Ok(false)`: it was not held by
    /// then (lost; or released by a server that stopped before its answer arrived). A release
    /// in flight when the session's server stops or crashes is carried out on the resumed
    /// session. The wait never outlasts the lease's validity: unconfirmed by then, it ends with
    /// an error saying so (the lease is no longer held by then either way).
    pub async fn release(mut self) -> Result<bool, ClientError> {
        self.released = true;
        let (reply, mut answer) = oneshot::channel();
        let _ = self.commands.send(Command::Release(self.id, Some(reply)));
        if self.is_lost() {
            return Ok(false);
        }
        // The validity moves only if the lease is resumed on another server meanwhile (the task
        // stops vouching for a lease being released).
        let mut valid = self.belief.validity();
        let mut following = true;
        loop {
            let until = *valid.borrow_and_update();
            tokio::select! {
                biased;
                answer = &mut answer => {
                    return answer.unwrap_or_else(|_| {
                        Err(ClientError::Protocol("the session ended before the release".into()))
                    });
                }
                changed = valid.changed(), if following => following = changed.is_ok(),
                () = sleep_until(until) => return Err(unconfirmed_release()),
            }
        }
    }
}

/// A release not confirmed before the lease's validity ran out.
pub(super) fn unconfirmed_release() -> ClientError {
    ClientError::Protocol(
        "the release was not confirmed before the lease's validity ran out (the lease is no longer held by then)"
            .into(),
    )
}

impl Drop for SessionLease {
    fn drop(&mut self) {
        if !self.released {
            let _ = self.commands.send(Command::Release(self.id, None));
        }
    }
}

impl std::fmt::Debug for SessionLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionLease")
            .field("id", &self.id)
            .field("fencing_token", &self.fencing_token)
            .finish_non_exhaustive()
    }
}

/// A leadership held on a session. Dropping it resigns.
#[derive(Debug)]
pub struct SessionLeader {
    pub(super) lease: SessionLease,
}

impl SessionLeader {
    /// The leader's term: larger for every new leader of the election.
    pub fn term(&self) -> u64 {
        self.lease.fencing_token
    }

    /// Completes with the reason once the leadership is lost.
    pub async fn lost(&self) -> String {
        self.lease.lost().await
    }

    /// As `lost`, with why typed.
    pub async fn loss(&self) -> crate::Loss {
        self.lease.loss().await
    }

    /// Publishes a new value.
    pub async fn proclaim(&self, value: impl Into<Vec<u8>>) -> Result<(), ClientError> {
        let (reply, answer) = oneshot::channel();
        let _ = self
            .lease
            .commands
            .send(Command::Proclaim(self.lease.id, value.into(), reply));
        answer
            .await
            .map_err(|_| ClientError::Protocol("the session ended before the proclaim".into()))?
    }

    /// Steps down; `Ok(false)` if it was no longer leader.
    pub async fn resign(self) -> Result<bool, ClientError> {
        self.lease.release().await
    }
}
