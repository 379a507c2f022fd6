//! `leasehold run`: hold a lock while a command runs.
//!
//! Exit statuses, for scripts and cron jobs:
//! - the command's own status when it ran to the end (128 + N when killed by signal N);
//! - [`EXIT_NOT_ACQUIRED`] (75) when the lock stayed taken for the whole `--wait`;
//! - [`EXIT_LOST`] (76) when the lease was lost while the command ran (its process group was
//!   sent SIGTERM, then SIGKILL after `--grace`). A server stopped or crashed under the lease is
//!   not a loss: the lease resumes on another replica of `--server` (unless `--no-resume`);
//! - [`EXIT_USAGE`](super::EXIT_USAGE) (64) when an argument is refused (here, or by the server);
//! - [`EXIT_UNAVAILABLE`] (69) when the server could not be reached or could not serve it;
//! - [`EXIT_NOPERM`](super::EXIT_NOPERM) (77) when the server refused the token or certificate, or
//!   the grant does not cover the lock;
//! - 130 / 143 when interrupted by SIGINT / SIGTERM (the command is stopped, the lock released).
//!
//! The command is the whole process tree it starts, not one process: it runs as the leader of a
//! process group of its own ([`Group`]), and every stop goes to the group (SIGTERM, then SIGKILL
//! after `--grace`): on a lost lease, on SIGINT / SIGTERM to `run`, and when the command ends
//! leaving processes behind (they would run on without the lock). A process that leaves the
//! group (`setsid`, a daemon) escapes. If `run` itself is killed, its [`Watchdog`] stops the
//! group, by the end of the lease's last confirmed validity at the latest.

use std::process::ExitCode;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

use leasehold_client::pb;
use leasehold_client::{Client, ClientError, ConnectOptions, LeaseGuard};

use super::group::{self, Group};
use super::progress::StatusLine;
use super::watchdog::Watchdog;
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
    let mut watchdog = match Watchdog::start(options.grace) {
        Ok(watchdog) => watchdog,
        Err(error) => {
            eprintln!(
                "leasehold: cannot start the watchdog that stops the command if this process dies: {error}"
            );
            let _ = guard.release().await;
            return ExitCode::from(EXIT_UNAVAILABLE);
        }
    };
    // Without resuming, the server frees the lock the moment this process's connection drops.
    let lease_ends = |guard: &LeaseGuard| match options.resume {
        true => guard.valid_until(),
        false => tokio::time::Instant::now(),
    };
    watchdog.valid_until(lease_ends(&guard)).await;
    let mut command = Command::new(program);
    command
        .args(args)
        .env("LEASEHOLD_FENCING_TOKEN", guard.fencing_token().to_string())
        .env("LEASEHOLD_LOCK", &options.name)
        .process_group(0)
        .kill_on_drop(true);
    watchdog.announce(&mut command);
    let started = command.spawn().and_then(|child| {
        let group = child.id().and_then(|id| i32::try_from(id).ok());
        match group.and_then(Group::led_by) {
            Some(group) => Ok((child, group)),
            None => Err(std::io::Error::other("it has no process id")),
        }
    });
    let (mut child, group) = match started {
        Ok(started) => started,
        Err(error) => {
            eprintln!("leasehold: cannot start {program:?}: {error}");
            watchdog.done().await;
            let _ = guard.release().await;
            return ExitCode::from(127);
        }
    };
    let code = supervise(&mut child, group, &guard, &options, &mut watchdog).await;
    watchdog.done().await;
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

/// Waits for the command, the loss of the lease, or an interrupt, and says how to exit; the
/// command's whole group has ended (or was sent SIGKILL) when it returns.
async fn supervise(
    child: &mut Child,
    group: Group,
    guard: &LeaseGuard,
    options: &RunOptions,
    watchdog: &mut Watchdog,
) -> u8 {
    let (mut interrupt, mut terminate) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(interrupt), Ok(terminate)) => (interrupt, terminate),
        _ => {
            eprintln!("leasehold: cannot watch for signals; stopping the command");
            stop(child, group, options.grace).await;
            return EXIT_UNAVAILABLE;
        }
    };
    // The watchdog's deadline follows the lease's validity (a stale one is only earlier); with
    // --no-resume the lock goes with this process, and the first deadline told stays.
    let mut told = guard.valid_until();
    let mut tick =
        tokio::time::interval((options.ttl / 10).clamp(group::POLL, Duration::from_secs(1)));
    loop {
        tokio::select! {
            status = child.wait() => {
                let code = match status {
                    Ok(status) => exit_code(status),
                    Err(error) => {
                        eprintln!("leasehold: lost track of the command: {error}");
                        EXIT_UNAVAILABLE
                    }
                };
                // What it left running would go on without the lock.
                if group.runs() {
                    eprintln!("leasehold: the command ended, leaving processes of its group running; stopping them");
                    stop(child, group, options.grace).await;
                }
                return code;
            }
            reason = guard.lost() => {
                eprintln!("leasehold: lease on {:?} lost ({reason}); stopping the command", options.name);
                stop(child, group, options.grace).await;
                return EXIT_LOST;
            }
            _ = interrupt.recv() => {
                stop(child, group, options.grace).await;
                return 130;
            }
            _ = terminate.recv() => {
                stop(child, group, options.grace).await;
                return 143;
            }
            _ = tick.tick() => {
                let valid_until = guard.valid_until();
                if options.resume && valid_until != told {
                    watchdog.valid_until(valid_until).await;
                    told = valid_until;
                }
            }
        }
    }
}

/// SIGTERM to the command's whole group, then SIGKILL to it if the command or any process of
/// its group still runs after `grace`.
async fn stop(child: &mut Child, group: Group, grace: Duration) {
    group.signal(Signal::SIGTERM);
    let ended = async {
        let _ = child.wait().await;
        while group.runs() {
            tokio::time::sleep(group::POLL).await;
        }
    };
    if tokio::time::timeout(grace, ended).await.is_err() {
        group.signal(Signal::SIGKILL);
        // The leader too, should it have left its group.
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
    let Some(refusal) = leasehold_client::Refusal::of(status) else {
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
