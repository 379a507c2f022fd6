//! The backstop that keeps a hung test from holding a CI run until the CI's own limit.
//!
//! Every await in these tests has a deadline of its own (`EVENT_TIMEOUT`, [`super::within`]), so
//! a broken build fails in seconds. This watchdog is for the await that was missed: the first
//! test that starts a Redis ([`super::RedisServer`]) starts one thread for the whole binary,
//! which aborts the binary, naming the limit and every test still running, when
//!
//! - a test that started a Redis has run longer than [`TEST_LIMIT`] (libtest runs each test on
//!   a thread named after it: the test is known by that thread, and forgotten when it exits), or
//! - the binary has run longer than [`RUN_LIMIT`] since then, whatever its tests are.
//!
//! Before exiting it kills this process's children (redis-server, server processes), which no
//! `Drop` would stop. `LEASEHOLD_TEST_LIMIT_SECS` changes the per-test limit (a slower machine;
//! or a few seconds, to see the watchdog act).

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Longer than any test here takes (the longest, the Redis modes' chaos runs, take about a
/// minute on two busy cores), far shorter than a CI run's limit.
pub const TEST_LIMIT: Duration = Duration::from_secs(300);
/// The whole integration binary (a few minutes in CI).
pub const RUN_LIMIT: Duration = Duration::from_secs(30 * 60);

/// The tests running now, by name, and when each started.
fn running() -> &'static Mutex<HashMap<String, Instant>> {
    static RUNNING: OnceLock<Mutex<HashMap<String, Instant>>> = OnceLock::new();
    RUNNING.get_or_init(Mutex::default)
}

fn test_limit() -> Duration {
    std::env::var("LEASEHOLD_TEST_LIMIT_SECS")
        .ok()
        .and_then(|secs| secs.parse().ok())
        .map_or(TEST_LIMIT, Duration::from_secs)
}

/// Forgets its test when the test's thread exits.
struct Registered(String);

impl Drop for Registered {
    fn drop(&mut self) {
        running()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.0);
    }
}

thread_local! {
    static REGISTERED: std::cell::OnceCell<Option<Registered>> = const { std::cell::OnceCell::new() };
}

/// Puts the calling test under the watchdog (once per test; a call from a thread that is not
/// a test's, such as a runtime's worker, only makes sure the watchdog runs).
pub fn watch() {
    static WATCHDOG: OnceLock<()> = OnceLock::new();
    WATCHDOG.get_or_init(|| {
        let started = Instant::now();
        // Its output goes to the process's stderr, not to a test's captured output.
        let _ = std::thread::Builder::new()
            .name("test watchdog".into())
            .spawn(move || guard(started));
    });
    let _ = REGISTERED.try_with(|registered| {
        registered.get_or_init(|| {
            let thread = std::thread::current();
            let name = thread.name().filter(|name| is_test(name))?.to_owned();
            running()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(name.clone(), Instant::now());
            Some(Registered(name))
        });
    });
}

/// libtest names a test's thread after the test (`chaos::holder_server_killed`); runtimes'
/// threads and the main thread are not tests.
fn is_test(thread: &str) -> bool {
    thread.contains("::") && !thread.starts_with("tokio")
}

fn guard(started: Instant) {
    let limit = test_limit();
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let now = Instant::now();
        let mut tests: Vec<(String, Duration)> = running()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(name, since)| (name.clone(), now - *since))
            .collect();
        tests.sort_by_key(|(_, ran)| std::cmp::Reverse(*ran));
        let why = match tests.first() {
            Some((name, ran)) if *ran > limit => {
                format!(
                    "test {name} has run {ran:.1?}, longer than the limit of {limit:?} per test"
                )
            }
            _ if now - started > RUN_LIMIT => format!(
                "the integration tests have run {:.1?}, longer than the limit of {RUN_LIMIT:?}",
                now - started
            ),
            _ => continue,
        };
        let still: Vec<String> = tests
            .iter()
            .map(|(name, ran)| format!("{name} ({ran:.1?})"))
            .collect();
        let _ = writeln!(
            std::io::stderr(),
            "\nWATCHDOG (tests/support/watchdog.rs): {why}; a test hangs, so the binary stops now \
             rather than at CI's limit. Running: {}.",
            still.join(", ")
        );
        kill_children();
        std::process::exit(101);
    }
}

/// SIGKILLs every child of this process (found in /proc), so none outlives the abort.
fn kill_children() {
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1));
        if parent == Some(me.as_str()) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid])
                .status();
        }
    }
}
