//! The command that `leasehold run` and `leasehold elect` run while they hold something (a
//! lock's lease, a leadership): started in a process group of its own under the [`Watchdog`],
//! and stopped, the whole group, when what it runs under is lost, when we are interrupted, or
//! when it ends leaving processes behind. One place, so a lock's job and a leader's job are
//! stopped the same way.
//!
//! The command is the whole process tree it starts, not one process: it runs as the leader of a
//! process group of its own ([`Group`]), and every stop goes to the group (SIGTERM, then SIGKILL
//! after `--grace`). A process that leaves the group (`setsid`, a daemon) escapes. If `run` or
//! `elect` itself is killed, its [`Watchdog`] stops the group, by the end of the last confirmed
//! validity at the latest.

use std::future::Future;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::process::{Child, Command};
use tokio::signal::unix::{self, SignalKind, signal};
use tokio::time::Instant;

use super::group::{self, Group};
use super::watchdog::Watchdog;
use super::{EXIT_LOST, EXIT_UNAVAILABLE};
use leasehold::lease::spec::{MAX_TTL, MIN_TTL};

/// The command could not be started (not found, not executable), as a shell says it.
const EXIT_NOT_STARTED: u8 = 127;
/// Interrupted: 128 + SIGINT, 128 + SIGTERM, as a shell reports a job the signal ended.
const EXIT_INTERRUPTED: u8 = 130;
const EXIT_TERMINATED: u8 = 143;

/// The command, and how to stop it.
pub struct Job<'a> {
    /// The program and its arguments.
    pub command: &'a [String],
    /// What the command is told of what it runs under (`LEASEHOLD_LOCK`, `LEASEHOLD_TERM`, ...).
    pub env: Vec<(&'static str, String)>,
    /// Between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// The lease's TTL: how often its validity is passed on to the watchdog.
    pub ttl: Duration,
}

/// What the command runs under, as the job sees it.
pub struct Held<'a, L> {
    /// As messages name it: `lease on "job"`, `leadership of "scheduler"`.
    pub what: String,
    /// Completes, with the reason, when it is lost.
    pub lost: L,
    /// Until when it was last vouched for, by this process's clock.
    pub valid_until: &'a dyn Fn() -> Instant,
    /// Whether it outlives a broken stream for its grace (resumable). If not, the server lets
    /// it go the moment this process's connection drops, and the watchdog does not wait.
    pub resumable: bool,
}

/// SIGINT and SIGTERM to this process, watched from before the command starts.
pub struct Interrupts {
    interrupt: unix::Signal,
    terminate: unix::Signal,
}

impl Interrupts {
    /// Watches both; `None` (said on stderr) if they cannot be watched.
    pub fn watch() -> Option<Interrupts> {
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(interrupt), Ok(terminate)) => Some(Interrupts {
                interrupt,
                terminate,
            }),
            _ => {
                eprintln!("leasehold: cannot watch for signals");
                None
            }
        }
    }

    /// The next one, as the exit status it calls for: 130 (SIGINT) or 143 (SIGTERM).
    pub async fn next(&mut self) -> u8 {
        tokio::select! {
            _ = self.interrupt.recv() => EXIT_INTERRUPTED,
            _ = self.terminate.recv() => EXIT_TERMINATED,
        }
    }
}

/// Refuses a TTL the server would refuse, in the words of the command line.
pub fn check_ttl(ttl: Duration) -> Result<(), String> {
    let shown = |d| humantime::format_duration(d).to_string();
    if ttl < MIN_TTL {
        return Err(format!(
            "ttl {} is below the {} minimum",
            shown(ttl),
            shown(MIN_TTL)
        ));
    }
    if ttl > MAX_TTL {
        return Err(format!(
            "ttl {} is above the {} maximum",
            shown(ttl),
            shown(MAX_TTL)
        ));
    }
    Ok(())
}

/// How others see this process by default (a lock's holder, a leader's value).
pub fn this_process(command: &str) -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown-host".into());
    format!("leasehold {command} on {host}, pid {}", std::process::id())
}

/// How a job ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    /// How to exit: the command's own status, [`EXIT_LOST`] when what it ran under was lost,
    /// 130 / 143 when interrupted, 127 when the command could not start, [`EXIT_UNAVAILABLE`]
    /// when the watchdog could not.
    pub code: u8,
    /// What it ran under was lost (there is nothing left to let go).
    pub lost: bool,
}

/// Runs the job while `held` lasts, and says how it ended. The command's whole group has ended
/// (or was sent SIGKILL) when it returns; letting go of `held` is the caller's.
pub async fn run_while_held<L: Future<Output = String>>(
    job: &Job<'_>,
    held: Held<'_, L>,
    interrupts: &mut Interrupts,
) -> Ended {
    let failed = |code| Ended { code, lost: false };
    let Some((program, args)) = job.command.split_first() else {
        eprintln!("leasehold: no command to run");
        return failed(super::EXIT_USAGE);
    };
    let mut watchdog = match Watchdog::start(job.grace) {
        Ok(watchdog) => watchdog,
        Err(error) => {
            eprintln!(
                "leasehold: cannot start the watchdog that stops the command if this process dies: {error}"
            );
            return failed(EXIT_UNAVAILABLE);
        }
    };
    // Not resumable: it goes with this process's connection.
    let ends = match held.resumable {
        true => (held.valid_until)(),
        false => Instant::now(),
    };
    watchdog.valid_until(ends).await;
    let mut command = Command::new(program);
    command
        .args(args)
        .envs(job.env.iter().map(|(key, value)| (key, value)))
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
    let ended = match started {
        Ok((mut child, group)) => {
            supervise(&mut child, group, job, held, interrupts, &mut watchdog).await
        }
        Err(error) => {
            eprintln!("leasehold: cannot start {program:?}: {error}");
            failed(EXIT_NOT_STARTED)
        }
    };
    watchdog.done().await;
    ended
}

/// Waits for the command, the loss of `held`, or an interrupt, and says how it ended.
async fn supervise<L: Future<Output = String>>(
    child: &mut Child,
    group: Group,
    job: &Job<'_>,
    held: Held<'_, L>,
    interrupts: &mut Interrupts,
    watchdog: &mut Watchdog,
) -> Ended {
    let (grace, ttl) = (job.grace, job.ttl);
    // The watchdog's deadline follows the validity (a stale one is only earlier); without
    // resuming, the first deadline told stays.
    let mut told = (held.valid_until)();
    let mut tick = tokio::time::interval((ttl / 10).clamp(group::POLL, Duration::from_secs(1)));
    let lost = held.lost;
    tokio::pin!(lost);
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
                // What it left running would go on without what it ran under.
                if group.runs() {
                    eprintln!("leasehold: the command ended, leaving processes of its group running; stopping them");
                    stop(child, group, grace).await;
                }
                return Ended { code, lost: false };
            }
            reason = &mut lost => {
                eprintln!("leasehold: {} lost ({reason}); stopping the command", held.what);
                stop(child, group, grace).await;
                return Ended { code: EXIT_LOST, lost: true };
            }
            code = interrupts.next() => {
                stop(child, group, grace).await;
                return Ended { code, lost: false };
            }
            _ = tick.tick() => {
                let valid_until = (held.valid_until)();
                if held.resumable && valid_until != told {
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

/// A command's status as a shell reports it: its code, or 128 + the signal that ended it.
fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(1),
        (None, None) => 1,
    }
}
