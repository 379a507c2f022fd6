//! The process group `leasehold run` puts its command in: signal all of it at once, and tell
//! whether any of it still runs.
//!
//! A command is rarely one process: `sh -c 'worker & wait'`, a make, a pipeline. Signalling the
//! direct child alone leaves its children running after the lease is lost, so `run` starts the
//! command as the leader of a group of its own and signals the group (`killpg`): every process
//! the command starts stays in it unless it moves itself out (`setsid`, `setpgid`, a daemon's
//! double fork), and such a process escapes `run`.

use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// How often a stopping `run` (or its watchdog) looks whether the group has ended.
pub const POLL: Duration = Duration::from_millis(20);

/// A process group, named by its leader's pid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group(Pid);

impl Group {
    /// The group led by `pid` (the command's pid: it was started with `process_group(0)`).
    /// `None` for a pid that cannot name a group (0, 1 or negative would signal others).
    pub fn led_by(pid: i32) -> Option<Group> {
        (pid > 1).then(|| Group(Pid::from_raw(pid)))
    }

    pub fn id(self) -> i32 {
        self.0.as_raw()
    }

    /// Sends `signal` to every process of the group; a group already gone is not an error.
    pub fn signal(self, signal: Signal) {
        match killpg(self.0, signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(error) => {
                tracing::warn!(group = self.id(), %signal, %error, "cannot signal the command's process group");
            }
        }
    }

    /// Whether a process of the group still runs. An exited process its parent has not reaped
    /// (a zombie) does not count: where the init process does not reap orphans (some
    /// containers), `kill(-group, 0)` goes on answering for them forever.
    pub fn runs(self) -> bool {
        // Anything but ESRCH says a process is there (EPERM: one that changed its user).
        if let Err(Errno::ESRCH) = killpg(self.0, None) {
            return false;
        }
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return true; // no /proc: trust kill
        };
        let group = self.id().to_string();
        entries.flatten().any(|entry| {
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                return false; // not a process, or it just ended
            };
            member_running(&stat, &group)
        })
    }
}

/// Whether a `/proc/PID/stat` line is a process of `group` that has not exited. The fields after
/// the command name (which may hold spaces and parentheses, hence the last `)`): state, parent
/// pid, process group.
fn member_running(stat: &str, group: &str) -> bool {
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let mut fields = rest.split_whitespace();
    let state = fields.next();
    let _parent = fields.next();
    fields.next() == Some(group) && !matches!(state, Some("Z" | "X"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_state_and_group_after_the_last_parenthesis() {
        let line = "4242 (a (b) c) S 4200 4242 4200 0 -1 4194560 99 0 0 0";
        assert!(member_running(line, "4242"));
        assert!(!member_running(line, "4200"));
        let zombie = "4243 (sleep) Z 1 4242 4200 0 -1 4194560 99 0 0 0";
        assert!(!member_running(zombie, "4242"));
        assert!(!member_running("garbage", "4242"));
    }

    #[test]
    fn refuses_pids_that_would_signal_other_groups() {
        assert_eq!(Group::led_by(0), None);
        assert_eq!(Group::led_by(1), None);
        assert_eq!(Group::led_by(-5), None);
        assert_eq!(Group::led_by(77).map(Group::id), Some(77));
    }
}
