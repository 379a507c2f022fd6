//! Leader election on leases: the `ElectionService` of `proto/leasehold/v1/election.proto`.
//!
//! - [`campaign`]: one task per `Campaign` stream: wait in line, lead, step down.
//! - [`client`]: the Rust client's election calls.
//! - [`observe`]: one subscription per watched election per server, fanned out to observers.
//! - [`store`]: the election's keys and the scripts that publish its leader.

pub mod campaign;
pub mod client;
pub mod observe;
pub mod store;

use tokio::sync::{broadcast, mpsc};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::{Request, Response, Status, Streaming};

use crate::admission::ConnectionLimits;
use crate::error::{Error, Result};
use crate::lease::{EVENT_BUFFER, Events, ResponseStream};
use crate::pb::{self, election_service_server::ElectionService};
use crate::store::Store;
use crate::validate::LockName;
use crate::waiting::WaitRoom;
use campaign::CampaignTask;
use observe::{Observers, Watch};
use store::{ElectionKeys, Snapshot};

/// Observe responses not yet read by the client; past it the task waits for the reader.
const OBSERVE_BUFFER: usize = 16;

/// Shared by every election request of one server.
#[derive(Clone)]
pub struct ElectionServer {
    store: Store,
    room: Option<WaitRoom>,
    /// Campaign and observer tasks, so shutdown can wait for candidates to step down.
    tasks: TaskTracker,
    shutdown: CancellationToken,
    limits: ConnectionLimits,
    observers: Observers,
}

impl ElectionServer {
    pub async fn start(
        store: Store,
        room: Option<WaitRoom>,
        tasks: TaskTracker,
        shutdown: CancellationToken,
        limits: ConnectionLimits,
    ) -> Result<Self> {
        let observers = Observers::start(&store).await?;
        Ok(ElectionServer {
            store,
            room,
            tasks,
            shutdown,
            limits,
            observers,
        })
    }
}

fn observed(snapshot: &Snapshot) -> pb::ObserveResponse {
    match &snapshot.leader {
        Some(leader) => pb::ObserveResponse {
            has_leader: true,
            value: leader.value.to_vec(),
            term: leader.term,
        },
        None => pb::ObserveResponse::default(),
    }
}

#[tonic::async_trait]
impl ElectionService for ElectionServer {
    type CampaignStream = ResponseStream<pb::CampaignResponse>;

    async fn campaign(
        &self,
        request: Request<Streaming<pb::CampaignRequest>>,
    ) -> Result<Response<Self::CampaignStream>, Status> {
        if self.shutdown.is_cancelled() {
            return Err(Error::ShuttingDown.into());
        }
        // A candidacy holds a lease: it counts against the same per-connection limit.
        let slot = self.limits.admit(request.remote_addr())?;
        let (tx, rx) = mpsc::channel(EVENT_BUFFER);
        let task = CampaignTask::new(
            self.store.clone(),
            self.room.clone(),
            request.into_inner(),
            Events::new(tx),
            self.shutdown.clone(),
        );
        self.tasks.spawn(task.run(slot));
        Ok(Response::new(Box::pin(
            ReceiverStream::new(rx).map(|item| *item),
        )))
    }

    async fn leader(
        &self,
        request: Request<pb::LeaderRequest>,
    ) -> Result<Response<pb::LeaderResponse>, Status> {
        let name = LockName::parse_election(request.into_inner().election)?;
        let snapshot = self
            .store
            .election_state(&self.store.election_keys(&name))
            .await?;
        let observed = observed(&snapshot);
        Ok(Response::new(pb::LeaderResponse {
            has_leader: observed.has_leader,
            value: observed.value,
            term: observed.term,
        }))
    }

    type ObserveStream = ResponseStream<pb::ObserveResponse>;

    async fn observe(
        &self,
        request: Request<pb::ObserveRequest>,
    ) -> Result<Response<Self::ObserveStream>, Status> {
        if self.shutdown.is_cancelled() {
            return Err(Error::ShuttingDown.into());
        }
        let name = LockName::parse_election(request.into_inner().election)?;
        let keys = self.store.election_keys(&name);
        // Subscribed before reading, so no change after the read is missed.
        let watch = self.observers.watch(&keys).await?;
        let first = self.store.election_state(&keys).await?;
        let (tx, rx) = mpsc::channel(OBSERVE_BUFFER);
        let follower = follow(
            self.store.clone(),
            keys,
            watch,
            first,
            tx,
            self.shutdown.clone(),
        );
        self.tasks.spawn(follower);
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Sends `first`, then every later change in revision order, until the observer leaves.
async fn follow(
    store: Store,
    keys: ElectionKeys,
    mut watch: Watch,
    first: Snapshot,
    tx: mpsc::Sender<Result<pb::ObserveResponse, Status>>,
    shutdown: CancellationToken,
) {
    let mut version = (first.epoch, first.revision);
    let mut shown = observed(&first);
    if tx.send(Ok(shown.clone())).await.is_err() {
        return;
    }
    loop {
        let change = tokio::select! {
            change = watch.changes.recv() => change,
            () = tx.closed() => return,
            () = shutdown.cancelled() => {
                let _ = tx.send(Err(Error::ShuttingDown.into())).await;
                return;
            }
        };
        let change = match change {
            Ok(change) => change,
            // This observer read too slowly and missed changes: catch up with the newest.
            Err(broadcast::error::RecvError::Lagged(_)) => {
                match store.election_state(&keys).await {
                    Ok(state) => state,
                    Err(error) => {
                        let _ = tx.send(Err(error.into())).await;
                        return;
                    }
                }
            }
            Err(broadcast::error::RecvError::Closed) => {
                let _ = tx.send(Err(Error::ShuttingDown.into())).await;
                return;
            }
        };
        // Within an epoch, changes published before our first read, or seen twice (after a
        // resync), are skipped. A new epoch means Redis lost the state: its revisions start again.
        if change.epoch == version.0 && change.revision <= version.1 {
            continue;
        }
        version = (change.epoch, change.revision);
        // A new epoch's first message may repeat what the observer already has.
        let state = observed(&change);
        if state == shown {
            continue;
        }
        shown = state;
        if tx.send(Ok(shown.clone())).await.is_err() {
            return;
        }
    }
}
