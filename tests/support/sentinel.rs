//! A primary, a replica and three Sentinels of the test's own, on free loopback ports; every
//! process killed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, redis_cli as cli, until_redis_cli as until};

/// The name the Sentinels monitor.
pub const SERVICE: &str = "leasehold";

pub struct RedisSentinel {
    pub primary: u16,
    pub replica: u16,
    sentinels: Vec<u16>,
    children: Vec<(u16, Child)>,
    dir: PathBuf,
}

impl RedisSentinel {
    pub fn start() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "leasehold-test-sentinel-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).expect("dir");
        let (primary, replica) = (free_port(), free_port());
        let mut children = vec![
            (primary, redis(&dir, primary, &[])),
            (
                replica,
                redis(
                    &dir,
                    replica,
                    &["--replicaof", "127.0.0.1", &primary.to_string()],
                ),
            ),
        ];
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            let port = free_port();
            let config = dir.join(format!("sentinel-{port}.conf"));
            let loopback = [127, 0, 0, 1].into();
            write_config(&config, port, loopback, &dir, (loopback, primary));
            let child = spawn(Command::new("redis-server"), &config);
            children.push((port, child));
            sentinels.push(port);
        }
        let setup = RedisSentinel {
            primary,
            replica,
            sentinels,
            children,
            dir,
        };
        until(replica, &["info", "replication"], |out| {
            out.contains("master_link_status:up")
        });
        for sentinel in &setup.sentinels {
            until(*sentinel, &["sentinel", "replicas", SERVICE], |out| {
                out.contains(&replica.to_string())
            });
            until(*sentinel, &["sentinel", "sentinels", SERVICE], |out| {
                out.matches("127.0.0.1").count() >= 2
            });
        }
        setup
    }

    /// `redis-sentinel://` with every Sentinel and the service name, as operators write it.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self
            .sentinels
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        format!("redis-sentinel://{}/{SERVICE}", nodes.join(","))
    }

    /// The port the Sentinels name as the primary now.
    pub fn current_primary(&self) -> Option<u16> {
        let answer = cli(
            self.sentinels[0],
            &["sentinel", "get-master-addr-by-name", SERVICE],
        );
        answer
            .lines()
            .nth(1)
            .and_then(|port| port.trim().parse().ok())
    }

    /// Waits (at most 30 s) until the Sentinels have promoted the replica.
    pub fn until_promoted(&self) {
        let started = Instant::now();
        while self.current_primary() != Some(self.replica)
            || !cli(self.replica, &["role"]).starts_with("master")
        {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the Sentinels did not promote the replica"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn kill(&mut self, port: u16) {
        if let Some((_, child)) = self.children.iter_mut().find(|(p, _)| *p == port) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends `signal` (STOP, CONT) to the node on `port`.
    pub fn signal(&self, port: u16, signal: &str) {
        if let Some((_, child)) = self.children.iter().find(|(p, _)| *p == port) {
            super::signal(child.id(), signal);
        }
    }

    /// Closes the primary's connections to its replicas: writes from now on reach no replica
    /// until one reconnects.
    pub fn cut_replication(&self) {
        cli(self.primary, &["client", "kill", "type", "replica"]);
    }

    /// Whether the node on `port` holds `key`.
    pub fn holds(&self, port: u16, key: &str) -> bool {
        cli(port, &["exists", key]) == "1"
    }
}

/// A Sentinel's configuration: on `ip:port`, watching `primary` as [`SERVICE`] (quorum 2, down
/// after 1 s). Off loopback (in a namespace) it answers only with protected mode off.
fn write_config(
    path: &std::path::Path,
    port: u16,
    ip: std::net::IpAddr,
    dir: &std::path::Path,
    primary: (std::net::IpAddr, u16),
) {
    let protected = if ip.is_loopback() { "yes" } else { "no" };
    let (primary_ip, primary_port) = primary;
    std::fs::write(
        path,
        format!(
            "port {port}\nbind {ip}\nprotected-mode {protected}\ndir {}\n\
             sentinel monitor {SERVICE} {primary_ip} {primary_port} 2\n\
             sentinel down-after-milliseconds {SERVICE} 1000\n\
             sentinel failover-timeout {SERVICE} 5000\n",
            dir.display()
        ),
    )
    .expect("sentinel config");
}

/// A Sentinel from `config`, run by `redis_server` (`redis-server`, here or in a namespace).
fn spawn(mut redis_server: Command, config: &std::path::Path) -> Child {
    redis_server
        .arg(config)
        .arg("--sentinel")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server --sentinel")
}

fn redis(dir: &std::path::Path, port: u16, extra: &[&str]) -> Child {
    Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server")
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        for (port, child) in &mut self.children {
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .stderr(Stdio::null())
                .status();
            let _ = child.kill();
            let _ = child.wait();
            let _ = port;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Three Sentinels in network namespace `host` (on its Redis side), for chaos runs whose
/// servers and Redis live in namespaces of their own (tests/support/chaos.rs); killed on drop.
pub struct SentinelsIn {
    ip: std::net::IpAddr,
    ports: Vec<u16>,
    children: Vec<Child>,
    dir: PathBuf,
}

impl SentinelsIn {
    /// Sentinels watching `primary`, ready once each knows `replica` and the two others.
    pub fn start(
        host: &super::netns::Host,
        primary: &super::RedisServer,
        replica: &super::RedisServer,
    ) -> Self {
        let ip = std::net::IpAddr::from(host.addr(super::netns::Side::Redis));
        let dir = std::env::temp_dir().join(format!("leasehold-test-sentinels-{}", host.name));
        std::fs::create_dir_all(&dir).expect("dir");
        let mut sentinels = SentinelsIn {
            ip,
            ports: Vec::new(),
            children: Vec::new(),
            dir,
        };
        for port in [26379, 26380, 26381] {
            let config = sentinels.dir.join(format!("sentinel-{port}.conf"));
            let watched = (primary.ip(), primary.port());
            write_config(&config, port, ip, &sentinels.dir, watched);
            let child = spawn(host.command("redis-server"), &config);
            sentinels.children.push(child);
            sentinels.ports.push(port);
        }
        let replica = replica.ip().to_string();
        for &port in &sentinels.ports {
            let started = Instant::now();
            let ask = |args: &[&str]| super::redis_cli_at(ip, port, args);
            while !ask(&["sentinel", "replicas", SERVICE]).contains(&replica)
                || ask(&["sentinel", "sentinels", SERVICE])
                    .matches(&ip.to_string())
                    .count()
                    < 2
            {
                assert!(
                    started.elapsed() < Duration::from_secs(20),
                    "Sentinel {ip}:{port} never saw the replica and the other Sentinels"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        sentinels
    }

    /// `redis-sentinel://` with every Sentinel and the service name.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self
            .ports
            .iter()
            .map(|port| format!("{}:{port}", self.ip))
            .collect();
        format!("redis-sentinel://{}/{SERVICE}", nodes.join(","))
    }

    /// `ip` of the node the first Sentinel names as the primary now.
    pub fn current_primary(&self) -> Option<String> {
        let answer = super::redis_cli_at(
            self.ip,
            self.ports[0],
            &["sentinel", "get-master-addr-by-name", SERVICE],
        );
        answer.lines().next().map(|ip| ip.trim().to_owned())
    }
}

impl Drop for SentinelsIn {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
