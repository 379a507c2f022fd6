//! Unary calls, bad input, key layout and start-up, against a real Redis.

mod support;

use std::time::Duration;

use fred::prelude::{ClientLike, KeysInterface, LuaInterface};
use leasehold::pb::lease_response::Event;
use leasehold::pb::{AcquireRequest, DescribeRequest, ExtendRequest, LeaseRequest, ReleaseRequest};
use support::*;
use tonic::Code;

fn acquire(name: &str, ttl_ms: u32, wait_ms: u32, holder: &str) -> AcquireRequest {
    AcquireRequest {
        name: name.into(),
        ttl_ms,
        wait_ms,
        holder: holder.into(),
        fair: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_acquire_extend_describe_release() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let direct = redis.client().await;
    let mut client = server.client().await;

    let got = client
        .acquire(acquire("cron", 1_000, 0, "cron@host"))
        .await
        .unwrap()
        .into_inner();
    assert!(got.acquired);
    assert!(got.fencing_token > 0);
    assert_eq!(got.ttl_ms, 1_000);
    assert!(got.valid_for_ms > 0 && got.valid_for_ms < 1_000);

    let described = client
        .describe(DescribeRequest {
            name: "cron".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(described.held);
    assert_eq!(described.holder, "cron@host");
    assert_eq!(described.fencing_token, got.fencing_token);
    assert!(described.ttl_remaining_ms > 0 && described.ttl_remaining_ms <= 1_000);

    // A second caller is told who holds it; that is an answer, not an error.
    let refused = client
        .acquire(acquire("cron", 1_000, 0, "other"))
        .await
        .unwrap()
        .into_inner();
    assert!(!refused.acquired);
    assert_eq!(refused.holder, "cron@host");
    assert!(refused.token.is_empty());

    let extended = client
        .extend(ExtendRequest {
            name: "cron".into(),
            token: got.token.clone(),
            ttl_ms: 60_000,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(extended.extended);
    let pttl: i64 = direct.pttl(lock_key("cron")).await.unwrap();
    assert!(pttl > 1_000, "extend did not reset the TTL: {pttl}");

    let released = client
        .release(ReleaseRequest {
            name: "cron".into(),
            token: got.token.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(released.released);
    assert_eq!(get(&direct, &lock_key("cron")).await, None);
    let described = client
        .describe(DescribeRequest {
            name: "cron".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!described.held);

    // Too late: a released lock cannot be extended or released again.
    let extended = client
        .extend(ExtendRequest {
            name: "cron".into(),
            token: got.token.clone(),
            ttl_ms: 1_000,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!extended.extended);
    let released = client
        .release(ReleaseRequest {
            name: "cron".into(),
            token: got.token,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!released.released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_acquire_waits_for_a_release() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let mut client = server.client().await;
    let mut other = server.client().await;

    let first = client
        .acquire(acquire("w", 30_000, 0, "first"))
        .await
        .unwrap()
        .into_inner();
    let first_fencing = first.fencing_token;
    let waiting = tokio::spawn(async move {
        other
            .acquire(acquire("w", 30_000, 10_000, "second"))
            .await
            .unwrap()
            .into_inner()
    });
    // The waiter has not got it while the first holds it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished());
    client
        .release(ReleaseRequest {
            name: "w".into(),
            token: first.token,
        })
        .await
        .unwrap();
    let second = tokio::time::timeout(EVENT_TIMEOUT, waiting)
        .await
        .unwrap()
        .unwrap();
    assert!(second.acquired);
    assert!(second.fencing_token > first_fencing);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_answers_false_and_leaves_the_lock_alone() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let direct = redis.client().await;
    let mut client = server.client().await;

    let mut lease = LeaseStream::acquire(&mut client, "mine", 30_000, 0, "").await;
    let acquired = lease.acquired().await;
    let wrong = "0".repeat(32);
    let extended = client
        .extend(ExtendRequest {
            name: "mine".into(),
            token: wrong.clone(),
            ttl_ms: 100,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!extended.extended);
    let released = client
        .release(ReleaseRequest {
            name: "mine".into(),
            token: wrong,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!released.released);
    assert_eq!(get(&direct, &lock_key("mine")).await, Some(acquired.token));
    let pttl: i64 = direct.pttl(lock_key("mine")).await.unwrap();
    assert!(pttl > 20_000, "a wrong token changed the TTL: {pttl}");
}

/// Every way a request can be wrong, each answered with INVALID_ARGUMENT and a message naming the
/// problem, while another client's lock stays untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_clearly_and_disturbs_no_other_lock() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let direct = redis.client().await;
    let mut client = server.client().await;

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
    let status = client.acquire(acquire("", 1_000, 0, "")).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    let status = client
        .extend(ExtendRequest {
            name: "bystander".into(),
            token: String::new(),
            ttl_ms: 1_000,
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
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    let status = client
        .release(ReleaseRequest {
            name: "bystander".into(),
            token: "t".repeat(65),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
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
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let direct = redis.client().await;
    let mut client = server.client().await;

    // Names that would collide or escape the hash tag if used raw.
    let names = ["a}b", "a%7Db", "{a}", "a", "a:lock", "*", "a b", "ключ"];
    let mut leases = Vec::new();
    for name in names {
        let mut lease = LeaseStream::acquire(&mut client, name, 30_000, 0, "").await;
        lease.acquired().await;
        leases.push(lease);
    }
    let keys: Vec<String> = direct.custom(fred::cmd!("KEYS"), vec!["*"]).await.unwrap();
    // Three keys per name (lock, owner, fence), all inside the prefix, one hash tag each.
    assert_eq!(keys.len(), names.len() * 3, "{keys:?}");
    for key in &keys {
        assert!(key.starts_with("leasehold:{"), "{key}");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_are_reloaded_when_redis_forgets_them() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    let direct = redis.client().await;
    let mut client = server.client().await;
    let _: () = direct.script_flush(false).await.unwrap();
    let mut lease = LeaseStream::acquire(&mut client, "job", 300, 0, "").await;
    lease.acquired().await;
    let _: () = direct.script_flush(false).await.unwrap();
    // Renewal (extend script) survives the flush too.
    assert!(matches!(lease.next().await, Ok(Some(Event::Extended(_)))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_refuses_to_start_without_redis() {
    let unused = {
        let redis = RedisServer::start();
        redis.port()
    }; // Stopped: nothing listens there now.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(["--redis", &format!("redis://127.0.0.1:{unused}")])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot use Redis at redis://127.0.0.1:"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_reads_its_settings_from_the_environment() {
    let redis = RedisServer::start();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    for var in ["LEASEHOLD_REDIS", "LEASEHOLD_LISTEN"] {
        assert!(help.contains(var), "{help}");
    }
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("serve")
        .env("LEASEHOLD_REDIS", redis.url())
        .env("LEASEHOLD_LISTEN", "127.0.0.1:0")
        .env("LEASEHOLD_KEY_PREFIX", "from-env:")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let addr = line
        .trim()
        .strip_prefix("leasehold: listening on ")
        .unwrap()
        .to_owned();
    let mut client = connect(&format!("http://{addr}")).await;
    let mut lease = LeaseStream::acquire(&mut client, "job", 30_000, 0, "").await;
    let token = lease.acquired().await.token;
    let direct = redis.client().await;
    assert_eq!(get(&direct, "from-env:{job}:lock").await, Some(token));
    let _ = child.kill();
    let _ = child.wait();
}
