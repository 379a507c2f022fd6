//! `leasehold run`: hold a lock while a command runs.
//!
//! Exit statuses, for scripts and cron jobs:
//! - the command's own status when it ran to the end (128 + N when killed by signal N);
//! - [`EXIT_NOT_ACQUIRED`] (75) when the lock stayed taken for the whole `--wait`;
//! - [`EXIT_LOST`](super::EXIT_LOST) (76) when the lease was lost while the command ran, or reached
//!   its `--max-hold` (its process group was sent SIGTERM, then SIGKILL after `--grace`). A server stopped or crashed under the lease is
//!   not a loss: the lease resumes on another replica of `--server` (unless `--no-resume`);
//! - [`EXIT_USAGE`](super::EXIT_USAGE) (64) when an argument is refused (here, or by the server);
//! - [`EXIT_UNAVAILABLE`] (69) when the server could not be reached or could not serve it;
//! - [`EXIT_NOPERM`](super::EXIT_NOPERM) (77) when the server refused the token or certificate, or
//!   the grant does not cover the lock;
//! - 130 / 143 when interrupted by SIGINT / SIGTERM (the command is stopped, the lock released).
//!
//! The command runs as [`super::job`] runs it: in a process group of its own, stopped whole
//! (SIGTERM, then SIGKILL after `--grace`) on a lost lease, on SIGINT / SIGTERM to `run`, and
//! when it ends leaving processes behind; if `run` itself is killed, its watchdog stops the group,
//! by the end of the lease's last confirmed validity at the latest.
//!
//! Several names (`run a b -- CMD`) are one lease on all of them, taken all or none: the command
//! gets every name's fencing token in `LEASEHOLD_FENCING_TOKENS` and the first's in
//! `LEASEHOLD_FENCING_TOKEN`, as a single name's run always did.

use std::process::ExitCode;
use std::time::Duration;

use leasehold_client::pb;
use leasehold_client::{Client, ClientError, ConnectOptions, LeaseGuard, LostReason};

use super::job::{self, Held, Interrupts, Job};
use super::progress::StatusLine;
use leasehold::lease::spec::{LockName, MAX_WAIT};

use super::{EXIT_NOT_ACQUIRED, EXIT_UNAVAILABLE, RunArgs, fail, usage};

/// What `leasehold run` needs.
#[derive(Debug)]
struct RunOptions {
    connect: ConnectOptions,
    /// The names held, all or none; the first is the lease's `name`.
    names: Vec<String>,
    ttl: Duration,
    wait: Duration,
    holder: Option<String>,
    grace: Duration,
    /// Holders at once (a semaphore when above 1).
    limit: u32,
    /// Hold it shared (a reader).
    shared: bool,
    /// Resume the lease on another server when its stream breaks (the default), rather than
    /// stop the command.
    resume: bool,
    lock_delay: Option<Duration>,
    max_hold: Option<Duration>,
    command: Vec<String>,
}

impl RunOptions {
    /// The first name: the lease's own, whose fencing token is `LEASEHOLD_FENCING_TOKEN`.
    fn name(&self) -> &str {
        self.names.first().map_or("", String::as_str)
    }

    /// As messages name what is held: `"job"`, or every name, `"a", "b"`.
    fn shown(&self) -> String {
        super::progress::quoted(&self.names)
    }
}

/// `LEASEHOLD_FENCING_TOKENS`: a `name=token` line per name, in the order given (names hold no
/// control characters; a reader splits each line at its last `=`).
fn fencing_tokens(fences: &[(String, u64)]) -> String {
    let pairs: Vec<String> = fences
        .iter()
        .map(|(name, token)| format!("{name}={token}"))
        .collect();
    pairs.join("\n")
}

/// `leasehold run`, from its arguments.
pub async fn command(args: RunArgs) -> ExitCode {
    let connect = match args.server.options() {
        Ok(connect) => connect,
        Err(problem) => return usage(problem),
    };
    run(RunOptions {
        connect,
        names: args.names,
        ttl: args.ttl,
        wait: args.wait,
        holder: args.holder,
        grace: args.grace,
        limit: args.limit,
        shared: args.shared,
        resume: !args.no_resume,
        lock_delay: args.lock_delay,
        max_hold: args.max_hold,
        command: args.command,
    })
    .await
}

/// Holds a lease on every name while `command` runs.
async fn run(options: RunOptions) -> ExitCode {
    if options.command.is_empty() {
        return usage("no command to run (leasehold run NAME -- CMD ARGS...)");
    }
    if let Err(problem) = check(&options) {
        return usage(problem);
    }
    let client = match Client::connect_with(options.connect.clone()).await {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    let holder = options
        .holder
        .clone()
        .unwrap_or_else(|| job::this_process("run"));
    let guard = match acquire_showing_progress(&client, &options, holder).await {
        Ok(guard) => guard,
        Err(ClientError::Status(status)) if status.code() == tonic::Code::Aborted => {
            eprintln!("leasehold: {}", not_acquired(&options, &status));
            return ExitCode::from(EXIT_NOT_ACQUIRED);
        }
        Err(error) => return fail(error),
    };
    let Some(mut interrupts) = Interrupts::watch() else {
        let _ = guard.release().await;
        return ExitCode::from(EXIT_UNAVAILABLE);
    };
    let job = Job {
        command: &options.command,
        env: vec![
            ("LEASEHOLD_FENCING_TOKEN", guard.fencing_token().to_string()),
            ("LEASEHOLD_FENCING_TOKENS", fencing_tokens(guard.fences())),
            ("LEASEHOLD_LOCK", options.name().to_owned()),
        ],
        grace: options.grace,
        ttl: options.ttl,
    };
    let lost = async {
        let loss = guard.loss().await;
        match (loss.code, options.max_hold) {
            (LostReason::MaxHold, Some(max_hold)) => format!(
                "the max hold of {} was reached",
                humantime::format_duration(max_hold)
            ),
            _ => loss.reason,
        }
    };
    let held = Held {
        what: format!("lease on {}", options.shown()),
        lost,
        valid_until: &|| guard.valid_until(),
        resumable: options.resume,
    };
    let ended = job::run_while_held(&job, held, &mut interrupts).await;
    let _ = guard.release().await;
    ExitCode::from(ended.code)
}

/// Refuses what the server would refuse, before connecting, in the words of the command line.
fn check(options: &RunOptions) -> Result<(), String> {
    let shown = |d| humantime::format_duration(d).to_string();
    for name in &options.names {
        LockName::parse(name.clone()).map_err(|error| error.to_string())?;
    }
    job::check_ttl(options.ttl)?;
    if options.wait > MAX_WAIT {
        let (wait, max) = (shown(options.wait), shown(MAX_WAIT));
        return Err(format!("wait {wait} is above the {max} maximum"));
    }
    if options.names.len() > 1 {
        if options.shared || options.limit > 1 {
            return Err(
                "several names are held as plain locks only, not with --limit or --shared".into(),
            );
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(twice) = options.names.iter().find(|name| !seen.insert(*name)) {
            return Err(format!("lock name {twice:?} is given twice"));
        }
    }
    if let Some(max_hold) = options.max_hold
        && max_hold < options.ttl
    {
        let (max_hold, ttl) = (shown(max_hold), shown(options.ttl));
        return Err(format!(
            "max hold {max_hold} is below the ttl {ttl} (give a --ttl no longer than it)"
        ));
    }
    Ok(())
}

/// Acquires, showing on a terminal who holds the lock and for how long we have waited.
async fn acquire_showing_progress(
    client: &Client,
    options: &RunOptions,
    holder: String,
) -> Result<LeaseGuard, ClientError> {
    let mut line = StatusLine::new();
    let waiting = std::sync::Arc::new(std::sync::Mutex::new(None::<pb::Waiting>));
    let seen = waiting.clone();
    let mut lease = client
        .lease(options.name())
        .more_names(options.names.iter().skip(1))
        .ttl(options.ttl)
        .wait(options.wait)
        .holder(holder)
        .limit(options.limit)
        .auto_resume(options.resume);
    if options.shared {
        lease = lease.shared();
    }
    if let Some(delay) = options.lock_delay {
        lease = lease.lock_delay(delay);
    }
    if let Some(max_hold) = options.max_hold {
        lease = lease.max_hold(max_hold);
    }
    let acquire = lease.acquire_with_progress(move |w| {
        if let Ok(mut seen) = seen.lock() {
            *seen = Some(w.clone());
        }
    });
    tokio::pin!(acquire);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let result = loop {
        tokio::select! {
            result = &mut acquire => break result,
            _ = tick.tick() => {
                let current = waiting.lock().ok().and_then(|w| w.clone());
                if let Some(current) = current {
                    line.show(&StatusLine::lock_held(&options.names, &current));
                }
            }
        }
    };
    line.clear();
    result
}

/// Why `run` gave up, in one sentence: who holds the lock and when it frees at the latest, read
/// from the status details; the server's message when it sent none.
fn not_acquired(options: &RunOptions, status: &tonic::Status) -> String {
    let Some(refusal) = leasehold_client::Refusal::of(status) else {
        return status.message().to_owned();
    };
    // Of several names, the one found taken (the refusal names it).
    let name = match refusal.metadata.get("lock") {
        Some(lock) if options.names.len() > 1 => format!("{lock:?}"),
        _ => options.shown(),
    };
    let holder = refusal.holder.unwrap_or_default();
    let waited = match refusal.reason.as_str() {
        "WAIT_EXPIRED" => format!(
            " after waiting {}",
            humantime::format_duration(options.wait)
        ),
        _ => String::new(),
    };
    match refusal.retry_after {
        Some(ttl) => {
            let ttl = Duration::from_millis(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
            format!(
                "lock {name} is held by {holder:?}{waited} (its lease ends within {} unless renewed)",
                humantime::format_duration(ttl)
            )
        }
        None => format!("lock {name} is held by {holder:?}{waited}"),
    }
}
