//! The watchdog: stops `leasehold run`'s command (and `elect`'s, the same way) when `run` itself
//! dies (SIGKILL, the OOM killer, a crash), so the command never outlives the lease it ran under.
//!
//! `run` stops its command's process group itself on every path it lives through (see
//! [`super::run`]). A killed `run` does nothing more, and its lease runs out on the server
//! within its TTL, so another holder may start while the orphaned command still runs: two
//! copies of the job at once. Hence a second process:
//!
//! - `run` starts `leasehold __run-watchdog` (this binary again, `/proc/self/exe`, so an upgrade
//!   of the file on disk does not matter) before the command, with a pipe as its stdin whose
//!   write end only `run` holds (close-on-exec, so the command does not inherit it);
//! - the command announces its own pid (its process group) on that pipe between fork and exec,
//!   so there is no moment when the command runs and the watchdog does not know it;
//! - `run` tells it, each time it changes, until when the lease was last vouched for, as an
//!   instant of `CLOCK_MONOTONIC` (the same in every process of the machine);
//! - when `run` ends normally it says so (`done`) and the watchdog exits without acting. End of
//!   file without `done` means `run` died: the watchdog sends SIGTERM to the command's group,
//!   then SIGKILL at the earlier of `--grace` later and [`KILL_AHEAD`] before the end of the
//!   lease's last confirmed validity, and exits as soon as no process of the group runs. (With
//!   `run --no-resume` the server frees the lock as soon as `run`'s connection drops: `run` tells
//!   a validity that has already ended, and the SIGKILL follows the SIGTERM at once.)
//!
//! The watchdog leads a process group of its own: outside the command's (a Ctrl-C or `kill` to
//! the command's group does not reach it) and outside `run`'s (a supervisor that kills `run`'s
//! whole group still leaves the watchdog to clean up); it ignores SIGINT, SIGTERM, SIGHUP and
//! SIGQUIT as well. Only SIGKILL to the watchdog and `run` both leaves the command behind.
//!
//! Why not `PR_SET_PDEATHSIG` on the command: it reaches only the direct child (a shell whose
//! grandchild does the work), it fires when the *thread* that forked the child ends rather than
//! the process (a runtime's worker thread), and it gives no grace period bounded by the lease.
//! The pipe covers every way `run` can end, since the kernel closes its end then.

use std::io::{self, Read};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use nix::sys::signal::{SigHandler, Signal};
use nix::time::{ClockId, clock_gettime};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin, Command};

use super::group::{self, Group};

/// The hidden subcommand `run` starts.
pub const SUBCOMMAND: &str = "__run-watchdog";

/// How long before the lease's validity ends the watchdog sends SIGKILL: the signal has to land
/// (the watchdog woken, the processes torn down) before the lock can go to another holder, on a
/// machine that may be loaded (where a process can wait a tenth of a second to run). Killing
/// that much earlier takes from the command only time it would have had to spend on the
/// SIGTERM of a `run` already dead.
pub const KILL_AHEAD: Duration = Duration::from_millis(200);

/// One message: a tag byte and a little-endian u64. Nine bytes, under PIPE_BUF: the command's
/// announcement (written from its own process) and `run`'s writes never interleave.
const MESSAGE: usize = 9;
/// The command's process group (its leader's pid).
const GROUP: u8 = b'G';
/// The lease was last vouched for until this `CLOCK_MONOTONIC` instant, in nanoseconds.
const VALID_UNTIL: u8 = b'V';
/// `run` ended normally: the command's group is done with; exit without acting.
const DONE: u8 = b'D';

fn encode(tag: u8, value: u64) -> [u8; MESSAGE] {
    let mut message = [tag; MESSAGE];
    message[1..].copy_from_slice(&value.to_le_bytes());
    message
}

/// Now on `CLOCK_MONOTONIC`, in nanoseconds.
fn monotonic_ns() -> Option<u64> {
    let now = clock_gettime(ClockId::CLOCK_MONOTONIC).ok()?;
    let seconds = u64::try_from(now.tv_sec()).ok()?;
    let nanos = u64::try_from(now.tv_nsec()).ok()?;
    seconds.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// `run`'s side: the watchdog process and the write end of its pipe.
pub struct Watchdog {
    process: Child,
    pipe: Option<ChildStdin>,
}

impl Watchdog {
    /// Starts the watchdog; `grace` is `run --grace`.
    pub fn start(grace: Duration) -> io::Result<Watchdog> {
        let own = std::path::Path::new("/proc/self/exe");
        let program = match own.exists() {
            true => own.to_path_buf(),
            false => std::env::current_exe()?,
        };
        let mut process = Command::new(program)
            .arg(SUBCOMMAND)
            .arg("--grace")
            .arg(format!("{}ms", grace.as_millis()))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()?;
        let pipe = process.stdin.take();
        if pipe.is_none() {
            return Err(io::Error::other("the watchdog has no pipe"));
        }
        Ok(Watchdog { process, pipe })
    }

    /// Makes `command` announce its pid to the watchdog when it starts (between fork and exec).
    pub fn announce(&self, command: &mut Command) {
        let Some(fd) = self.pipe.as_ref().map(AsRawFd::as_raw_fd) else {
            return;
        };
        // SAFETY: the closure runs in the forked child before exec and only makes two system
        // calls (getpid, write) on a stack buffer: no allocation, no lock, async-signal-safe.
        // `fd` is the pipe's write end, open in `run` while this Watchdog lives (so in the
        // child, a copy of `run` taken at fork); it closes in the child at exec.
        unsafe {
            command.pre_exec(move || announce_self(fd));
        }
    }

    /// Tells the watchdog until when the lease was last vouched for.
    pub async fn valid_until(&mut self, until: tokio::time::Instant) {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        let left = u64::try_from(left.as_nanos()).unwrap_or(u64::MAX);
        if let Some(now) = monotonic_ns() {
            self.send(encode(VALID_UNTIL, now.saturating_add(left)))
                .await;
        }
    }

    /// `run` is done with the command: the watchdog exits without acting.
    pub async fn done(mut self) {
        self.send(encode(DONE, 0)).await;
        drop(self.pipe.take());
        // It exits at once; reap it rather than leave a zombie for the rest of `run`.
        let _ = tokio::time::timeout(Duration::from_secs(1), self.process.wait()).await;
    }

    async fn send(&mut self, message: [u8; MESSAGE]) {
        let Some(pipe) = self.pipe.as_mut() else {
            return;
        };
        if let Err(error) = pipe.write_all(&message).await {
            eprintln!(
                "leasehold: the watchdog stopped ({error}); if this process dies, its command may outlive the lease"
            );
            self.pipe = None;
        }
    }
}

/// In the command's process, before exec: its pid, which names its process group.
fn announce_self(fd: RawFd) -> io::Result<()> {
    let pid = nix::unistd::getpid().as_raw();
    let message = encode(GROUP, u64::try_from(pid).unwrap_or(0));
    // SAFETY: see `Watchdog::announce`: `fd` is open here and stays open past this call.
    let pipe = unsafe { BorrowedFd::borrow_raw(fd) };
    match nix::unistd::write(pipe, &message) {
        Ok(MESSAGE) => Ok(()),
        Ok(_) => Err(io::Error::other("short write to the watchdog")),
        Err(errno) => Err(errno.into()),
    }
}

/// The watchdog process: `leasehold __run-watchdog --grace D`.
pub fn watch(grace: Duration) -> ExitCode {
    for signal in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        // SAFETY: ignoring a signal installs no handler, so no code runs on its delivery.
        let _ = unsafe { nix::sys::signal::signal(signal, SigHandler::SigIgn) };
    }
    let mut group = None;
    let mut valid_until = None;
    let mut pipe = io::stdin().lock();
    let mut message = [0u8; MESSAGE];
    // Until end of file (or a broken message): `run` is gone.
    while pipe.read_exact(&mut message).is_ok() {
        let mut value = [0u8; 8];
        value.copy_from_slice(&message[1..]);
        let value = u64::from_le_bytes(value);
        match message[0] {
            GROUP => group = i32::try_from(value).ok().and_then(Group::led_by),
            VALID_UNTIL => valid_until = Some(value),
            DONE => return ExitCode::SUCCESS,
            _ => break,
        }
    }
    let Some(group) = group else {
        return ExitCode::SUCCESS; // `run` died before its command started
    };
    if !group.runs() {
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "leasehold: `leasehold run` (or `elect`) ended without stopping its command; stopping process group {}",
        group.id()
    );
    let Some(now) = monotonic_ns() else {
        group.signal(Signal::SIGKILL);
        return ExitCode::SUCCESS;
    };
    let grace_ns = u64::try_from(grace.as_nanos()).unwrap_or(u64::MAX);
    let ahead = u64::try_from(KILL_AHEAD.as_nanos()).unwrap_or(0);
    let kill_at = valid_until
        .map_or(u64::MAX, |v| v.saturating_sub(ahead).max(now))
        .min(now.saturating_add(grace_ns));
    group.signal(Signal::SIGTERM);
    loop {
        if !group.runs() {
            return ExitCode::SUCCESS;
        }
        let Some(now) = monotonic_ns().filter(|&now| now < kill_at) else {
            break;
        };
        std::thread::sleep(group::POLL.min(Duration::from_nanos(kill_at - now)));
    }
    group.signal(Signal::SIGKILL);
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_a_tag_and_a_little_endian_value() {
        let message = encode(VALID_UNTIL, 0x0102);
        assert_eq!(message, [b'V', 2, 1, 0, 0, 0, 0, 0, 0]);
        assert!(monotonic_ns().is_some());
    }
}
