//! A lease over several names at once, all or none (Redisson's MultiLock, Curator's
//! InterProcessMultiLock), composed from the one-name steps: no script ever spans two names,
//! so the names may live on different Redis Cluster slots, or be Redlock's on each primary.
//!
//! Taking them cannot deadlock against another caller asking for an overlapping set in any
//! order, because nobody ever waits while holding a name: the names are tried in one canonical
//! order (by bytes) without waiting; at the first one taken, what this acquisition took is
//! released, and it waits in *that* name's fair line holding nothing else; once granted it
//! keeps that one and tries the others again without waiting, until it holds all or its
//! deadline passes (docs/primitives.md, "Several names at once").
//!
//! Held, the names share one token and one scheduler entry: a renewal extends every name and
//! answers "held" only if every one is, so losing any name loses the lease as a whole, and
//! [`super::held::Lock`]'s `after_loss` releases the rest.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use super::acquire::{Acquisition, WaitingState, acquire_one};
use super::held::Lock;
use super::spec::{LeaseSpec, LockName};
use super::waiting::WaitRoom;
use crate::error::{Error, Result};
use crate::store::{LockKeys, Store, Token};

/// The names of a lease over several beyond its first: built once, shared by its clones.
pub struct MoreNames {
    /// Every name, the first included, in the order asked: for words and fences.
    pub names: Vec<LockName>,
    /// The keys of `more_names` (the first's are the lock's own), in the order asked.
    pub keys: Vec<LockKeys>,
    /// The first name a renewal found no longer ours, to say which.
    lost: Mutex<Option<LockName>>,
}

impl MoreNames {
    /// The further names `spec` asks for; `None` for a lease over one name.
    pub fn of(store: &Store, spec: &LeaseSpec) -> Option<Arc<Self>> {
        Self::over(store, &spec.name, &spec.more_names)
    }

    /// The names `more` held with `first` (checked by [`super::spec::more_names`]).
    pub fn over(store: &Store, first: &LockName, more: &[LockName]) -> Option<Arc<Self>> {
        if more.is_empty() {
            return None;
        }
        let keys = more
            .iter()
            .map(|name| store.locks.keys(name.as_str()))
            .collect();
        let names = std::iter::once(first).chain(more).cloned().collect();
        Some(Arc::new(MoreNames {
            names,
            keys,
            lost: Mutex::new(None),
        }))
    }

    /// Which name was lost, in words for the holder, once a renewal found one gone.
    pub fn lost_words(&self) -> Option<String> {
        let lost = self.lost.lock().unwrap_or_else(|p| p.into_inner());
        lost.as_ref().map(|name| {
            format!(
                "lock {:?}, one of this lease's {} names; the others are no longer renewed",
                name.as_str(),
                self.names.len()
            )
        })
    }

    fn lost_at(&self, index: usize) {
        let mut lost = self.lost.lock().unwrap_or_else(|p| p.into_inner());
        if lost.is_none() {
            *lost = self.names.get(index).cloned();
        }
    }
}

/// Takes every name of `lock` for `token`, all or none, waiting until `spec.wait` at most, as
/// the module says. `on_waiting` hears the blocking name's holder and place. Every way out
/// but success leaves nothing of ours behind once it returns a refusal (LockHeld,
/// WaitExpired); an error of Redis leaves what may have landed to the lease's drop.
pub async fn acquire_all(
    lock: &Lock,
    token: &Token,
    spec: &LeaseSpec,
    room: Option<&WaitRoom>,
    mut on_waiting: impl FnMut(&WaitingState),
) -> Result<Acquisition> {
    let names: Vec<&LockName> = spec.names().collect();
    let keys: Vec<&LockKeys> = lock.all_keys().collect();
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by(|&a, &b| {
        names[a]
            .as_str()
            .as_bytes()
            .cmp(names[b].as_str().as_bytes())
    });
    let started = Instant::now();
    let deadline = started + spec.wait;
    // Each name's fencing token and when its winning command left, once taken.
    let mut taken: Vec<Option<(u64, Instant)>> = vec![None; names.len()];
    let one = |index: usize, wait: Duration| LeaseSpec {
        name: names[index].clone(),
        wait,
        more_names: Vec::new(),
        ..spec.clone()
    };
    loop {
        let mut refused = None;
        for &index in &order {
            if taken[index].is_some() {
                continue;
            }
            let tried = acquire_one(
                &lock.locks,
                keys[index],
                token,
                &one(index, Duration::ZERO),
                room,
                |_| {},
            )
            .await;
            match tried {
                Ok(acquired) => taken[index] = Some((acquired.fencing_token, acquired.sent_at)),
                Err(error @ Error::LockHeld { .. }) => {
                    refused = Some((index, error));
                    break;
                }
                Err(error) => {
                    let_go(lock, token, &keys, &mut taken).await?;
                    return Err(error);
                }
            }
        }
        let Some((blocked, refusal)) = refused else {
            return Ok(acquisition(&taken, spec));
        };
        // Never wait holding a name: that is what makes waiting deadlock-free.
        let_go(lock, token, &keys, &mut taken).await?;
        let now = Instant::now();
        if spec.wait.is_zero() {
            return Err(refusal);
        }
        if now >= deadline {
            return Err(expired(refusal, now - started));
        }
        let granted = acquire_one(
            &lock.locks,
            keys[blocked],
            token,
            &one(blocked, deadline - now),
            room,
            &mut on_waiting,
        )
        .await?;
        taken[blocked] = Some((granted.fencing_token, granted.sent_at));
    }
}

/// Every name's fencing token, the first's in its own field; valid from the earliest send.
fn acquisition(taken: &[Option<(u64, Instant)>], spec: &LeaseSpec) -> Acquisition {
    let held: Vec<(u64, Instant)> = taken.iter().flatten().copied().collect();
    let sent_at = held
        .iter()
        .map(|&(_, at)| at)
        .min()
        .unwrap_or_else(Instant::now);
    let fencing_token = held.first().map_or(0, |&(fence, _)| fence);
    Acquisition {
        fencing_token,
        sent_at,
        attachment: 0,
        more_fences: held.iter().skip(1).map(|&(fence, _)| fence).collect(),
        // From the earliest send, so never later than any name's own ceiling in Redis.
        ceiling: spec.limits.max_hold,
        delayed: spec.limits.lock_delay.is_some(),
    }
}

/// A refusal without waiting turned into the end of a wait.
fn expired(refusal: Error, waited: Duration) -> Error {
    match refusal {
        Error::LockHeld {
            name,
            holder,
            retry_after,
        } => Error::WaitExpired {
            name,
            holder,
            waited,
            retry_after,
        },
        other => other,
    }
}

/// Releases the names this acquisition took (a clean release, each compare-and-delete by
/// token, waking its line). `Err` if Redis could not be told: the lease's drop tries again.
async fn let_go(
    lock: &Lock,
    token: &Token,
    keys: &[&LockKeys],
    taken: &mut [Option<(u64, Instant)>],
) -> Result<()> {
    let held: Vec<usize> = (0..taken.len()).filter(|&i| taken[i].is_some()).collect();
    let released = join_all(
        held.iter()
            .map(|&i| lock.locks.release(keys[i], token, true)),
    )
    .await;
    for result in released {
        result?;
    }
    taken.iter_mut().for_each(|slot| *slot = None);
    Ok(())
}

/// Resumes every name of the lease `token` holds. [`Error::NotResumable`] naming the first
/// name it no longer holds; the names resumed before it are then shortened back to the grace,
/// never released (see below), so a lease that cannot come back whole does not stay held.
pub async fn resume_all(lock: &Lock, token: &Token, spec: &LeaseSpec) -> Result<Acquisition> {
    let sent_at = Instant::now();
    let mut fences = Vec::new();
    let (mut attachment, mut attached) = (0, Vec::new());
    let (mut ceiling, mut delayed) = (None::<Duration>, false);
    let keys: Vec<&LockKeys> = lock.all_keys().collect();
    for (name, name_keys) in spec.names().zip(&keys) {
        let resumed = lock.locks.resume(name_keys, token, spec.ttl).await?;
        match resumed {
            Some(resumed) => {
                attachment = attachment.max(resumed.attachment);
                attached.push(resumed.attachment);
                fences.push(resumed.fencing_token);
                // The earliest ceiling of any name is the lease's.
                ceiling = match (ceiling, resumed.ceiling) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                delayed |= resumed.delayed;
            }
            None => {
                // Never released: the holder may believe in them until its last validity
                // (at most its grace) runs out. Shortened back to that grace instead, so the set
                // does not stay held a whole TTL (their lock-delay, if any, follows).
                let back = keys[..fences.len()].iter().zip(&attached);
                if let Some(grace) = spec.resume_grace {
                    join_all(back.map(|(keys, &attachment)| {
                        lock.locks.detach(keys, token, grace, attachment)
                    }))
                    .await;
                }
                return Err(Error::NotResumable {
                    name: name.to_string(),
                });
            }
        }
    }
    Ok(Acquisition {
        fencing_token: fences.first().copied().unwrap_or(0),
        sent_at,
        attachment,
        more_fences: fences.split_off(1.min(fences.len())),
        ceiling,
        delayed,
    })
}

/// Renews every name: `Ok(true)` only if every one is still ours; `Ok(false)` if any is not
/// (remembered, to say which), whatever the others answered; `Err` if an answer is unknown.
/// Each extend joins its node's renewal batch.
pub async fn extend_all(lock: &Lock, token: &Token, ttl: Duration) -> Result<bool> {
    let answers = join_all(
        lock.all_keys()
            .map(|keys| lock.locks.extend(keys, token, ttl)),
    )
    .await;
    if let Some(index) = answers
        .iter()
        .position(|answer| matches!(answer, Ok(false)))
    {
        if let Some(more) = &lock.more {
            more.lost_at(index);
        }
        return Ok(false);
    }
    answers
        .into_iter()
        .try_fold(true, |all, answer| Ok(all && answer?))
}

/// A unary `Extend` of every name, each never past its max-hold ceiling
/// ([`crate::store::locks::Locks::extend_capped`]): the shortest TTL set when every name is still
/// ours; `None` if any is not, or a ceiling is reached (the names extended meanwhile stay so).
pub async fn extend_all_capped(
    lock: &Lock,
    token: &Token,
    ttl: Duration,
) -> Result<Option<Duration>> {
    let answers = join_all(
        lock.all_keys()
            .map(|keys| lock.locks.extend_capped(keys, token, ttl)),
    )
    .await;
    answers.into_iter().try_fold(Some(ttl), |shortest, answer| {
        Ok(shortest.zip(answer?).map(|(a, b)| a.min(b)))
    })
}

/// Releases every name `token` still holds: `Ok(true)` if any was.
pub async fn release_all(lock: &Lock, token: &Token, clean: bool) -> Result<bool> {
    let answers = join_all(
        lock.all_keys()
            .map(|keys| lock.locks.release(keys, token, clean)),
    )
    .await;
    answers
        .into_iter()
        .try_fold(false, |any, answer| Ok(answer? || any))
}
