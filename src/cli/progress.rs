//! What `leasehold run` shows while it waits: who holds the lock, the place in line, how long.

use std::io::{IsTerminal, Write};

use leasehold_client::pb;
use tokio::time::Instant;

/// A spinner line on stderr while waiting; nothing when stderr is not a terminal.
pub struct StatusLine {
    name: String,
    started: Instant,
    frame: usize,
    shown: bool,
    enabled: bool,
}

impl StatusLine {
    pub fn new(name: &str) -> Self {
        StatusLine {
            name: name.to_owned(),
            started: Instant::now(),
            frame: 0,
            shown: false,
            enabled: std::io::stderr().is_terminal(),
        }
    }

    pub fn show(&mut self, waiting: &pb::Waiting) {
        if !self.enabled {
            return;
        }
        const FRAMES: [char; 4] = ['|', '/', '-', '\\'];
        self.frame = (self.frame + 1) % FRAMES.len();
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
        let mut err = std::io::stderr();
        let _ = write!(
            err,
            "\r\x1b[2K{} waiting for lock {:?} held by {holder}{place} ({}s)",
            FRAMES[self.frame],
            self.name,
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
