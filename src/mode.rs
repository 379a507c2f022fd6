//! How many may hold one name at once: a plain lock, a semaphore's permits, or a shared hold.
//!
//! Below every layer (and beside [`crate::error`], whose `ModeMismatch` names two of them), so
//! the store's scripts, the lease's spec and the error type share one vocabulary without
//! importing each other.

/// How many may hold one name at once, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Up to `limit` holders, each with its own token and expiry: 1 is a plain lock (and the
    /// writer of a read-write lock), more is a counting semaphore.
    Exclusive { limit: u32 },
    /// A reader of a read-write lock: readers hold together; a writer excludes them all.
    Shared,
}

impl Mode {
    /// A plain lock.
    pub const LOCK: Mode = Mode::Exclusive { limit: 1 };

    /// How the scripts spell it (`permits.lua`), and errors' details name it: the limit, or
    /// `shared`.
    pub fn kind(self) -> String {
        match self {
            Mode::Exclusive { limit } => limit.to_string(),
            Mode::Shared => "shared".to_owned(),
        }
    }

    pub fn from_kind(kind: &str) -> Option<Mode> {
        match kind {
            "shared" => Some(Mode::Shared),
            limit => limit.parse().ok().map(|limit| Mode::Exclusive { limit }),
        }
    }

    /// A new waiter's id in the line: its first letter tells the scripts what it waits for (a
    /// waiting writer, `x`, keeps later readers out).
    pub fn waiter_id(self) -> String {
        let kind = match self {
            Mode::LOCK => 'x',
            Mode::Exclusive { .. } => 'p',
            Mode::Shared => 's',
        };
        format!("{kind}{:016x}", rand::random::<u64>())
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mode::Exclusive { limit } => write!(f, "limit {limit}"),
            Mode::Shared => f.write_str("shared (a read-write lock, limit 1)"),
        }
    }
}
