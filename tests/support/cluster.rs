//! A Redis Cluster of the test's own: primaries and replicas on free loopback ports (or on fixed
//! ports in a network namespace of its own, for chaos runs), formed by `redis-cli --cluster
//! create`, every process killed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{command_in, free_port, redis_cli_at};

pub struct RedisCluster {
    nodes: Vec<(u16, Child)>,
    dir: PathBuf,
    /// Where every node listens: loopback, or its namespace's address.
    ip: std::net::IpAddr,
}

impl RedisCluster {
    /// `primaries` primaries with `replicas` replicas each; returns once every node says the
    /// cluster is ok.
    pub fn start(primaries: usize, replicas: usize) -> Self {
        let ports = (0..primaries * (1 + replicas))
            .map(|_| (free_port(), free_port()))
            .collect();
        Self::start_at(None, [127, 0, 0, 1].into(), ports, replicas)
    }

    /// As [`RedisCluster::start`], every node in network namespace `host` (its own port space:
    /// ports from 7000, bus ports from 17000), on its link to the Redis bridge.
    pub fn start_in(host: &super::netns::Host, primaries: usize, replicas: usize) -> Self {
        let ports = (0..primaries * (1 + replicas))
            .map(|i| (7000 + i as u16, 7000 + BUS_OFFSET + i as u16))
            .collect();
        let ip = host.addr(super::netns::Side::Redis).into();
        Self::start_at(Some(&host.name), ip, ports, replicas)
    }

    /// Nodes on `(port, bus port)` each.
    fn start_at(
        ns: Option<&str>,
        ip: std::net::IpAddr,
        ports: Vec<(u16, u16)>,
        replicas: usize,
    ) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "leasehold-test-cluster-{}-{}",
            std::process::id(),
            free_port()
        ));
        let mut nodes = Vec::new();
        for (port, bus) in ports {
            nodes.push(Self::start_node(ns, ip, (port, bus), &dir));
        }
        let cluster = RedisCluster { nodes, dir, ip };
        let addresses: Vec<String> = cluster
            .nodes
            .iter()
            .map(|(port, _)| format!("{ip}:{port}"))
            .collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli");
        assert!(created.success(), "redis-cli --cluster create failed");
        for (port, _) in &cluster.nodes {
            cluster.until(*port, &["cluster", "info"], |out| {
                out.contains("cluster_state:ok")
            });
        }
        // A replica that has not finished its first sync refuses to fail over (its data is
        // "too old"): wait for every replication link.
        for (port, _) in &cluster.nodes {
            cluster.until(*port, &["info", "replication"], |out| {
                out.contains("role:master") || out.contains("master_link_status:up")
            });
        }
        cluster
    }

    /// One node on `(port, bus port)`, answering PING. On loopback, a node that exits at once
    /// (a port chosen free, then taken by another test or an outgoing connection before Redis
    /// bound it) is started again on other free ports, as [`super::RedisServer`] does; in a
    /// namespace its ports are its own and a failure is final.
    fn start_node(
        ns: Option<&str>,
        ip: std::net::IpAddr,
        (mut port, mut bus): (u16, u16),
        dir: &std::path::Path,
    ) -> (u16, Child) {
        for _ in 0..5 {
            let node_dir = dir.join(port.to_string());
            std::fs::create_dir_all(&node_dir).expect("node dir");
            let mut child = command_in(ns, "redis-server")
                .args(["--port", &port.to_string(), "--bind", &ip.to_string()])
                .args(["--protected-mode", if ns.is_some() { "no" } else { "yes" }])
                .args([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                ])
                .args(["--cluster-node-timeout", "2000"])
                // A bus port of its own: the default (port + 10,000) is past 65,535 for half
                // the ephemeral range, and may be another test's port.
                .args(["--cluster-port", &bus.to_string()])
                .args(own_source(ns, ip, port))
                .args(["--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(&node_dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server");
            let deadline = Instant::now() + Duration::from_secs(20);
            let exited = loop {
                if redis_cli_at(ip, port, &["ping"]) == "PONG" {
                    return (port, child);
                }
                if let Ok(Some(_)) = child.try_wait() {
                    break true;
                }
                if Instant::now() > deadline {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            let _ = child.kill();
            let _ = child.wait();
            if ns.is_some() || !exited {
                break;
            }
            (port, bus) = (free_port(), free_port());
        }
        panic!("redis cluster node {port} (bus {bus}) never answered PING");
    }

    /// `redis-cli` against the node on `port`, its output trimmed.
    fn cli(&self, port: u16, args: &[&str]) -> String {
        redis_cli_at(self.ip, port, args)
    }

    /// Runs `redis-cli` against the node on `port` until `done` accepts its output (at most
    /// 20 s).
    fn until(&self, port: u16, args: &[&str], done: impl Fn(&str) -> bool) {
        let started = Instant::now();
        while !done(&self.cli(port, args)) {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "redis node {port} never answered {args:?} as expected"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `redis-cluster://` with every node, as operators write it.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|(port, _)| format!("{}:{port}", self.ip))
            .collect();
        format!("redis-cluster://{}", nodes.join(","))
    }

    /// A direct cluster client, to look at keys behind the server's back.
    pub async fn client(&self) -> fred::prelude::Client {
        use fred::prelude::*;
        let (first, others) = self.nodes.split_first().expect("nodes");
        let others: Vec<String> = others
            .iter()
            .map(|(port, _)| format!("node={}:{port}", self.ip))
            .collect();
        let url = format!(
            "redis-cluster://{}:{}?{}",
            self.ip,
            first.0,
            others.join("&")
        );
        // Bounded calls, and reconnects: it must outlive a failover without hanging a test.
        let client = Builder::from_config(Config::from_url(&url).expect("url"))
            .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(2))
            .set_policy(ReconnectPolicy::new_constant(0, 100))
            .build()
            .expect("client");
        client.init().await.expect("connect to the test cluster");
        client
    }

    /// Every node's port, primaries and replicas.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|(port, _)| *port).collect()
    }

    /// The ports of the nodes that are primaries now.
    pub fn primaries(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .map(|(port, _)| *port)
            .filter(|port| self.cli(*port, &["role"]).starts_with("master"))
            .collect()
    }

    /// The primaries once there are `count` of them (at most 20 s): on a loaded machine a node
    /// may answer `ROLE` late, or a replica take over for a moment, while the cluster settles.
    pub fn primaries_settled(&self, count: usize) -> Vec<u16> {
        let started = Instant::now();
        loop {
            let primaries = self.primaries();
            if primaries.len() == count {
                return primaries;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "{} primaries, not {count}: {primaries:?}",
                primaries.len()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the node on `port` holds `key` (not a replica's copy: ask primaries).
    pub fn holds(&self, port: u16, key: &str) -> bool {
        self.cli(port, &["exists", key]) == "1"
    }

    /// Sends `signal` (STOP, CONT) to the node on `port`.
    pub fn signal(&self, port: u16, signal: &str) {
        if let Some((_, child)) = self.nodes.iter().find(|(p, _)| *p == port) {
            super::signal(child.id(), signal);
        }
    }

    /// Kills the node on `port` (SIGKILL).
    pub fn kill(&mut self, port: u16) {
        if let Some((_, child)) = self.nodes.iter_mut().find(|(p, _)| *p == port) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits (at most 30 s) until a replica has taken over from a killed primary: every live
    /// node says the cluster is ok and `primaries` live primaries answer.
    pub fn until_failed_over(&self, primaries: usize) {
        let started = Instant::now();
        loop {
            let live: Vec<u16> = self
                .nodes
                .iter()
                .map(|(port, _)| *port)
                .filter(|port| self.cli(*port, &["ping"]) == "PONG")
                .collect();
            let ok = live.iter().all(|port| {
                self.cli(*port, &["cluster", "info"])
                    .contains("cluster_state:ok")
            });
            let masters = live
                .iter()
                .filter(|port| self.cli(**port, &["role"]).starts_with("master"))
                .count();
            if ok && masters == primaries {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the cluster did not fail over"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The primary serving `key`'s slot, and the slot.
    pub fn slot_of(&self, key: &str) -> (u16, u16) {
        let slot: u16 = self
            .cli(self.nodes[0].0, &["cluster", "keyslot", key])
            .parse()
            .expect("CLUSTER KEYSLOT");
        let owner = self
            .primaries()
            .into_iter()
            .find(|port| self.serves(*port, slot))
            .expect("a primary serves the slot");
        (owner, slot)
    }

    /// Whether the primary on `port` serves `slot`, by its own line of `CLUSTER NODES`.
    fn serves(&self, port: u16, slot: u16) -> bool {
        self.cli(port, &["cluster", "nodes"])
            .lines()
            .find(|line| line.contains("myself"))
            .is_some_and(|line| {
                line.split_whitespace()
                    .skip(8)
                    .any(|range| covers(range, slot))
            })
    }

    /// Moves `slot` from the primary on `from` to the one on `to` while clients use it, as
    /// `redis-cli --cluster reshard` does: IMPORTING / MIGRATING, `MIGRATE` of its keys a batch
    /// at a time, then the new owner announced to every primary.
    pub fn migrate_slot(&self, slot: u16, from: u16, to: u16) {
        self.start_migration(slot, from, to);
        self.finish_migration(slot, to);
    }

    /// The first half of [`RedisCluster::migrate_slot`]: `slot` IMPORTING on `to`, MIGRATING on
    /// `from`, and every key of it moved to `to`. `from` still owns the slot and answers `ASK`
    /// for its keys until [`RedisCluster::finish_migration`].
    pub fn start_migration(&self, slot: u16, from: u16, to: u16) {
        let slot = slot.to_string();
        let from_id = self.cli(from, &["cluster", "myid"]);
        let to_id = self.cli(to, &["cluster", "myid"]);
        assert_eq!(
            self.cli(to, &["cluster", "setslot", &slot, "importing", &from_id]),
            "OK"
        );
        assert_eq!(
            self.cli(from, &["cluster", "setslot", &slot, "migrating", &to_id]),
            "OK"
        );
        loop {
            let keys = self.cli(from, &["cluster", "getkeysinslot", &slot, "100"]);
            let keys: Vec<&str> = keys.lines().filter(|key| !key.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let to_port = to.to_string();
            let ip = self.ip.to_string();
            let mut args = vec!["migrate", &ip, &to_port, "", "0", "5000", "keys"];
            args.extend(keys);
            let answer = self.cli(from, &args);
            assert!(answer == "OK" || answer == "NOKEY", "MIGRATE: {answer}");
        }
    }

    /// The second half of [`RedisCluster::migrate_slot`]: `to` announced as `slot`'s owner to
    /// every primary.
    pub fn finish_migration(&self, slot: u16, to: u16) {
        let slot = slot.to_string();
        let to_id = self.cli(to, &["cluster", "myid"]);
        for port in self.primaries() {
            assert_eq!(
                self.cli(port, &["cluster", "setslot", &slot, "node", &to_id]),
                "OK"
            );
        }
    }

    /// The port of the replica of the primary on `port` (its first, by `INFO replication`).
    pub fn replica_of(&self, port: u16) -> u16 {
        let info = self.cli(port, &["info", "replication"]);
        info.lines()
            .find(|line| line.starts_with("slave0:"))
            .and_then(|line| line.split(',').find_map(|part| part.strip_prefix("port=")))
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("the primary on {port} has no replica: {info}"))
    }

    /// The replica on `port` takes its primary's slots over at once, asking no one (`CLUSTER
    /// FAILOVER TAKEOVER`: what an operator does when the primary is gone and the cluster is
    /// not to wait for its node timeout); returns once it says it is a primary (at most 20 s).
    pub fn take_over(&self, port: u16) {
        let answer = self.cli(port, &["cluster", "failover", "takeover"]);
        assert_eq!(answer, "OK", "CLUSTER FAILOVER TAKEOVER on {port}");
        self.until(port, &["role"], |out| out.starts_with("master"));
    }

    /// Waits (at most 20 s) until the node on `port` says it is a primary: a replica promoted
    /// by the cluster's own failure detection.
    pub fn until_primary(&self, port: u16) {
        self.until(port, &["role"], |out| out.starts_with("master"));
    }

    /// The node on `port`'s own addresses in its namespace, by which a partition can tell its
    /// packets from the other nodes' on the loopback they share.
    pub fn node_addresses(&self, port: u16) -> NodeAddresses {
        assert!(
            !self.ip.is_loopback(),
            "a cluster in a namespace of its own"
        );
        NodeAddresses {
            ports: [port, port + BUS_OFFSET],
            source: source_of(port),
        }
    }

    /// `redis-cli` against the node on `port`, for what the helpers here do not cover.
    pub fn run(&self, port: u16, args: &[&str]) -> String {
        self.cli(port, args)
    }

    /// How many keys the node on `port` holds.
    pub fn keys_on(&self, port: u16) -> usize {
        self.cli(port, &["dbsize"]).parse().unwrap_or(0)
    }
}

/// Whether a `CLUSTER NODES` slot field (`5461-10922` or `42`) covers `slot`.
/// Where a node in a namespace has its bus port: [`RedisCluster::start_in`]'s layout.
const BUS_OFFSET: u16 = 10_000;

/// A node's port and bus port, and the source address of every connection it opens (to the
/// other nodes' bus ports, to its primary).
pub struct NodeAddresses {
    pub ports: [u16; 2],
    pub source: std::net::Ipv4Addr,
}

/// The source address of every connection the node on `port` opens, in a namespace: one of its
/// own on loopback (`127.1.x.y`). The nodes share one address and loopback, and a node's links
/// to the others' bus ports come from ports nothing else tells apart; with a source address
/// each, a partition can drop one node's links by address.
fn source_of(port: u16) -> std::net::Ipv4Addr {
    let [high, low] = port.to_be_bytes();
    std::net::Ipv4Addr::new(127, 1, high, low)
}

/// In a namespace: a node's connections open from its own [`source_of`] address, and it
/// announces its namespace's address (not that source, which the other nodes would otherwise
/// take for its address and hand to clients). Nothing on plain loopback.
fn own_source(ns: Option<&str>, ip: std::net::IpAddr, port: u16) -> Vec<String> {
    let Some(_) = ns else { return Vec::new() };
    let source = source_of(port).to_string();
    let announce = ip.to_string();
    [
        "--bind-source-addr",
        &source,
        "--cluster-announce-ip",
        &announce,
    ]
    .map(str::to_owned)
    .to_vec()
}

fn covers(range: &str, slot: u16) -> bool {
    let (low, high) = range.split_once('-').unwrap_or((range, range));
    match (low.parse::<u16>(), high.parse::<u16>()) {
        (Ok(low), Ok(high)) => (low..=high).contains(&slot),
        _ => false,
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for (_, child) in &mut self.nodes {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
