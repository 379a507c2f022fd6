//! gRPC health checking (`grpc.health.v1.Health`) that means something: SERVING while Redis
//! answers (a majority of Redlock's primaries), NOT_SERVING when it does not or when its
//! `maxmemory-policy` may evict held locks, and NOT_SERVING from the moment shutdown begins, so a
//! load balancer or a Kubernetes probe stops sending new work to a server that cannot hold it.

use std::time::Duration;

use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;
use tracing::{info, warn};

use crate::pb::election_service_server::ElectionServiceServer;
use crate::pb::lock_service_server::LockServiceServer;
use crate::pb::session_service_server::SessionServiceServer;
use crate::store::Store;

/// How often Redis is asked. With the command timeout (2 s by default) a Redis that goes away
/// shows as NOT_SERVING within about three seconds.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Keeps the health status of the server ("") and of both services in line with Redis.
pub struct HealthMonitor {
    reporter: HealthReporter,
    store: Store,
}

impl HealthMonitor {
    /// Reports SERVING (the store connected moments ago) before the server takes its first
    /// call, so no probe ever finds the services unknown.
    pub async fn start(reporter: HealthReporter, store: Store) -> Self {
        let monitor = HealthMonitor { reporter, store };
        monitor.report(ServingStatus::Serving).await;
        // The store just connected: Redis answered.
        let nodes = monitor.store.nodes().all().len();
        monitor
            .store
            .connection()
            .metrics()
            .redis_health(true, nodes, nodes);
        monitor
    }

    /// Runs until shutdown begins, then reports NOT_SERVING for good.
    pub async fn run(self) {
        let tasks = self.store.connection().tasks().clone();
        let mut serving = Some(true);
        let mut ticks = tokio::time::interval(CHECK_INTERVAL);
        loop {
            tokio::select! {
                () = tasks.stopping() => break,
                _ = ticks.tick() => {}
            }
            let health = tokio::select! {
                () = tasks.stopping() => break,
                health = self.store.health() => health,
            };
            let metrics = self.store.connection().metrics();
            metrics.redis_health(health.reachable, health.answered, health.nodes);
            if serving != Some(health.serving) {
                match health.serving {
                    true => info!("Redis answers and cannot evict held locks: health SERVING"),
                    // The node and its policy were logged (error) when it was read.
                    false if health.may_evict > 0 => warn!(
                        may_evict = health.may_evict,
                        "Redis may evict held locks (maxmemory-policy): health NOT_SERVING, no new leases"
                    ),
                    false => warn!("Redis does not answer: health NOT_SERVING"),
                }
                self.report(status(health.serving)).await;
                serving = Some(health.serving);
            }
        }
        self.report(ServingStatus::NotServing).await;
    }

    async fn report(&self, status: ServingStatus) {
        let reporter = &self.reporter;
        reporter.set_service_status("", status).await;
        reporter
            .set_service_status(service_name::<LockServiceServer<()>>(), status)
            .await;
        reporter
            .set_service_status(service_name::<ElectionServiceServer<()>>(), status)
            .await;
        reporter
            .set_service_status(service_name::<SessionServiceServer<()>>(), status)
            .await;
    }
}

fn status(serving: bool) -> ServingStatus {
    match serving {
        true => ServingStatus::Serving,
        false => ServingStatus::NotServing,
    }
}

fn service_name<S: tonic::server::NamedService>() -> &'static str {
    S::NAME
}
