//! Who owns the server's background work: every task it starts, and the one signal that stops
//! them all.
//!
//! Modelled on mini-redis's `shutdown.rs`: a task never runs on its own. Lease and campaign
//! streams, the waiting room, the election observers, the Redis reconnect watcher and the
//! releases that run after a stream has gone are all spawned here, all listen to
//! [`Tasks::stopping`], and `serve` returns only once they have finished (or a bounded grace has
//! passed), so nothing of a stopped server is left running.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::{
    CancellationToken, WaitForCancellationFuture, WaitForCancellationFutureOwned,
};
use tokio_util::task::TaskTracker;

/// The background tasks of one server and its shutdown signal. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Tasks {
    tracker: TaskTracker,
    stop: CancellationToken,
}

impl Tasks {
    pub fn new() -> Self {
        Tasks::default()
    }

    /// Runs `task` in the background, owned by this set: shutdown waits for it.
    pub fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.tracker.spawn(task);
    }

    /// As [`Tasks::spawn`], for a task that carries on a call's work after its handler returned
    /// (a stream's driver): its spans are children of the call's. Without a current span (no
    /// traces, no log span) the task is spawned as it is, carrying no span of its own.
    pub fn spawn_in_current_span<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let span = tracing::Span::current();
        if span.is_none() {
            self.spawn(task);
        } else {
            self.spawn(tracing::Instrument::instrument(task, span));
        }
    }

    /// Completes once shutdown has begun; every long-running task selects on it. (The token's
    /// own future, not an `async fn` around it: every held lease keeps one.)
    pub fn stopping(&self) -> WaitForCancellationFuture<'_> {
        self.stop.cancelled()
    }

    /// [`Tasks::stopping`] owning its token: for a held lease's state, polled by hand, which
    /// cannot borrow the set it lives beside.
    pub fn stopping_owned(&self) -> WaitForCancellationFutureOwned {
        self.stop.clone().cancelled_owned()
    }

    pub fn is_stopping(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// Begins shutdown: every task hears [`Tasks::stopping`].
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Waits up to `grace` for every task to finish, tasks spawned meanwhile included (the
    /// releases that shutdown itself starts). Returns how many were still running.
    pub async fn finish(&self, grace: Duration) -> usize {
        self.tracker.close();
        match tokio::time::timeout(grace, self.tracker.wait()).await {
            Ok(()) => 0,
            Err(_) => self.tracker.len(),
        }
    }
}
