//! The console's JSON API: each call is the gRPC services' own, made in this process through
//! the same interceptor with the page's bearer token, so the console is held to exactly what
//! that token may do through gRPC.
//!
//! - `GET /api/state?prefix=P`: the locks and elections under P (`List` of each), once.
//! - `GET /api/events?prefix=P`: the same as server-sent events, a new `state` whenever it
//!   changes, read every [`POLL`]; a `problem` event when a read fails (Redis down), and the
//!   state again once it reads.
//! - `POST /api/revoke`: `LockService.Revoke` or `ElectionService.Revoke`.
//!
//! A refusal or failure answers with the HTTP status nearest its gRPC code (401, 403, 501, 503…)
//! and `{code, words, message}`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, State as Shared};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;
use tokio_stream::wrappers::ReceiverStream;
use tonic::service::Interceptor;
use tonic::{Code, Status};
use tracing::debug;

use super::Peer;
use super::state::{ElectionView, LockView, State};
use crate::pb::{self, election_service_server::ElectionService, lock_service_server::LockService};
use crate::server::auth::Authenticate;
use crate::server::election::ElectionServer;
use crate::server::lock::LockServer;
use crate::tasks::Tasks;

/// How often a live page's state is read again (`List` of locks and of elections): a lock taken
/// shows within this, plus the read.
pub const POLL: Duration = Duration::from_millis(500);
/// States not yet sent to a slow page; the poll waits for room rather than queue more.
const EVENTS_QUEUED: usize = 4;

/// The services the console calls, and the interceptor in front of them on the gRPC port.
pub struct Services {
    pub locks: LockServer,
    pub elections: ElectionServer,
    pub authenticate: Authenticate,
    /// The server's tasks: a live page's poll is one, ended at shutdown.
    pub tasks: Tasks,
}

impl Services {
    /// `message` as a gRPC request from this peer with the page's `authorization` header, passed
    /// through the interceptor as on the gRPC port (UNAUTHENTICATED here if it refuses).
    fn request<T>(
        &self,
        peer: &Peer,
        headers: &HeaderMap,
        message: T,
    ) -> Result<tonic::Request<T>, Status> {
        let mut http = http::Request::new(());
        if let Some(authorization) = headers.get(header::AUTHORIZATION) {
            http.headers_mut()
                .insert(header::AUTHORIZATION, authorization.clone());
        }
        *http.extensions_mut() = peer.0.clone();
        let passed = self
            .authenticate
            .clone()
            .call(tonic::Request::from_http(http))?;
        let (metadata, extensions, ()) = passed.into_parts();
        Ok(tonic::Request::from_parts(metadata, extensions, message))
    }

    /// The locks and elections under `prefix`, as this caller may see them.
    async fn read(&self, peer: &Peer, headers: &HeaderMap, prefix: &str) -> Result<State, Status> {
        let listed = pb::ListRequest { limit: 0 };
        let locks = LockService::list(&self.locks, self.request(peer, headers, listed)?)
            .await?
            .into_inner();
        let listed = pb::ElectionServiceListRequest { limit: 0 };
        let elections =
            ElectionService::list(&self.elections, self.request(peer, headers, listed)?).await;
        let (elections, elections_truncated, elections_error) = match elections {
            Ok(answer) => {
                let answer = answer.into_inner();
                (answer.elections, answer.truncated, None)
            }
            Err(status) => (Vec::new(), false, Some(status.message().to_owned())),
        };
        let state = State {
            locks: locks.locks.into_iter().map(LockView::from_listed).collect(),
            locks_truncated: locks.truncated,
            elections: elections
                .into_iter()
                .map(ElectionView::from_listed)
                .collect(),
            elections_truncated,
            elections_error,
            poll_ms: u64::try_from(POLL.as_millis()).unwrap_or(u64::MAX),
        };
        Ok(state.under(prefix))
    }
}

/// `GET /api/state`
pub(super) async fn state(
    Shared(api): Shared<Arc<Services>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    match api.read(&peer, &headers, &prefix(&uri)).await {
        Ok(state) => json_answer(StatusCode::OK, &json!(state)),
        Err(status) => refusal(&status),
    }
}

/// `GET /api/events`: refused as `/api/state` would be before any event; then a stream.
pub(super) async fn events(
    Shared(api): Shared<Arc<Services>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let prefix = prefix(&uri);
    let first = match api.read(&peer, &headers, &prefix).await {
        Ok(state) => state,
        Err(status) => return refusal(&status),
    };
    let (tx, rx) = mpsc::channel(EVENTS_QUEUED);
    let tasks = api.tasks.clone();
    tasks.spawn(follow(api, peer, headers, prefix, first, tx));
    let stream = ReceiverStream::new(rx);
    let mut response = Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response();
    super::secured(response.headers_mut());
    response
}

/// A live page's poll: sends `first`, then each state whose shape differs from the last sent,
/// and a problem when a read fails, until the page goes or the server stops.
async fn follow(
    api: Arc<Services>,
    peer: Peer,
    headers: HeaderMap,
    prefix: String,
    first: State,
    tx: mpsc::Sender<Result<Event, Infallible>>,
) {
    let mut shown = Some(first.shape());
    if tx.send(Ok(state_event(&first))).await.is_err() {
        return;
    }
    let mut last_problem = None;
    let mut ticks = tokio::time::interval(POLL);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = tx.closed() => return,
            () = api.tasks.stopping() => {
                let stopping = Status::unavailable("the server is shutting down");
                let _ = tx.send(Ok(problem_event(&stopping))).await;
                return;
            }
        }
        let event = match api.read(&peer, &headers, &prefix).await {
            Ok(state) => {
                last_problem = None;
                let shape = Some(state.shape());
                if shape == shown {
                    continue;
                }
                shown = shape;
                state_event(&state)
            }
            Err(status) => {
                debug!(code = ?status.code(), message = status.message(), "console read failed");
                // The next state read is sent whatever it is: the page has shown the problem.
                shown = None;
                let problem = (status.code(), status.message().to_owned());
                if last_problem.as_ref() == Some(&problem) {
                    continue;
                }
                last_problem = Some(problem);
                problem_event(&status)
            }
        };
        if tx.send(Ok(event)).await.is_err() {
            return;
        }
    }
}

fn state_event(state: &State) -> Event {
    Event::default()
        .event("state")
        .data(json!(state).to_string())
}

fn problem_event(status: &Status) -> Event {
    Event::default()
        .event("problem")
        .data(problem(status).to_string())
}

/// What the page asks to revoke: a lock's holding (fencing token "0": every holder) or an
/// election's leadership (term "0": whoever leads).
#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
enum Revoke {
    Lock {
        name: String,
        #[serde(default)]
        fencing_token: Option<String>,
    },
    Election {
        name: String,
        #[serde(default)]
        term: Option<String>,
    },
}

/// `POST /api/revoke`
pub(super) async fn revoke(
    Shared(api): Shared<Arc<Services>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let asked: Revoke = match serde_json::from_slice(&body) {
        Ok(asked) => asked,
        Err(error) => return refusal(&Status::invalid_argument(format!("revoke: {error}"))),
    };
    let number = |text: Option<String>, what: &str| -> Result<u64, Status> {
        let text = text.unwrap_or_default();
        if text.is_empty() {
            return Ok(0);
        }
        text.parse()
            .map_err(|_| Status::invalid_argument(format!("{what} {text:?} is not a number")))
    };
    let answer = match asked {
        Revoke::Lock {
            name,
            fencing_token,
        } => {
            let fencing_token = match number(fencing_token, "fencing token") {
                Ok(token) => token,
                Err(status) => return refusal(&status),
            };
            let message = pb::RevokeRequest {
                name,
                fencing_token,
            };
            match api.request(&peer, &headers, message) {
                Ok(request) => LockService::revoke(&api.locks, request)
                    .await
                    .map(|answer| revoked_locks(answer.into_inner())),
                Err(status) => Err(status),
            }
        }
        Revoke::Election { name, term } => {
            let term = match number(term, "term") {
                Ok(term) => term,
                Err(status) => return refusal(&status),
            };
            let message = pb::ElectionServiceRevokeRequest {
                election: name,
                term,
            };
            match api.request(&peer, &headers, message) {
                Ok(request) => {
                    ElectionService::revoke(&api.elections, request)
                        .await
                        .map(|answer| {
                            let answer = answer.into_inner();
                            json!({
                                "revoked": answer.revoked,
                                "value": String::from_utf8_lossy(&answer.value),
                                "term": answer.term.to_string(),
                            })
                        })
                }
                Err(status) => Err(status),
            }
        }
    };
    match answer {
        Ok(body) => json_answer(StatusCode::OK, &body),
        Err(status) => refusal(&status),
    }
}

fn revoked_locks(answer: pb::RevokeResponse) -> serde_json::Value {
    let revoked: Vec<_> = answer
        .revoked
        .into_iter()
        .map(|held| {
            json!({
                "holder": held.holder,
                "fencing_token": held.fencing_token.to_string(),
            })
        })
        .collect();
    json!({ "revoked": revoked })
}

/// The `prefix` query parameter, decoded (`""` when absent).
fn prefix(uri: &Uri) -> String {
    let query = uri.query().unwrap_or_default();
    query
        .split('&')
        .filter_map(|pair| pair.strip_prefix("prefix="))
        .map(|value| {
            let value = value.replace('+', " ");
            percent_encoding::percent_decode_str(&value)
                .decode_utf8_lossy()
                .into_owned()
        })
        .next()
        .unwrap_or_default()
}

fn json_answer(code: StatusCode, body: &serde_json::Value) -> Response {
    let mut response = (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    super::secured(response.headers_mut());
    response
}

/// A gRPC status as the page reads it.
fn problem(status: &Status) -> serde_json::Value {
    json!({
        "code": code_name(status.code()),
        "words": status.code().description(),
        "message": status.message(),
    })
}

/// A refused or failed call, with the HTTP status nearest its gRPC code.
fn refusal(status: &Status) -> Response {
    let code = match status.code() {
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::FailedPrecondition | Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let mut response = json_answer(code, &problem(status));
    if code == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static("Bearer"),
        );
    }
    response
}

/// `PermissionDenied` as gRPC spells its codes: `PERMISSION_DENIED`.
fn code_name(code: Code) -> String {
    let mut name = String::new();
    for (i, c) in format!("{code:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_spelled_as_grpc_spells_them_and_prefixes_decoded() {
        assert_eq!(code_name(Code::PermissionDenied), "PERMISSION_DENIED");
        assert_eq!(code_name(Code::Unimplemented), "UNIMPLEMENTED");
        let uri: Uri = "/api/events?x=1&prefix=app%2Fa+b".parse().unwrap();
        assert_eq!(prefix(&uri), "app/a b");
        assert_eq!(prefix(&"/api/events".parse().unwrap()), "");
    }
}
