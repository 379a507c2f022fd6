//! etcd for the peers bench (`benches/peers.rs`): an etcd server of the bench's own, in its
//! own process, and its lock API (`v3lockpb.Lock/Lock` + `Unlock`) over gRPC from the same
//! tonic stack Leasehold's Rust client uses, so the two are reached alike.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use http::uri::PathAndQuery;
use tonic::transport::Channel;

use crate::paths::{BenchError, unexpected};
use crate::support::free_port;

/// An etcd server of the bench's own on free loopback ports; killed on drop.
pub struct Etcd {
    child: Child,
    pub port: u16,
    dir: PathBuf,
}

impl Etcd {
    /// `None` when no `etcd` binary is installed.
    pub fn start() -> Option<Etcd> {
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
pub struct EtcdLock {
    grpc: tonic::client::Grpc<Channel>,
    lease: i64,
    name: Vec<u8>,
}

impl EtcdLock {
    pub async fn connect(port: u16, name: &str) -> Result<EtcdLock, BenchError> {
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
                    name: name.as_bytes().to_vec(),
                })
            };
            match attempt.await {
                Ok(lock) => return Ok(lock),
                Err(e) if tokio::time::Instant::now() > deadline => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    pub async fn lock(&mut self) -> Result<Vec<u8>, BenchError> {
        let request = etcd_pb::LockRequest {
            name: self.name.clone(),
            lease: self.lease,
        };
        let locked: etcd_pb::LockResponse =
            call(&mut self.grpc, "/v3lockpb.Lock/Lock", request).await?;
        Ok(locked.key)
    }

    pub async fn unlock(&mut self, key: Vec<u8>) -> Result<(), BenchError> {
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
