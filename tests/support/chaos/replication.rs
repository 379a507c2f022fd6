//! The chaos runs of issue 49: nothing is vouched for until the replicas have it, so a failover
//! loses no lease. A replica's link is held back (its primary still counts it as connected; it
//! acknowledges nothing) while grants are asked and a holder renews, then the primary dies and
//! the replica takes over; or the old primary and one server are partitioned from everything
//! else for longer than a TTL; or a Redis keeping an append-only file is killed and started again
//! inside a TTL. In each, no two holders may overlap at all: the checker runs without the
//! data-loss allowance (kept for `--redis-replicas 0`).

use std::time::Duration;

use tokio::time::{Instant, sleep};

use super::{Chaos, Cluster, Current, FAULT_FOR, Report, TTL};
use crate::support::netns::{Host, Side, partition, rejoin};

/// How long after the link was held back a grant may still be answered: one whose
/// acknowledgement had come in just before (its answer on its way to the worker).
const IN_FLIGHT: Duration = Duration::from_millis(100);

#[derive(Clone, Copy)]
enum Split {
    Apart,
    Together,
}

/// A replica link held back, and since when.
pub struct HeldBack {
    pub at: Instant,
    link: Link,
}

/// Which replica's link: Sentinel's (the replica's own namespace drops its packets to and from
/// the primary), or a Cluster's (the cluster's namespace drops those to and from the lock's
/// primary's port on loopback: the nodes share it), with the ports of that primary and replica.
#[derive(Clone, Copy)]
enum Link {
    Sentinel,
    Cluster { primary: u16, replica: u16 },
}

impl Cluster {
    /// Holds back the link from the lock's primary to its replica: the connection stays open
    /// (the primary still counts the replica as connected and online, so `--redis-replicas
    /// auto` waits for it), and nothing passes either way, while the Sentinels (or the cluster
    /// bus) still reach the replica, which stays healthy and promotable.
    pub fn hold_back_replica(&self) -> HeldBack {
        let link = match (&self.sentinels, &self.redis_cluster) {
            (Some(_), _) => {
                let (primary, port) = (self.lock_host.addr(Side::Redis), self.lock_redis.port());
                self.primary_hosts[0].hold_back_link_to(primary, port);
                Link::Sentinel
            }
            (None, Some(redis)) => {
                let (primary, _) = redis.slot_of(&crate::support::lock_key(super::LOCK));
                let replica = redis.replica_of(primary);
                self.engine().hold_back_local_port(primary);
                Link::Cluster { primary, replica }
            }
            (None, None) => panic!("no replica to hold back in a {} run", self.mode),
        };
        HeldBack {
            at: Instant::now(),
            link,
        }
    }

    /// Kills the held-back replica's primary (SIGKILL) and lets its replica take over without
    /// what the link held back (a dead primary's unsent writes are lost with it): the link is
    /// let go only once the replica is primary and has closed it, so what the dead primary's
    /// kernel still retransmits never lands. On Sentinel the Sentinels promote the replica
    /// (down-after 1 s); on a Cluster the replica takes the slots over at once (`CLUSTER
    /// FAILOVER TAKEOVER`). Returns when the replica was named primary.
    pub fn kill_primary_and_promote_replica(&mut self, held_back: &HeldBack) -> Instant {
        match held_back.link {
            Link::Sentinel => {
                self.lock_redis.kill();
                self.until_replica_promoted();
                let (primary, port) = (self.lock_host.addr(Side::Redis), self.lock_redis.port());
                self.primary_hosts[0].release_link_to(primary, port);
            }
            Link::Cluster { primary, replica } => {
                let redis = self.redis_cluster.as_mut().expect("a cluster run");
                redis.kill(primary);
                redis.take_over(replica);
                self.engine().release_local_port(primary);
            }
        }
        Instant::now()
    }

    /// The old primary's link to its replica, which a partition of that primary cuts: on
    /// Sentinel, the lock Redis's; on a Cluster, the lock's slot's primary's and its replica's.
    fn old_primarys_link(&self) -> Link {
        match (&self.sentinels, &self.redis_cluster) {
            (Some(_), _) => Link::Sentinel,
            (None, Some(redis)) => {
                let (primary, _) = redis.slot_of(&crate::support::lock_key(super::LOCK));
                let replica = redis.replica_of(primary);
                Link::Cluster { primary, replica }
            }
            (None, None) => panic!("no replica to partition from in a {} run", self.mode),
        }
    }

    /// Partitions (or rejoins) the old primary and server `server` from everything else on
    /// the Redis side: the replica (its link too), the Sentinels or the other nodes, and the
    /// other servers.
    fn split_old_primary_with(&self, server: usize, link: Link, split: Split) {
        match link {
            Link::Sentinel => self.split_sentinels_primary_with(server, split),
            Link::Cluster { primary, .. } => self.split_cluster_node_with(server, primary, split),
        }
    }

    /// On Sentinel every process has a namespace of its own: iptables in each splits the bridge.
    fn split_sentinels_primary_with(&self, server: usize, split: Split) {
        let minority = [&self.lock_host, &self.server_hosts[server]];
        let mut majority = vec![&self.primary_hosts[0], self.engine()];
        let others = (0..self.server_hosts.len()).filter(|i| *i != server);
        majority.extend(others.map(|i| &self.server_hosts[i]));
        match split {
            Split::Apart => partition(&minority, &majority),
            Split::Together => rejoin(&minority, &majority),
        }
    }

    /// On a Cluster the nodes share a namespace and its address: the node on `primary` is cut
    /// off from the other nodes on loopback (by its ports and its own source address: its bus
    /// and its replica's link), server `server` reaches only that node, and the other servers
    /// every node but it.
    fn split_cluster_node_with(&self, server: usize, primary: u16, split: Split) {
        let redis = self.redis_cluster.as_ref().expect("a cluster run");
        let node = redis.node_addresses(primary);
        let (engine, nodes) = (self.engine(), self.engine().addr(Side::Redis));
        for (i, host) in self.server_hosts.iter().enumerate() {
            match (split, i == server) {
                (Split::Apart, true) => host.only_reach_port_of(nodes, primary),
                (Split::Together, true) => host.rejoin_all_of(nodes, primary),
                (Split::Apart, false) => host.hold_back_link_to(nodes, primary),
                (Split::Together, false) => host.release_link_to(nodes, primary),
            }
        }
        match split {
            Split::Apart => engine.cut_off_local_process(&node.ports, node.source),
            Split::Together => engine.rejoin_local_process(&node.ports, node.source),
        }
    }

    /// Waits until the old primary's replica is primary: named by the Sentinels, or promoted
    /// by the cluster's own failure detection (the other primaries find the old one gone past
    /// the node timeout and vote for its replica).
    fn until_old_primary_replaced(&self, link: Link) {
        match link {
            Link::Sentinel => self.until_replica_promoted(),
            Link::Cluster { replica, .. } => {
                let redis = self.redis_cluster.as_ref().expect("a cluster run");
                redis.until_primary(replica);
            }
        }
    }

    /// The namespace of the Sentinels or of the cluster's nodes.
    fn engine(&self) -> &Host {
        self.engine_host
            .as_ref()
            .expect("a Sentinel or Cluster run")
    }
}

impl Chaos {
    /// The replica's link held back while a fresh holder renews: its renewals go
    /// unacknowledged, so it is told lost within its TTL, and every grant meanwhile is refused
    /// (`REDIS_NOT_REPLICATED`; the workers retry) for several renewal periods more. Then the
    /// primary dies and the replica, which has none of it, takes over; the run goes on through
    /// it. Nothing was vouched for that the replica lacks: no overlap, the history checked
    /// without the data-loss allowance.
    pub async fn run_replica_held_back_then_primary_killed(mut self, fault: &'static str) {
        self.progress(10).await;
        let holder = self.fresh_holder().await;
        let held_back = self.cluster.hold_back_replica();
        self.until_turn_over(&holder).await;
        // Several renewal periods more with the link held back: a fault's length, not a wait
        // for an event.
        sleep(FAULT_FOR.saturating_sub(held_back.at.elapsed())).await;
        let killed_at = Instant::now();
        let promoted_at = self.cluster.kill_primary_and_promote_replica(&held_back);
        self.progress(10).await;
        let report = self.finish(fault).await;

        report.assert_holder_told(&holder, held_back.at, TTL + Duration::from_millis(200));
        let granted = report.grants_between(held_back.at + IN_FLIGHT, killed_at);
        // Waiters ride the refusals out inside their wait (the server retries), so few
        // acquisitions fail; none is granted before the replica took over.
        let failed = report.failures_between(held_back.at, promoted_at);
        let (_, first_grant) = report.next_hold_after(held_back.at);
        let (_, usable_again) = report.next_hold_after(killed_at);
        let believed = report.belief_after(&holder, held_back.at);
        let hold = report.hold_of(&holder);
        let told = hold.end.saturating_duration_since(held_back.at);
        let vouched = hold.valid_until.saturating_duration_since(held_back.at);
        println!(
            "FIGURE fault={fault} holder_believed_ms={} (told_ms={} vouched_ms={}) granted_while_held_back={granted} first_grant_after_hold_back_ms={} acquisitions_failed={failed} held_back_ms={} promoted_after_kill_ms={} usable_after_kill_ms={} overlap_ms={}",
            believed.as_millis(),
            told.as_millis(),
            vouched.as_millis(),
            first_grant.as_millis(),
            (killed_at - held_back.at).as_millis(),
            (promoted_at - killed_at).as_millis(),
            usable_again.as_millis(),
            report.max_overlap().as_millis(),
        );
        assert_eq!(granted, 0, "granted while the replica was held back");
        assert_eq!(
            report.max_overlap(),
            Duration::ZERO,
            "two holders overlapped"
        );
        report.assert_safe(usable_again);
    }

    /// The old primary and the fresh holder's server partitioned from the replica, the
    /// Sentinels (or the cluster's other nodes) and the other server(s) for longer than a TTL
    /// while the replica is promoted (by the Sentinels, or the cluster's own failure detection)
    /// and the majority side serves through it. The minority's old primary still takes writes
    /// (`min-replicas-to-write` 0), but its replica acknowledges none, so the holder there
    /// stops believing within its TTL; whatever the majority's new primary grants, no two
    /// holders overlap.
    pub async fn run_old_primary_and_a_server_partitioned(self) {
        let fault = "old-primary-and-a-server-partitioned";
        self.progress(10).await;
        // Redis as it comes (min-replicas-to-write 0): at the heal the promoted replica closes
        // its link and the old primary sees no replica at once; the servers' own rule (auto
        // goes on waiting for a replica that left, LOST_REPLICA_WAIT) keeps them from vouching
        // for anything there until it is demoted.
        let holder = self.fresh_holder().await;
        let cluster = &self.cluster;
        let link = cluster.old_primarys_link();
        cluster.split_old_primary_with(holder.server, link, Split::Apart);
        let cut_at = Instant::now();
        self.until_turn_over(&holder).await;
        cluster.until_old_primary_replaced(link);
        let promoted_at = Instant::now();
        // The new primary serves, the old one still cut off, for longer than a TTL.
        sleep(FAULT_FOR).await;
        cluster.split_old_primary_with(holder.server, link, Split::Together);
        let healed_at = Instant::now();
        self.progress(10).await;
        let report = self.finish(fault).await;

        report.assert_holder_told(&holder, cut_at, TTL + Duration::from_millis(200));
        let majority_served = report
            .holds
            .iter()
            .filter(|h| h.server != holder.server && h.start > promoted_at && h.start < healed_at)
            .count();
        let (_, usable_again) = report.next_hold_after(cut_at);
        // The lock may have gone on through the majority side and be done before the heal.
        let after_heal = report.holds.iter().filter(|h| h.start > healed_at);
        let usable_after_heal = after_heal.map(|h| h.start - healed_at).min();
        println!(
            "FIGURE fault={fault} holder_believed_ms={} promoted_after_cut_ms={} majority_grants_while_cut={majority_served} acquisitions_failed={} usable_again_ms={} usable_after_heal_ms={:?} overlap_ms={}",
            report.belief_after(&holder, cut_at).as_millis(),
            (promoted_at - cut_at).as_millis(),
            report.failures_between(cut_at, healed_at),
            usable_again.as_millis(),
            usable_after_heal.map(|d| d.as_millis()),
            report.max_overlap().as_millis(),
        );
        assert_eq!(
            report.max_overlap(),
            Duration::ZERO,
            "two holders overlapped"
        );
        report.assert_safe(usable_again);
    }

    /// A Redis with an append-only file fsynced before every reply, killed (SIGKILL) and
    /// started again from it inside a TTL, under a fresh holder, servers on `--redis-durable`:
    /// every lease is kept (no holder of the lock told lost), no overlap.
    pub async fn run_durable_redis_killed_and_restarted(mut self) {
        let fault = "durable-redis-killed-and-restarted";
        self.progress(10).await;
        let holder = self.fresh_holder().await;
        let killed_at = Instant::now();
        self.cluster.lock_redis.kill_and_start_again();
        let back = killed_at.elapsed();
        // Kept: its turn ends as every other does, and the lock goes on to the others.
        *super::lock(&self.shared.hold_until_lost) = None;
        self.handed_over(&holder).await;
        self.progress(10).await;
        let report = self.finish(fault).await;

        let lost: Vec<_> = report
            .holds
            .iter()
            .filter(|h| h.start < killed_at && h.end > killed_at && h.lost.is_some())
            .map(|h| h.lost.clone())
            .collect();
        let kept = report.hold_of(&holder).lost.is_none();
        println!(
            "FIGURE fault={fault} back_after_ms={} holder_kept={kept} lost={} overlap_ms={}",
            back.as_millis(),
            lost.len(),
            report.max_overlap().as_millis(),
        );
        assert!(
            back < TTL,
            "Redis took {back:?} to come back: not inside a TTL"
        );
        assert!(lost.is_empty(), "leases lost across the restart: {lost:?}");
        assert_eq!(
            report.max_overlap(),
            Duration::ZERO,
            "two holders overlapped"
        );
        let (_, next) = report.next_hold_after(killed_at);
        report.assert_safe(next);
    }

    /// Waits until `holder`'s turn is over (told lost, or its validity out), at most a TTL and
    /// a second: a holder that goes on believing is left to the checker and the assertions
    /// after it, which name the bug, rather than cut short here.
    async fn until_turn_over(&self, holder: &Current) {
        let mut current = self.shared.current.subscribe();
        let over = current.wait_for(
            |c| !matches!(c, Some(c) if c.worker == holder.worker && c.token == holder.token),
        );
        let _ = tokio::time::timeout(TTL + Duration::from_secs(1), over).await;
    }
}

impl Report {
    /// How many turns were granted between `from` and `to`.
    pub fn grants_between(&self, from: Instant, to: Instant) -> usize {
        let between = |h: &&super::Hold| h.start > from && h.start < to;
        self.holds.iter().filter(between).count()
    }

    /// How many acquisitions failed (Redis unreachable, the wait ran out, ...) between `from`
    /// and `to`.
    pub fn failures_between(&self, from: Instant, to: Instant) -> usize {
        let between = |(at, _): &&(Instant, String)| *at > from && *at < to;
        self.failed.iter().filter(between).count()
    }

    /// How long `holder` believed after `instant`: until told, or until its validity ran out by
    /// its own clock.
    pub fn belief_after(&self, holder: &Current, instant: Instant) -> Duration {
        let hold = self.hold_of(holder);
        hold.end
            .min(hold.valid_until)
            .saturating_duration_since(instant)
    }
}
