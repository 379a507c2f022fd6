//! A session's leases, renewed together as one entry of the [`super::scheduler`].
//!
//! A session holds any number of leases of one TTL. Scheduling each on its own would cost an
//! entry, a due instant and a settled answer per lease, and would confirm them to the client one
//! by one. As a group they fall due at one instant, go to the store's batches together (one
//! script per node for the lot), and are confirmed by one message when every one has answered.
//!
//! Each member keeps its own rules: its validity counts from before its own command was sent
//! (a lease acquired while a round was in flight is not covered by that round, so the group
//! vouches for the earliest validity of its members, never the round's alone), and a `0` loses
//! that member alone, reported to the session by its key. A round in which some member got no
//! answer is a failed round for the group: it is retried soon, and if none succeeds before the
//! group's validity ends, every member is lost with it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::future::{BoxFuture, join_all};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::renewal::drift;
use super::scheduler::{LostCode, Renewable, revoked_lately};
use crate::error::Result;
use crate::store::{LockKeys, Locks, Token};

/// A group's member, by the key the session gave it.
struct Member {
    lease: Arc<dyn Renewable>,
    /// Until when this member is known to be held: from before its last confirmed command.
    valid_until: Instant,
    /// Its max-hold ceiling: the first round at or after it lets it go, told MAX_HOLD.
    ceiling: Option<Instant>,
}

/// The leases of one session. Shared by the session and its scheduler entry.
pub struct RenewalGroup {
    members: Mutex<HashMap<u64, Member>>,
    /// The keys of members a renewal found no longer ours, and why.
    lost: mpsc::UnboundedSender<(u64, LostCode)>,
    /// Lock keys whose revocation was heard, and when: a member of one found not held is told
    /// it was revoked. Forgotten once a round sent after it has answered.
    revoked: Mutex<HashMap<String, Instant>>,
}

impl RenewalGroup {
    /// An empty group, and where it reports the keys of members found lost.
    pub fn new() -> (Arc<Self>, mpsc::UnboundedReceiver<(u64, LostCode)>) {
        let (lost, losses) = mpsc::unbounded_channel();
        let group = RenewalGroup {
            members: Mutex::new(HashMap::new()),
            lost,
            revoked: Mutex::new(HashMap::new()),
        };
        (Arc::new(group), losses)
    }

    fn members(&self) -> MutexGuard<'_, HashMap<u64, Member>> {
        // A panic while holding the lock leaves plain data behind; carry on with it.
        self.members
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn revocations(&self) -> MutexGuard<'_, HashMap<String, Instant>> {
        self.revoked
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Why a member of `lease` found not held is lost.
    fn loss_code(&self, lease: &Arc<dyn Renewable>) -> LostCode {
        // A member is a lease (never a group), whose `revoked` only answers: any of its keys.
        let revoked = lease
            .lock_claims()
            .iter()
            .any(|(_, keys, _)| self.revocations().contains_key(keys.lock()));
        if revoked {
            LostCode::Revoked
        } else {
            LostCode::Taken
        }
    }

    /// Renews `lease` with the others from the next round on; it is held until `valid_until`,
    /// and renewed until its max-hold `ceiling`, if any.
    pub fn join(
        &self,
        key: u64,
        lease: Arc<dyn Renewable>,
        valid_until: Instant,
        ceiling: Option<Instant>,
    ) {
        let member = Member {
            lease,
            valid_until,
            ceiling,
        };
        self.members().insert(key, member);
    }

    /// Stops renewing the member of `key`.
    pub fn leave(&self, key: u64) {
        self.members().remove(&key);
    }

    /// How long from `now` every member is known to be held (`None` without members).
    pub fn valid_for(&self, now: Instant) -> Option<Duration> {
        self.members()
            .values()
            .map(|member| member.valid_until.saturating_duration_since(now))
            .min()
    }
}

impl Renewable for RenewalGroup {
    /// One round: every member's extend at once (the store batches them per node). `Ok(true)`
    /// once every member answered; members that answered `0` have left the group and are
    /// reported. `Err` if any member's answer is unknown: the round is retried as a whole.
    fn renew(self: Arc<Self>, ttl: Duration) -> BoxFuture<'static, Result<bool>> {
        Box::pin(async move {
            let sent_at = Instant::now();
            // Members at their max-hold are not renewed again: they leave, told MAX_HOLD (their
            // keys expire by their TTL, still held when their holders hear it).
            let round: Vec<(u64, Arc<dyn Renewable>)> = {
                let mut members = self.members();
                members.retain(|&key, member| {
                    let reached = member.ceiling.is_some_and(|ceiling| ceiling <= sent_at);
                    if reached {
                        let _ = self.lost.send((key, LostCode::MaxHold));
                    }
                    !reached
                });
                members
                    .iter()
                    .map(|(&key, member)| (key, member.lease.clone()))
                    .collect()
            };
            let answers = renew_all(&round, ttl).await;
            let mut unknown = None;
            let mut gone = Vec::new();
            {
                let mut members = self.members();
                for ((key, lease), answer) in round.into_iter().zip(answers) {
                    // A member released (or replaced under its key) meanwhile is not this one.
                    let current = members
                        .get_mut(&key)
                        .filter(|member| Arc::ptr_eq(&member.lease, &lease));
                    match (answer, current) {
                        (Ok(true), Some(member)) => {
                            member.valid_until = sent_at + ttl - drift(ttl);
                        }
                        (Ok(false), Some(_)) => {
                            members.remove(&key);
                            gone.push((key, lease));
                        }
                        (Err(error), Some(_)) => unknown = Some(error),
                        (_, None) => {}
                    }
                }
            }
            // Told outside the lock: whether a member was revoked may take a read.
            for (key, lease) in gone {
                lease.not_held();
                let code = match self.loss_code(&lease) {
                    LostCode::Taken if revoked_lately(&lease).await => LostCode::Revoked,
                    code => code,
                };
                let _ = self.lost.send((key, code));
            }
            if unknown.is_none() {
                // Every member of a revoked lock has answered a round sent after it was heard.
                self.revocations().retain(|_, heard| *heard > sent_at);
            }
            match unknown {
                Some(error) => Err(error),
                None => Ok(true),
            }
        })
    }

    /// Never: members are lost one by one, inside the round.
    fn not_held(&self) {}

    fn next_ceiling(&self) -> Option<Instant> {
        self.members()
            .values()
            .filter_map(|member| member.ceiling)
            .min()
    }

    fn revoked(&self, lock: &str) -> bool {
        let held = self
            .members()
            .values()
            .any(|member| member.lease.revoked(lock));
        if held {
            self.revocations().insert(lock.to_owned(), Instant::now());
        }
        held
    }
}

/// Renews every lease of a round: leases of one store in one request to its batches (no
/// future, reply channel or queue message of their own), anything else each on its own.
async fn renew_all(round: &[(u64, Arc<dyn Renewable>)], ttl: Duration) -> Vec<Result<bool>> {
    let claims: Option<Vec<(&Locks, &LockKeys, &Token)>> =
        round.iter().map(|(_, lease)| lease.claim()).collect();
    match claims {
        Some(claims) if !claims.is_empty() => {
            let locks = claims[0].0;
            let leases: Vec<(&LockKeys, &Token)> = claims
                .iter()
                .map(|&(_, keys, token)| (keys, token))
                .collect();
            locks.extend_all(&leases, ttl).await
        }
        _ => join_all(round.iter().map(|(_, lease)| lease.clone().renew(ttl))).await,
    }
}

impl std::fmt::Debug for RenewalGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RenewalGroup")
            .field("members", &self.members().len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use tokio::sync::Notify;

    /// A lease whose renewal answers as told, once let through.
    struct Answering {
        answer: fn() -> Result<bool>,
        gate: Option<Arc<Notify>>,
    }

    impl Renewable for Answering {
        fn renew(self: Arc<Self>, _: Duration) -> BoxFuture<'static, Result<bool>> {
            Box::pin(async move {
                if let Some(gate) = &self.gate {
                    gate.notified().await;
                }
                (self.answer)()
            })
        }

        fn not_held(&self) {}
    }

    fn lease(answer: fn() -> Result<bool>) -> Arc<dyn Renewable> {
        Arc::new(Answering { answer, gate: None })
    }

    const TTL: Duration = Duration::from_secs(3);

    /// The group's twin of `renewal::validity_counts_from_the_send_not_the_reply`: a round
    /// whose answer comes late (Redis slow to reply, the reply held up on the way) vouches for
    /// its members from before it was sent, since Redis may have started each key's TTL at any
    /// moment after the send. What the session tells its client is the earliest of this and
    /// the scheduler's own clock, so this is the only place a reply-time count would show.
    #[tokio::test(start_paused = true)]
    async fn members_validity_counts_from_the_send_not_the_reply() {
        let (group, _lost) = RenewalGroup::new();
        let gate = Arc::new(Notify::new());
        let slow: Arc<dyn Renewable> = Arc::new(Answering {
            answer: || Ok(true),
            gate: Some(gate.clone()),
        });
        let start = Instant::now();
        group.join(1, slow, start, None);
        // The round is sent at `start` (time is paused: nothing moves it until both wait), and
        // its answer arrives a second later.
        let late = Duration::from_secs(1);
        let answer_late = async {
            tokio::time::sleep(late).await;
            gate.notify_one();
        };
        let (answer, ()) = tokio::join!(group.clone().renew(TTL), answer_late);
        assert!(answer.unwrap());
        let answered = Instant::now();
        assert!(answered >= start + late, "the answer was not late");
        let valid_for = group.valid_for(answered);
        assert_eq!(
            valid_for,
            Some((start + TTL - drift(TTL)).saturating_duration_since(answered)),
            "the members' validity must count from the send, not from the answer"
        );
    }

    #[tokio::test]
    async fn a_member_not_held_leaves_alone_and_the_rest_are_renewed() {
        let (group, mut lost) = RenewalGroup::new();
        let now = Instant::now();
        let early = now + Duration::from_millis(100);
        group.join(1, lease(|| Ok(true)), early, None);
        group.join(2, lease(|| Ok(false)), early, None);
        assert!(group.clone().renew(TTL).await.unwrap());
        assert_eq!(lost.try_recv().unwrap(), (2, LostCode::Taken));
        assert!(lost.try_recv().is_err());
        // Member 1 is vouched for from this round, a TTL less its drift.
        let valid_for = group.valid_for(now).unwrap();
        assert!(valid_for > Duration::from_secs(2), "{valid_for:?}");
        group.leave(1);
        assert_eq!(group.valid_for(now), None);
    }

    #[tokio::test]
    async fn an_unknown_answer_fails_the_round_but_not_the_answered_members() {
        let (group, mut lost) = RenewalGroup::new();
        let now = Instant::now();
        group.join(1, lease(|| Ok(true)), now, None);
        group.join(2, lease(|| Err(Error::invalid("no answer"))), now, None);
        assert!(group.clone().renew(TTL).await.is_err());
        assert!(
            lost.try_recv().is_err(),
            "nobody is lost for want of an answer"
        );
        // The group vouches for its earliest member: 2 was not renewed.
        assert_eq!(group.valid_for(now), Some(Duration::ZERO));
    }

    #[tokio::test]
    async fn a_member_that_joined_during_a_round_keeps_its_own_validity() {
        let (group, _lost) = RenewalGroup::new();
        let gate = Arc::new(Notify::new());
        let slow: Arc<dyn Renewable> = Arc::new(Answering {
            answer: || Ok(true),
            gate: Some(gate.clone()),
        });
        let start = Instant::now();
        group.join(1, slow, start, None);
        let round = tokio::spawn(group.clone().renew(TTL));
        tokio::task::yield_now().await;
        // Acquired while the round is in flight: the round does not cover it.
        let own = start + Duration::from_millis(500);
        group.join(2, lease(|| Ok(true)), own, None);
        // Replaced under a key the round holds: the old answer is not the new lease's.
        group.join(1, lease(|| Ok(true)), own, None);
        gate.notify_one();
        assert!(round.await.unwrap().unwrap());
        assert_eq!(group.valid_for(start), Some(Duration::from_millis(500)));
    }
}
