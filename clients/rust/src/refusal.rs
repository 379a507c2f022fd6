//! What the server says about a refused call, read from gRPC's standard status details rather
//! than its message (the table in docs/errors.md), so a program can act on it.

use std::collections::HashMap;
use std::time::Duration;

use tonic::Status;
use tonic_types::StatusExt;

/// A refusal's machine-readable part: the status code, the stable `reason` (`LOCK_HELD`,
/// `WAIT_EXPIRED`, `LIMIT_MISMATCH`, ...), the holder when a lock was taken, and when a retry is
/// worth it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub code: tonic::Code,
    pub reason: String,
    /// The holder's description, for `LOCK_HELD` and `WAIT_EXPIRED`.
    pub holder: Option<String>,
    /// The earliest a retry can succeed (a taken lock: its holder's remaining TTL).
    pub retry_after: Option<Duration>,
    /// Every named value the server sent (`lock`, `holder`, `held_limit`, `limit`...).
    pub metadata: HashMap<String, String>,
}

impl Refusal {
    /// The refusal a status carries; `None` when it has no `ErrorInfo` of ours (a transport
    /// error, or a server older than the details).
    pub fn of(status: &Status) -> Option<Refusal> {
        let info = status.get_details_error_info()?;
        if info.domain != crate::pb::ERROR_DOMAIN {
            return None;
        }
        let retry_after = status
            .get_details_retry_info()
            .and_then(|retry| retry.retry_delay);
        Some(Refusal {
            code: status.code(),
            holder: info.metadata.get("holder").cloned(),
            reason: info.reason,
            retry_after,
            metadata: info.metadata,
        })
    }
}
