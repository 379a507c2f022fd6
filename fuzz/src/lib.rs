//! What the fuzz targets share: every message a client can send the server, and for each, the
//! checks the server runs on it, with the documented limits as an independent model of what
//! those checks must accept.
//!
//! The model's numbers are the contract's (proto/leasehold/v1/*.proto, "Limits"), written out
//! here rather than read from `leasehold::lease::spec`, so a constant that drifts from the
//! contract is caught too. A refusal must be `INVALID_ARGUMENT` exactly when the model says the
//! request breaks a limit, and an acceptance must carry the request's values unchanged.

use std::fmt::Debug;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use leasehold::error::Error;
use leasehold::lease::spec::{self, LeaseSpec, LockName, Mode};
use leasehold::pb;
use leasehold::server::campaign::Campaign;
use leasehold::server::driver::{LeaseStream, Move, no_message};
use leasehold::server::lock_stream::LockStream;
use prost::Message;

/// The contract's limits (proto/leasehold/v1/lock.proto and election.proto).
pub mod contract {
    /// name, election: 1..=256 bytes of UTF-8, no control characters.
    pub const MAX_NAME_BYTES: usize = 256;
    /// holder: at most 256 bytes, no control characters.
    pub const MAX_HOLDER_BYTES: usize = 256;
    /// ttl_ms: 100 ms ..= 1 hour.
    pub const MIN_TTL_MS: u32 = 100;
    pub const MAX_TTL_MS: u32 = 3_600_000;
    /// wait_ms: at most 1 hour.
    pub const MAX_WAIT_MS: u32 = 3_600_000;
    /// limit: 0 or 1 (a plain lock) ..= 10,000.
    pub const MAX_LIMIT: u32 = 10_000;
    /// An election's value: at most 64 KiB.
    pub const MAX_ELECTION_VALUE_BYTES: usize = 65_536;
}

/// A client→server message, and how the server checks it before anything touches Redis.
pub trait ClientRequest:
    Message + Default + PartialEq + Clone + Debug + Send + Sync + 'static
{
    /// The message's proto name, for failure reports.
    const NAME: &'static str;

    /// Runs the message through the server's checks, panicking on any broken invariant.
    fn validate(self);
}

/// Something to do with every request type ([`for_each_request`]).
pub trait EachRequest {
    fn each<R: ClientRequest>(&mut self);
}

/// Every message a client sends to the services this crate serves (`LockService`,
/// `ElectionService`, and the optional bench `EchoService`), streams' messages included.
/// Health and reflection requests are tonic's own, not ours.
pub fn for_each_request(each: &mut impl EachRequest) {
    // LockService
    each.each::<pb::LeaseRequest>();
    each.each::<pb::AcquireRequest>();
    each.each::<pb::ExtendRequest>();
    each.each::<pb::ReleaseRequest>();
    each.each::<pb::DescribeRequest>();
    each.each::<pb::ListRequest>();
    // ElectionService
    each.each::<pb::CampaignRequest>();
    each.each::<pb::LeaderRequest>();
    each.each::<pb::ObserveRequest>();
    // EchoService (`serve --echo`)
    each.each::<pb::bench::EchoRequest>();
    each.each::<pb::bench::EchoStreamRequest>();
    each.each::<pb::bench::TicksRequest>();
    // The first messages of the streams, on their own as well as inside their oneof above:
    // the fuzzer reaches their checks without first finding the wrapping.
    each.each::<pb::LeaseAcquire>();
    each.each::<pb::CampaignStart>();
}

/// How many types [`for_each_request`] visits.
pub const REQUEST_TYPES: usize = 14;

/// Does `each` for the `index`-th request type of [`for_each_request`] alone.
pub fn with_request(index: usize, each: &mut impl EachRequest) {
    struct Nth<'a, E> {
        wanted: usize,
        at: usize,
        each: &'a mut E,
    }
    impl<E: EachRequest> EachRequest for Nth<'_, E> {
        fn each<R: ClientRequest>(&mut self) {
            if self.at == self.wanted {
                self.each.each::<R>();
            }
            self.at += 1;
        }
    }
    let mut nth = Nth {
        wanted: index % REQUEST_TYPES,
        at: 0,
        each,
    };
    for_each_request(&mut nth);
    assert_eq!(nth.at, REQUEST_TYPES, "REQUEST_TYPES is out of date");
}

/// How much longer than what was sent a decoded message may encode: a negative `LeaseMode`
/// (int32) sent as a short varint (the decoder keeps its low 32 bits) encodes in 10 bytes, and
/// its length prefix may grow a byte. Messages carry at most one enum.
const REENCODING_SLACK: usize = 16;

/// Re-encoding a decoded message and decoding it again gives the same message, and never a
/// much longer one than what was sent (unknown fields are dropped, repeated singular fields keep
/// the last): the decoder amplifies nothing.
pub fn check_round_trip<R: ClientRequest>(message: &R, sent_bytes: usize) {
    let encoded = message.encode_to_vec();
    assert!(
        encoded.len() <= sent_bytes + REENCODING_SLACK,
        "{}: {sent_bytes} bytes decoded to a message of {} bytes: {message:?}",
        R::NAME,
        encoded.len()
    );
    let again = R::decode(encoded.as_slice())
        .unwrap_or_else(|error| panic!("{}: re-encoded message unreadable: {error}", R::NAME));
    assert_eq!(
        &again,
        message,
        "{}: re-encoding changed the message",
        R::NAME
    );
}

/// Runs a future that must finish at once (everything it reads is in memory).
pub fn now<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("waited although everything it reads was in memory"),
    }
}

// ---- The model: what the documented limits allow ----

pub fn name_allowed(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= contract::MAX_NAME_BYTES
        && !name.chars().any(char::is_control)
}

pub fn holder_allowed(holder: &str) -> bool {
    holder.len() <= contract::MAX_HOLDER_BYTES && !holder.chars().any(char::is_control)
}

pub fn ttl_allowed(ttl_ms: u32) -> bool {
    (contract::MIN_TTL_MS..=contract::MAX_TTL_MS).contains(&ttl_ms)
}

pub fn wait_allowed(wait_ms: u32) -> bool {
    wait_ms <= contract::MAX_WAIT_MS
}

/// A token a client sends back: compared if non-empty and not absurdly long.
pub fn token_allowed(token: &str) -> bool {
    !token.is_empty() && token.len() <= spec::MAX_TOKEN_BYTES
}

/// A resume token: empty (not resuming) or a token.
pub fn resume_token_allowed(token: &str) -> bool {
    token.is_empty() || token_allowed(token)
}

pub fn election_value_allowed(value: &[u8]) -> bool {
    value.len() <= contract::MAX_ELECTION_VALUE_BYTES
}

fn millis(ms: u32) -> Duration {
    Duration::from_millis(ms.into())
}

/// One check's outcome against the model: accepted exactly when `allowed`, refused as
/// INVALID_ARGUMENT with a message that becomes valid gRPC headers.
pub fn expect<T>(
    what: &str,
    allowed: bool,
    outcome: leasehold::error::Result<T>,
    request: &dyn Debug,
) -> Option<T> {
    match outcome {
        Ok(value) => {
            assert!(
                allowed,
                "{what}: accepted a request that breaks a documented limit: {request:?}"
            );
            Some(value)
        }
        Err(error) => {
            assert!(
                !allowed,
                "{what}: refused a request within every documented limit ({error}): {request:?}"
            );
            assert!(
                matches!(error, Error::InvalidArgument(_)),
                "{what}: refused with {error:?}, not as an invalid argument"
            );
            check_refusal(what, error, tonic::Code::InvalidArgument);
            None
        }
    }
}

/// A refusal: an error with words, that becomes a status of `code` the transport can send.
pub fn check_refusal(what: &str, error: Error, code: tonic::Code) {
    let words = error.to_string();
    assert!(
        !words.is_empty(),
        "{what}: refusal without words: {error:?}"
    );
    let status = tonic::Status::from(error);
    assert_eq!(status.code(), code, "{what}: {status:?}");
    let mut headers = http::HeaderMap::new();
    if let Err(status) = status.add_header(&mut headers) {
        panic!("{what}: the refusal cannot be sent as headers: {status:?}");
    }
}

// ---- Each request, as the server checks it ----

/// The checks of `LeaseAcquire` (the `Lease` stream's first message) and, through it, of the
/// unary `Acquire`.
pub fn check_lease_acquire(request: pb::LeaseAcquire, via: &str) {
    let mode = pb::LeaseMode::try_from(request.mode);
    let shared = matches!(mode, Ok(pb::LeaseMode::Shared));
    let allowed = ttl_allowed(request.ttl_ms)
        && mode.is_ok()
        && resume_token_allowed(&request.resume_token)
        && name_allowed(&request.name)
        && wait_allowed(request.wait_ms)
        && holder_allowed(&request.holder)
        && request.limit <= contract::MAX_LIMIT
        && !(shared && request.limit > 1)
        && request.resume_grace_ms <= request.ttl_ms;
    let outcome = if via == "Lease" {
        LockStream::open(request.clone()).map(|(spec, LockStream)| spec)
    } else {
        LeaseSpec::try_from(pb::AcquireRequest {
            name: request.name.clone(),
            ttl_ms: request.ttl_ms,
            wait_ms: request.wait_ms,
            holder: request.holder.clone(),
            fair: request.fair,
            limit: request.limit,
            mode: request.mode,
        })
    };
    let Some(spec) = expect(via, allowed, outcome, &request) else {
        return;
    };
    // Accepted: the request's values, unchanged, each within its limit.
    assert_eq!(spec.name.as_str(), request.name);
    assert_eq!(spec.ttl, millis(request.ttl_ms));
    assert!(spec.ttl >= spec::MIN_TTL && spec.ttl <= spec::MAX_TTL);
    assert_eq!(spec.wait, millis(request.wait_ms));
    assert!(spec.wait <= spec::MAX_WAIT);
    assert_eq!(spec.holder, request.holder);
    assert_eq!(spec.fair, request.fair.unwrap_or(true));
    let expected_mode = if shared {
        Mode::Shared
    } else {
        Mode::Exclusive {
            limit: request.limit.max(1),
        }
    };
    assert_eq!(spec.mode, expected_mode);
    if let Mode::Exclusive { limit } = spec.mode {
        assert!((1..=spec::MAX_LIMIT).contains(&limit));
    }
    assert_eq!(
        spec.resume_grace,
        (request.resume_grace_ms > 0).then(|| millis(request.resume_grace_ms))
    );
    assert!(spec.resume_grace.is_none_or(|grace| grace <= spec.ttl));
    assert_eq!(
        spec.resume.as_deref(),
        (!request.resume_token.is_empty()).then_some(request.resume_token.as_str())
    );
}

/// The checks of a `Campaign` stream's `start`.
pub fn check_campaign_start(start: pb::CampaignStart) {
    let allowed = ttl_allowed(start.ttl_ms)
        && name_allowed(&start.election)
        && start.resume_grace_ms <= start.ttl_ms
        && resume_token_allowed(&start.resume_token)
        && election_value_allowed(&start.value);
    let outcome = Campaign::open(start.clone()).map(|(spec, _)| spec);
    let Some(spec) = expect("Campaign start", allowed, outcome, &start) else {
        return;
    };
    assert_eq!(spec.name.as_str(), start.election);
    assert_eq!(spec.ttl, millis(start.ttl_ms));
    assert!(spec.ttl >= spec::MIN_TTL && spec.ttl <= spec::MAX_TTL);
    // A candidate waits as long as it lives, for a plain lock, in line.
    assert_eq!(spec.wait, spec::MAX_WAIT);
    assert_eq!(spec.mode, Mode::LOCK);
    assert!(spec.fair);
    assert!(holder_allowed(&spec.holder));
    assert_eq!(
        spec.resume_grace,
        (start.resume_grace_ms > 0).then(|| millis(start.resume_grace_ms))
    );
    assert_eq!(
        spec.resume.as_deref(),
        (!start.resume_token.is_empty()).then_some(start.resume_token.as_str())
    );
}

/// A lock name as the unary calls check it.
pub fn check_lock_name(name: String, via: &str) {
    let allowed = name_allowed(&name);
    if let Some(parsed) = expect(via, allowed, LockName::parse(name.clone()), &name) {
        assert_eq!(parsed.as_str(), name);
    }
}

/// An election name as `Leader` and `Observe` check it.
pub fn check_election_name(name: String, via: &str) {
    let allowed = name_allowed(&name);
    if let Some(parsed) = expect(via, allowed, LockName::parse_election(name.clone()), &name) {
        assert_eq!(parsed.as_str(), name);
    }
}

/// A token as `Extend` and `Release` check it.
pub fn check_token(token: String, via: &str) {
    let allowed = token_allowed(&token);
    if let Some(checked) = expect(via, allowed, spec::token(token.clone()), &token) {
        assert_eq!(checked, token);
    }
}

impl ClientRequest for pb::LeaseRequest {
    const NAME: &'static str = "LeaseRequest";

    fn validate(self) {
        match LockStream::read(self) {
            Move::Start(acquire) => check_lease_acquire(acquire, "Lease"),
            Move::Release | Move::NoAction => {}
            Move::Other(message) => no_message(&message),
            Move::HalfClosed | Move::Broken(_) => {
                panic!("LeaseRequest read as the end of the stream")
            }
        }
    }
}

impl ClientRequest for pb::AcquireRequest {
    const NAME: &'static str = "AcquireRequest";

    fn validate(self) {
        let as_lease = pb::LeaseAcquire {
            name: self.name,
            ttl_ms: self.ttl_ms,
            wait_ms: self.wait_ms,
            holder: self.holder,
            fair: self.fair,
            limit: self.limit,
            mode: self.mode,
            ..Default::default()
        };
        check_lease_acquire(as_lease, "Acquire");
    }
}

impl ClientRequest for pb::ExtendRequest {
    const NAME: &'static str = "ExtendRequest";

    /// As `LockServer::extend`: name, token, then TTL.
    fn validate(self) {
        check_lock_name(self.name, "Extend name");
        check_token(self.token, "Extend token");
        let allowed = ttl_allowed(self.ttl_ms);
        if let Some(ttl) = expect("Extend ttl", allowed, spec::ttl(self.ttl_ms), &self.ttl_ms) {
            assert_eq!(ttl, millis(self.ttl_ms));
        }
    }
}

impl ClientRequest for pb::ReleaseRequest {
    const NAME: &'static str = "ReleaseRequest";

    fn validate(self) {
        check_lock_name(self.name, "Release name");
        check_token(self.token, "Release token");
    }
}

impl ClientRequest for pb::DescribeRequest {
    const NAME: &'static str = "DescribeRequest";

    fn validate(self) {
        check_lock_name(self.name, "Describe name");
    }
}

impl ClientRequest for pb::ListRequest {
    const NAME: &'static str = "ListRequest";

    /// `LockServer::list` clamps the limit inline (not a public function): decoding is all
    /// there is to check here.
    fn validate(self) {}
}

impl ClientRequest for pb::CampaignRequest {
    const NAME: &'static str = "CampaignRequest";

    fn validate(self) {
        match Campaign::read(self) {
            Move::Start(start) => check_campaign_start(start),
            Move::Other(value) => {
                assert_eq!(Campaign::message_name(&value), "proclaim");
                // While leader, `handle` checks the value; while waiting, it is refused.
                let allowed = election_value_allowed(&value);
                let checked = spec::election_value(value.clone());
                if let Some(checked) = expect("Campaign proclaim", allowed, checked, &value.len()) {
                    assert_eq!(checked, value);
                }
                check_refusal(
                    "Campaign proclaim while waiting",
                    Campaign::refuse_while_waiting(value),
                    tonic::Code::FailedPrecondition,
                );
            }
            Move::Release | Move::NoAction => {}
            Move::HalfClosed | Move::Broken(_) => {
                panic!("CampaignRequest read as the end of the stream")
            }
        }
    }
}

impl ClientRequest for pb::LeaseAcquire {
    const NAME: &'static str = "LeaseAcquire";

    fn validate(self) {
        check_lease_acquire(self, "Lease");
    }
}

impl ClientRequest for pb::CampaignStart {
    const NAME: &'static str = "CampaignStart";

    fn validate(self) {
        check_campaign_start(self);
    }
}

impl ClientRequest for pb::LeaderRequest {
    const NAME: &'static str = "LeaderRequest";

    fn validate(self) {
        check_election_name(self.election, "Leader election");
    }
}

impl ClientRequest for pb::ObserveRequest {
    const NAME: &'static str = "ObserveRequest";

    fn validate(self) {
        check_election_name(self.election, "Observe election");
    }
}

/// The echo service answers payloads as they come: nothing to check past decoding.
impl ClientRequest for pb::bench::EchoRequest {
    const NAME: &'static str = "EchoRequest";

    fn validate(self) {}
}

impl ClientRequest for pb::bench::EchoStreamRequest {
    const NAME: &'static str = "EchoStreamRequest";

    fn validate(self) {}
}

impl ClientRequest for pb::bench::TicksRequest {
    const NAME: &'static str = "TicksRequest";

    fn validate(self) {}
}

/// The contract's numbers and the code's constants agree (checked once per process).
pub fn check_constants() {
    static CHECKED: std::sync::Once = std::sync::Once::new();
    CHECKED.call_once(|| {
        assert_eq!(spec::MAX_NAME_BYTES, contract::MAX_NAME_BYTES);
        assert_eq!(spec::MAX_HOLDER_BYTES, contract::MAX_HOLDER_BYTES);
        assert_eq!(spec::MIN_TTL, millis(contract::MIN_TTL_MS));
        assert_eq!(spec::MAX_TTL, millis(contract::MAX_TTL_MS));
        assert_eq!(spec::MAX_WAIT, millis(contract::MAX_WAIT_MS));
        assert_eq!(spec::MAX_LIMIT, contract::MAX_LIMIT);
        assert_eq!(
            spec::MAX_ELECTION_VALUE_BYTES,
            contract::MAX_ELECTION_VALUE_BYTES
        );
    });
}
