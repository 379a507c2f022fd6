//! The task behind one session: it reads the session's stream, carries out its holders' wishes,
//! ends each lease once, and reopens a broken stream on any replica.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Instant, sleep_until, timeout_at};
use tokio_stream::StreamExt;
use tonic::{Status, Streaming};

use super::leases::{Entry, Phase, Releasing, Shared, expire_due, held_validities, lock};
use super::{Ask, Command};
use crate::client::moves_on;
use crate::held::{LeaseState, resumable};
use crate::pb::session_request::Action;
use crate::pb::session_service_client::SessionServiceClient;
use crate::pb::{self, SessionRequest, SessionResponse};
use crate::{Client, ClientError};

/// Longest one attempt to open a session on a replica may take before the next is tried.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause between attempts to reopen a broken session.
const RETRY: Duration = Duration::from_millis(50);
/// How long a broken session without held leases keeps trying to reopen (for its waiters).
const REOPEN_WITHOUT_LEASES: Duration = Duration::from_secs(5);

/// One stream of the session.
pub(super) struct Stream {
    requests: mpsc::UnboundedSender<SessionRequest>,
    events: Streaming<SessionResponse>,
    /// When `open` was sent: what `valid_to_ms` counts from.
    pub(super) opened: Instant,
    replica: crate::replicas::Replica,
}

impl Stream {
    pub(super) async fn open(client: &Client, open: &pb::SessionOpen) -> Result<Self, Status> {
        let (requests, outbox) = mpsc::unbounded_channel();
        let _ = requests.send(SessionRequest {
            action: Some(Action::Open(open.clone())),
        });
        let replica = client.replicas().current();
        let opened = Instant::now();
        let answer = SessionServiceClient::new(replica.transport.clone())
            .session(tokio_stream::wrappers::UnboundedReceiverStream::new(outbox))
            .await;
        match answer {
            Ok(events) => Ok(Stream {
                requests,
                events: events.into_inner(),
                opened,
                replica,
            }),
            Err(status) => {
                if moves_on(&status) {
                    client.replicas().failed(&replica);
                }
                Err(status)
            }
        }
    }

    pub(super) fn send(&self, action: Action) {
        let _ = self.requests.send(SessionRequest {
            action: Some(action),
        });
    }
}

/// The task behind one session: reads its stream, tells each lease, reopens a broken stream.
pub(super) struct Task {
    pub(super) client: Client,
    pub(super) open: pb::SessionOpen,
    pub(super) shared: Arc<Shared>,
    /// Which stream of the session is current.
    pub(super) generation: u64,
    pub(super) ended: watch::Sender<Option<String>>,
}

/// How a stream stopped.
pub(super) enum Stop {
    /// The session is over, for this reason.
    Ended(String),
    /// The stream broke; the session may go on on another.
    Broke(String),
}

impl Task {
    pub(super) async fn run(
        mut self,
        mut stream: Stream,
        mut inbox: mpsc::UnboundedReceiver<Command>,
    ) {
        let reason = loop {
            match self.follow(&mut stream, &mut inbox).await {
                Stop::Ended(reason) => break reason,
                Stop::Broke(broke) => {
                    if self.open.resume_grace_ms == 0 {
                        break broke;
                    }
                    match self.reopen(&broke).await {
                        Some(reopened) => stream = reopened,
                        None => break format!("could not resume the session: {broke}"),
                    }
                }
            }
        };
        self.end(reason);
    }

    /// Every lease ends with the session.
    fn end(&self, reason: String) {
        let mut state = lock(&self.shared);
        for (_, entry) in state.leases.drain() {
            match entry.phase {
                Phase::Pending(reply) => {
                    let _ = reply.send(Err(ClientError::Protocol(format!(
                        "the session ended: {reason}"
                    ))));
                }
                Phase::Held(held) => held.end(LeaseState::Lost(reason.clone().into()), Ok(false)),
            }
        }
        state.ended = Some(reason.clone());
        drop(state);
        self.ended.send_replace(Some(reason));
    }

    /// Follows one stream until it stops.
    async fn follow(
        &mut self,
        stream: &mut Stream,
        inbox: &mut mpsc::UnboundedReceiver<Command>,
    ) -> Stop {
        // Whatever the previous stream left unsaid: every lease is asked for on this one.
        let ids: Vec<u64> = lock(&self.shared).leases.keys().copied().collect();
        for id in ids {
            self.sync(stream, id);
        }
        let mut closing: Option<Option<oneshot::Sender<u32>>> = None;
        loop {
            let deadline = self.earliest_validity();
            tokio::select! {
                message = stream.events.next() => match message {
                    Some(Ok(SessionResponse { event: Some(event) })) => {
                        if let Some(stop) = self.event(stream, event, &mut closing) {
                            return stop;
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(status)) if resumable(&status) && closing.is_none() => {
                        if moves_on(&status) {
                            self.client.replicas().failed(&stream.replica);
                        }
                        return Stop::Broke(format!("session stream failed: {status}"));
                    }
                    Some(Err(status)) => return Stop::Ended(format!("session stream failed: {status}")),
                    None if closing.is_some() => return Stop::Ended("session closed".into()),
                    None => return Stop::Broke("the server ended the session stream".into()),
                },
                command = inbox.recv(), if closing.is_none() => match command {
                    Some(Command::Sync(id)) => self.sync(stream, id),
                    Some(Command::Release(id, reply)) => self.release(stream, id, reply),
                    Some(Command::Proclaim(id, value, reply)) => self.proclaim(stream, id, value, reply),
                    Some(Command::Close(reply)) => {
                        stream.send(Action::Close(pb::SessionClose {}));
                        closing = Some(reply);
                    }
                    None => {
                        stream.send(Action::Close(pb::SessionClose {}));
                        closing = Some(None);
                    }
                },
                () = sleep_until(deadline.unwrap_or_else(far_future)), if deadline.is_some() => {
                    self.expire(stream);
                }
            }
        }
    }

    /// Asks for a lease on `stream`, if it was not asked for there yet.
    fn sync(&mut self, stream: &Stream, id: u64) {
        let generation = self.generation;
        let mut state = lock(&self.shared);
        let Some(entry) = state.leases.get_mut(&id) else {
            return;
        };
        if entry.sent == Some(generation) {
            return;
        }
        entry.sent = Some(generation);
        // A held lease is taken back by its token; one still pending is asked for afresh.
        let resume_token = match &mut entry.phase {
            Phase::Held(held) => {
                held.resuming = true;
                held.token.clone()
            }
            Phase::Pending(_) => {
                entry.asked_at = Some(Instant::now());
                String::new()
            }
        };
        let action = match entry.ask.clone() {
            Ask::Lock(mut acquire) => {
                acquire.id = id;
                acquire.resume_token = resume_token;
                Action::Acquire(acquire)
            }
            Ask::Campaign(mut campaign) => {
                campaign.id = id;
                campaign.resume_token = resume_token;
                Action::Campaign(campaign)
            }
        };
        stream.send(action);
    }

    fn release(&mut self, stream: &Stream, id: u64, reply: Option<Releasing>) {
        let mut state = lock(&self.shared);
        let Some(entry) = state.leases.get_mut(&id) else {
            if let Some(reply) = reply {
                let _ = reply.send(Ok(false));
            }
            return;
        };
        match &mut entry.phase {
            Phase::Held(held) => {
                held.releasing = reply.or(held.releasing.take());
                held.letting_go = true;
                // Being taken back on this stream: released once it is (a release before the
                // resume is confirmed would find nothing to release there, and the resume
                // would then hold it again).
                if held.resuming {
                    return;
                }
            }
            Phase::Pending(_) => {
                // Given up: nobody waits for it any more.
                state.leases.remove(&id);
            }
        }
        stream.send(Action::Release(pb::SessionRelease { id }));
    }

    fn proclaim(
        &mut self,
        stream: &Stream,
        id: u64,
        value: Vec<u8>,
        reply: oneshot::Sender<Result<(), ClientError>>,
    ) {
        let mut state = lock(&self.shared);
        let Some(Entry {
            phase: Phase::Held(held),
            ask,
            ..
        }) = state.leases.get_mut(&id)
        else {
            let _ = reply.send(Err(ClientError::Protocol("the leadership is gone".into())));
            return;
        };
        // A resume publishes the newest value.
        if let Ask::Campaign(campaign) = ask {
            campaign.value = value.clone();
        }
        held.proclaiming = Some(reply);
        stream.send(Action::Proclaim(pb::SessionProclaim { id, value }));
    }

    /// The earliest instant a held lease stops being vouched for.
    fn earliest_validity(&self) -> Option<Instant> {
        held_validities(&self.shared).into_iter().min()
    }

    /// Leases whose validity ran out unconfirmed are lost by this process's clock (and let go,
    /// in case the server still holds them).
    fn expire(&mut self, stream: &Stream) {
        let reason = "no renewal confirmed before the lease ran out (server silent)";
        for id in expire_due(&self.shared, reason) {
            stream.send(Action::Release(pb::SessionRelease { id }));
        }
    }

    /// Opens the session again on any replica before its leases' validity runs out.
    async fn reopen(&mut self, broke: &str) -> Option<Stream> {
        tracing::info!(reason = %broke, "session stream broke; resuming");
        let until = self
            .latest_validity()
            .unwrap_or_else(|| Instant::now() + REOPEN_WITHOUT_LEASES);
        loop {
            let now = Instant::now();
            if now >= until {
                return None;
            }
            let trying = self.client.replicas().current();
            match timeout_at(
                (now + ATTEMPT_TIMEOUT).min(until),
                Stream::open(&self.client, &self.open),
            )
            .await
            {
                Ok(Ok(stream)) => {
                    self.generation += 1;
                    return Some(stream);
                }
                Ok(Err(status)) if !resumable(&status) => return None,
                Ok(Err(_)) => {}
                Err(_) => self.client.replicas().failed(&trying),
            }
            sleep_until((Instant::now() + RETRY).min(until)).await;
            // Leases whose validity ran out meanwhile are lost, not resumed.
            let reason = format!("could not resume before the lease's validity ran out: {broke}");
            expire_due(&self.shared, &reason);
        }
    }

    fn latest_validity(&self) -> Option<Instant> {
        held_validities(&self.shared).into_iter().max()
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}
