//! The gRPC face of the server: decode, validate, call the lease layer, answer.
//!
//! Errors become statuses in one place (`From<Error> for Status`).

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::{Request, Response, Status, Streaming};
use tracing::{Instrument, info_span};

use crate::acquire;
use crate::admission::ConnectionLimits;
use crate::error::Error;
use crate::lease::{EVENT_BUFFER, Events, LeaseTask, ResponseStream};
use crate::pb::{self, lock_service_server::LockService};
use crate::renew::RenewalClock;
use crate::store::{LockState, Store};
use crate::token::Token;
use crate::validate::{self, LeaseSpec, LockName, millis_u32};
use crate::waiting::WaitRoom;

/// Shared by every request of one server.
#[derive(Clone)]
pub struct LockServer {
    store: Store,
    /// Wake-ups and the fair line; `None` when wake-ups are disabled (waiters poll).
    room: Option<WaitRoom>,
    /// Lease tasks, so shutdown can wait for their releases.
    leases: TaskTracker,
    /// Fired once when the server stops: every lease releases and reports `Lost`.
    shutdown: CancellationToken,
    limits: ConnectionLimits,
}

impl LockServer {
    pub fn new(
        store: Store,
        room: Option<WaitRoom>,
        leases: TaskTracker,
        shutdown: CancellationToken,
        limits: ConnectionLimits,
    ) -> Self {
        LockServer {
            store,
            room,
            leases,
            shutdown,
            limits,
        }
    }
}

#[tonic::async_trait]
impl LockService for LockServer {
    type LeaseStream = ResponseStream<pb::LeaseResponse>;

    async fn lease(
        &self,
        request: Request<Streaming<pb::LeaseRequest>>,
    ) -> Result<Response<Self::LeaseStream>, Status> {
        if self.shutdown.is_cancelled() {
            return Err(Error::ShuttingDown.into());
        }
        let slot = self.limits.admit(request.remote_addr())?;
        let (tx, rx) = mpsc::channel(EVENT_BUFFER);
        let task = LeaseTask::new(
            self.store.clone(),
            self.room.clone(),
            request.into_inner(),
            Events::new(tx),
            self.shutdown.clone(),
        );
        self.leases.spawn(Box::new(task).run(slot));
        Ok(Response::new(Box::pin(
            ReceiverStream::new(rx).map(|item| *item),
        )))
    }

    async fn acquire(
        &self,
        request: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::AcquireResponse>, Status> {
        let request = request.into_inner();
        let spec = LeaseSpec::parse(
            request.name,
            request.ttl_ms,
            request.wait_ms,
            request.holder,
            request.fair,
        )?;
        let token = Token::random();
        let keys = self.store.keys(&spec.name);
        let span = info_span!("acquire", name = %spec.name, lease = token.lease_id());
        let room = self.room.as_ref();
        let outcome = acquire::acquire(&self.store, &keys, &token, &spec, room, |_| {})
            .instrument(span)
            .await;
        let response = match outcome {
            Ok(acquired) => pb::AcquireResponse {
                acquired: true,
                token: token.secret().to_owned(),
                fencing_token: acquired.fencing_token,
                ttl_ms: millis_u32(spec.ttl),
                holder: String::new(),
                valid_for_ms: millis_u32(
                    RenewalClock::new(spec.ttl, acquired.sent_at).valid_for(Instant::now()),
                ),
            },
            // A taken lock is an answer here, not an error: say who has it.
            Err(Error::LockHeld { holder, .. } | Error::WaitExpired { holder, .. }) => {
                pb::AcquireResponse {
                    holder,
                    ..Default::default()
                }
            }
            Err(error) => {
                // An attempt that timed out may still land in Redis: do not strand it.
                self.store.release_in_background(keys, token);
                return Err(error.into());
            }
        };
        Ok(Response::new(response))
    }

    async fn extend(
        &self,
        request: Request<pb::ExtendRequest>,
    ) -> Result<Response<pb::ExtendResponse>, Status> {
        let request = request.into_inner();
        let name = LockName::parse(request.name)?;
        let token = Token::from_client(validate::token(request.token)?);
        let ttl = validate::ttl(request.ttl_ms)?;
        let sent_at = Instant::now();
        let extended = self
            .store
            .extend(&self.store.keys(&name), &token, ttl)
            .await?;
        let valid_for_ms = if extended {
            millis_u32(RenewalClock::new(ttl, sent_at).valid_for(Instant::now()))
        } else {
            0
        };
        Ok(Response::new(pb::ExtendResponse {
            extended,
            valid_for_ms,
        }))
    }

    async fn release(
        &self,
        request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        let request = request.into_inner();
        let name = LockName::parse(request.name)?;
        let token = Token::from_client(validate::token(request.token)?);
        let released = self.store.release(&self.store.keys(&name), &token).await?;
        Ok(Response::new(pb::ReleaseResponse { released }))
    }

    async fn describe(
        &self,
        request: Request<pb::DescribeRequest>,
    ) -> Result<Response<pb::DescribeResponse>, Status> {
        let name = LockName::parse(request.into_inner().name)?;
        let response = match self.store.describe(&self.store.keys(&name)).await? {
            LockState::Free => pb::DescribeResponse::default(),
            LockState::Held {
                holder,
                ttl_remaining,
                fencing_token,
            } => pb::DescribeResponse {
                held: true,
                holder,
                ttl_remaining_ms: ttl_remaining.map(millis_u32).unwrap_or(u32::MAX),
                fencing_token,
            },
        };
        Ok(Response::new(response))
    }
}
