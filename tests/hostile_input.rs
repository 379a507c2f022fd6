//! Hostile input, tried on purpose: malformed and oversized frames, invalid UTF-8, and a flood
//! of streams on one connection. None may crash the server or disturb another client's lock.

mod support;

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use leasehold::pb::lease_response::Event;
use leasehold::server::ServerConfig;
use support::*;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic::transport::Channel;
use tower::ServiceExt;

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
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let direct = redis.client().await;
    let mut client = server.client().await;
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
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    assert!(
        status.message().contains("too large"),
        "{}",
        status.message()
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
