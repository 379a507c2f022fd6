//! `leasehold run`: hold a lock while a command runs.
//!
//! Exit statuses, for scripts and cron jobs:
//! - the command's own status when it ran to the end (128 + N when killed by signal N);
//! - [`EXIT_NOT_ACQUIRED`] (75) when the lock stayed taken for the whole `--wait`;
//! - [`EXIT_LOST`] (76) when the lease was lost while the command ran (it was sent SIGTERM,
//!   then SIGKILL after `--grace`). A server stopped or crashed under the lease is not a loss:
//!   the lease resumes on another replica of `--server` (unless `--no-resume`);
//! - [`EXIT_USAGE`](super::EXIT_USAGE) (64) when an argument is refused (here, or by the server);
//! - [`EXIT_UNAVAILABLE`] (69) when the server could not be reached or could not serve it;
//! - [`EXIT_NOPERM`](super::EXIT_NOPERM) (77) when the server refused the token or certificate, or
//!   the grant does not cover the lock;
//! - 130 / 143 when interrupted by SIGINT / SIGTERM (the command is stopped, the lock released).

use std::process::ExitCode;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

use leasehold::client::{Client, ClientError, ConnectOptions, LeaseGuard};
use leasehold::pb;

use super::progress::StatusLine;
use leasehold::lease::spec::{LockName, MAX_TTL, MAX_WAIT, MIN_TTL};

use super::{EXIT_LOST, EXIT_NOT_ACQUIRED, EXIT_UNAVAILABLE, fail, usage};

/// What `leasehold run` needs.
#[derive(Debug)]
pub struct RunOptions {
    pub connect: ConnectOptions,
    pub name: String,
    pub ttl: Duration,
    pub wait: Duration,
    pub holder: Option<String>,
    pub grace: Duration,
    /// Holders at once (a semaphore when above 1).
    pub limit: u32,
    /// Hold it shared (a reader).
    pub shared: bool,
    /// Resume the lease on another server when its stream breaks (the default), rather than
    /// stop the command.
    pub resume: bool,
    pub command: Vec<String>,
}

/// Holds a lease on `name` while `command` runs.
pub async fn run(options: RunOptions) -> ExitCode {
    let Some((program, args)) = options.command.split_first() else {
        return usage("no command to run (leasehold run NAME -- CMD ARGS...)");
    };
    if let Err(problem) = check(&options) {
        return usage(problem);
    }
    let client = match Client::connect_with(options.connect.clone()).await {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    let holder = options.holder.clone().unwrap_or_else(default_holder);
    let guard = match acquire_showing_progress(&client, &options, holder).await {
        Ok(guard) => guard,
        Err(ClientError::Status(status)) if status.code() == tonic::Code::Aborted => {
            eprintln!("leasehold: {}", not_acquired(&options, &status));
            return ExitCode::from(EXIT_NOT_ACQUIRED);
        }
        Err(error) => return fail(error),
    };
    let child = Command::new(program)
        .args(args)
        .env("LEASEHOLD_FENCING_TOKEN", guard.fencing_token().to_string())
        .env("LEASEHOLD_LOCK", &options.name)
        .kill_on_drop(true)
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(error) => {
            eprintln!("leasehold: cannot start {program:?}: {error}");
            let _ = guard.release().await;
            return ExitCode::from(127);
        }
    };
    let code = supervise(&mut child, &guard, &options).await;
    let _ = guard.release().await;
    ExitCode::from(code)
}

/// Refuses what the server would refuse, before connecting, in the words of the command line.
fn check(options: &RunOptions) -> Result<(), String> {
    let shown = |d| humantime::format_duration(d).to_string();
    LockName::parse(options.name.clone()).map_err(|error| error.to_string())?;
    if options.ttl < MIN_TTL {
        let (ttl, min) = (shown(options.ttl), shown(MIN_TTL));
        return Err(format!("ttl {ttl} is below the {min} minimum"));
    }
    if options.ttl > MAX_TTL {
        let (ttl, max) = (shown(options.ttl), shown(MAX_TTL));
        return Err(format!("ttl {ttl} is above the {max} maximum"));
    }
    if options.wait > MAX_WAIT {
        let (wait, max) = (shown(options.wait), shown(MAX_WAIT));
        return Err(format!("wait {wait} is above the {max} maximum"));
    }
    Ok(())
}

/// Waits for the command, the loss of the lease, or an interrupt, and says how to exit.
async fn supervise(child: &mut Child, guard: &LeaseGuard, options: &RunOptions) -> u8 {
    let (mut interrupt, mut terminate) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(interrupt), Ok(terminate)) => (interrupt, terminate),
        _ => {
            eprintln!("leasehold: cannot watch for signals; stopping the command");
            stop(child, options.grace).await;
            return EXIT_UNAVAILABLE;
        }
    };
    tokio::select! {
        status = child.wait() => match status {
            Ok(status) => exit_code(status),
            Err(error) => {
                eprintln!("leasehold: lost track of the command: {error}");
                EXIT_UNAVAILABLE
            }
        },
        reason = guard.lost() => {
            eprintln!("leasehold: lease on {:?} lost ({reason}); stopping the command", options.name);
            stop(child, options.grace).await;
            EXIT_LOST
        }
        _ = interrupt.recv() => {
            stop(child, options.grace).await;
            130
        }
        _ = terminate.recv() => {
            stop(child, options.grace).await;
            143
        }
    }
}

/// SIGTERM, then SIGKILL if the command has not ended after `grace`.
async fn stop(child: &mut Child, grace: Duration) {
    if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        let _ = child.kill().await;
    }
}

fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
        (None, None) => 1,
    }
}

fn default_holder() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown-host".into());
    format!("leasehold run on {host}, pid {}", std::process::id())
}

/// Acquires, showing on a terminal who holds the lock and for how long we have waited.
async fn acquire_showing_progress(
    client: &Client,
    options: &RunOptions,
    holder: String,
) -> Result<LeaseGuard, ClientError> {
    let mut line = StatusLine::new(&options.name);
    let waiting = std::sync::Arc::new(std::sync::Mutex::new(None::<pb::Waiting>));
    let seen = waiting.clone();
    let mut lease = client
        .lease(options.name.clone())
        .ttl(options.ttl)
        .wait(options.wait)
        .holder(holder)
        .limit(options.limit)
        .auto_resume(options.resume);
    if options.shared {
        lease = lease.shared();
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
                    line.show(&current);
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
    let Some(refusal) = leasehold::client::Refusal::of(status) else {
        return status.message().to_owned();
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
                "lock {:?} is held by {holder:?}{waited} (its lease ends within {} unless renewed)",
                options.name,
                humantime::format_duration(ttl)
            )
        }
        None => format!("lock {:?} is held by {holder:?}{waited}", options.name),
    }
}
