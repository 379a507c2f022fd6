//! Leasehold beside the lock services a user could pick instead (`cargo bench --bench peers`).
//!
//! One client, one lock, acquire + release one after another, every path in the same run:
//! - direct Redis with fred (`SET NX PX` + the compare-and-delete script): the baseline;
//! - Leasehold's `Lease` stream and unary `Acquire`/`Release` (an in-process server);
//! - `rslock` (the Redlock crate a Rust user would pick) on the same single Redis;
//! - etcd's own lock API (`v3lockpb.Lock/Lock` and `Unlock` with one lease granted up front, as
//!   etcd's `concurrency.Mutex` does within a session), when an `etcd` binary is installed
//!   (`apt-get install -y etcd-server`). Its data directory is on tmpfs when `/dev/shm` exists:
//!   our Redis keeps nothing on disk either, so neither pays for fsync.
//!
//! The peers live here, in a bench binary, so the server never links them.

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fred::prelude::{Builder, ClientLike, Config};
use http::uri::PathAndQuery;
// The same measured paths and tables as `leasehold bench`, which keeps them out of the library.
#[allow(dead_code)]
#[path = "../src/cli/bench/figures.rs"]
mod figures;
#[allow(dead_code)]
#[path = "../src/cli/bench/paths.rs"]
mod paths;

use figures::{Figures, print_uncontended};
use leasehold_client::Client;
use paths::{BenchError, direct_redis, lease_stream, sequential, unary, unexpected};
use support::{RedisServer, TestServer, free_port};
use tonic::transport::Channel;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BenchError> {
    let quick = std::env::args().any(|a| a == "--quick");
    let operations = if quick { 200 } else { 5_000 };
    let redis_server = RedisServer::start();
    let server = TestServer::start(&redis_server).await;
    let redis = Builder::from_config(Config::from_url(&redis_server.url())?).build()?;
    redis.init().await?;
    let client = Client::connect(server.url()).await?;
    let etcd = Etcd::start();

    // Warm every path once so connection set-up is not measured.
    direct_redis(&redis, 50).await?;
    lease_stream(&client, 50).await?;
    let rslock = rslock::LockManager::new(vec![redis_server.url()]);
    rslock_path(&rslock, 50).await?;
    let mut etcd_lock = match &etcd {
        Some(etcd) => Some(EtcdLock::connect(etcd.port).await?),
        None => None,
    };
    if let Some(lock) = etcd_lock.as_mut() {
        etcd_path(lock, 50).await?;
    }

    let mut rows = vec![
        direct_redis(&redis, operations).await?,
        lease_stream(&client, operations).await?,
        unary(&client, operations).await?,
        rslock_path(&rslock, operations).await?,
    ];
    if let Some(lock) = etcd_lock.as_mut() {
        rows.push(etcd_path(lock, operations).await?);
    }

    print_uncontended(
        "Uncontended acquire + release, one client, one lock",
        &rows.iter().collect::<Vec<_>>(),
    );
    if etcd.is_none() {
        println!("\n(etcd not measured: no `etcd` binary; apt-get install -y etcd-server)");
    }
    server.stop().await;
    Ok(())
}

async fn rslock_path(
    manager: &rslock::LockManager,
    operations: usize,
) -> Result<Figures, BenchError> {
    let resource = format!("bench-rslock-{}", std::process::id());
    let resource = &resource;
    sequential(
        "rslock (Redlock, 1 Redis)",
        operations,
        move || async move {
            let lock = manager
                .lock(resource.as_bytes(), Duration::from_secs(30))
                .await
                .map_err(|e| unexpected(format!("rslock lock: {e:?}")))?;
            manager.unlock(&lock).await;
            Ok(())
        },
    )
    .await
}

async fn etcd_path(lock: &mut EtcdLock, operations: usize) -> Result<Figures, BenchError> {
    let lock = std::sync::Arc::new(tokio::sync::Mutex::new(lock));
    sequential("etcd v3lock", operations, || {
        let lock = lock.clone();
        async move {
            let mut lock = lock.lock().await;
            let key = lock.lock().await?;
            lock.unlock(key).await
        }
    })
    .await
}

/// An etcd server of the bench's own on free loopback ports; killed on drop.
struct Etcd {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Etcd {
    /// `None` when no `etcd` binary is installed.
    fn start() -> Option<Etcd> {
        let (port, peer_port) = (free_port(), free_port());
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("leasehold-bench-etcd-{}", std::process::id()));
        let client_url = format!("http://127.0.0.1:{port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let child = Command::new("etcd")
            .arg("--data-dir")
            .arg(&dir)
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("default={peer_url}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        Some(Etcd { child, port, dir })
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The few etcd v3 messages the bench needs, written by hand from etcd's `rpc.proto` and
/// `v3lock.proto` (field numbers as there) rather than vendoring etcd's protos.
mod etcd_pb {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LeaseGrantRequest {
        #[prost(int64, tag = "1")]
        pub ttl: i64,
        #[prost(int64, tag = "2")]
        pub id: i64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LeaseGrantResponse {
        #[prost(int64, tag = "2")]
        pub id: i64,
        #[prost(string, tag = "4")]
        pub error: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LockRequest {
        #[prost(bytes = "vec", tag = "1")]
        pub name: Vec<u8>,
        #[prost(int64, tag = "2")]
        pub lease: i64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LockResponse {
        #[prost(bytes = "vec", tag = "2")]
        pub key: Vec<u8>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct UnlockRequest {
        #[prost(bytes = "vec", tag = "1")]
        pub key: Vec<u8>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct UnlockResponse {}
}

/// etcd's lock API over gRPC, with one lease (30 s TTL) granted when connecting.
struct EtcdLock {
    grpc: tonic::client::Grpc<Channel>,
    lease: i64,
    name: Vec<u8>,
}

impl EtcdLock {
    async fn connect(port: u16) -> Result<EtcdLock, BenchError> {
        let endpoint = Channel::from_shared(format!("http://127.0.0.1:{port}"))
            .map_err(|e| unexpected(e.to_string()))?;
        // etcd takes a moment to elect itself; retry the grant until it answers.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let attempt = async {
                let channel = endpoint
                    .connect()
                    .await
                    .map_err(|e| unexpected(e.to_string()))?;
                let mut grpc = tonic::client::Grpc::new(channel);
                let granted: etcd_pb::LeaseGrantResponse = call(
                    &mut grpc,
                    "/etcdserverpb.Lease/LeaseGrant",
                    etcd_pb::LeaseGrantRequest { ttl: 30, id: 0 },
                )
                .await?;
                if !granted.error.is_empty() {
                    return Err(unexpected(format!("etcd lease grant: {}", granted.error)));
                }
                Ok(EtcdLock {
                    grpc,
                    lease: granted.id,
                    name: format!("bench-etcd-{}", std::process::id()).into_bytes(),
                })
            };
            match attempt.await {
                Ok(lock) => return Ok(lock),
                Err(e) if tokio::time::Instant::now() > deadline => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    async fn lock(&mut self) -> Result<Vec<u8>, BenchError> {
        let request = etcd_pb::LockRequest {
            name: self.name.clone(),
            lease: self.lease,
        };
        let locked: etcd_pb::LockResponse =
            call(&mut self.grpc, "/v3lockpb.Lock/Lock", request).await?;
        Ok(locked.key)
    }

    async fn unlock(&mut self, key: Vec<u8>) -> Result<(), BenchError> {
        let _: etcd_pb::UnlockResponse = call(
            &mut self.grpc,
            "/v3lockpb.Lock/Unlock",
            etcd_pb::UnlockRequest { key },
        )
        .await?;
        Ok(())
    }
}

async fn call<Req, Resp>(
    grpc: &mut tonic::client::Grpc<Channel>,
    path: &'static str,
    request: Req,
) -> Result<Resp, BenchError>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    grpc.ready()
        .await
        .map_err(|e| unexpected(format!("etcd not ready: {e}")))?;
    let response = grpc
        .unary(
            tonic::Request::new(request),
            PathAndQuery::from_static(path),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .map_err(|status| unexpected(format!("etcd {path}: {}", status.message())))?;
    Ok(response.into_inner())
}
