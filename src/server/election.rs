//! The `ElectionService`: `Campaign` (through the driver), `Leader`, `Observe`, and `List`.

use std::sync::Arc;

use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::warn;

use super::auth::{Caller, Role, Scope};
use super::campaign::Campaign;
use super::driver::{self, Streams};
use super::events::ResponseStream;
use crate::error::{Error, Result};
use crate::lease::observers::{Observers, Watch};
use crate::lease::revoke::revoke_leader;
use crate::lease::spec::{LockName, MAX_LISTED};
use crate::pb::{self, election_service_server::ElectionService};
use crate::store::elections::Snapshot;
use crate::store::{ElectionKeys, Elections};
use crate::tasks::Tasks;

/// Observe responses not yet read by the client; past it the task waits for the reader.
const OBSERVE_BUFFER: usize = 16;

/// Shared by every election request of one server.
#[derive(Clone)]
pub struct ElectionServer {
    streams: Arc<Streams>,
    observers: Observers,
}

impl ElectionServer {
    pub async fn start(streams: Arc<Streams>) -> Result<Self> {
        let observers = Observers::start(&streams.store.elections).await?;
        Ok(ElectionServer { streams, observers })
    }

    fn available(&self) -> Result<(), Status> {
        available(&self.streams.store).map_err(Status::from)
    }

    fn elections(&self) -> &Elections {
        &self.streams.store.elections
    }

    fn tasks(&self) -> &Tasks {
        self.streams.tasks()
    }
}

/// Elections keep their announcements in one Redis; on Redlock's primaries there is no one
/// Redis to trust with them, so they are refused rather than quietly weaker: on every path that
/// runs one (this service, and a session's `campaign`).
pub fn available(store: &crate::store::Store) -> Result<(), Error> {
    if store.is_redlock() {
        return Err(Error::FailedPrecondition(
            "elections are not available with --redlock; run them on a server with --redis (single, Sentinel or Cluster)".into(),
        ));
    }
    Ok(())
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

/// Sends `first`, then every later change in revision order, until the observer leaves.
async fn follow(
    elections: Elections,
    keys: ElectionKeys,
    mut watch: Watch,
    first: Snapshot,
    tx: mpsc::Sender<Result<pb::ObserveResponse, Status>>,
    tasks: Tasks,
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
            () = tasks.stopping() => {
                let _ = tx.send(Err(Error::ShuttingDown.into())).await;
                return;
            }
        };
        let change = match change {
            Ok(change) => change,
            // This observer read too slowly and missed changes: catch up with the newest.
            Err(broadcast::error::RecvError::Lagged(_)) => {
                match elections.retire_stale_leader(&keys).await {
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

#[tonic::async_trait]
impl ElectionService for ElectionServer {
    type CampaignStream = ResponseStream<pb::CampaignResponse>;
    type ObserveStream = ResponseStream<pb::ObserveResponse>;

    async fn leader(
        &self,
        request: Request<pb::LeaderRequest>,
    ) -> Result<Response<pb::LeaderResponse>, Status> {
        self.available()?;
        let caller = Caller::of(&request);
        let name = LockName::parse_election(request.into_inner().election)?;
        caller.allow(Scope::Election, name.as_str(), Role::Observe)?;
        let elections = self.elections();
        let snapshot = elections
            .retire_stale_leader(&elections.keys(name.as_str()))
            .await?;
        let observed = observed(&snapshot);
        Ok(Response::new(pb::LeaderResponse {
            has_leader: observed.has_leader,
            value: observed.value,
            term: observed.term,
        }))
    }

    async fn observe(
        &self,
        request: Request<pb::ObserveRequest>,
    ) -> Result<Response<Self::ObserveStream>, Status> {
        self.available()?;
        if self.tasks().is_stopping() {
            return Err(Error::ShuttingDown.into());
        }
        let caller = Caller::of(&request);
        let name = LockName::parse_election(request.into_inner().election)?;
        caller.allow(Scope::Election, name.as_str(), Role::Observe)?;
        let keys = self.elections().keys(name.as_str());
        // Subscribed before reading, so no change after the read is missed.
        let watch = self.observers.watch(&keys).await?;
        let first = self.elections().retire_stale_leader(&keys).await?;
        let (tx, rx) = mpsc::channel(OBSERVE_BUFFER);
        let counted = self.streams.metrics().open_stream("observe");
        let follower = follow(
            self.elections().clone(),
            keys,
            watch,
            first,
            tx,
            self.tasks().clone(),
        );
        self.tasks().spawn(async move {
            follower.await;
            drop(counted);
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn campaign(
        &self,
        request: Request<Streaming<pb::CampaignRequest>>,
    ) -> Result<Response<Self::CampaignStream>, Status> {
        self.available()?;
        driver::open::<Campaign>(&self.streams, request)
    }

    async fn revoke(
        &self,
        request: Request<pb::ElectionServiceRevokeRequest>,
    ) -> Result<Response<pb::ElectionServiceRevokeResponse>, Status> {
        self.available()?;
        let caller = Caller::of(&request);
        // The address alone, "unknown" when the transport gives none.
        let peer = request
            .remote_addr()
            .map_or_else(|| "unknown".to_owned(), |addr| addr.to_string());
        let request = request.into_inner();
        let name = LockName::parse_election(request.election)?;
        caller.allow(Scope::Election, name.as_str(), Role::Admin)?;
        let streams = &self.streams;
        let ended = revoke_leader(&streams.store, &streams.scheduler, &name, request.term).await?;
        let Some(leader) = ended else {
            return Ok(Response::new(pb::ElectionServiceRevokeResponse::default()));
        };
        let who = caller.who();
        // The leader's value names it (a candidate has no holder name); its start is enough.
        let value = String::from_utf8_lossy(&leader.value);
        let holder: String = value.chars().take(256).collect();
        warn!(audit = "revoke", who, peer = %peer, election = %name, holder, term = leader.term, "leadership revoked");
        streams.metrics().revoked("election", 1);
        Ok(Response::new(pb::ElectionServiceRevokeResponse {
            revoked: true,
            value: leader.value.to_vec(),
            term: leader.term,
        }))
    }

    async fn list(
        &self,
        request: Request<pb::ElectionServiceListRequest>,
    ) -> Result<Response<pb::ElectionServiceListResponse>, Status> {
        self.available()?;
        let caller = Caller::of(&request);
        // As LockService.List: admins only, and each sees the names under its prefixes.
        caller.has(Role::Admin)?;
        let limit = match request.into_inner().limit {
            0 => MAX_LISTED,
            limit => usize::try_from(limit).map_or(MAX_LISTED, |l| l.min(MAX_LISTED)),
        };
        let (leading, truncated) = self.elections().leading(limit).await?;
        let elections = leading
            .into_iter()
            .filter(|(name, _)| caller.sees(Scope::Election, name))
            .map(|(election, state)| pb::ElectionState {
                election,
                value: state.leader.value.to_vec(),
                term: state.leader.term,
                ttl_remaining_ms: state.lease_ttl.map(pb::millis).unwrap_or(u32::MAX),
                waiting: state.waiting,
            })
            .collect();
        Ok(Response::new(pb::ElectionServiceListResponse {
            elections,
            truncated,
        }))
    }
}
