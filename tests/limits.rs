//! Issue 41's limits on a holding, against a real Redis: the token check (`Check`), lock-delay
//! and max-hold.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use leasehold::pb::lock_service_client::LockServiceClient;
use leasehold::pb::{CheckRequest, TokenState};
use leasehold::server::ServerConfig;
use leasehold::server::auth::{AuthPolicy, token_digest};
use support::certs::TempDir;
use support::*;
use tonic::Code;
use tonic::transport::Channel;

/// `Check` of `fencing_token` on `name`: its state and the current token it answers.
async fn check(
    client: &mut LockServiceClient<Channel>,
    name: &str,
    fencing_token: u64,
) -> (TokenState, u64) {
    let answer = client
        .check(CheckRequest {
            name: name.into(),
            fencing_token,
        })
        .await
        .expect("check")
        .into_inner();
    (answer.state(), answer.current_fencing_token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_answers_current_superseded_or_free_for_a_lock_and_a_permit() {
    let (_redis, _server, _direct, mut client) = setup().await;

    // A lock: current while held, superseded once another holds it, free once let go.
    let first = client
        .acquire(unary_acquire("check/lock", 200, 0, "first"))
        .await
        .unwrap()
        .into_inner();
    assert!(first.acquired);
    let fence = first.fencing_token;
    assert_eq!(
        check(&mut client, "check/lock", fence).await,
        (TokenState::Current, fence)
    );
    assert_eq!(
        check(&mut client, "check/lock", fence + 1).await,
        (TokenState::Superseded, fence)
    );
    let second = within(Duration::from_secs(5), "the next holder", async {
        loop {
            let got = client
                .acquire(unary_acquire("check/lock", 5_000, 1_000, "second"))
                .await
                .unwrap()
                .into_inner();
            if got.acquired {
                return got;
            }
        }
    })
    .await;
    assert_eq!(
        check(&mut client, "check/lock", fence).await,
        (TokenState::Superseded, second.fencing_token)
    );
    release_unary(&mut client, "check/lock", &second.token).await;
    assert_eq!(
        check(&mut client, "check/lock", fence).await,
        (TokenState::Free, 0)
    );

    // A semaphore's permits: each holder's token is current; another is superseded by the oldest.
    let mut permit = |holder: &'static str| {
        let mut request = unary_acquire("check/sem", 5_000, 0, holder);
        request.limit = 2;
        request
    };
    let a = client.acquire(permit("a")).await.unwrap().into_inner();
    let b = client.acquire(permit("b")).await.unwrap().into_inner();
    assert!(a.acquired && b.acquired);
    for token in [a.fencing_token, b.fencing_token] {
        assert_eq!(
            check(&mut client, "check/sem", token).await,
            (TokenState::Current, token)
        );
    }
    assert_eq!(
        check(&mut client, "check/sem", fence).await,
        (TokenState::Superseded, a.fencing_token.min(b.fencing_token))
    );
    release_unary(&mut client, "check/sem", &a.token).await;
    release_unary(&mut client, "check/sem", &b.token).await;
    assert_eq!(
        check(&mut client, "check/sem", a.fencing_token).await,
        (TokenState::Free, 0)
    );
}

async fn release_unary(client: &mut LockServiceClient<Channel>, name: &str, token: &str) {
    let released = client
        .release(leasehold::pb::ReleaseRequest {
            name: name.into(),
            token: token.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(released.released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_refuses_bad_input_and_callers_without_the_observe_role() {
    let redis = RedisServer::start();
    let dir = TempDir::new("auth");
    let grants = dir.write(
        "auth.toml",
        &format!(
            "[[grant]]\nname = \"dashboard\"\ntoken_sha256 = \"{}\"\nrole = \"observe\"\nlocks = [\"billing/\"]\n",
            token_digest("dashboard-secret")
        ),
    );
    let config = ServerConfig {
        auth: Some(Arc::new(AuthPolicy::load(&grants).unwrap())),
        ..fast_keepalive()
    };
    let server = TestServer::start_with(&redis, "leasehold:", config).await;
    let mut client = server.client().await;
    let call = |name: &str, fencing_token: u64, token: Option<&str>| {
        let mut request = tonic::Request::new(CheckRequest {
            name: name.into(),
            fencing_token,
        });
        if let Some(token) = token {
            let value = format!("Bearer {token}").parse().unwrap();
            request.metadata_mut().insert("authorization", value);
        }
        request
    };
    let observer = Some("dashboard-secret");
    let free = client.check(call("billing/x", 7, observer)).await.unwrap();
    assert_eq!(free.into_inner().state(), TokenState::Free);
    for (name, token, code) in [
        ("reports/x", observer, Code::PermissionDenied),
        ("billing/x", None, Code::Unauthenticated),
    ] {
        let refused = client.check(call(name, 7, token)).await.unwrap_err();
        assert_eq!(refused.code(), code, "{name}");
    }
    let empty = client.check(call("", 7, observer)).await.unwrap_err();
    assert_eq!(empty.code(), Code::InvalidArgument);
    let zero = client
        .check(call("billing/x", 0, observer))
        .await
        .unwrap_err();
    assert_eq!(zero.code(), Code::InvalidArgument);
    assert!(
        zero.message().contains("fencing token is 0"),
        "{}",
        zero.message()
    );
}
