//! What `leasehold run` and `leasehold elect` show while they wait: for a lock, who holds it and
//! the place in line; for an election, who leads; and how long.

use std::io::{IsTerminal, Write};

use leasehold_client::{Leader, pb};
use tokio::time::Instant;

/// A spinner line on stderr while waiting; nothing when stderr is not a terminal.
pub struct StatusLine {
    started: Instant,
    frame: usize,
    shown: bool,
    enabled: bool,
}

impl StatusLine {
    pub fn new() -> Self {
        StatusLine {
            started: Instant::now(),
            frame: 0,
            shown: false,
            enabled: std::io::stderr().is_terminal(),
        }
    }

    /// Whether anything is shown (stderr is a terminal): what it shows need not be followed
    /// otherwise.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// What a lock's waiter sees: who holds it, and our place in line.
    pub fn lock_held(names: &[String], waiting: &pb::Waiting) -> String {
        let place = match waiting.position {
            0 => String::new(),
            1 => ", next in line".to_owned(),
            n => format!(", {n} in line"),
        };
        let holder = if waiting.holder.is_empty() {
            "someone".to_owned()
        } else {
            waiting.holder.clone()
        };
        let what = match names.len() {
            1 => "lock",
            _ => "locks",
        };
        format!(
            "waiting for {what} {} held by {holder}{place}",
            quoted(names)
        )
    }

    /// What a candidate sees: who leads the election, if anyone.
    pub fn election_led(name: &str, leader: Option<&Leader>) -> String {
        match leader {
            Some(leader) => format!(
                "waiting to lead {name:?}, led by {} (term {})",
                String::from_utf8_lossy(&leader.value),
                leader.term
            ),
            None => format!("waiting to lead {name:?}"),
        }
    }

    /// Shows `what` with the next spinner frame and the time waited so far.
    pub fn show(&mut self, what: &str) {
        if !self.enabled {
            return;
        }
        const FRAMES: [char; 4] = ['|', '/', '-', '\\'];
        self.frame = (self.frame + 1) % FRAMES.len();
        let mut err = std::io::stderr();
        let _ = write!(
            err,
            "\r\x1b[2K{} {what} ({}s)",
            FRAMES[self.frame],
            self.started.elapsed().as_secs()
        );
        let _ = err.flush();
        self.shown = true;
    }

    pub fn clear(&mut self) {
        if self.shown {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
            self.shown = false;
        }
    }
}

/// Names as messages show them: each quoted, comma-separated (`"a", "b"`).
pub fn quoted(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|name| format!("{name:?}")).collect();
    quoted.join(", ")
}
