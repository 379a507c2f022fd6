//! Key layout: where a name's keys live, and why no name can reach another's.
//!
//! Every key of one name is `<prefix>[<space>]{<encoded name>}:<part>`. The name is
//! percent-encoded inside the `{…}` hash tag, so it can never contain `{`, `}` (hash tags), `:`
//! (our separators) or glob characters: the encoding is injective, keeps all of a name's keys in
//! one hash slot (one script can touch them all on a Redis Cluster), and keeps every key inside
//! the prefix whatever the name.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

/// Bytes of a name kept as they are in keys; everything else is percent-encoded.
const KEPT_IN_KEYS: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'/')
    .remove(b'@');

/// The keys of one lock (or of the lease behind an election). They share the `{…}` hash tag,
/// except the fencing counter, which lives in the same hash slot under a tag of its own.
///
/// Every key here but the counter expires: the lock with its lease, the line with its last
/// waiter's deadline, the permits with the last permit. A plain lock with nobody waiting is one
/// key.
#[derive(Clone, Debug)]
pub struct LockKeys {
    /// The lock's key: string `<token>:<fencing token>:<attachment>:<holder>`; its TTL is the
    /// lease's. The token comes first, so "does it still hold our token" is a prefix test; the
    /// holder comes last, so it may contain anything. Every other key is derived from it when a
    /// command needs it: a held lease keeps one string, not eight (each lease of a session or a
    /// stream holds its keys for its whole life, and commands take keys by value anyway).
    lock: Box<str>,
    /// Where the key prefix ends in `lock` (the fencing counter lives under the prefix).
    prefix_len: usize,
    /// A key renewed with the lease to outlive it by two TTLs: an election's state. `None` for
    /// a lock.
    pub kept_with: Option<String>,
}

impl LockKeys {
    /// The lock's key.
    pub fn lock(&self) -> &str {
        &self.lock
    }

    /// `<prefix>[<space>]{<encoded name>}`: what every key of the name but the counter starts
    /// with.
    fn base(&self) -> &str {
        self.lock.strip_suffix(LOCK_SUFFIX).unwrap_or(&self.lock)
    }

    /// The fencing counter of this name's hash slot (see [`fence_key`]): never expires, and only
    /// grows.
    pub fn fence(&self) -> String {
        fence_key(&self.lock[..self.prefix_len], &self.lock)
    }

    /// Fair waiters in arrival order (sorted set: waiter id -> arrival time in microseconds).
    pub fn line(&self) -> String {
        [self.base(), ":line"].concat()
    }

    /// Every waiter (fair or not), with when it leaves unless its server vouches for it again
    /// (sorted set, ms). Its existence is what tells a release that someone may be waiting.
    pub fn deadlines(&self) -> String {
        [self.base(), ":deadlines"].concat()
    }

    /// Holders of a semaphore's permits or a shared lock (sorted set: token -> expiry, ms).
    pub fn holders(&self) -> String {
        [self.lock(), HOLDERS_SUFFIX].concat()
    }

    /// Each permit's holder, fencing token and attachments, and the name's kind (hash).
    pub fn permits(&self) -> String {
        [self.lock(), PERMITS_SUFFIX].concat()
    }

    /// Sharded pub/sub channel announcing that the lock may be free (same slot as the keys).
    pub fn channel(&self) -> String {
        [self.base(), ":wake"].concat()
    }

    /// Marks the name watched while a server watches it (string, with a TTL each watching
    /// server renews), and is also the sharded channel its change notices go on (same slot): the
    /// scripts that change the name publish there only while the mark exists (`announce` in
    /// lease.lua), so a name nobody watches pays one `EXISTS` per change and no message.
    pub fn watched(&self) -> String {
        [self.base(), ":watched"].concat()
    }

    /// A lock-delay (string `<delay ms>:<holder>`): set when a lease that asked for one takes
    /// the name, renewed with it to outlive it by the delay, deleted by a clean release. While
    /// it exists and the lock does not, the name is taken by nobody (a lost holder's delay).
    pub fn delay(&self) -> String {
        [self.base(), ":delay"].concat()
    }

    /// The tokens revoked lately (a set, kept as long as the longest revoked lease had left, so
    /// nothing stays behind): a renewal that finds its key gone before its server heard the
    /// revocation's message reads it, and tells its holder REVOKED rather than TAKEN.
    pub fn revoked(&self) -> String {
        [self.base(), ":revoked"].concat()
    }
}

const LOCK_SUFFIX: &str = ":lock";

/// A name's permits live beside its `lock` key: `<lock>:holders` and `<lock>:permits` (the
/// batched renewal script finds them from the lock's key alone).
const HOLDERS_SUFFIX: &str = ":holders";
const PERMITS_SUFFIX: &str = ":permits";

/// The permits' keys beside the `lock` key `lock`: `[holders, permits]`.
pub fn permit_keys(lock: &str) -> [String; 2] {
    [
        [lock, HOLDERS_SUFFIX].concat(),
        [lock, PERMITS_SUFFIX].concat(),
    ]
}

/// The keys of lock `name` under `prefix`: `<prefix>{<encoded name>}:lock|line|…`.
pub fn lock_keys(prefix: &str, name: &str) -> LockKeys {
    lock_keys_at(prefix, &key_base(prefix, name))
}

/// What every key of `name` under `prefix` starts with: `<prefix>{<encoded name>}`.
pub fn key_base(prefix: &str, name: &str) -> String {
    [prefix, "{", &hash_tag(name), "}"].concat()
}

/// A lock's keys below `base` (from [`key_base`], under `prefix`). Built on every call that
/// names a lock: joined, not `format!`ted (the formatting machinery was 3 % of a unary
/// `Acquire`'s CPU).
pub fn lock_keys_at(prefix: &str, base: &str) -> LockKeys {
    LockKeys {
        lock: [base, LOCK_SUFFIX].concat().into_boxed_str(),
        prefix_len: prefix.len(),
        kept_with: None,
    }
}

/// The fencing counter for `key`'s hash slot: `<prefix>fence:{<tag>}`, the tag being the first
/// of `0`, `1`, `2`, … (in hex) that hashes to that slot.
///
/// Why one counter per slot and not per name: a per-name counter would be a key left behind by
/// every name ever locked (it must outlive its leases, or tokens could go back). A per-slot one
/// is at most 16,384 keys per prefix, whatever the number of names, and still in the name's slot,
/// so the acquire script reaches it on a Cluster. Tokens are strictly increasing per slot, so
/// per name: `max(counter + 1, Redis clock in µs)`. The clock term keeps them increasing across
/// a Redis that lost its data (as long as its clock did not go back); the counter keeps them
/// increasing when the clock goes back (as long as the data is kept).
pub fn fence_key(prefix: &str, key: &str) -> String {
    let slot = fred::util::redis_keyslot(key.as_bytes());
    [prefix, "fence:{", &slot_tags()[usize::from(slot)], "}"].concat()
}

/// Number of hash slots in a Redis Cluster.
const SLOTS: usize = 16_384;

/// For every slot, the first hex number (as text) that hashes to it. About 170,000 CRC16s,
/// once per process (a few milliseconds; [`crate::store::Locks::open`] does it, so no request
/// waits for it).
pub fn slot_tags() -> &'static [String] {
    static TAGS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    TAGS.get_or_init(|| {
        let mut tags = vec![String::new(); SLOTS];
        let mut missing = SLOTS;
        let mut n: u64 = 0;
        while missing > 0 {
            let tag = format!("{n:x}");
            let slot = usize::from(fred::util::redis_keyslot(tag.as_bytes()));
            if tags[slot].is_empty() {
                tags[slot] = tag;
                missing -= 1;
            }
            n += 1;
        }
        tags
    })
}

/// A `SCAN` pattern that matches the `lock` key (and the permits' keys) of every lock under
/// `prefix`, and no other name's key (an election's keys have `election:` between the prefix and
/// the `{`).
pub fn lock_key_pattern(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 8);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push_str("{*}:lock*");
    pattern
}

/// The name of the lock whose `lock` (or `holders`) key is `key`, if it is one under `prefix`.
pub fn lock_name(prefix: &str, key: &str) -> Option<String> {
    let key = key.strip_suffix(HOLDERS_SUFFIX).unwrap_or(key);
    let tag = key
        .strip_prefix(prefix)?
        .strip_prefix('{')?
        .strip_suffix("}:lock")?;
    if tag.contains(['{', '}', ':']) {
        return None;
    }
    let name = percent_decode_str(tag).decode_utf8().ok()?;
    Some(name.into_owned())
}

/// The name as it appears inside the `{…}` hash tag: injective, and free of `{`, `}` and `:`.
/// Borrowed when nothing needs escaping, as most names.
fn hash_tag(name: &str) -> std::borrow::Cow<'_, str> {
    utf8_percent_encode(name, KEPT_IN_KEYS).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cannot_escape_their_hash_tag() {
        for name in ["a}b", "{x}", "a:b", "*", "a%7Db", "é", "a b"] {
            let tag = hash_tag(name);
            assert!(
                !tag.contains(['{', '}', ':', '*', ' ']),
                "{name:?} -> {tag:?}"
            );
        }
        // Encoding is injective: a name that spells another's escape keeps its own key.
        assert_ne!(hash_tag("a}b"), hash_tag("a%7Db"));
    }

    #[test]
    fn lock_names_are_read_back_from_their_keys() {
        for name in ["a}b", "{x}", "a:b", "*", "a%7Db", "é", "a b", "plain"] {
            let keys = lock_keys("p*[x]:", name);
            assert_eq!(lock_name("p*[x]:", keys.lock()).as_deref(), Some(name));
        }
        assert_eq!(lock_name("p:", "p:{a}:owner"), None);
        assert_eq!(lock_name("p:", "p:{a}:lock:holders").as_deref(), Some("a"));
        assert_eq!(lock_name("p:", "p:{a}:lock:permits"), None);
        assert_eq!(lock_name("p:", "p:election:{a}:lock"), None);
        assert_eq!(lock_key_pattern("p*[x]:"), "p\\*\\[x\\]:{*}:lock*");
    }

    /// take.lua and release.lua are given the lock's key alone and derive the others from it
    /// (`base = string.sub(lock, 1, -6)`): the layout they assume is this one.
    #[test]
    fn the_scripts_derive_every_key_from_the_locks_as_here() {
        for name in ["a", "é", "{x}", "a:b"] {
            let keys = lock_keys("p:", name);
            let lock = keys.lock();
            let base = &lock[..lock.len() - 5];
            assert_eq!(&lock[base.len()..], ":lock");
            assert_eq!(keys.deadlines(), format!("{base}:deadlines"));
            assert_eq!(keys.line(), format!("{base}:line"));
            assert_eq!(keys.watched(), format!("{base}:watched"));
            assert_eq!(keys.delay(), format!("{base}:delay"));
            assert_eq!(keys.channel(), format!("{base}:wake"));
            assert_eq!(keys.holders(), format!("{lock}:holders"));
            assert_eq!(keys.permits(), format!("{lock}:permits"));
        }
    }

    #[test]
    fn the_fencing_counter_shares_the_names_slot_and_never_a_names_key() {
        let slot = |key: &str| fred::util::redis_keyslot(key.as_bytes());
        for name in ["a", "job-17", "é", "{x}", "a:b"] {
            let keys = lock_keys("p:", name);
            assert_eq!(slot(&keys.fence()), slot(keys.lock()), "{name}");
            assert!(keys.fence().starts_with("p:fence:{"), "{}", keys.fence());
            assert_eq!(lock_name("p:", &keys.fence()), None);
        }
        // One tag per slot, each found, each distinct.
        let tags = slot_tags();
        assert_eq!(tags.len(), SLOTS);
        assert_eq!(
            tags.iter().collect::<std::collections::HashSet<_>>().len(),
            SLOTS
        );
    }
}
