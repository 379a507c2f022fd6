//! Recorded histories, as etcd's robustness tests keep them: every operation of every worker in
//! a fault run, with the instants (by the test process's clock) it was called and returned and
//! its outcome. A run saves its history as JSON and hands it to the checker in `tests/checker`
//! (Porcupine's linearizability models for the fenced register, fencing tokens, the lock or
//! semaphore and the election, plus the interval check); a failed model leaves its
//! visualisation beside the history.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// `token`: the fencing token it got.
    Acquire,
    /// The end of a hold the client let go of: `call` is when it stopped believing.
    Release,
    /// The end of a hold the client was told it lost (or whose validity ran out by its clock).
    Lost,
    /// A fenced read: `token` presented, `value` returned.
    Read,
    /// A fenced write: `token` presented, `value` written.
    Write,
    /// Elected: `token` is the term.
    Campaign,
    /// The end of a leadership (resigned or lost): `token` is the term.
    Resign,
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Ok,
    /// Refused for a reason the client knows: the wait ran out, a stale fencing token.
    Refused,
    /// The call failed or timed out: it may or may not have taken effect.
    Unknown,
}

#[derive(Clone, Debug, Serialize)]
struct Op {
    client: usize,
    kind: Kind,
    call: i64,
    #[serde(rename = "return")]
    returned: Option<i64>,
    outcome: Outcome,
    token: u64,
    value: u64,
}

#[derive(Serialize)]
struct File<'a> {
    run: &'a str,
    lock_limit: u32,
    data_loss: bool,
    /// With data loss: the leases' renewal period, which bounds a permitted overlap.
    renewal_ms: u64,
    operations: &'a [Op],
}

/// The longest a lease of `ttl` goes between renewals: src/lease/renewal.rs renews every third
/// of the window (the TTL, or a shorter resume grace), on a grid that only makes it earlier.
/// A holder whose key Redis lost hears of it at its server's next renewal, so this is what
/// the checker allows an overlap under data loss (plus a slack for the news to travel).
pub fn renewal_period(ttl: Duration) -> Duration {
    ttl / 3
}

/// One run's operations, shared by its workers.
pub struct History {
    start: Instant,
    ops: Mutex<Vec<Op>>,
}

impl Default for History {
    fn default() -> Self {
        History {
            start: Instant::now(),
            ops: Mutex::default(),
        }
    }
}

impl History {
    fn nanos(&self, at: Instant) -> i64 {
        i64::try_from(at.saturating_duration_since(self.start).as_nanos()).unwrap_or(i64::MAX)
    }

    /// Records an operation that returned at `returned`, or never did (`None`: unknown).
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &self,
        client: usize,
        kind: Kind,
        call: Instant,
        returned: Option<Instant>,
        outcome: Outcome,
        token: u64,
        value: u64,
    ) {
        let op = Op {
            client,
            kind,
            call: self.nanos(call),
            returned: returned.map(|at| self.nanos(at).max(self.nanos(call))),
            outcome,
            token,
            value,
        };
        self.ops.lock().unwrap_or_else(|e| e.into_inner()).push(op);
    }

    /// Records an acquisition called at `called` from what the client answered: ok with its
    /// fencing token, refused (the server's answer: the wait ran out), or unknown (the call
    /// failed: a permit or lock may have been granted that nobody heard of). Returns when it
    /// returned.
    pub fn record_acquire(
        &self,
        client: usize,
        called: Instant,
        answer: Result<u64, &leasehold_client::ClientError>,
    ) -> Instant {
        let now = Instant::now();
        let (returned, outcome, token) = match answer {
            Ok(token) => (Some(now), Outcome::Ok, token),
            Err(error) if error.refusal().is_some() => (Some(now), Outcome::Refused, 0),
            Err(_) => (None, Outcome::Unknown, 0),
        };
        self.record(client, Kind::Acquire, called, returned, outcome, token, 0);
        now
    }

    /// Records the end of a hold (or a leadership) that ended in the client's belief at `ended`
    /// and whose release (if any) returned at `returned`.
    pub fn record_end(
        &self,
        client: usize,
        kind: Kind,
        ended: Instant,
        returned: Instant,
        token: u64,
    ) {
        let returned = returned.max(ended);
        self.record(client, kind, ended, Some(returned), Outcome::Ok, token, 0);
    }

    pub fn len(&self) -> usize {
        self.ops.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Saves the history as `<target>/tmp/robustness/<run>/history.json` and checks it; panics
    /// with the checker's verdicts if a model that must hold does not (the visualisation of
    /// each failed model is left beside the history). `data_loss`: `Some(renewal period of the
    /// run's leases)` when the fault may make Redis forget a lock, so two holders may overlap
    /// (reported) for at most about that period, while fencing must still hold.
    pub fn check(&self, run: &str, lock_limit: u32, data_loss: Option<Duration>) {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("robustness")
            .join(run);
        std::fs::create_dir_all(&dir).expect("history directory");
        let path = dir.join("history.json");
        let mut ops = self.ops.lock().unwrap_or_else(|e| e.into_inner()).clone();
        ops.sort_by_key(|op| op.call);
        let file = File {
            run,
            lock_limit,
            data_loss: data_loss.is_some(),
            // Rounded up: the checker's bound must not be shorter than the period.
            renewal_ms: data_loss.map_or(0, |period| {
                u64::try_from(period.as_micros().div_ceil(1_000)).unwrap_or(u64::MAX)
            }),
            operations: &ops,
        };
        std::fs::write(
            &path,
            serde_json::to_vec(&file).expect("history serialises"),
        )
        .expect("write history");
        let mut command = Command::new(checker());
        command
            .arg("-timeout")
            .arg(format!("{}s", MODEL_TIMEOUT.as_secs()))
            .arg(&path);
        let output = output_within(&mut command, CHECK_LIMIT, "the checker");
        let verdicts = String::from_utf8_lossy(&output.stdout);
        println!("{verdicts}");
        assert!(
            output.status.success(),
            "{run}: the checker refused the history {}:\n{verdicts}{}",
            path.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// How long each of the checker's Porcupine models may search (the histories here take well
/// under a second; one not proven within this fails).
const MODEL_TIMEOUT: Duration = Duration::from_secs(40);
/// The whole checker run: five models at most, each bounded by `MODEL_TIMEOUT`.
const CHECK_LIMIT: Duration = Duration::from_secs(5 * 40 + 20);
/// Building the checker (its module is in Go's cache after `scripts/test.sh`'s `go vet`).
const BUILD_LIMIT: Duration = Duration::from_secs(180);

/// Runs `command` to its end and returns its output; kills it and panics, naming `what` and
/// the limit, if it has not ended within `limit`.
fn output_within(command: &mut Command, limit: Duration, what: &str) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: could not start: {e}"));
    // Read both pipes meanwhile, so a chatty child never blocks on a full one.
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let read = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = read(stdout.map(|p| Box::new(p) as Box<dyn Read + Send>));
    let stderr = read(stderr.map(|p| Box::new(p) as Box<dyn Read + Send>));
    let started = std::time::Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{what} did not finish within {limit:?}");
            }
            Err(e) => panic!("{what}: {e}"),
        }
    };
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// The checker (`tests/checker`, Go with Porcupine), built once per test binary: `go build` is
/// incremental, so a changed checker is never run stale. Built under a temporary name and
/// renamed, so test binaries running at once never run a half-written file.
fn checker() -> &'static Path {
    static CHECKER: OnceLock<PathBuf> = OnceLock::new();
    CHECKER.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let bin = root.join("target/go/bin");
        std::fs::create_dir_all(&bin).expect("target/go/bin");
        let path = bin.join("leasehold-checker");
        let building = bin.join(format!("leasehold-checker.{}", std::process::id()));
        let mut command = Command::new("go");
        command
            .args(["build", "-o"])
            .arg(&building)
            .arg(".")
            .current_dir(root.join("tests/checker"));
        let output = output_within(
            &mut command,
            BUILD_LIMIT,
            "go build tests/checker (Go is needed for the robustness checker)",
        );
        assert!(
            output.status.success(),
            "go build tests/checker: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::rename(&building, &path).expect("install the checker");
        path
    })
}
