//! Property tests (fuzzing by proptest) for request validation and the key layout: no input may
//! panic, pass a limit it breaks, or reach another name's keys.

use leasehold::lease::spec::{self, LeaseSpec, LockName, MAX_NAME_BYTES};
use leasehold::pb::LeaseAcquire;
use leasehold::store::keys::lock_keys;
use proptest::prelude::*;

/// Names rich in the characters that break naive key layouts.
fn tricky_name() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just('{'),
            Just('}'),
            Just(':'),
            Just('*'),
            Just('%'),
            Just('\n'),
            Just('\u{0}'),
            Just('é'),
            Just('7'),
            Just('D'),
            any::<char>(),
        ],
        0..80,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn validation_never_panics_and_accepts_only_what_the_limits_allow(
        name in tricky_name(),
        ttl_ms in any::<u32>(),
        wait_ms in any::<u32>(),
        holder in tricky_name(),
    ) {
        let request = LeaseAcquire { name: name.clone(), ttl_ms, wait_ms, holder: holder.clone(), fair: None, ..Default::default() };
        match LeaseSpec::try_from(request) {
            Ok(spec) => {
                prop_assert!(!name.is_empty() && name.len() <= MAX_NAME_BYTES);
                prop_assert!(!name.chars().any(char::is_control));
                prop_assert!(spec.ttl >= spec::MIN_TTL && spec.ttl <= spec::MAX_TTL);
                prop_assert!(spec.wait <= spec::MAX_WAIT);
                prop_assert!(!holder.chars().any(char::is_control));
            }
            Err(error) => prop_assert!(!error.to_string().is_empty()),
        }
    }

    #[test]
    fn keys_stay_in_their_prefix_and_hash_tag_and_never_collide(a in tricky_name(), b in tricky_name()) {
        let (Ok(a), Ok(b)) = (LockName::parse(a), LockName::parse(b)) else {
            return Ok(());
        };
        let (ka, kb) = (lock_keys("leasehold:", a.as_str()), lock_keys("leasehold:", b.as_str()));
        for key in [ka.lock().to_owned(), ka.line(), ka.deadlines(), ka.holders(), ka.permits(), ka.fence()] {
            prop_assert!(key.starts_with("leasehold:"), "{} is outside the prefix", key);
            prop_assert_eq!(key.matches('{').count(), 1);
            prop_assert_eq!(key.matches('}').count(), 1);
            prop_assert!(!key.contains(['*', '\n', ' ']));
        }
        // All keys of one lock share one hash tag, and the fencing counter its hash slot, so
        // one script can touch them all on a cluster.
        let tag = |k: &str| k[k.find('{').unwrap()..=k.find('}').unwrap()].to_owned();
        prop_assert_eq!(tag(ka.lock()), tag(&ka.line()));
        prop_assert_eq!(tag(ka.lock()), tag(&ka.permits()));
        let slot = |k: &str| fred::util::redis_keyslot(k.as_bytes());
        prop_assert_eq!(slot(ka.lock()), slot(&ka.fence()));
        prop_assert!(ka.lock().starts_with("leasehold:{"), "{}", ka.lock());
        prop_assert_eq!(a == b, ka.lock() == kb.lock());
    }
}
