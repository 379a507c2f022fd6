//! A lease held in Redis, and let go exactly once on every way out (its renewals are the
//! server's [`super::scheduler`]'s).
//!
//! [`HeldLease`] is claimed *before* the first acquire command leaves: an attempt whose reply
//! never came (a timeout, a client that left mid-wait) may still have landed in Redis, so from
//! that moment every exit must let go. Its `Drop` lets go in the background unless an explicit
//! [`HeldLease::release`] did, or the lease is known not to be held ([`HeldLease::disarm`]), so
//! no branch of any stream can forget it. A resume is the exception: it creates nothing, so it
//! is armed only once resumed ([`HeldLease::claim_held`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::scheduler::Renewable;
use super::several::{self, MoreNames};
use super::spec::{LeaseSpec, LockName};
use crate::error::Result;
use crate::store::{ElectionKeys, Elections, LockKeys, Locks, Store, Token};

/// What one lease holds in Redis and how it lets go: one implementation per key space (a lock,
/// an election's leadership; a semaphore's permit next), so acquiring, renewing and the exit
/// guard are written once.
pub trait Holding: Clone + Send + Sync + 'static {
    /// What a lease on `name` holds in `store`.
    fn at(store: &Store, name: &LockName) -> Self;
    /// What the lease `spec` asks for holds in `store` (a lock may hold several names).
    fn of(store: &Store, spec: &LeaseSpec) -> Self {
        Self::at(store, &spec.name)
    }
    /// The lock behind the lease: what is acquired and renewed.
    fn lock(&self) -> &Lock;
    fn lock_mut(&mut self) -> &mut Lock;
    /// Lets go of the lease. `Ok(false)`: it was not, or no longer, ours.
    /// `clean`: the holder's own release (the name is free at once); otherwise its lock-delay,
    /// if any, runs from now ([`crate::store::locks::Locks::release`]).
    fn release(&self, token: &Token, clean: bool) -> impl Future<Output = Result<bool>> + Send;
    /// What is left to do once the lease of `token` is lost, if anything: never a release of
    /// what its holder may believe in (see [`HeldLease::lost`]).
    fn after_loss(
        &self,
        token: &Token,
    ) -> Option<impl Future<Output = Result<()>> + Send + 'static>;
}

/// A plain lock, and the lock operations.
#[derive(Clone)]
pub struct Lock {
    pub locks: Locks,
    pub keys: LockKeys,
    /// The further names of a lease over several at once (`None`: one name, the usual case,
    /// at the cost of a pointer).
    pub more: Option<Arc<MoreNames>>,
}

impl Holding for Lock {
    fn at(store: &Store, name: &LockName) -> Self {
        let keys = store.locks.keys(name.as_str());
        let locks = store.locks.clone();
        Lock {
            locks,
            keys,
            more: None,
        }
    }

    fn of(store: &Store, spec: &LeaseSpec) -> Self {
        let mut lock = Self::at(store, &spec.name);
        lock.more = MoreNames::of(store, spec);
        lock
    }

    fn lock(&self) -> &Lock {
        self
    }

    fn lock_mut(&mut self) -> &mut Lock {
        self
    }

    async fn release(&self, token: &Token, clean: bool) -> Result<bool> {
        several::release_all(self, token, clean).await
    }

    /// Nothing, even for a lease over several names whose other names still hold: its holder
    /// believes in them until it hears `lost` (or its validity runs out), so releasing them now
    /// would let the next holder in while it may still be writing. They expire by their TTL,
    /// no longer renewed (and their lock-delay, if any, follows).
    fn after_loss(&self, _: &Token) -> Option<impl Future<Output = Result<()>> + Send + 'static> {
        None::<std::future::Ready<Result<()>>>
    }
}

/// An election's leadership: the lease (a lock in the election's key space), and the
/// announcement retired after it.
#[derive(Clone)]
pub struct Leadership {
    pub lease: Lock,
    pub elections: Elections,
    pub election: ElectionKeys,
}

impl Holding for Leadership {
    fn at(store: &Store, name: &LockName) -> Self {
        let election = store.elections.keys(name.as_str());
        Leadership {
            lease: Lock {
                locks: store.locks.clone(),
                keys: election.lease.clone(),
                more: None,
            },
            elections: store.elections.clone(),
            election,
        }
    }

    fn lock(&self) -> &Lock {
        &self.lease
    }

    fn lock_mut(&mut self) -> &mut Lock {
        &mut self.lease
    }

    /// Releases the lease (the next candidate is woken), then retires the announcement unless a
    /// successor already replaced it, so no exit leaves a stale leader behind.
    async fn release(&self, token: &Token, clean: bool) -> Result<bool> {
        let was_held = self.lease.release(token, clean).await?;
        self.elections.retire_stale_leader(&self.election).await?;
        Ok(was_held)
    }

    /// Observers hear there is no leader now (the announcement is left alone while the lease
    /// key is still ours, and then retired by whoever reads it after it expires).
    fn after_loss(&self, _: &Token) -> Option<impl Future<Output = Result<()>> + Send + 'static> {
        let (elections, election) = (self.elections.clone(), self.election.clone());
        Some(async move { elections.retire_stale_leader(&election).await.map(|_| ()) })
    }
}

/// A lease that is, or may be, held.
pub struct HeldLease<H: Holding> {
    claim: Arc<Claim<H>>,
    /// Whether dropping this must still let go.
    armed: bool,
}

/// What a lease holds, and its token: shared with the renewal scheduler while held.
struct Claim<H> {
    holding: H,
    token: Token,
}

impl<H: Holding> Renewable for Claim<H> {
    fn renew(self: Arc<Self>, ttl: Duration) -> BoxFuture<'static, Result<bool>> {
        Box::pin(async move {
            let lock = self.holding.lock();
            match &lock.more {
                None => lock.locks.extend(&lock.keys, &self.token, ttl).await,
                Some(_) => several::extend_all(lock, &self.token, ttl).await,
            }
        })
    }

    fn not_held(&self) {
        let lock = self.holding.lock();
        for keys in lock.all_keys() {
            lock.locks.leave_in_background(keys.clone(), String::new());
        }
    }

    /// A lease over several names is renewed on its own (every name, or it is lost).
    fn claim(&self) -> Option<(&Locks, &LockKeys, &Token)> {
        let Lock {
            locks, keys, more, ..
        } = self.holding.lock();
        more.is_none().then_some((locks, keys, &self.token))
    }

    fn lock_claims(&self) -> Vec<(&Locks, &LockKeys, &Token)> {
        let lock = self.holding.lock();
        lock.all_keys()
            .map(|keys| (&lock.locks, keys, &self.token))
            .collect()
    }

    fn revoked(&self, lock: &str) -> bool {
        self.holding
            .lock()
            .all_keys()
            .any(|keys| keys.lock() == lock)
    }
}

impl Lock {
    /// The keys of every name: the first, then `more_names` in the order asked.
    pub fn all_keys(&self) -> impl Iterator<Item = &LockKeys> {
        let more = self.more.as_deref().map_or(&[][..], |more| &more.keys[..]);
        std::iter::once(&self.keys).chain(more)
    }

    /// `reason` for a loss, naming the name lost when the lease holds several.
    pub fn lost_reason(&self, reason: String) -> String {
        match self.more.as_ref().and_then(|more| more.lost_words()) {
            Some(words) => format!("{reason} ({words})"),
            None => reason,
        }
    }
}

impl<H: Holding> HeldLease<H> {
    /// Claims the lease for `token` before the first attempt to take it.
    pub fn claim(holding: H, token: Token) -> Self {
        HeldLease {
            claim: Arc::new(Claim { holding, token }),
            armed: true,
        }
    }

    pub fn holding(&self) -> &H {
        &self.claim.holding
    }

    pub fn token(&self) -> &Token {
        &self.claim.token
    }

    /// Claims a lease its holder already holds, to resume it: nothing to let go on drop until
    /// it is resumed ([`HeldLease::arm`]). A resume creates nothing, so one given up, or whose
    /// answer never came, must never release the lease its holder believes in.
    pub fn claim_held(holding: H, token: Token) -> Self {
        HeldLease {
            claim: Arc::new(Claim { holding, token }),
            armed: false,
        }
    }

    /// Taken with a lock-delay (or resumed with one): its delay key is renewed with it, to
    /// outlive it by the delay. Called before it is renewed by anyone (the claim is not shared
    /// yet; if it were, the delay key would still expire the delay after the lease's last TTL
    /// it was set to, only earlier than the lease's renewed one).
    pub fn keep_lock_delay(&mut self) {
        if let Some(claim) = Arc::get_mut(&mut self.claim) {
            let lock = claim.holding.lock_mut();
            lock.keys.kept_with = Some(lock.keys.delay());
            // Every name of a lease over several has its own delay key, renewed with its name.
            if let Some(more) = lock.more.as_mut().and_then(Arc::get_mut) {
                for keys in &mut more.keys {
                    keys.kept_with = Some(keys.delay());
                }
            }
        }
    }

    /// Resumed: from now on this stream's, let go on every way out as a lease it took.
    pub fn arm(&mut self) {
        self.armed = true;
    }

    /// What the renewal scheduler needs to keep this lease alive.
    pub fn renewable(&self) -> Arc<dyn Renewable> {
        self.claim.clone()
    }

    /// Nothing to let go on drop: Redis said the lease is someone else's, or the caller took
    /// over letting go (a unary `Acquire` hands the token to its client).
    pub fn disarm(&mut self) {
        self.armed = false;
    }

    /// The lease is lost (its renewals could not confirm it): never released, as its client
    /// believes in it until it reads the news or the validity last confirmed to it runs out,
    /// and a release would let the next holder in before either. (With Redlock, a lease lost
    /// for want of a majority still holds a minority of keys, renewed moments ago.) What is
    /// still ours expires by its TTL, after that validity; a resumable lease may also have been
    /// resumed elsewhere with the same token meanwhile.
    pub fn lost(&mut self) {
        self.armed = false;
        if let Some(work) = self.holding().after_loss(self.token()) {
            let span = tracing::info_span!("after_loss", lease = self.token().lease_id());
            let connection = self.holding().lock().locks.connection();
            connection.in_background(span, "could not retire a lost leader", work);
        }
    }

    /// Its stream broke and the lease may be resumed: it now ends after `grace` unless resumed
    /// (and is left alone if it was resumed elsewhere since `attachment`). Never released by
    /// drop after this: if Redis could not be told, the lease expires by its TTL.
    pub async fn detach(&mut self, grace: Duration, attachment: u64) {
        self.armed = false;
        let lock = self.holding().lock();
        let detached = futures_util::future::try_join_all(
            lock.all_keys()
                .map(|keys| lock.locks.detach(keys, self.token(), grace, attachment)),
        );
        match detached.await {
            Ok(_) => tracing::info!(grace_ms = grace.as_millis(), "kept for resumption"),
            Err(error) => {
                tracing::warn!(%error, "could not shorten the lease to its grace; it expires by its TTL");
            }
        }
    }

    /// Lets go now; `clean` if its holder asked (see [`Holding::release`]). `Ok(false)`: the
    /// lease was no longer ours. On an error the drop still tries.
    pub async fn release(&mut self, clean: bool) -> Result<bool> {
        let was_held = self.holding().release(self.token(), clean).await?;
        self.armed = false;
        Ok(was_held)
    }
}

impl<H: Holding> Drop for HeldLease<H> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let claim = self.claim.clone();
        // Its key named: a unary `Acquire` without a wait runs in no span of its own.
        let key = claim.holding.lock().keys.lock();
        let span = tracing::info_span!("release", key, lease = claim.token.lease_id());
        self.holding().lock().locks.connection().in_background(
            span,
            "release failed; the lease expires by its TTL",
            // Dropped armed: its stream ended without a release (or a refusal raced a grant).
            async move { claim.holding.release(&claim.token, false).await.map(|_| ()) },
        );
    }
}
