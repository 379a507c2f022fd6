//! The lock's scripts, each in its own `.lua` file beside this module, loaded once.

use std::sync::Arc;

use fred::types::scripts::Script;

use crate::store::renewals::ExtendScripts;

/// A script of its own `.lua` file beside this module, after the lock value's helpers
/// (`lease.lua`) and the permits' (`permits.lua`).
macro_rules! with_permits {
    ($file:literal) => {
        Script::from_lua(concat!(
            include_str!("lease.lua"),
            include_str!("permits.lua"),
            include_str!($file)
        ))
    };
}

/// The lock's scripts, each in its own `.lua` file beside this module.
pub(super) struct Scripts {
    /// A plain lock's common case, tried first (see `take.lua`).
    pub(super) take: Script,
    pub(super) acquire: Script,
    /// Shared with the renewal batches.
    pub(super) extend: Arc<ExtendScripts>,
    pub(super) release: Script,
    pub(super) describe: Script,
    pub(super) leave: Script,
    pub(super) refresh: Script,
    pub(super) raise_fence: Script,
    pub(super) resume: Script,
    pub(super) detach: Script,
    pub(super) revoke: Script,
    /// A read only (`Check`): runs where writes are refused.
    pub(super) check: Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        Scripts {
            // Alone: its common case is cut to the bone (see take.lua).
            take: Script::from_lua(include_str!("take.lua")),
            acquire: with_permits!("acquire.lua"),
            extend: Arc::new(ExtendScripts {
                one: with_permits!("extend.lua"),
                // The flag must be the script's first line.
                many: Script::from_lua(concat!(
                    "#!lua flags=allow-cross-slot-keys\n",
                    include_str!("lease.lua"),
                    include_str!("extend_many.lua")
                )),
            }),
            // Its common case first, returning before the helpers are defined (see release.lua).
            release: Script::from_lua(concat!(
                include_str!("release.lua"),
                include_str!("lease.lua"),
                include_str!("permits.lua"),
                include_str!("release_rest.lua")
            )),
            describe: with_permits!("describe.lua"),
            leave: with_permits!("leave.lua"),
            refresh: with_permits!("refresh.lua"),
            raise_fence: Script::from_lua(concat!(
                include_str!("lease.lua"),
                include_str!("raise_fence.lua")
            )),
            resume: with_permits!("resume.lua"),
            detach: with_permits!("detach.lua"),
            revoke: with_permits!("revoke.lua"),
            check: Script::from_lua(concat!(
                "#!lua flags=no-writes\n",
                include_str!("check.lua")
            )),
        }
    }

    pub(super) fn all(&self) -> [&Script; 13] {
        [
            &self.take,
            &self.resume,
            &self.detach,
            &self.raise_fence,
            &self.extend.many,
            &self.acquire,
            &self.extend.one,
            &self.release,
            &self.describe,
            &self.leave,
            &self.refresh,
            &self.revoke,
            &self.check,
        ]
    }
}
