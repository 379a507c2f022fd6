//! Several names at once, all or none: on the `Lease` stream, the unary calls and a session;
//! refusals leave nothing half-taken, overlapping sets in any order never deadlock, a loss of
//! one name loses the whole, resume takes every name back; names over a Cluster's slots.

use crate::session::Raw;
use crate::support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::prelude::KeysInterface;
use leasehold::pb::lease_request::Action;
use leasehold::pb::lease_response::Event;
use leasehold::pb::lock_service_client::LockServiceClient;
use leasehold::pb::{self, LeaseAcquire, LeaseRequest};
use support::*;
use tonic::Code;
use tonic::transport::Channel;

/// An acquire of `names` (the first as `name`, the rest as `more_names`).
fn acquire_all(names: &[&str], ttl_ms: u32, wait_ms: u32, holder: &str) -> LeaseRequest {
    LeaseRequest {
        action: Some(Action::Acquire(LeaseAcquire {
            name: names[0].to_owned(),
            more_names: names[1..].iter().map(|&n| n.to_owned()).collect(),
            ttl_ms,
            wait_ms,
            holder: holder.to_owned(),
            ..Default::default()
        })),
    }
}

async fn open(
    client: &mut LockServiceClient<Channel>,
    names: &[&str],
    ttl_ms: u32,
    wait_ms: u32,
    holder: &str,
) -> LeaseStream {
    LeaseStream::open(client, acquire_all(names, ttl_ms, wait_ms, holder)).await
}

/// Who holds each name's key now (the token), `None` where free.
async fn tokens(direct: &fred::prelude::Client, names: &[&str]) -> Vec<Option<String>> {
    let mut held = Vec::new();
    for name in names {
        held.push(get(direct, &lock_key(name)).await);
    }
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_names_are_taken_together_with_a_fence_each_and_released_together() {
    let (_redis, _server, direct, mut client) = setup().await;
    let names = ["s-c", "s-a", "s-b"];
    let mut lease = open(&mut client, &names, 5_000, 0, "all").await;
    let acquired = lease.acquired().await;
    let fenced: Vec<&str> = acquired.fences.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(fenced, names, "fences in the order asked");
    assert_eq!(acquired.fencing_token, acquired.fences[0].fencing_token);
    for fence in &acquired.fences {
        let value: String = direct.get(lock_key(&fence.name)).await.unwrap();
        let value = lease_value(&value);
        assert_eq!(value.token, acquired.token, "one token for every name");
        assert_eq!(value.fencing_token, fence.fencing_token);
    }
    assert!(lease.release().await);
    assert_eq!(tokens(&direct, &names).await, vec![None, None, None]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_or_a_wait_leaves_nothing_half_taken() {
    let (_redis, server, direct, mut client) = setup().await;
    let mut other = server.client().await;
    let mut blocker = LeaseStream::acquire(&mut other, "h-b", 5_000, 0, "blocker").await;
    blocker.acquired().await;
    // Asked without waiting: refused, naming the taken name's holder; a and c left free.
    let mut refused = open(&mut client, &["h-a", "h-b", "h-c"], 5_000, 0, "all").await;
    let status = refused.status().await;
    assert_eq!(status.code(), Code::Aborted, "{status:?}");
    assert!(
        status.message().contains("held by \"blocker\""),
        "{status:?}"
    );
    assert_eq!(tokens(&direct, &["h-a", "h-c"]).await, vec![None, None]);
    // Asked with a wait: in h-b's line, told its holder, holding nothing meanwhile.
    let mut waiting = open(&mut client, &["h-c", "h-b", "h-a"], 5_000, 5_000, "all").await;
    assert_eq!(waiting.waiting().await.holder, "blocker");
    assert_eq!(tokens(&direct, &["h-a", "h-c"]).await, vec![None, None]);
    // Given up while waiting: nothing left behind either.
    drop(waiting);
    let mut waiting = open(&mut client, &["h-c", "h-b", "h-a"], 5_000, 5_000, "all").await;
    assert_eq!(waiting.waiting().await.holder, "blocker");
    assert!(blocker.release().await);
    let acquired = waiting.acquired().await;
    assert_eq!(acquired.fences.len(), 3);
    // Past its deadline: WaitExpired naming the blocking name's holder, nothing taken.
    let mut late = open(&mut other, &["h-z", "h-a"], 5_000, 200, "late").await;
    assert_eq!(late.waiting().await.holder, "all");
    let status = late.status().await;
    assert_eq!(status.code(), Code::Aborted, "{status:?}");
    assert_eq!(get(&direct, &lock_key("h-z")).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlapping_sets_asked_in_any_order_all_complete_one_holder_per_name() {
    let redis = RedisServer::start();
    let server = TestServer::start(&redis).await;
    const NAMES: [&str; 3] = ["o-x", "o-y", "o-z"];
    const CLIENTS: usize = 4;
    const ROUNDS: usize = 20;
    let holders: Arc<Mutex<HashMap<&str, usize>>> = Arc::default();
    let mut workers = Vec::new();
    for worker in 0..CLIENTS {
        let mut client = server.client().await;
        let holders = holders.clone();
        workers.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                // Two or three of the names, in an order of this round's own.
                let mut names = NAMES.to_vec();
                names.rotate_left((worker + round) % 3);
                if (worker * 7 + round) % 2 == 1 {
                    names.reverse();
                }
                names.truncate(2 + (worker + round) % 2);
                let mut lease = open(&mut client, &names, 5_000, 10_000, "w").await;
                lease.acquired().await;
                for name in &names {
                    let mut held = holders.lock().unwrap();
                    let count = held.entry(name).or_default();
                    *count += 1;
                    assert_eq!(*count, 1, "two holders of {name}");
                }
                tokio::task::yield_now().await;
                for name in &names {
                    *holders.lock().unwrap().get_mut(name).unwrap() -= 1;
                }
                assert!(lease.release().await);
            }
        }));
    }
    within(
        Duration::from_secs(60),
        "every round of every client",
        async {
            for worker in workers {
                worker.await.expect("worker");
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_one_name_loses_the_whole_lease_and_lets_the_rest_expire() {
    let (_redis, _server, direct, mut client) = setup().await;
    let mut lease = open(&mut client, &["l-a", "l-b", "l-c"], 300, 0, "all").await;
    let acquired = lease.acquired().await;
    let _: i64 = direct.del(lock_key("l-b")).await.unwrap();
    match lease.next_significant().await {
        Ok(Some(Event::Lost(lost))) => {
            assert_eq!(lost.code, pb::LostReason::Taken as i32);
            assert!(lost.reason.contains("\"l-b\""), "{}", lost.reason);
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    // Not released while the holder may still believe in them (it hears `lost` first): the
    // last renewal, at most a third of the TTL ago, keeps them a while; then they expire, no
    // longer renewed.
    let ours = Some(acquired.token.clone());
    assert_eq!(
        tokens(&direct, &["l-a", "l-c"]).await,
        vec![ours.clone(), ours]
    );
    for name in ["l-a", "l-c"] {
        wait_until_gone(&direct, &lock_key(name), Duration::from_secs(2)).await;
    }
    assert!(matches!(lease.next_significant().await, Ok(None) | Err(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_one_name_revokes_the_whole_lease() {
    let (_redis, _server, direct, mut client) = setup().await;
    let mut lease = open(&mut client, &["r-a", "r-b"], 600, 0, "all").await;
    lease.acquired().await;
    let revoked = client
        .revoke(pb::RevokeRequest {
            name: "r-b".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(revoked.revoked.len(), 1);
    match lease.next_significant().await {
        Ok(Some(Event::Lost(lost))) => assert_eq!(lost.code, pb::LostReason::Revoked as i32),
        other => panic!("expected Lost, got {other:?}"),
    }
    wait_until_gone(&direct, &lock_key("r-a"), Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_over_several_names_resumes_whole_or_not_at_all() {
    let (_redis, _server, direct, mut client) = setup().await;
    let names = ["m-a", "m-b"];
    let resumable = |wait_ms, resume_token: &str| {
        let mut request = acquire_all(&names, 5_000, wait_ms, "all");
        if let Some(Action::Acquire(acquire)) = &mut request.action {
            acquire.resume_grace_ms = 400;
            acquire.resume_token = resume_token.to_owned();
        }
        request
    };
    let mut lease = LeaseStream::open(&mut client, resumable(0, "")).await;
    let first = lease.acquired().await;
    // The stream ends without a release: kept for its grace, then resumed whole.
    drop(lease);
    let mut resumed = LeaseStream::open(&mut client, resumable(0, &first.token)).await;
    let again = resumed.acquired().await;
    assert_eq!(again.fences, first.fences, "same fencing token per name");
    drop(resumed);
    // One name gone: NOT_FOUND, and the other is not left held: not released (its holder may
    // believe in it until its grace runs out) but shortened back to the grace.
    let _: i64 = direct.del(lock_key("m-b")).await.unwrap();
    let mut refused = LeaseStream::open(&mut client, resumable(0, &first.token)).await;
    assert_eq!(refused.status().await.code(), Code::NotFound);
    let pttl: i64 = direct.pttl(lock_key("m-a")).await.unwrap();
    assert!(
        (1..=400).contains(&pttl),
        "m-a's TTL {pttl} ms, not its grace"
    );
    wait_until_gone(&direct, &lock_key("m-a"), Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_acquire_extend_and_release_name_every_name() {
    let (_redis, _server, direct, mut client) = setup().await;
    let mut request = unary_acquire("u-a", 5_000, 0, "unary");
    request.more_names = vec!["u-b".into(), "u-c".into()];
    let acquired = client.acquire(request.clone()).await.unwrap().into_inner();
    assert!(acquired.acquired);
    let fenced: Vec<&str> = acquired.fences.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(fenced, ["u-a", "u-b", "u-c"]);
    // Taken again by another: refused whole, naming the holder.
    let refused = client.acquire(request).await.unwrap().into_inner();
    assert!(!refused.acquired && refused.fences.is_empty());
    assert_eq!(refused.holder, "unary");
    let more = vec!["u-b".to_owned(), "u-c".to_owned()];
    let extend = |more_names: Vec<String>| pb::ExtendRequest {
        name: "u-a".into(),
        token: acquired.token.clone(),
        ttl_ms: 9_000,
        more_names,
    };
    assert!(
        client
            .extend(extend(more.clone()))
            .await
            .unwrap()
            .into_inner()
            .extended
    );
    for name in ["u-a", "u-b", "u-c"] {
        let pttl: i64 = direct.pttl(lock_key(name)).await.unwrap();
        assert!(pttl > 5_000, "{name} extended: {pttl}");
    }
    // One name no longer ours: extended = false.
    let _: i64 = direct.del(lock_key("u-c")).await.unwrap();
    assert!(
        !client
            .extend(extend(more.clone()))
            .await
            .unwrap()
            .into_inner()
            .extended
    );
    let release = pb::ReleaseRequest {
        name: "u-a".into(),
        token: acquired.token.clone(),
        more_names: more,
    };
    assert!(client.release(release).await.unwrap().into_inner().released);
    assert_eq!(tokens(&direct, &["u-a", "u-b"]).await, vec![None, None]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_holds_several_names_as_one_lease_lost_alone() {
    let (_redis, server, direct, _client) = setup().await;
    let mut session = Raw::open(&server.url(), 600, 0).await;
    let acquire = |id, name: &str, more: &[&str]| {
        pb::session_request::Action::Acquire(pb::SessionAcquire {
            id,
            name: name.into(),
            more_names: more.iter().map(|&n| n.to_owned()).collect(),
            ..Default::default()
        })
    };
    session.send(acquire(1, "q-a", &["q-b"]));
    let several = session.acquired(1).await;
    let fenced: Vec<&str> = several.fences.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(fenced, ["q-a", "q-b"]);
    session.send(acquire(2, "q-single", &[]));
    let single = session.acquired(2).await;
    assert_eq!(single.fences.len(), 1);
    assert_eq!(single.fences[0].fencing_token, single.fencing_token);
    // One of its names deleted: that lease alone is lost, its other name left to expire.
    let _: i64 = direct.del(lock_key("q-b")).await.unwrap();
    use pb::session_response::Event as S;
    match session.next_about().await {
        Ok(Some(S::LeaseLost(lost))) => {
            assert_eq!(lost.id, 1);
            assert!(lost.reason.contains("\"q-b\""), "{}", lost.reason);
        }
        other => panic!("expected lease_lost 1, got {other:?}"),
    }
    wait_until_gone(&direct, &lock_key("q-a"), Duration::from_secs(2)).await;
    assert!(get(&direct, &lock_key("q-single")).await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_on_different_cluster_slots_are_held_and_waited_for_together() {
    let cluster = support::cluster::RedisCluster::start(3, 0);
    let server = TestServer::start_at(&cluster.url(), "leasehold:", fast_keepalive()).await;
    let direct = cluster.client().await;
    // Names whose keys live on different primaries.
    let names: Vec<String> = (0..12).map(|i| format!("slot-{i}")).collect();
    let mut by_primary: HashMap<u16, &str> = HashMap::new();
    for name in &names {
        by_primary
            .entry(cluster.slot_of(&lock_key(name)).0)
            .or_insert(name);
    }
    let spread: Vec<&str> = by_primary.into_values().collect();
    assert!(spread.len() >= 2, "names over {} primaries", spread.len());
    let (mut a, mut b) = (server.client().await, server.client().await);
    let mut first = open(&mut a, &spread, 2_000, 0, "first").await;
    let held = first.acquired().await;
    assert_eq!(held.fences.len(), spread.len());
    // In the other order, waiting: granted once the first lets go.
    let reversed: Vec<&str> = spread.iter().rev().copied().collect();
    let mut second = open(&mut b, &reversed, 2_000, 5_000, "second").await;
    assert_eq!(second.waiting().await.holder, "first");
    assert!(first.release().await);
    let taken = second.acquired().await;
    for fence in &taken.fences {
        assert_eq!(
            get(&direct, &lock_key(&fence.name)).await,
            Some(taken.token.clone())
        );
    }
    assert!(second.release().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_one_name_of_a_session_lease_over_several_is_told_revoked() {
    let (_redis, server, _direct, mut client) = setup().await;
    let mut session = Raw::open(&server.url(), 600, 0).await;
    session.send(pb::session_request::Action::Acquire(pb::SessionAcquire {
        id: 1,
        name: "sv-a".into(),
        more_names: vec!["sv-b".into()],
        ..Default::default()
    }));
    session.acquired(1).await;
    let revoked = client
        .revoke(pb::RevokeRequest {
            name: "sv-a".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(revoked.revoked.len(), 1);
    use pb::session_response::Event as S;
    match session.next_about().await {
        Ok(Some(S::LeaseLost(lost))) => {
            assert_eq!(lost.id, 1);
            assert_eq!(lost.code, pb::LostReason::Revoked as i32, "{}", lost.reason);
        }
        other => panic!("expected lease_lost 1, got {other:?}"),
    }
}
