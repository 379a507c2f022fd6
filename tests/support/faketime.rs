//! A server process's clock under libfaketime (Debian's `libfaketime`, which
//! `scripts/redis.sh` installs): preloaded into the process, it adds an offset read from a file
//! to every clock the process reads, the monotonic one included, so a test jumps the clock of a
//! running server forward or back by writing the file. (Redis cannot run under it: Debian's
//! build aborts, its jemalloc recursing into `clock_gettime`. A forward jump on Redis is what
//! `PEXPIRE` on a lock key does, see tests/chaos.rs.)

use std::path::{Path, PathBuf};
use std::time::Duration;

/// One process's fake clock: an offset from the real one, in whole seconds.
pub struct FakeClock {
    file: PathBuf,
}

impl FakeClock {
    /// A clock at the real time (offset 0) until [`FakeClock::jump`].
    pub fn new() -> Self {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("faketime");
        std::fs::create_dir_all(&dir).expect("faketime directory");
        let file = dir.join(format!("clock-{}", super::free_port()));
        std::fs::write(&file, "+0\n").expect("write the clock file");
        FakeClock { file }
    }

    /// The environment that puts a process on this clock. The file is read again at every
    /// clock call (`FAKETIME_NO_CACHE`), so a jump takes effect at once.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("LD_PRELOAD".into(), library().display().to_string()),
            (
                "FAKETIME_TIMESTAMP_FILE".into(),
                self.file.display().to_string(),
            ),
            ("FAKETIME_NO_CACHE".into(), "1".into()),
        ]
    }

    /// Sets the offset from the real clock: `forward` by `by`, or back. Relative to the real
    /// clock, not to the last jump.
    pub fn jump(&self, forward: bool, by: Duration) {
        let sign = if forward { '+' } else { '-' };
        std::fs::write(&self.file, format!("{sign}{}\n", by.as_secs())).expect("write the clock");
    }
}

impl Drop for FakeClock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}

/// `libfaketimeMT.so.1` (the build for threaded programs) under the multiarch library directory.
fn library() -> PathBuf {
    let found = std::fs::read_dir("/usr/lib")
        .expect("/usr/lib")
        .flatten()
        .map(|entry| entry.path().join("faketime/libfaketimeMT.so.1"))
        .find(|path| path.exists());
    found.expect("libfaketime is not installed (scripts/redis.sh: ensure_faketime_installed)")
}
