//! What the page is sent: the `List` answers as JSON, filtered by the page's name prefix.
//!
//! Fencing tokens and terms are sent as strings: they can pass 2^53, past which JavaScript's
//! numbers round, and a Revoke must name the exact token.

use serde::Serialize;

use crate::pb;

/// One state of the page: everything it shows.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct State {
    pub locks: Vec<LockView>,
    /// More locks are held than were listed (`List` stops at 1,000, or its scan budget).
    pub locks_truncated: bool,
    pub elections: Vec<ElectionView>,
    pub elections_truncated: bool,
    /// Why elections could not be listed (e.g. refused with `--redlock`), while locks could.
    pub elections_error: Option<String>,
    /// How often the server reads the state again for a live page.
    pub poll_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LockView {
    pub name: String,
    /// `exclusive` (a lock, or a semaphore when `limit` > 1) or `shared` (readers).
    pub mode: &'static str,
    pub limit: u32,
    pub waiting: u32,
    /// Every holder, oldest fencing token first.
    pub holders: Vec<HolderView>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HolderView {
    pub holder: String,
    pub fencing_token: String,
    pub ttl_ms: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ElectionView {
    pub election: String,
    /// The leader's value as text (not UTF-8: replacement characters).
    pub value: String,
    pub term: String,
    pub ttl_ms: u32,
    pub waiting: u32,
}

impl LockView {
    pub fn from_listed(lock: pb::HeldLock) -> Self {
        let mode = match pb::LeaseMode::try_from(lock.mode) {
            Ok(pb::LeaseMode::Shared) => "shared",
            _ => "exclusive",
        };
        LockView {
            name: lock.name,
            mode,
            limit: lock.limit,
            waiting: lock.waiting,
            holders: lock
                .holders
                .into_iter()
                .map(|held| HolderView {
                    holder: held.holder,
                    fencing_token: held.fencing_token.to_string(),
                    ttl_ms: held.ttl_remaining_ms,
                })
                .collect(),
        }
    }
}

impl ElectionView {
    pub fn from_listed(election: pb::ElectionState) -> Self {
        ElectionView {
            election: election.election,
            value: String::from_utf8_lossy(&election.value).into_owned(),
            term: election.term.to_string(),
            ttl_ms: election.ttl_remaining_ms,
            waiting: election.waiting,
        }
    }
}

impl State {
    /// Only the names under `prefix` (`""`: every name the caller may see).
    pub fn under(mut self, prefix: &str) -> Self {
        self.locks.retain(|lock| lock.name.starts_with(prefix));
        self.elections
            .retain(|election| election.election.starts_with(prefix));
        self.locks.sort_by(|a, b| a.name.cmp(&b.name));
        self.elections.sort_by(|a, b| a.election.cmp(&b.election));
        self
    }

    /// The state as far as a live page needs telling: TTLs to the second (they fall at every
    /// read; a new state for each would be a message per poll for nothing).
    pub fn shape(&self) -> State {
        let second = |ms: u32| ms.div_ceil(1_000);
        let mut shape = self.clone();
        for lock in &mut shape.locks {
            for holder in &mut lock.holders {
                holder.ttl_ms = second(holder.ttl_ms);
            }
        }
        for election in &mut shape.elections {
            election.ttl_ms = second(election.ttl_ms);
        }
        shape
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(name: &str, ttl_ms: u32) -> LockView {
        LockView {
            name: name.into(),
            mode: "exclusive",
            limit: 1,
            waiting: 0,
            holders: vec![HolderView {
                holder: "h".into(),
                fencing_token: "9007199254740993".into(),
                ttl_ms,
            }],
        }
    }

    fn state(locks: Vec<LockView>) -> State {
        State {
            locks,
            locks_truncated: false,
            elections: Vec::new(),
            elections_truncated: false,
            elections_error: None,
            poll_ms: 500,
        }
    }

    #[test]
    fn a_prefix_keeps_its_names_and_ttls_count_in_seconds() {
        let all = state(vec![lock("b/x", 900), lock("a/y", 1_000), lock("b/a", 10)]);
        let names: Vec<_> = all.under("b/").locks.into_iter().map(|l| l.name).collect();
        assert_eq!(names, ["b/a", "b/x"]);
        assert_eq!(
            state(vec![lock("a", 1_900)]).shape(),
            state(vec![lock("a", 1_001)]).shape()
        );
        assert_ne!(
            state(vec![lock("a", 1_000)]).shape(),
            state(vec![lock("a", 1_001)]).shape()
        );
    }
}
