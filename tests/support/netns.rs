//! Real network partitions: processes in network namespaces of their own, joined to two
//! bridges by veth pairs. Setting a veth's host end down is a black hole (packets vanish, no
//! reset reaches either side), as a partition looks to TCP. The kernel here has no `netem`
//! qdisc, so delays are out of reach; partitions and heals are not. Needs root (`ip netns`).
//!
//! ```text
//!   test process (clients) ── bridge "c" ── server netns ── bridge "r" ── Redis netns
//!                                                      (test process on "r" too, to look at Redis)
//! ```
//! Cutting a server's `c` link partitions it from its clients; its `r` link, from Redis; a
//! Redis's link, that Redis from every server (one Redlock primary from the rest).

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Runs `ip args…` and panics with its output if it fails.
fn ip(args: &[&str]) {
    let output = Command::new("ip")
        .args(args)
        .output()
        .expect("the `ip` command (iproute2) is needed for partitions");
    assert!(
        output.status.success(),
        "ip {}: {} (network namespaces need root)",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr).trim()
    );
}

/// One bridge (a LAN) in the host's namespace; the test process is on it at `.1`.
struct Bridge {
    name: String,
    /// The first three octets of its /24.
    net: [u8; 3],
}

impl Bridge {
    fn create(name: String, net: [u8; 3]) -> Self {
        let [a, b, c] = net;
        ip(&["link", "add", &name, "type", "bridge"]);
        ip(&["addr", "add", &format!("{a}.{b}.{c}.1/24"), "dev", &name]);
        ip(&["link", "set", &name, "up"]);
        Bridge { name, net }
    }

    fn addr(&self, host: u8) -> Ipv4Addr {
        let [a, b, c] = self.net;
        Ipv4Addr::new(a, b, c, host)
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.name])
            .status();
    }
}

/// A little network of its own per test: two bridges, namespaces hanging off them.
pub struct Net {
    id: String,
    clients: Bridge,
    redis: Bridge,
    next: u8,
}

/// Where a host's link hangs.
#[derive(Clone, Copy)]
pub enum Side {
    /// The clients' bridge.
    Clients,
    /// The bridge to Redis.
    Redis,
}

/// A network namespace with its links.
pub struct Host {
    pub name: String,
    links: Vec<(Side, String, Ipv4Addr)>,
}

impl Net {
    pub fn create() -> Self {
        static COUNT: AtomicU32 = AtomicU32::new(0);
        let n = COUNT.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let id = format!("lh{:x}x{n}", pid & 0xff_ffff);
        // 10.x.y.0/24 pairs, by process and by net: distinct for runs at once.
        let slot = (pid % 2_400) * 16 + (n % 8) * 2;
        let (x, y) = (slot / 256, slot % 256);
        let (x, y) = (x as u8, y as u8);
        Net {
            clients: Bridge::create(format!("{id}c"), [10, 100 + x, y]),
            redis: Bridge::create(format!("{id}r"), [10, 100 + x, y + 1]),
            id,
            next: 2,
        }
    }

    /// The test process's address on `side`.
    pub fn local(&self, side: Side) -> Ipv4Addr {
        self.bridge(side).addr(1)
    }

    fn bridge(&self, side: Side) -> &Bridge {
        match side {
            Side::Clients => &self.clients,
            Side::Redis => &self.redis,
        }
    }

    /// A new namespace with a link on each of `sides`.
    pub fn host(&mut self, sides: &[Side]) -> Host {
        let index = self.next;
        self.next += 1;
        let name = format!("{}n{index}", self.id);
        ip(&["netns", "add", &name]);
        ip(&["netns", "exec", &name, "ip", "link", "set", "lo", "up"]);
        let mut links = Vec::new();
        for (k, side) in sides.iter().enumerate() {
            let bridge = self.bridge(*side);
            let outer = format!("{name}{k}");
            let inner = format!("{name}i{k}");
            let addr = bridge.addr(index);
            ip(&[
                "link", "add", &outer, "type", "veth", "peer", "name", &inner,
            ]);
            ip(&["link", "set", &inner, "netns", &name]);
            ip(&["link", "set", &outer, "master", &bridge.name]);
            ip(&["link", "set", &outer, "up"]);
            let cidr = format!("{addr}/24");
            ip(&[
                "netns", "exec", &name, "ip", "addr", "add", &cidr, "dev", &inner,
            ]);
            ip(&["netns", "exec", &name, "ip", "link", "set", &inner, "up"]);
            links.push((*side, outer, addr));
        }
        Host { name, links }
    }
}

impl Host {
    /// Its address on `side`.
    pub fn addr(&self, side: Side) -> Ipv4Addr {
        self.link(side).2
    }

    fn link(&self, side: Side) -> &(Side, String, Ipv4Addr) {
        self.links
            .iter()
            .find(|(s, _, _)| std::mem::discriminant(s) == std::mem::discriminant(&side))
            .expect("the host has no link on that side")
    }

    /// `program` to be run inside the namespace (`ip netns exec` execs it: same pid).
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name, program]);
        command
    }

    /// Partitions the host from everything on `side`.
    pub fn cut(&self, side: Side) {
        ip(&["link", "set", &self.link(side).1, "down"]);
    }

    pub fn heal(&self, side: Side) {
        ip(&["link", "set", &self.link(side).1, "up"]);
    }

    /// Drops (silently, both ways) every packet between this host and `peer` on the Redis
    /// bridge, while both keep their links: a partition that splits the hosts of one bridge
    /// into sides, each side still whole ([`partition`]).
    fn drop_peer(&self, peer: Ipv4Addr, rule: Rule) {
        let peer = format!("{peer}/32");
        self.iptables(rule, &["INPUT", "-s", &peer, "-j", "DROP"]);
        self.iptables(rule, &["OUTPUT", "-d", &peer, "-j", "DROP"]);
    }

    /// Holds back every connection between two processes of this host to its TCP `port` (they
    /// talk over loopback): the packets vanish, the connections stay open, as with a link
    /// whose packets are lost. Other hosts still reach the port. Undone by
    /// [`Host::release_local_port`].
    pub fn hold_back_local_port(&self, port: u16) {
        self.local_port(port, Rule::Add);
    }

    pub fn release_local_port(&self, port: u16) {
        self.local_port(port, Rule::Delete);
    }

    /// Holds back this host's TCP connections to `peer`'s `port` (a replica's link to its
    /// primary): their packets vanish both ways, the connections stay open, every other
    /// connection of either host flows. Undone by [`Host::release_link_to`].
    pub fn hold_back_link_to(&self, peer: Ipv4Addr, port: u16) {
        self.link_to(peer, port, Rule::Add);
    }

    pub fn release_link_to(&self, peer: Ipv4Addr, port: u16) {
        self.link_to(peer, port, Rule::Delete);
    }

    /// Drops every TCP packet between this host and `peer` but those to and from `peer`'s
    /// `port`: of the processes sharing `peer`'s address (a cluster's nodes), this host reaches
    /// only the one on `port`. Undone by [`Host::rejoin_all_of`].
    pub fn only_reach_port_of(&self, peer: Ipv4Addr, port: u16) {
        self.all_but_port_of(peer, port, Rule::Add);
    }

    pub fn rejoin_all_of(&self, peer: Ipv4Addr, port: u16) {
        self.all_but_port_of(peer, port, Rule::Delete);
    }

    fn all_but_port_of(&self, peer: Ipv4Addr, port: u16, rule: Rule) {
        let (peer, port) = (format!("{peer}/32"), port.to_string());
        let inbound = [
            "INPUT", "-s", &peer, "-p", "tcp", "!", "--sport", &port, "-j", "DROP",
        ];
        let outbound = [
            "OUTPUT", "-d", &peer, "-p", "tcp", "!", "--dport", &port, "-j", "DROP",
        ];
        self.iptables(rule, &inbound);
        self.iptables(rule, &outbound);
    }

    /// Cuts one of this host's processes off from the others on loopback (a cluster's node from
    /// the other nodes): every packet to or from its `ports` (whoever connected) or its own
    /// `source` address (the connections it opened) is dropped on `lo`, while hosts on the
    /// bridge still reach it. Undone by [`Host::rejoin_local_process`].
    pub fn cut_off_local_process(&self, ports: &[u16], source: Ipv4Addr) {
        self.local_process(ports, source, Rule::Add);
    }

    pub fn rejoin_local_process(&self, ports: &[u16], source: Ipv4Addr) {
        self.local_process(ports, source, Rule::Delete);
    }

    fn local_process(&self, ports: &[u16], source: Ipv4Addr, rule: Rule) {
        for port in ports {
            self.local_port(*port, rule);
        }
        let source = format!("{source}/32");
        for way in ["-s", "-d"] {
            self.iptables(rule, &["INPUT", "-i", "lo", way, &source, "-j", "DROP"]);
        }
    }

    fn link_to(&self, peer: Ipv4Addr, port: u16, rule: Rule) {
        let (peer, port) = (format!("{peer}/32"), port.to_string());
        let tcp = ["-p", "tcp"];
        let inbound = [
            "INPUT", "-s", &peer, tcp[0], tcp[1], "--sport", &port, "-j", "DROP",
        ];
        let outbound = [
            "OUTPUT", "-d", &peer, tcp[0], tcp[1], "--dport", &port, "-j", "DROP",
        ];
        self.iptables(rule, &inbound);
        self.iptables(rule, &outbound);
    }

    fn local_port(&self, port: u16, rule: Rule) {
        let port = port.to_string();
        for way in ["--dport", "--sport"] {
            let spec = ["INPUT", "-i", "lo", "-p", "tcp", way, &port, "-j", "DROP"];
            self.iptables(rule, &spec);
        }
    }

    /// `iptables -A|-D rule…` in this namespace (Debian's `iptables`).
    fn iptables(&self, rule: Rule, spec: &[&str]) {
        let verb = match rule {
            Rule::Add => "-A",
            Rule::Delete => "-D",
        };
        let mut args = vec!["netns", "exec", &self.name, "iptables", verb];
        args.extend_from_slice(spec);
        ip(&args);
    }
}

#[derive(Clone, Copy)]
enum Rule {
    Add,
    Delete,
}

/// Splits the Redis bridge in two: no packet passes between a host of `a` and one of `b`
/// (dropped by `iptables` in each, silently: no reset, no unreachable), while the hosts of a
/// side still reach each other and the test process. Undone by [`rejoin`].
pub fn partition(a: &[&Host], b: &[&Host]) {
    split(a, b, Rule::Add);
}

pub fn rejoin(a: &[&Host], b: &[&Host]) {
    split(a, b, Rule::Delete);
}

fn split(a: &[&Host], b: &[&Host], rule: Rule) {
    for (one, other) in a.iter().flat_map(|x| b.iter().map(move |y| (*x, *y))) {
        one.drop_peer(other.addr(Side::Redis), rule);
        other.drop_peer(one.addr(Side::Redis), rule);
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // Deleting the namespace deletes the veth pairs with it.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}
