//! The election key space: an election's keys, and the scripts that publish its leader.
//!
//! An election is a lock (same scripts, same fair line, same fencing counter) in a key space of
//! its own, plus a `state` hash naming the leader (token, term, value) and a revision that grows
//! with every change. Every change is published, from the script that makes it, on the
//! election's sharded channel, so observers on every server see the same changes in the same
//! order.

use std::sync::Arc;
use std::time::Duration;

use fred::bytes::Bytes;
use fred::prelude::*;
use fred::types::scripts::Script;

use super::connection::Connection;
use super::keys::{LockKeys, key_base, lock_keys_at};
use super::token::Token;
use crate::error::{Error, Result};

mod listing;

pub use listing::Leading;

/// Elections live under `<prefix>election:`; lock keys start with `<prefix>{`, so the two key
/// spaces never meet.
const ELECTION_SPACE: &str = "election:";

/// The keys of one election, all in one hash slot.
#[derive(Clone, Debug)]
pub struct ElectionKeys {
    /// The leadership lease: an ordinary lock.
    pub lease: LockKeys,
    /// Hash: `rev` (never reset), and while there is a leader `token`, `term`, `value`.
    pub state: String,
    /// Sharded pub/sub channel carrying every change of `state`.
    pub events: String,
}

/// An election's leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    pub term: u64,
    pub value: Bytes,
}

/// One state of an election, as of `revision` within `epoch`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Names the copy of the state in Redis; a new one means the revisions began again (Redis
    /// restarted empty or failed over).
    pub epoch: u64,
    pub revision: u64,
    pub leader: Option<Leader>,
    /// How long the leader's lease has left (read) or was granted (announced).
    pub lease_ttl: Option<Duration>,
}

/// The elections under one key prefix. Cheap to clone: one pointer.
#[derive(Clone)]
pub struct Elections(Arc<Shared>);

struct Shared {
    connection: Connection,
    announce: Script,
    retire_stale: Script,
    /// `<prefix>election:`
    space: String,
    /// `<prefix>`: the fencing counters are shared with the locks.
    prefix: String,
}

impl Elections {
    /// Opens the key space under `prefix`, loading its scripts. The leadership lease is a lock
    /// in this key space, run by the lock scripts.
    pub async fn open(connection: &Connection, prefix: &str) -> Result<Self> {
        let announce = Script::from_lua(concat!(
            include_str!("locks/lease.lua"),
            include_str!("elections/announce.lua")
        ));
        let retire_stale = Script::from_lua(concat!(
            include_str!("locks/lease.lua"),
            include_str!("elections/retire_stale.lua")
        ));
        for script in [&announce, &retire_stale] {
            connection.load(script).await?;
        }
        Ok(Elections(Arc::new(Shared {
            connection: connection.clone(),
            announce,
            retire_stale,
            space: format!("{prefix}{ELECTION_SPACE}"),
            prefix: prefix.to_owned(),
        })))
    }

    pub fn connection(&self) -> &Connection {
        &self.0.connection
    }

    /// The keys of election `name`.
    pub fn keys(&self, name: &str) -> ElectionKeys {
        let base = key_base(&self.0.space, name);
        let state = format!("{base}:state");
        let mut lease = lock_keys_at(&self.0.prefix, &base);
        lease.kept_with = Some(state.clone());
        ElectionKeys {
            lease,
            state,
            events: format!("{base}:events"),
        }
    }

    /// Publishes `token`'s leadership with `value`, if `token` still holds the lease.
    /// `Ok(false)`: it does not.
    pub async fn announce(
        &self,
        keys: &ElectionKeys,
        token: &Token,
        term: u64,
        lease_ttl: Duration,
        value: &[u8],
    ) -> Result<bool> {
        const CONTEXT: &str = "announce leader";
        // Announced only once the replicas have it: a failover must not forget a leader its
        // followers were told of.
        let revision: i64 = self
            .0
            .connection
            .eval_vouched(
                &self.0.announce,
                CONTEXT,
                lease_ttl,
                |r: &i64| *r > 0,
                move || {
                    (
                        vec![keys.lease.lock().to_owned(), keys.state.clone()],
                        vec![
                            Value::from(token.secret()),
                            Value::from(term.to_string()),
                            Value::Bytes(Bytes::copy_from_slice(value)),
                            Value::from(keys.events.as_str()),
                            Value::from(lease_ttl.as_millis().to_string()),
                        ],
                    )
                },
            )
            .await?;
        Ok(revision > 0)
    }

    /// Retires a leader whose lease is gone (resigned, lost, or run out with its server), which
    /// bumps the revision and publishes "no leader"; then returns the election's state. So the
    /// answer never names a leader that no longer holds the lease. A never-seen election gets a
    /// state (a new epoch) here.
    pub async fn retire_stale_leader(&self, keys: &ElectionKeys) -> Result<Snapshot> {
        const CONTEXT: &str = "read leader";
        let reply: Vec<Value> = self
            .0
            .connection
            .eval(&self.0.retire_stale, CONTEXT, move || {
                (
                    vec![keys.lease.lock().to_owned(), keys.state.clone()],
                    vec![Value::from(keys.events.as_str())],
                )
            })
            .await?;
        let bad = |detail: &str| Error::BadReply {
            context: CONTEXT,
            detail: detail.to_owned(),
        };
        let [epoch, revision, has_leader, term, value, ttl] = reply.as_slice() else {
            return Err(bad("expected 6 fields"));
        };
        let epoch = epoch.as_u64().ok_or_else(|| bad("epoch is not a number"))?;
        let revision = revision
            .as_u64()
            .ok_or_else(|| bad("revision is not a number"))?;
        let leader = if has_leader.as_i64() == Some(1) {
            Some(Leader {
                term: term.as_u64().ok_or_else(|| bad("term is not a number"))?,
                value: Bytes::copy_from_slice(value.as_bytes().unwrap_or_default()),
            })
        } else {
            None
        };
        let lease_ttl = ttl
            .as_i64()
            .and_then(|ms| u64::try_from(ms).ok())
            .map(Duration::from_millis);
        Ok(Snapshot {
            epoch,
            revision,
            leader,
            lease_ttl,
        })
    }
}

/// Reads a change as the scripts publish it:
/// `epoch \n rev \n has_leader \n term \n ttl_ms \n value`.
pub fn parse_event(payload: &[u8]) -> Option<Snapshot> {
    let mut fields = payload.splitn(6, |&b| b == b'\n');
    let mut number = || -> Option<u64> { std::str::from_utf8(fields.next()?).ok()?.parse().ok() };
    let epoch = number()?;
    let revision = number()?;
    let has_leader = number()? == 1;
    let term = number()?;
    let ttl_ms = number()?;
    let value = fields.next()?;
    Some(Snapshot {
        epoch,
        revision,
        leader: has_leader.then(|| Leader {
            term,
            value: Bytes::copy_from_slice(value),
        }),
        lease_ttl: has_leader.then(|| Duration::from_millis(ttl_ms)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_binary_values() {
        let event = parse_event(b"5\n7\n1\n42\n3000\nva\nlue\x00").unwrap();
        assert_eq!((event.epoch, event.revision), (5, 7));
        assert_eq!(
            event.leader,
            Some(Leader {
                term: 42,
                value: Bytes::from_static(b"va\nlue\x00")
            })
        );
        assert_eq!(event.lease_ttl, Some(Duration::from_millis(3000)));
        let none = parse_event(b"5\n8\n0\n0\n0\n").unwrap();
        assert_eq!(
            (none.epoch, none.revision, none.leader, none.lease_ttl),
            (5, 8, None, None)
        );
        assert!(parse_event(b"garbage").is_none());
    }
}
