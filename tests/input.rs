//! Bad input, everywhere a client can send it: empty, oversized or malformed names, TTLs, tokens
//! and values; messages out of order; malformed and oversized frames, invalid UTF-8; a flood of
//! streams on one connection. Each gets a clear status, and none may crash the server, reach
//! another name's keys, or disturb another client's lock or leadership.
//!
//! The same limits are fuzzed without a server in `input_props.rs`.

use crate::support;

use std::time::Duration;

use fred::prelude::ClientLike;
use http_body_util::{BodyExt, Full};
use leasehold::pb::campaign_request::Action;
use leasehold::pb::campaign_response::Event as CampaignEvent;
use leasehold::pb::election_service_client::ElectionServiceClient;
use leasehold::pb::lease_response::Event;
use leasehold::pb::{
    self, CampaignRequest, CampaignResponse, DescribeRequest, ExtendRequest, LeaseRequest,
    ReleaseRequest,
};
use leasehold::server::ServerConfig;
use leasehold_client::{Client, ClientError, Leader};
use support::*;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Streaming};
use tower::ServiceExt;

/// An acquire of `name` (TTL 1 s), changed by `shape`.
fn shaped(name: &str, shape: impl FnOnce(&mut pb::LeaseAcquire)) -> LeaseRequest {
    let mut request = acquire_request(name, 1_000, 0, "");
    if let Some(pb::lease_request::Action::Acquire(acquire)) = request.action.as_mut() {
        shape(acquire);
    }
    request
}

/// Sends `body` as the raw HTTP/2 body of a gRPC call; returns (grpc-status, grpc-message).
async fn raw_call(channel: &Channel, method: &str, body: Vec<u8>) -> (i32, String) {
    let request = http::Request::builder()
        .method("POST")
        .uri(format!(
            "http://localhost/leasehold.v1.LockService/{method}"
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(tonic::body::Body::new(
            Full::new(bytes::Bytes::from(body)).map_err(|never| match never {}),
        ))
        .unwrap();
    let response = tokio::time::timeout(EVENT_TIMEOUT, channel.clone().oneshot(request))
        .await
        .expect("no answer")
        .expect("transport");
    let headers = response.headers().clone();
    let collected = tokio::time::timeout(EVENT_TIMEOUT, response.into_body().collect())
        .await
        .expect("no end")
        .expect("body");
    // A status in the trailers, or in the headers for a trailers-only answer.
    let fields = collected.trailers().cloned().unwrap_or(headers);
    let status = fields
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("no grpc-status");
    let message = fields
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, message)
}

/// A gRPC length-prefixed frame.
fn frame(message: &[u8]) -> Vec<u8> {
    let mut framed = vec![0];
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message);
    framed
}

/// A LeaseRequest{acquire{name}} with `name` as raw bytes (may be invalid UTF-8).
fn acquire_with_raw_name(name: &[u8]) -> Vec<u8> {
    let mut acquire = vec![0x0a, name.len() as u8];
    acquire.extend_from_slice(name);
    acquire.extend_from_slice(&[0x10, 0xe8, 0x07]); // ttl_ms = 1000
    let mut request = vec![0x0a, acquire.len() as u8];
    request.extend_from_slice(&acquire);
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_frames_get_a_status_and_disturb_nothing() {
    let (_redis, server, direct, mut client) = setup().await;
    let mut bystander = LeaseStream::acquire(&mut client, "bystander", 600, 0, "").await;
    let bystander_token = bystander.acquired().await.token;

    let channel = tonic::transport::Endpoint::from_shared(server.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    // Deterministic "random" bytes: the same run every time.
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut noise = |len: usize| {
        (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect::<Vec<u8>>()
    };
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    for len in [1, 7, 64, 300] {
        let bytes = noise(len);
        cases.push(("Lease", frame(&bytes)));
        cases.push(("Acquire", frame(&bytes)));
        cases.push(("Release", frame(&bytes)));
    }
    let valid = acquire_with_raw_name(b"bystander");
    cases.push(("Lease", frame(&valid)[..frame(&valid).len() - 3].to_vec())); // cut mid-frame
    cases.push(("Lease", frame(&valid[..valid.len() - 3]))); // cut mid-message
    cases.push(("Lease", vec![0, 0, 0])); // cut mid-prefix
    cases.push(("Lease", frame(&acquire_with_raw_name(&[b'b', 0xff, 0xfe])))); // invalid UTF-8
    cases.push(("Lease", {
        let mut compressed = frame(&valid);
        compressed[0] = 1; // compressed, without a grpc-encoding
        compressed
    }));
    for (method, body) in cases {
        let (status, message) = raw_call(&channel, method, body.clone()).await;
        // The lease stream reads its own messages and answers INVALID_ARGUMENT; unary calls are
        // decoded by tonic, which answers INTERNAL for undecodable protobuf.
        if method == "Lease" {
            assert_eq!(status, Code::InvalidArgument as i32, "{body:?}: {message}");
        } else {
            assert!(
                status == Code::InvalidArgument as i32 || status == Code::Internal as i32,
                "{method} {body:?}: {status} {message}"
            );
        }
        assert!(!message.is_empty(), "{method}: no message");
    }

    // A message far over the limit is refused before it is decoded.
    let mut oversized = leasehold::pb::lock_service_client::LockServiceClient::new(channel.clone());
    let status = oversized
        .acquire(leasehold::pb::AcquireRequest {
            name: "n".repeat(1 << 20),
            ttl_ms: 1_000,
            ..Default::default()
        })
        .await
        .unwrap_err();
    // A limit, named: RESOURCE_EXHAUSTED (what the gRPC spec says), not tonic's OUT_OF_RANGE.
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("max-message-bytes"),
        "{}",
        status.message()
    );
    // With its details, like every other refusal (docs/errors.md).
    let refusal = leasehold_client::Refusal::of(&status).expect("details");
    assert_eq!(refusal.reason, "MESSAGE_TOO_LARGE");
    assert_eq!(
        refusal.metadata.get("limit"),
        Some(&leasehold::server::MAX_REQUEST_BYTES.to_string())
    );

    // The bystander never noticed: same token, renewed all along, no Lost.
    assert_eq!(
        get(&direct, &lock_key("bystander")).await,
        Some(bystander_token)
    );
    assert!(bystander.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_streams_on_one_connection_hit_the_limit() {
    const LIMIT: usize = 1_000;
    const EXTRA: usize = 50;
    let redis = RedisServer::start();
    let config = ServerConfig {
        max_leases_per_connection: LIMIT,
        ..fast_keepalive()
    };
    let server = TestServer::start_with(&redis, "leasehold:", config).await;
    let client = server.client().await;

    let mut held = Vec::new();
    let mut refused = 0;
    for i in 0..LIMIT + EXTRA {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tx.send(acquire_request(&format!("flood-{i}"), 30_000, 0, ""))
            .await
            .unwrap();
        match client.clone().lease(ReceiverStream::new(rx)).await {
            Ok(response) => held.push((tx, response.into_inner())),
            Err(status) => {
                assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                assert!(
                    status.message().contains("1000 open lease streams"),
                    "{}",
                    status.message()
                );
                refused += 1;
            }
        }
    }
    assert_eq!(held.len(), LIMIT);
    assert_eq!(refused, EXTRA);
    // Every admitted stream really holds its lock.
    for (_, events) in held.iter_mut().take(20) {
        let message = tokio::time::timeout(EVENT_TIMEOUT, events.message())
            .await
            .unwrap();
        assert!(matches!(message, Ok(Some(r)) if matches!(r.event, Some(Event::Acquired(_)))));
    }

    // Other connections are not affected.
    let mut other = server.client().await;
    let mut lease = LeaseStream::acquire(&mut other, "elsewhere", 30_000, 0, "").await;
    lease.acquired().await;

    // Closing streams gives their places back.
    held.truncate(LIMIT - 10);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tx.send(acquire_request("after-close", 30_000, 0, ""))
            .await
            .unwrap();
        match client.clone().lease(ReceiverStream::new(rx)).await {
            Ok(_) => break,
            Err(status)
                if status.code() == Code::ResourceExhausted
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(status) => panic!("no place freed: {status:?}"),
        }
    }
}

/// Every way a request can be wrong, each answered with INVALID_ARGUMENT and a message naming the
/// problem, while another client's lock stays untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_clearly_and_disturbs_no_other_lock() {
    let (_redis, _server, direct, mut client) = setup().await;

    let mut bystander = LeaseStream::acquire(&mut client, "bystander", 30_000, 0, "").await;
    let bystander_token = bystander.acquired().await.token;

    let long_name = "n".repeat(257);
    let long_holder = "h".repeat(257);
    let cases: Vec<(LeaseRequest, &str)> = vec![
        (acquire_request("", 1_000, 0, ""), "name is empty"),
        (
            acquire_request(&long_name, 1_000, 0, ""),
            "over the limit of 256",
        ),
        (
            acquire_request("bad\nname", 1_000, 0, ""),
            "control character",
        ),
        (acquire_request("bystander", 0, 0, ""), "ttl_ms is 0"),
        (acquire_request("bystander", 99, 0, ""), "ttl_ms is 99"),
        (
            acquire_request("bystander", 3_600_001, 0, ""),
            "ttl_ms is 3600001",
        ),
        (acquire_request("x", 1_000, 3_600_001, ""), "wait_ms"),
        (
            acquire_request("x", 1_000, 0, &long_holder),
            "holder is 257 bytes",
        ),
        (release_request(), "release sent before acquire"),
        (LeaseRequest { action: None }, "no action"),
        (
            shaped("bystander", |a| a.limit = 10_001),
            "limit is 10001; it must be between 1 and 10000",
        ),
        (
            shaped("bystander", |a| {
                a.limit = 3;
                a.mode = pb::LeaseMode::Shared.into();
            }),
            "limit is 3 on a shared lease",
        ),
        (shaped("bystander", |a| a.mode = 7), "mode is 7"),
        (
            shaped("bystander", |a| a.resume_grace_ms = 1_001),
            "resume_grace_ms is 1001; it must be at most ttl_ms (1000)",
        ),
        (
            shaped("bystander", |a| a.resume_token = "t".repeat(65)),
            "token is 65 bytes",
        ),
        // Several names at once: each a name, none twice, at most 32, plain locks only.
        (
            shaped("x", |a| a.more_names = vec!["y".into(), String::new()]),
            "more_names[1] is empty",
        ),
        (
            shaped("x", |a| a.more_names = vec!["y".into(), "x".into()]),
            "lock name \"x\" is asked twice",
        ),
        (
            shaped("x", |a| {
                a.more_names = (0..32).map(|i| format!("n{i}")).collect()
            }),
            "33 names asked at once",
        ),
        (
            shaped("x", |a| {
                a.more_names = vec!["y".into()];
                a.mode = pb::LeaseMode::Shared.into();
            }),
            "only plain exclusive locks",
        ),
        (
            shaped("x", |a| {
                a.more_names = vec!["y".into()];
                a.limit = 2;
            }),
            "a semaphore (limit 2)",
        ),
    ];
    for (request, expected) in cases {
        let mut stream = LeaseStream::open(&mut client, request.clone()).await;
        let status = stream.status().await;
        assert_eq!(
            status.code(),
            Code::InvalidArgument,
            "{request:?}: {status:?}"
        );
        assert!(
            status.message().contains(expected),
            "{request:?}: {}",
            status.message()
        );
    }

    // A second acquire on a stream that holds a lock ends that stream (and releases its lock).
    let mut twice = LeaseStream::acquire(&mut client, "twice", 30_000, 0, "").await;
    twice.acquired().await;
    twice.send(acquire_request("bystander", 1_000, 0, "")).await;
    let status = twice.status().await;
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().contains("acquire sent twice"),
        "{}",
        status.message()
    );
    wait_until_gone(&direct, &lock_key("twice"), Duration::from_secs(2)).await;

    // Unary calls check the same limits.
    let status = client
        .acquire(unary_acquire("", 1_000, 0, ""))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    let status = client
        .extend(ExtendRequest {
            name: "bystander".into(),
            token: String::new(),
            ttl_ms: 1_000,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("token is empty"));
    let status = client
        .extend(ExtendRequest {
            name: "bystander".into(),
            token: bystander_token.clone(),
            ttl_ms: 50,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    let status = client
        .release(ReleaseRequest {
            name: "bystander".into(),
            token: "t".repeat(65),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    let mut twice = unary_acquire("x", 1_000, 0, "");
    twice.more_names = vec!["x".into()];
    let status = client.acquire(twice).await.unwrap_err();
    assert!(status.message().contains("asked twice"), "{status:?}");
    let status = client
        .release(ReleaseRequest {
            name: "bystander".into(),
            token: bystander_token.clone(),
            more_names: vec!["b\n".into()],
        })
        .await
        .unwrap_err();
    assert!(status.message().contains("more_names[0]"), "{status:?}");
    let status = client
        .describe(DescribeRequest {
            name: "a\u{7}".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);

    // The bystander never noticed: same token in Redis, and no Lost on its stream.
    assert_eq!(
        get(&direct, &lock_key("bystander")).await,
        Some(bystander_token)
    );
    assert!(bystander.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_with_special_characters_stay_in_their_own_keys() {
    let (_redis, _server, direct, mut client) = setup().await;

    // Names that would collide or escape the hash tag if used raw.
    let names = ["a}b", "a%7Db", "{a}", "a", "a:lock", "*", "a b", "ключ"];
    let mut leases = Vec::new();
    for name in names {
        let mut lease = LeaseStream::acquire(&mut client, name, 30_000, 0, "").await;
        lease.acquired().await;
        leases.push(lease);
    }
    let keys: Vec<String> = direct.custom(fred::cmd!("KEYS"), vec!["*"]).await.unwrap();
    // One key per name (a plain lock nobody waits for), and the fencing counters of their hash
    // slots (at most one per name); all inside the prefix, one hash tag each.
    let (counters, locks): (Vec<&String>, Vec<&String>) = keys
        .iter()
        .partition(|key| key.starts_with("leasehold:fence:{"));
    assert_eq!(locks.len(), names.len(), "{keys:?}");
    assert!(counters.len() <= names.len(), "{keys:?}");
    for key in &locks {
        assert!(key.starts_with("leasehold:{"), "{key}");
        assert!(key.ends_with("}:lock"), "{key}");
    }
    for key in &keys {
        assert_eq!(key.matches('{').count(), 1, "{key}");
        assert_eq!(key.matches('}').count(), 1, "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_prefix_namespaces_every_key() {
    let redis = RedisServer::start();
    let server = TestServer::start_with(&redis, "team-a:", fast_keepalive()).await;
    let direct = redis.client().await;
    let mut client = server.client().await;
    let mut lease = LeaseStream::acquire(&mut client, "job", 30_000, 0, "").await;
    let token = lease.acquired().await.token;
    assert_eq!(get(&direct, "team-a:{job}:lock").await, Some(token));
    let keys: Vec<String> = direct.custom(fred::cmd!("KEYS"), vec!["*"]).await.unwrap();
    assert!(keys.iter().all(|k| k.starts_with("team-a:")), "{keys:?}");
}

/// A raw Campaign stream, to send what the client library never would.
async fn raw_campaign(
    url: &str,
    first: CampaignRequest,
) -> (
    mpsc::Sender<CampaignRequest>,
    Result<Streaming<CampaignResponse>, tonic::Status>,
) {
    let channel = Channel::from_shared(url.to_owned())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let (tx, rx) = mpsc::channel(4);
    tx.send(first).await.unwrap();
    let stream = ElectionServiceClient::new(channel)
        .campaign(ReceiverStream::new(rx))
        .await
        .map(|r| r.into_inner());
    (tx, stream)
}

fn start(election: &str, value: Vec<u8>, ttl_ms: u32) -> CampaignRequest {
    CampaignRequest {
        action: Some(Action::Start(pb::CampaignStart {
            election: election.to_owned(),
            value,
            ttl_ms,
            ..Default::default()
        })),
    }
}

/// `request` (a start) resuming `token` with `grace_ms`.
fn with_resume(mut request: CampaignRequest, token: &str, grace_ms: u32) -> CampaignRequest {
    if let Some(Action::Start(start)) = &mut request.action {
        start.resume_token = token.to_owned();
        start.resume_grace_ms = grace_ms;
    }
    request
}

fn proclaim(value: &str) -> CampaignRequest {
    CampaignRequest {
        action: Some(Action::Proclaim(pb::Proclaim {
            value: value.as_bytes().to_vec(),
        })),
    }
}

/// The status that ends a raw campaign stream.
async fn ending_status(
    stream: Result<Streaming<CampaignResponse>, tonic::Status>,
) -> tonic::Status {
    let mut stream = match stream {
        Ok(stream) => stream,
        Err(status) => return status,
    };
    within(EVENT_TIMEOUT, "the stream's end", async {
        loop {
            match stream.message().await {
                Ok(Some(CampaignResponse {
                    event: Some(CampaignEvent::Elected(_)),
                })) => continue,
                Ok(other) => panic!("expected an error status, got {other:?}"),
                Err(status) => return status,
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_status_and_leaves_the_leader_alone() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let url = server.url();
    let client = Client::connect(url.clone()).await.unwrap();
    let mut leader = client
        .campaign("steady", "leader", Duration::from_secs(5))
        .await
        .unwrap();
    let term = leader.elected().await.unwrap();

    let cases: Vec<(&str, CampaignRequest, Code, &str)> = vec![
        (
            "empty name",
            start("", vec![], 1000),
            Code::InvalidArgument,
            "election name is empty",
        ),
        (
            "long name",
            start(&"n".repeat(257), vec![], 1000),
            Code::InvalidArgument,
            "over the limit",
        ),
        (
            "large value",
            start("steady", vec![0; 64 * 1024 + 1], 1000),
            Code::InvalidArgument,
            "value is 65537 bytes",
        ),
        (
            "zero ttl",
            start("steady", vec![], 0),
            Code::InvalidArgument,
            "ttl_ms",
        ),
        (
            "grace above the ttl",
            with_resume(start("steady", vec![], 1000), "", 1001),
            Code::InvalidArgument,
            "resume_grace_ms",
        ),
        (
            "oversized resume token",
            with_resume(start("steady", vec![], 1000), &"t".repeat(4096), 1000),
            Code::InvalidArgument,
            "token is 4096 bytes",
        ),
        (
            "resume token that leads nothing",
            with_resume(start("steady", vec![], 1000), &"0".repeat(32), 1000),
            Code::NotFound,
            "resume token",
        ),
        (
            "proclaim first",
            proclaim("x"),
            Code::InvalidArgument,
            "must be start",
        ),
        (
            "no action",
            CampaignRequest { action: None },
            Code::InvalidArgument,
            "no action",
        ),
    ];
    for (what, first, code, message) in cases {
        let (_tx, stream) = raw_campaign(&url, first).await;
        let status = ending_status(stream).await;
        assert_eq!(status.code(), code, "{what}: {status:?}");
        assert!(status.message().contains(message), "{what}: {status:?}");
    }

    // Proclaiming while waiting in line: FAILED_PRECONDITION, and the waiter leaves the line.
    let (tx, stream) = raw_campaign(&url, start("steady", b"usurper".to_vec(), 1000)).await;
    tx.send(proclaim("usurper")).await.unwrap();
    let status = ending_status(stream).await;
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(
        status.message().contains("before being elected"),
        "{status:?}"
    );

    // A second start, once elected: INVALID_ARGUMENT, and that leadership ends.
    let (tx, stream) = raw_campaign(&url, start("other", vec![], 1000)).await;
    let mut stream = stream.unwrap();
    assert!(matches!(
        stream.message().await.unwrap(),
        Some(CampaignResponse {
            event: Some(CampaignEvent::Elected(_))
        })
    ));
    tx.send(start("other", vec![], 1000)).await.unwrap();
    let status = ending_status(Ok(stream)).await;
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("start sent twice"), "{status:?}");

    // Unary calls refuse bad names too.
    match client.leader("").await {
        Err(ClientError::Status(status)) => assert_eq!(status.code(), Code::InvalidArgument),
        other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
    }
    match client.observe("a\nb").await {
        Err(ClientError::Status(status)) => assert_eq!(status.code(), Code::InvalidArgument),
        Err(other) => panic!("expected INVALID_ARGUMENT, got {other:?}"),
        Ok(_) => panic!("observing a bad name was accepted"),
    }

    // None of it disturbed the leader.
    assert_eq!(
        client.leader("steady").await.unwrap(),
        Some(Leader {
            term,
            value: b"leader".to_vec()
        })
    );
    leader.proclaim("still here").await.unwrap();
}
