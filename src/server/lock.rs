//! The `LockService`: the `Lease` stream (through the driver) and the unary calls.

use std::sync::Arc;

use tokio::time::Instant;
use tonic::{Request, Response, Status, Streaming};
use tracing::level_filters::LevelFilter;
use tracing::{Instrument, Span, info_span, warn};

use super::auth::{Caller, Role, Scope};
use super::driver::{self, Streams};
use super::events::ResponseStream;
use super::lock_stream::{LockStream, fences};
use crate::error::Error;
use crate::lease::acquire::acquire;
use crate::lease::held::{HeldLease, Holding, Lock};
use crate::lease::renewal::RenewalClock;
use crate::lease::revoke::revoke_lock;
use crate::lease::several::{self, MoreNames};
use crate::lease::spec::{self, LeaseSpec, LockName, MAX_LISTED};
use crate::lease::watch::{Watchers, Watching};
use crate::metrics::Outcome;
use crate::mode::Mode;
use crate::pb::{self, lock_service_server::LockService};
use crate::store::Token;
use crate::store::locks::{Described, HolderState, LockState, TokenState};

/// Shared by every lock request of one server.
#[derive(Clone)]
pub struct LockServer {
    streams: Arc<Streams>,
    watchers: Watchers,
}

impl LockServer {
    pub async fn start(streams: Arc<Streams>) -> Result<Self, Error> {
        let watchers = Watchers::start(&streams.store.locks).await?;
        Ok(LockServer { streams, watchers })
    }

    /// The lock (over `name` and `more_names`) and the token a unary call names, all checked,
    /// and the caller allowed to hold every name.
    fn named(
        &self,
        caller: &Caller,
        name: String,
        more_names: Vec<String>,
        token: String,
    ) -> Result<(Lock, Token), Error> {
        let name = LockName::parse(name)?;
        let more = spec::more_names(&name, more_names, Mode::LOCK)?;
        for name in std::iter::once(&name).chain(&more) {
            caller.allow(Scope::Lock, name.as_str(), Role::Hold)?;
        }
        let token = Token::from_client(spec::token(token)?);
        let store = &self.streams.store;
        let mut lock = Lock::at(store, &name);
        lock.more = MoreNames::over(store, &name, &more);
        Ok((lock, token))
    }
}

#[tonic::async_trait]
impl LockService for LockServer {
    type LeaseStream = ResponseStream<pb::LeaseResponse>;

    async fn lease(
        &self,
        request: Request<Streaming<pb::LeaseRequest>>,
    ) -> Result<Response<Self::LeaseStream>, Status> {
        driver::open::<LockStream>(&self.streams, request)
    }

    async fn acquire(
        &self,
        request: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::AcquireResponse>, Status> {
        let caller = Caller::of(&request);
        let spec = LeaseSpec::try_from(request.into_inner())?;
        for name in spec.names() {
            caller.allow(Scope::Lock, name.as_str(), Role::Hold)?;
        }
        // Claimed before the attempt: if it fails without an answer, or this call is cancelled
        // mid-command, the attempt may still land in Redis, and is let go on drop.
        let lock = Lock::of(&self.streams.store, &spec);
        let mut lease = HeldLease::claim(lock, Token::random());
        let span = acquire_span(&spec, lease.token());
        let room = self.streams.room.as_ref();
        let asked = Instant::now();
        let outcome = Box::pin(acquire(&lease, &spec, room, |_| {}).instrument(span)).await;
        let metrics = self.streams.metrics();
        metrics.acquisition(spec.name.as_str(), Outcome::of(&outcome), asked.elapsed());
        let response = match outcome {
            Ok(acquired) => pb::AcquireResponse {
                acquired: true,
                token: lease.token().secret().to_owned(),
                fencing_token: acquired.fencing_token,
                ttl_ms: pb::millis(spec.ttl),
                holder: String::new(),
                valid_for_ms: pb::millis(
                    RenewalClock::new(spec.ttl, acquired.sent_at)
                        .with_ceiling(acquired.ceiling, acquired.sent_at)
                        .valid_for(Instant::now()),
                ),
                fences: fences(
                    spec.names().map(LockName::as_str),
                    acquired.fencing_token,
                    &acquired.more_fences,
                ),
            },
            // A taken lock is an answer here, not an error: say who has it.
            Err(Error::LockHeld { holder, .. } | Error::WaitExpired { holder, .. }) => {
                pb::AcquireResponse {
                    holder,
                    ..Default::default()
                }
            }
            Err(error) => return Err(error.into()),
        };
        // Taken: the client holds it by its token now. Refused: nothing to let go.
        lease.disarm();
        Ok(Response::new(response))
    }

    async fn extend(
        &self,
        request: Request<pb::ExtendRequest>,
    ) -> Result<Response<pb::ExtendResponse>, Status> {
        let caller = Caller::of(&request);
        let request = request.into_inner();
        let (lock, token) = self.named(&caller, request.name, request.more_names, request.token)?;
        let ttl = spec::ttl(request.ttl_ms)?;
        let sent_at = Instant::now();
        // Every name, or the answer is no (a name no longer ours is never extended back);
        // never past the lease's max-hold: near it, a shorter TTL is set (and vouched for).
        let set = several::extend_all_capped(&lock, &token, ttl).await?;
        let valid_for_ms = set.map_or(0, |set| {
            pb::millis(RenewalClock::new(set, sent_at).valid_for(Instant::now()))
        });
        Ok(Response::new(pb::ExtendResponse {
            extended: set.is_some(),
            valid_for_ms,
        }))
    }

    async fn release(
        &self,
        request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        let caller = Caller::of(&request);
        let request = request.into_inner();
        let (lock, token) = self.named(&caller, request.name, request.more_names, request.token)?;
        let released = lock.release(&token, true).await?;
        Ok(Response::new(pb::ReleaseResponse { released }))
    }

    async fn describe(
        &self,
        request: Request<pb::DescribeRequest>,
    ) -> Result<Response<pb::DescribeResponse>, Status> {
        let caller = Caller::of(&request);
        let name = LockName::parse(request.into_inner().name)?;
        caller.allow(Scope::Lock, name.as_str(), Role::Observe)?;
        let locks = &self.streams.store.locks;
        let state = locks.describe(&locks.keys(name.as_str())).await?;
        Ok(Response::new(described(state)))
    }

    async fn list(
        &self,
        request: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListResponse>, Status> {
        let caller = Caller::of(&request);
        // Listing shows names: admins only, and each sees the names under its prefixes.
        caller.has(Role::Admin)?;
        let limit = match request.into_inner().limit {
            0 => MAX_LISTED,
            limit => usize::try_from(limit).map_or(MAX_LISTED, |l| l.min(MAX_LISTED)),
        };
        let (held, truncated) = self.streams.store.locks.held(limit).await?;
        let locks = held
            .into_iter()
            .filter(|(name, _)| caller.sees(Scope::Lock, name))
            .map(|(name, state)| {
                let described = described(state);
                pb::HeldLock {
                    name,
                    holder: described.holder,
                    ttl_remaining_ms: described.ttl_remaining_ms,
                    fencing_token: described.fencing_token,
                    holders: described.holders,
                    limit: described.limit,
                    mode: described.mode,
                    waiting: described.waiting,
                }
            })
            .collect();
        Ok(Response::new(pb::ListResponse { locks, truncated }))
    }

    async fn revoke(
        &self,
        request: Request<pb::RevokeRequest>,
    ) -> Result<Response<pb::RevokeResponse>, Status> {
        let caller = Caller::of(&request);
        // The address alone, "unknown" when the transport gives none.
        let peer = request
            .remote_addr()
            .map_or_else(|| "unknown".to_owned(), |addr| addr.to_string());
        let request = request.into_inner();
        let name = LockName::parse(request.name)?;
        caller.allow(Scope::Lock, name.as_str(), Role::Admin)?;
        let streams = &self.streams;
        let ended = revoke_lock(
            &streams.store,
            &streams.scheduler,
            &name,
            request.fencing_token,
        )
        .await?;
        let who = caller.who();
        for held in &ended {
            warn!(audit = "revoke", who, peer = %peer, lock = %name, holder = held.holder, fencing_token = held.fencing_token, "lock holding revoked");
        }
        streams.metrics().revoked("lock", ended.len());
        Ok(Response::new(pb::RevokeResponse {
            revoked: ended.into_iter().map(holder).collect(),
        }))
    }

    async fn check(
        &self,
        request: Request<pb::CheckRequest>,
    ) -> Result<Response<pb::CheckResponse>, Status> {
        let caller = Caller::of(&request);
        let request = request.into_inner();
        let name = LockName::parse(request.name)?;
        caller.allow(Scope::Lock, name.as_str(), Role::Observe)?;
        if request.fencing_token == 0 {
            return Err(Error::invalid("fencing token is 0").into());
        }
        let locks = &self.streams.store.locks;
        let keys = locks.keys(name.as_str());
        let (state, current_fencing_token) = match locks.check(&keys, request.fencing_token).await?
        {
            TokenState::Current => (pb::TokenState::Current, request.fencing_token),
            TokenState::Superseded { current } => (pb::TokenState::Superseded, current),
            TokenState::Free => (pb::TokenState::Free, 0),
        };
        Ok(Response::new(pb::CheckResponse {
            state: state.into(),
            current_fencing_token,
        }))
    }

    type WatchStream = ResponseStream<pb::WatchResponse>;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        if self.streams.tasks().is_stopping() {
            return Err(Error::ShuttingDown.into());
        }
        let caller = Caller::of(&request);
        let name = LockName::parse(request.into_inner().name)?;
        caller.allow(Scope::Lock, name.as_str(), Role::Observe)?;
        let locks = &self.streams.store.locks;
        let keys = locks.keys(name.as_str());
        // Redis unreachable is the caller's answer now, not a silent stream.
        locks.describe(&keys).await?;
        let watching = self.watchers.watch(&keys).await?;
        let counted = self.streams.metrics().open_stream("watch");
        Ok(Response::new(Box::pin(watched(watching, counted))))
    }
}

/// A unary `Acquire`'s span: the lock's name and the lease id on every line written inside it.
///
/// Without a wait, nothing inside writes a line at INFO or above (only waiting does: the line,
/// the waiting room and their background work), so unless DEBUG lines or traces are on (either
/// raises the subscriber's level past INFO) none is made: the log format writes a span's fields
/// as it is created, and creating, entering and closing one took a sixth of the call's own CPU.
fn acquire_span(spec: &LeaseSpec, token: &Token) -> Span {
    if spec.wait.is_zero() && LevelFilter::current() < LevelFilter::DEBUG {
        return Span::none();
    }
    info_span!("acquire", lock = %spec.name, lease = token.lease_id())
}

/// The states of a watch, pulled by the response stream: a reader that falls behind gets the
/// newest state next, never a queue. Ends with `SHUTTING_DOWN` when the server stops.
fn watched<C: Send + 'static>(
    watching: Watching,
    counted: C,
) -> impl tokio_stream::Stream<Item = Result<pb::WatchResponse, Status>> + Send {
    futures_util::stream::unfold(Some((watching, counted)), |open| async move {
        let (mut watching, counted) = open?;
        Some(match watching.next().await {
            Some(state) => {
                let state = Some(described(state));
                (Ok(pb::WatchResponse { state }), Some((watching, counted)))
            }
            None => (Err(Error::ShuttingDown.into()), None),
        })
    })
}

/// A lock's state as `Describe` answers it: every holder, and the first in the single-holder
/// fields that predate semaphores.
fn described(described: Described) -> pb::DescribeResponse {
    let waiting = described.waiting;
    let LockState::Held { mode, holders } = described.state else {
        return pb::DescribeResponse {
            waiting,
            ..Default::default()
        };
    };
    let holders: Vec<pb::Holder> = holders.into_iter().map(holder).collect();
    let first = holders.first().cloned().unwrap_or_default();
    let (limit, mode) = match mode {
        Mode::Exclusive { limit } => (limit, pb::LeaseMode::Exclusive),
        Mode::Shared => (1, pb::LeaseMode::Shared),
    };
    pb::DescribeResponse {
        held: true,
        holder: first.holder,
        ttl_remaining_ms: first.ttl_remaining_ms,
        fencing_token: first.fencing_token,
        holders,
        limit,
        mode: mode.into(),
        waiting,
    }
}

/// One holder as the protocol reports it (Describe, List, Watch, Revoke).
fn holder(held: HolderState) -> pb::Holder {
    pb::Holder {
        holder: held.holder,
        // No expiry (a key set by hand): as long as it can say.
        ttl_remaining_ms: held.ttl_remaining.map(pb::millis).unwrap_or(u32::MAX),
        fencing_token: held.fencing_token,
    }
}
