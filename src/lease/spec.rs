//! What a lease is asked for: a name, a TTL, a wait, a holder; each within a stated limit.
//!
//! A [`LockName`] can only be built through its check, and a [`LeaseSpec`] is assembled from
//! checked parts (by `TryFrom` on the request, in the server layer), so everything below the
//! gRPC layer works on values known to be within limits before anything touches Redis. Every
//! limit is a named constant so the proto, docs/contract.md and the code agree.

use std::time::Duration;

use crate::error::{Error, Result};
pub use crate::mode::Mode;
pub use crate::store::locks::HoldLimits;

/// Longest lock name, in bytes of UTF-8.
pub const MAX_NAME_BYTES: usize = 256;
/// Longest holder description, in bytes of UTF-8.
pub const MAX_HOLDER_BYTES: usize = 256;
/// Largest value an election candidate may publish.
pub const MAX_ELECTION_VALUE_BYTES: usize = 64 * 1024;
/// Longest token we bother comparing; real tokens are 32 hex digits.
pub const MAX_TOKEN_BYTES: usize = 64;
/// Shortest lock TTL: shorter leases cannot be renewed reliably over a network.
pub const MIN_TTL: Duration = Duration::from_millis(100);
/// Longest lock TTL: a crashed holder blocks others for at most this long.
pub const MAX_TTL: Duration = Duration::from_secs(3600);
/// Most locks one `List` call reports.
pub const MAX_LISTED: usize = 1_000;
/// Most permits of one semaphore: each holder's permit is an entry the scripts walk.
pub const MAX_LIMIT: u32 = 10_000;
/// Longest wait for a taken lock.
pub const MAX_WAIT: Duration = Duration::from_secs(3600);
/// Most names one lease holds at once (`name` and `more_names`): each costs a script per
/// acquisition attempt and a renewal per round.
pub const MAX_NAMES: usize = 32;
/// Longest lock-delay: a lost holder blocks the name for at most its TTL and this.
pub const MAX_LOCK_DELAY: Duration = Duration::from_secs(3600);
/// Longest max-hold ceiling on a holding.
pub const MAX_HOLD: Duration = Duration::from_secs(7 * 24 * 3600);

/// The name of a lock or an election, checked: non-empty, bounded, no control characters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockName(String);

impl LockName {
    pub fn parse(name: String) -> Result<Self> {
        Self::parse_as(name, "lock name")
    }

    /// An election's name: the same rules, named as such in errors.
    pub fn parse_election(name: String) -> Result<Self> {
        Self::parse_as(name, "election name")
    }

    fn parse_as(name: String, what: &str) -> Result<Self> {
        if name.is_empty() {
            return Err(Error::invalid(format!("{what} is empty")));
        }
        if name.len() > MAX_NAME_BYTES {
            return Err(Error::invalid(format!(
                "{what} is {} bytes, over the limit of {MAX_NAME_BYTES}",
                name.len()
            )));
        }
        if name.chars().any(char::is_control) {
            return Err(Error::invalid(format!(
                "{what} contains a control character (newline, tab, NUL, ...)"
            )));
        }
        Ok(LockName(name))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for LockName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A lock TTL within `MIN_TTL ..= MAX_TTL`.
pub fn ttl(ttl_ms: u32) -> Result<Duration> {
    let ttl = Duration::from_millis(ttl_ms.into());
    if ttl < MIN_TTL || ttl > MAX_TTL {
        return Err(Error::invalid(format!(
            "ttl_ms is {ttl_ms}; it must be between {} and {}",
            MIN_TTL.as_millis(),
            MAX_TTL.as_millis()
        )));
    }
    Ok(ttl)
}

/// A wait of at most `MAX_WAIT`; zero means do not wait.
pub fn wait(wait_ms: u32) -> Result<Duration> {
    let wait = Duration::from_millis(wait_ms.into());
    if wait > MAX_WAIT {
        return Err(Error::invalid(format!(
            "wait_ms is {wait_ms}; it must be at most {}",
            MAX_WAIT.as_millis()
        )));
    }
    Ok(wait)
}

/// How a lease holds its name: `limit` holders at once (0 counts as 1, a plain lock), or shared.
pub fn mode(limit: u32, shared: bool) -> Result<Mode> {
    if limit > MAX_LIMIT {
        return Err(Error::invalid(format!(
            "limit is {limit}; it must be between 1 and {MAX_LIMIT} (0 means 1)"
        )));
    }
    match (shared, limit) {
        (false, limit) => Ok(Mode::Exclusive {
            limit: limit.max(1),
        }),
        (true, 0 | 1) => Ok(Mode::Shared),
        (true, limit) => Err(Error::invalid(format!(
            "limit is {limit} on a shared lease: shared leases (readers) hold together without a limit; \
             use limit with exclusive leases (a semaphore)"
        ))),
    }
}

/// How long a lease outlives its broken stream: at most its TTL; zero releases at once.
pub fn resume_grace(grace_ms: u32, ttl: Duration) -> Result<Option<Duration>> {
    let grace = Duration::from_millis(grace_ms.into());
    if grace > ttl {
        return Err(Error::invalid(format!(
            "resume_grace_ms is {grace_ms}; it must be at most ttl_ms ({})",
            ttl.as_millis()
        )));
    }
    Ok((!grace.is_zero()).then_some(grace))
}

/// The further names of a lease held over several names at once (`more_names`), checked:
/// each a valid name, none twice (nor `first` again), at most [`MAX_NAMES`] in all, and only
/// for a plain exclusive lock (a semaphore's permits or a shared hold over several names would
/// need every name's count to agree, which no single script can see across slots).
pub fn more_names(first: &LockName, more: Vec<String>, mode: Mode) -> Result<Vec<LockName>> {
    if more.is_empty() {
        return Ok(Vec::new());
    }
    if more.len() + 1 > MAX_NAMES {
        return Err(Error::invalid(format!(
            "{} names asked at once (name and {} more_names), over the limit of {MAX_NAMES}",
            more.len() + 1,
            more.len()
        )));
    }
    if mode != Mode::LOCK {
        let what = match mode {
            Mode::Shared => "a shared lease".to_owned(),
            Mode::Exclusive { limit } => format!("a semaphore (limit {limit})"),
        };
        return Err(Error::invalid(format!(
            "more_names asks for several names at once, which only plain exclusive locks (limit 0 or 1, not shared) can hold; this is {what}"
        )));
    }
    let mut names: Vec<LockName> = Vec::with_capacity(more.len());
    for (index, name) in more.into_iter().enumerate() {
        let name = LockName::parse_as(name, &format!("more_names[{index}]"))?;
        if name == *first || names.contains(&name) {
            return Err(Error::invalid(format!(
                "lock name {:?} is asked twice (name and more_names must all differ): one lease holds each name once",
                name.as_str()
            )));
        }
        names.push(name);
    }
    Ok(names)
}

/// A lock-delay of at most `MAX_LOCK_DELAY`, for plain exclusive locks only; zero means none.
pub fn lock_delay(delay_ms: u32, mode: Mode) -> Result<Option<Duration>> {
    let delay = Duration::from_millis(delay_ms.into());
    if delay.is_zero() {
        return Ok(None);
    }
    if mode != Mode::LOCK {
        return Err(Error::invalid(
            "lock_delay_ms is only for plain exclusive locks (limit 0 or 1, not shared)",
        ));
    }
    if delay > MAX_LOCK_DELAY {
        return Err(Error::invalid(format!(
            "lock_delay_ms is {delay_ms}; it must be at most {}",
            MAX_LOCK_DELAY.as_millis()
        )));
    }
    Ok(Some(delay))
}

/// A max-hold ceiling between the TTL and `MAX_HOLD`; zero means none.
pub fn max_hold(max_hold_ms: u32, ttl: Duration) -> Result<Option<Duration>> {
    let max_hold = Duration::from_millis(max_hold_ms.into());
    if max_hold.is_zero() {
        return Ok(None);
    }
    if max_hold < ttl || max_hold > MAX_HOLD {
        return Err(Error::invalid(format!(
            "max_hold_ms is {max_hold_ms}; it must be between ttl_ms ({}) and {}",
            ttl.as_millis(),
            MAX_HOLD.as_millis()
        )));
    }
    Ok(Some(max_hold))
}

/// A holder description: free text shown to others, bounded and printable.
pub fn holder(holder: String) -> Result<String> {
    if holder.len() > MAX_HOLDER_BYTES {
        return Err(Error::invalid(format!(
            "holder is {} bytes, over the limit of {MAX_HOLDER_BYTES}",
            holder.len()
        )));
    }
    if holder.chars().any(char::is_control) {
        return Err(Error::invalid("holder contains a control character"));
    }
    Ok(holder)
}

/// A token as the client sent it. Any non-empty value is compared; a wrong one simply does not match.
pub fn token(token: String) -> Result<String> {
    if token.is_empty() {
        return Err(Error::invalid("token is empty"));
    }
    if token.len() > MAX_TOKEN_BYTES {
        return Err(Error::invalid(format!(
            "token is {} bytes, over the limit of {MAX_TOKEN_BYTES}",
            token.len()
        )));
    }
    Ok(token)
}

/// A value an election candidate publishes: at most `MAX_ELECTION_VALUE_BYTES`.
pub fn election_value(value: Vec<u8>) -> Result<Vec<u8>> {
    if value.len() > MAX_ELECTION_VALUE_BYTES {
        return Err(Error::invalid(format!(
            "value is {} bytes, over the limit of {MAX_ELECTION_VALUE_BYTES}",
            value.len()
        )));
    }
    Ok(value)
}

/// Everything needed to take one lease (a lock, or a candidacy's lease).
#[derive(Clone, Debug)]
pub struct LeaseSpec {
    pub name: LockName,
    pub ttl: Duration,
    pub wait: Duration,
    pub holder: String,
    /// Wait in line (the default) or race for the lock.
    pub fair: bool,
    /// A plain lock, a semaphore's permit, or a shared hold.
    pub mode: Mode,
    /// How long the lease outlives a broken stream, to be resumed; `None`: released at once.
    pub resume_grace: Option<Duration>,
    /// Reattach to the lease this token holds instead of taking a new one.
    pub resume: Option<String>,
    /// Further names held with `name`, all or none, in the order asked ([`more_names`]).
    pub more_names: Vec<LockName>,
    /// Lock-delay and max-hold (a resumed lease keeps those it was taken with).
    pub limits: HoldLimits,
}

impl LeaseSpec {
    /// Every name of the lease: `name` first, then `more_names` in the order asked.
    pub fn names(&self) -> impl Iterator<Item = &LockName> {
        std::iter::once(&self.name).chain(&self.more_names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_at_the_limits() {
        assert!(LockName::parse("a".repeat(MAX_NAME_BYTES)).is_ok());
        assert!(LockName::parse("a".repeat(MAX_NAME_BYTES + 1)).is_err());
        assert!(LockName::parse(String::new()).is_err());
        assert!(LockName::parse("a\nb".into()).is_err());
        assert!(LockName::parse("a\u{0}".into()).is_err());
        assert!(LockName::parse("{x}:*?é".into()).is_ok());
    }

    #[test]
    fn modes_and_graces_at_the_limits() {
        assert_eq!(mode(0, false).ok(), Some(Mode::LOCK));
        assert_eq!(
            mode(MAX_LIMIT, false).ok(),
            Some(Mode::Exclusive { limit: MAX_LIMIT })
        );
        assert!(mode(MAX_LIMIT + 1, false).is_err());
        assert_eq!(mode(1, true).ok(), Some(Mode::Shared));
        assert!(mode(2, true).is_err());
        let ttl = Duration::from_secs(1);
        assert_eq!(resume_grace(0, ttl).ok(), Some(None));
        assert_eq!(resume_grace(1_000, ttl).ok(), Some(Some(ttl)));
        assert!(resume_grace(1_001, ttl).is_err());
    }

    #[test]
    fn more_names_at_the_limits() {
        let first = LockName::parse("a".into()).unwrap();
        let many = |n: usize| (1..n).map(|i| format!("n{i}")).collect::<Vec<_>>();
        assert_eq!(
            more_names(&first, many(MAX_NAMES), Mode::LOCK)
                .unwrap()
                .len(),
            MAX_NAMES - 1
        );
        assert!(more_names(&first, many(MAX_NAMES + 1), Mode::LOCK).is_err());
        assert!(more_names(&first, vec!["b".into(), "b".into()], Mode::LOCK).is_err());
        assert!(more_names(&first, vec!["a".into()], Mode::LOCK).is_err());
        assert!(more_names(&first, vec![String::new()], Mode::LOCK).is_err());
        assert!(more_names(&first, vec!["b".into()], Mode::Shared).is_err());
        assert!(more_names(&first, vec!["b".into()], Mode::Exclusive { limit: 2 }).is_err());
        assert!(
            more_names(&first, Vec::new(), Mode::Shared)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn ttl_bounds() {
        assert!(ttl(99).is_err());
        assert!(ttl(100).is_ok());
        assert!(ttl(3_600_000).is_ok());
        assert!(ttl(3_600_001).is_err());
        assert!(ttl(0).is_err());
    }
}
