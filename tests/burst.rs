//! A burst of acquisitions far above the Redis in-flight limit waits in line instead of failing.
//! Alone in its binary: a burst this size on two cores must not share the runtime with other
//! tests, whose timers it would starve.

use crate::support;

use std::time::Duration;

use leasehold::pb::AcquireRequest;
use leasehold::server::ServerConfig;
use leasehold::store::{RedisSettings, Store};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_over_the_in_flight_limit_waits_in_line_instead_of_failing() {
    let redis = RedisServer::start();
    // Few places and a Redis timeout far below the burst's length (about 15 s here): every
    // command must wait its turn, and no command's wait in line may count against its timeout.
    // Not shorter: on two cores a task woken by its answer may itself wait a second or two for
    // a thread behind 20,000 others, and that wait does count (it flaked at 2 s).
    let mut settings = RedisSettings::new(redis.url());
    settings.command_timeout = Duration::from_secs(5);
    settings.max_in_flight = 32;
    let store = Store::connect(&settings, "burst:", Default::default())
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(leasehold::server::serve(
        listener,
        store,
        // Client and server share this starved runtime: keepalive pings would go unanswered
        // and drop connections, which is not what this test is about.
        ServerConfig {
            keepalive_interval: Duration::from_secs(60),
            ..ServerConfig::default()
        },
        async {
            let _ = stopped.await;
        },
    ));
    // Plain gRPC clients, without the client library's 2 s keepalive: on this starved runtime a
    // ping's answer can wait longer than that, and the test is about the server's queue to
    // Redis, not about dead connections.
    let mut clients = Vec::new();
    for _ in 0..20 {
        clients.push(connect(&url).await);
    }
    let burst = (0..20_000).map(|i| {
        let mut client = clients[i % clients.len()].clone();
        async move {
            client
                .acquire(AcquireRequest {
                    name: format!("burst-{i}"),
                    ttl_ms: 30_000,
                    ..Default::default()
                })
                .await
                .map(tonic::Response::into_inner)
        }
    });
    let answers = futures_join_all(burst).await;
    let failed: Vec<_> = answers.iter().filter_map(|a| a.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "{} failed, e.g. {:?}",
        failed.len(),
        failed.first()
    );
    assert!(answers.iter().all(|a| a.as_ref().is_ok_and(|r| r.acquired)));
    let _ = stop.send(());
    server.await.unwrap().unwrap();
}

/// Runs every future at once (on the runtime's tasks), in order of the input.
async fn futures_join_all<F, T>(futures: impl Iterator<Item = F>) -> Vec<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut answers = Vec::with_capacity(handles.len());
    for handle in handles {
        answers.push(handle.await.unwrap());
    }
    answers
}
