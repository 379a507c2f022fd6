//! Names, rich in the characters that break naive key layouts, through the key layout
//! (src/store/keys.rs): the invariants of tests/input_props.rs and the module's own claims, for
//! any string (the server only ever passes checked names, but the layout promises them for
//! every name):
//! - every key stays under its prefix, with one `{…}` hash tag holding no `{`, `}`, `:` or glob
//!   character; all of a name's keys share that tag, and the fencing counter its hash slot;
//! - two different names never share a key (the fencing counter, one per hash slot, aside),
//!   nor does a lock with an election (`<prefix>election:` key space);
//! - `lock_name` reads a name back from its `lock` and `holders` keys and from no other key,
//!   and `lock_key_pattern` (List's SCAN) matches a lock's `lock`, `holders` and `permits` keys
//!   and no other key.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use leasehold::lease::spec::LockName;
use leasehold::store::keys::{key_base, lock_key_pattern, lock_keys, lock_keys_at, lock_name};
use leasehold_fuzz::name_allowed;
use libfuzzer_sys::fuzz_target;

/// Key prefixes (operator configuration, not client input): the default, none, and one full of
/// glob characters (`lock_key_pattern` must escape them).
const PREFIXES: [&str; 3] = ["leasehold:", "", "p*[x]?\\:"];

/// Mirrors `Elections`' private `ELECTION_SPACE` (`Elections::keys` needs a Redis connection;
/// its key layout is `key_base` and `lock_keys_at`, as here).
const ELECTION_SPACE: &str = "election:";

/// Characters that break naive key layouts (as in tests/input_props.rs), and the ones the
/// encoding keeps as they are.
const TRICKY: &[char] = &[
    '{', '}', ':', '*', '%', '\n', '\0', 'é', '7', 'D', '?', '[', ']', '\\', ' ', '-', '_', '.',
    '/', '@', 'a', 'Z', '\u{7f}', '\u{85}', '\u{fffd}', '😀',
];

#[derive(Arbitrary, Debug)]
enum Piece {
    Tricky(u8),
    Ascii(u8),
    Any(char),
}

impl Piece {
    fn char(&self) -> char {
        match *self {
            Piece::Tricky(i) => TRICKY[usize::from(i) % TRICKY.len()],
            Piece::Ascii(b) => char::from(b & 0x7f),
            Piece::Any(c) => c,
        }
    }
}

#[derive(Debug)]
struct Input {
    a: String,
    b: String,
}

/// Characters per name: past the 256-byte limit, not so long that the fuzzer spends its time
/// escaping.
const MAX_CHARS: usize = 320;

fn name(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    u.arbitrary_iter::<Piece>()?
        .take(MAX_CHARS)
        .map(|piece| piece.map(|p| p.char()))
        .collect()
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(Input {
            a: name(u)?,
            b: name(u)?,
        })
    }
}

fn slot(key: &str) -> u16 {
    fred::util::redis_keyslot(key.as_bytes())
}

/// Redis's glob, as SCAN MATCH reads it: `*`, `?`, `\x`. `lock_key_pattern` escapes every other
/// special character, so an unescaped `[` is a failure.
fn glob(pattern: &[u8], key: &[u8]) -> bool {
    match pattern.split_first() {
        None => key.is_empty(),
        Some((b'*', rest)) => (0..=key.len()).any(|i| glob(rest, &key[i..])),
        Some((b'?', rest)) => !key.is_empty() && glob(rest, &key[1..]),
        Some((b'\\', rest)) => match rest.split_first() {
            Some((c, rest)) => key.first() == Some(c) && glob(rest, &key[1..]),
            None => key == b"\\",
        },
        Some((b'[', _)) => panic!("unescaped [ in a SCAN pattern"),
        Some((c, rest)) => key.first() == Some(c) && glob(rest, &key[1..]),
    }
}

/// Every key of one name under one prefix, checked on its own.
struct NameKeys {
    /// The lock's keys, fencing counter excluded.
    lock: Vec<String>,
    /// The election's keys (lease keys, state, events), fencing counter excluded.
    election: Vec<String>,
    /// The fencing counters (lock's and election's).
    fences: [String; 2],
}

fn keys_of(prefix: &str, name: &str) -> NameKeys {
    let keys = lock_keys(prefix, name);
    let base = key_base(prefix, name);

    // The hash tag: `<prefix>{<tag>}`, the tag free of what could end or split it.
    let tag = base
        .strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('{'))
        .and_then(|rest| rest.strip_suffix('}'))
        .unwrap_or_else(|| panic!("{name:?}: key base {base:?} is not <prefix>{{tag}}"));
    assert!(tag.is_ascii(), "{name:?}: tag {tag:?} is not ASCII");
    assert!(
        !tag.contains(['{', '}', ':', '*', '?', '[', ']', '\\', ' ', '\n', '\0']),
        "{name:?}: tag {tag:?} can escape its hash tag or match as a glob"
    );
    assert_eq!(tag.is_empty(), name.is_empty(), "{name:?}: tag {tag:?}");

    let parts = [
        (&keys.lock, ":lock"),
        (&keys.line, ":line"),
        (&keys.deadlines, ":deadlines"),
        (&keys.holders, ":lock:holders"),
        (&keys.permits, ":lock:permits"),
        (&keys.channel, ":wake"),
    ];
    // An empty `{}` is no hash tag to Redis (the whole key is hashed): only a non-empty name's
    // keys share a slot. The empty name is refused before it reaches the layout.
    let one_slot = !name.is_empty();
    for (key, part) in parts {
        assert_eq!(key, &[base.as_str(), part].concat(), "{name:?}");
        if one_slot {
            assert_eq!(slot(key), slot(&keys.lock), "{name:?}: {key:?}");
        }
    }
    assert_eq!(keys.kept_with, None);

    // As tests/input_props.rs: under the prefix, one hash tag, nothing a glob or a protocol
    // line would read differently.
    for key in parts.iter().map(|(key, _)| *key).chain([&keys.fence]) {
        let rest = key
            .strip_prefix(prefix)
            .unwrap_or_else(|| panic!("{key:?} is outside the prefix {prefix:?}"));
        assert_eq!(rest.matches('{').count(), 1, "{key:?}");
        assert_eq!(rest.matches('}').count(), 1, "{key:?}");
        assert!(!rest.contains(['*', '\n', ' ']), "{key:?}");
    }
    assert!(
        keys.fence.starts_with(&[prefix, "fence:{"].concat()) && keys.fence.ends_with('}'),
        "{:?}",
        keys.fence
    );
    assert_eq!(slot(&keys.fence), slot(&keys.lock), "{name:?}");

    // Read back from the lock and holders keys only.
    assert_eq!(lock_name(prefix, &keys.lock).as_deref(), Some(name));
    assert_eq!(lock_name(prefix, &keys.holders).as_deref(), Some(name));
    for key in [
        &keys.line,
        &keys.deadlines,
        &keys.permits,
        &keys.channel,
        &keys.fence,
    ] {
        assert_eq!(lock_name(prefix, key), None, "{key:?}");
    }

    // The election's keys, laid out as `Elections::keys` does.
    let space = [prefix, ELECTION_SPACE].concat();
    let election_base = key_base(&space, name);
    let lease = lock_keys_at(prefix, &election_base);
    let election = vec![
        lease.lock.clone(),
        lease.line,
        lease.deadlines,
        lease.holders,
        lease.permits,
        lease.channel,
        format!("{election_base}:state"),
        format!("{election_base}:events"),
    ];
    for key in &election {
        assert!(key.starts_with(&space), "{key:?}");
        if one_slot {
            assert_eq!(slot(key), slot(&lease.lock), "{key:?}");
        }
        assert_eq!(
            lock_name(prefix, key),
            None,
            "an election key read as a lock: {key:?}"
        );
    }
    assert_eq!(slot(&lease.fence), slot(&lease.lock));

    // List's SCAN pattern: a lock's lock, holders and permits keys, and nothing else.
    let pattern = lock_key_pattern(prefix);
    for (key, listed) in [
        (&keys.lock, true),
        (&keys.holders, true),
        (&keys.permits, true),
        (&keys.line, false),
        (&keys.deadlines, false),
        (&keys.channel, false),
        (&keys.fence, false),
    ]
    .into_iter()
    .chain(election.iter().map(|key| (key, false)))
    {
        assert_eq!(
            glob(pattern.as_bytes(), key.as_bytes()),
            listed,
            "pattern {pattern:?} on {key:?}"
        );
    }

    let lock = parts.iter().map(|(key, _)| (*key).clone()).collect();
    NameKeys {
        lock,
        election,
        fences: [keys.fence, lease.fence],
    }
}

fuzz_target!(|input: Input| {
    let Input { a, b } = input;
    // A name that spells another's encoding: `a}b` and `a%7Db` must keep apart.
    let spelled = {
        let lock = lock_keys("", &a).lock;
        lock[1..lock.len() - "}:lock".len()].to_owned()
    };
    let names = [a, b, spelled];
    for name in &names {
        assert_eq!(
            LockName::parse(name.clone()).is_ok(),
            name_allowed(name),
            "{name:?}"
        );
    }
    for prefix in PREFIXES {
        let keys: Vec<NameKeys> = names.iter().map(|name| keys_of(prefix, name)).collect();
        for (i, x) in keys.iter().enumerate() {
            // A lock's keys and an election's never meet, not even for one name.
            for key in &x.lock {
                assert!(!x.election.contains(key), "{key:?}");
            }
            for fence in &x.fences {
                assert!(!x.lock.contains(fence) && !x.election.contains(fence));
            }
            for (j, y) in keys.iter().enumerate().skip(i + 1) {
                let same = names[i] == names[j];
                assert_eq!(
                    same,
                    x.lock[0] == y.lock[0],
                    "{:?} {:?}",
                    names[i],
                    names[j]
                );
                for key in x.lock.iter().chain(&x.election) {
                    let shared = y.lock.contains(key) || y.election.contains(key);
                    assert_eq!(
                        shared, same,
                        "{key:?} of {:?} and of {:?} under {prefix:?}",
                        names[i], names[j]
                    );
                    assert!(!y.fences.contains(key), "{key:?} is another name's counter");
                }
            }
        }
    }
});
