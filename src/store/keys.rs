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

/// The keys of one lock (or of the lease behind an election). They share the `{…}` hash tag.
#[derive(Clone, Debug)]
pub struct LockKeys {
    /// String holding the current token; its TTL is the lock's.
    pub lock: String,
    /// Hash with the current holder's description and fencing token; same TTL as `lock`.
    pub owner: String,
    /// Counter behind the fencing tokens; it never expires so tokens only grow.
    pub fence: String,
    /// Fair waiters in arrival order (sorted set: waiter id -> arrival time in microseconds).
    pub line: String,
    /// When each waiter leaves the line unless its server vouches for it again (sorted set, ms).
    pub deadlines: String,
    /// Holders of a semaphore's permits or a shared lock (sorted set: token -> expiry, ms).
    pub holders: String,
    /// Each permit's holder, fencing token and attachments, and the name's kind (hash).
    pub permits: String,
    /// Sharded pub/sub channel announcing that the lock may be free (same slot as the keys).
    pub channel: String,
}

/// A name's permits live beside its `lock` key: `<lock>:holders` and `<lock>:permits` (the
/// batched renewal script finds them from the lock's key alone).
const HOLDERS_SUFFIX: &str = ":holders";
const PERMITS_SUFFIX: &str = ":permits";

/// The permits' keys beside the `lock` key `lock`: `[holders, permits]`.
pub fn permit_keys(lock: &str) -> [String; 2] {
    [
        format!("{lock}{HOLDERS_SUFFIX}"),
        format!("{lock}{PERMITS_SUFFIX}"),
    ]
}

/// The keys of lock `name` under `prefix`: `<prefix>{<encoded name>}:lock|owner|fence|…`.
pub fn lock_keys(prefix: &str, name: &str) -> LockKeys {
    lock_keys_at(&key_base(prefix, name))
}

/// What every key of `name` under `prefix` starts with: `<prefix>{<encoded name>}`.
pub fn key_base(prefix: &str, name: &str) -> String {
    format!("{prefix}{{{}}}", hash_tag(name))
}

/// A lock's keys below `base` (from [`key_base`]).
pub fn lock_keys_at(base: &str) -> LockKeys {
    let lock = format!("{base}:lock");
    let [holders, permits] = permit_keys(&lock);
    LockKeys {
        lock,
        holders,
        permits,
        owner: format!("{base}:owner"),
        fence: format!("{base}:fence"),
        line: format!("{base}:line"),
        deadlines: format!("{base}:deadlines"),
        channel: format!("{base}:wake"),
    }
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
fn hash_tag(name: &str) -> String {
    utf8_percent_encode(name, KEPT_IN_KEYS).to_string()
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
            let key = lock_keys("p*[x]:", name).lock;
            assert_eq!(lock_name("p*[x]:", &key).as_deref(), Some(name));
        }
        assert_eq!(lock_name("p:", "p:{a}:owner"), None);
        assert_eq!(lock_name("p:", "p:{a}:lock:holders").as_deref(), Some("a"));
        assert_eq!(lock_name("p:", "p:{a}:lock:permits"), None);
        assert_eq!(lock_name("p:", "p:election:{a}:lock"), None);
        assert_eq!(lock_key_pattern("p*[x]:"), "p\\*\\[x\\]:{*}:lock*");
    }
}
