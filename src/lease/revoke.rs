//! Revocation: an operator ends holdings by force, and the holders hear it at once, on
//! whichever server carries them.
//!
//! The store deletes what is revoked and announces the lock's key on one channel per key
//! prefix ([`crate::store::Locks::on_revocation`]); every server listens from its start and
//! hands each key to its renewal scheduler, which renews that lock's local leases at once
//! ([`Scheduler::revoked`]). A revoked lease's renewal answers `0`, so it is lost with
//! [`LostCode::Revoked`](super::scheduler::LostCode::Revoked) through the one path every loss
//! takes; a lease of the same name that was not revoked (another permit) renews and goes on. A
//! server that misses the message (or whose renewal answers first) learns at the lease's next
//! renewal, still as revoked: the store records the revoked tokens for as long as their leases
//! had left, and a renewal that finds its key gone reads that once. A
//! revoked token can never be resumed: its key is gone.

use super::scheduler::Scheduler;
use super::spec::LockName;
use crate::error::Result;
use crate::store::Store;
use crate::store::elections::Leader;
use crate::store::locks::HolderState;

/// Hands every revocation announced under the store's prefix to `scheduler`, until the server
/// stops. Subscribed before this returns.
pub async fn listen(store: &Store, scheduler: &Scheduler) -> Result<()> {
    let scheduler = scheduler.clone();
    store
        .locks
        .on_revocation(move |lock| scheduler.revoked(lock))
        .await
}

/// Ends every holding of lock `name` (`fencing_token` 0), or the one with that fencing token.
/// Returns what was ended; empty if nothing was.
pub async fn revoke_lock(
    store: &Store,
    scheduler: &Scheduler,
    name: &LockName,
    fencing_token: u64,
) -> Result<Vec<HolderState>> {
    let keys = store.locks.keys(name.as_str());
    let ended = store.locks.revoke(&keys, fencing_token).await?;
    if !ended.is_empty() {
        // This server's own leases need not wait for the message to come back.
        scheduler.revoked(keys.lock());
    }
    Ok(ended)
}

/// Ends election `name`'s leadership (`term` 0: whichever leads), as a loss does: the lease
/// deleted (the next candidate is elected with a larger term), then the announcement retired,
/// which observers hear. Returns the leader ended (its value if it had announced it), if any.
pub async fn revoke_leader(
    store: &Store,
    scheduler: &Scheduler,
    name: &LockName,
    term: u64,
) -> Result<Option<Leader>> {
    let elections = &store.elections;
    let keys = elections.keys(name.as_str());
    let before = elections.retire_stale_leader(&keys).await?.leader;
    let target = match (term, &before) {
        (0, Some(leader)) => leader.term,
        (term, _) => term,
    };
    let ended = store.locks.revoke(&keys.lease, target).await?;
    let Some(revoked) = ended.first() else {
        return Ok(None);
    };
    scheduler.revoked(keys.lease.lock());
    elections.retire_stale_leader(&keys).await?;
    let value = before
        .filter(|leader| leader.term == revoked.fencing_token)
        .map(|leader| leader.value)
        .unwrap_or_default();
    Ok(Some(Leader {
        term: revoked.fencing_token,
        value,
    }))
}
