//! Following a failover whose old primary went silent: Sentinel's, and a Cluster slot's.
//!
//! Why this exists: fred finds the primary by asking the Sentinels only when it (re)connects,
//! and it reconnects only when a connection breaks or its `unresponsive` check fires. A primary
//! cut off by a partition (a black hole) or frozen never breaks the connection: writes sit in
//! the kernel's send buffer and TCP retransmits for some fifteen minutes. And the
//! `unresponsive` check never fires on a busy connection: fred measures the time since the
//! connection's *latest* write (`Connection::last_write`, reset by every write in
//! `protocol/connection.rs`, compared in `router/types.rs`), not since the oldest command still
//! unanswered. Leasehold writes at least every two seconds (the health check's PING every
//! second, bounded by the 2 s command timeout; renewals), so with the 4 s limit
//! `Connection::open` sets, the silent connection never looked unresponsive: a server running
//! before the cut kept writing into it, NOT_SERVING, while the Sentinels had long promoted the
//! replica, and a server started after the promotion (which asked the Sentinels) served at once.
//!
//! What this module does instead, as our own handling (fred is configured, not patched):
//! - it listens to every Sentinel's `+switch-master` for the service, and when the Sentinels
//!   name a primary other than the one the connection is on, forces fred to reconnect
//!   (`force_reconnection`), which drops the old connection and asks the Sentinels again;
//! - it probes the connection (a PING every [`PROBE_EVERY`]); when the PING does not answer
//!   within the command timeout, it asks the Sentinels itself and moves the same way, so a
//!   `+switch-master` missed (a Sentinel restarted, a subscription not yet back) costs a probe,
//!   not the partition's length;
//! - pub/sub connections follow their command connection ([`follow_leader`]): when it moves to
//!   another primary, they are moved too, so wake-ups published on the new primary reach us;
//! - on a Cluster ([`SlotWatch`]), a primary that misses a PING makes it read the slots again,
//!   so a frozen or cut-off primary's slots go to the replica promoted in its place.
//!
//! Every wait here is bounded: the probe by the command timeout, each question to a Sentinel by
//! the command timeout, the forced reconnection by [`RECONNECT_LIMIT`]. The kernel bounds the
//! rest: `Connection::open` sets `TCP_USER_TIMEOUT`, so a write stuck behind a full send
//! buffer on a black-holed link fails instead of holding fred's router task (and with it the
//! forced reconnection) for as long as TCP retransmits.

use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::prelude::*;
use fred::types::CustomCommand;
use fred::types::config::Server;
use tokio::sync::{broadcast, mpsc};
use tracing::{debug, info, warn};

use crate::tasks::Tasks;

/// How often the connection is probed for silence.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

/// The longest wait for fred's forced reconnection (closing the old connection, asking the
/// Sentinels, connecting to the primary they name). Past it the reconnection goes on in fred's
/// router; we stop waiting and probe again.
pub const RECONNECT_LIMIT: Duration = Duration::from_secs(10);

/// The least `TCP_USER_TIMEOUT` set on Redis connections (twice the command timeout
/// otherwise): a few retransmissions, so a healthy link's hiccup does not cost a connection.
pub const LEAST_TCP_USER_TIMEOUT: Duration = Duration::from_secs(1);

/// The channel Sentinels announce a failover's end on: `<service> <old ip> <old port> <new ip>
/// <new port>`.
const SWITCH_MASTER: &str = "+switch-master";

/// A primary as the Sentinels name it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Primary {
    host: String,
    port: u16,
}

impl Primary {
    fn is(&self, server: &Server) -> bool {
        self.port == server.port && *self.host == *server.host
    }
}

impl std::fmt::Display for Primary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// Starts following Sentinel failovers for `client`, the command connection built from
/// `config`; nothing for a configuration that is not Sentinel's. Runs until shutdown.
pub fn follow(client: &Client, config: &Config, command_timeout: Duration, tasks: &Tasks) {
    let (hosts, service_name) = match &config.server {
        ServerConfig::Sentinel {
            hosts,
            service_name,
            ..
        } => (hosts, service_name),
        ServerConfig::Clustered { .. } => {
            let watch = SlotWatch {
                client: client.clone(),
                command_timeout,
            };
            tasks.spawn(watch.run(tasks.clone()));
            return;
        }
        _ => return,
    };
    let sentinels: Vec<Sentinel> = hosts
        .iter()
        .map(|host| Sentinel::new(host, config, command_timeout))
        .collect();
    let (switched, switches) = mpsc::channel(16);
    for sentinel in &sentinels {
        let listener = sentinel.listen(service_name.clone(), switched.clone());
        tasks.spawn(listener.run(tasks.clone()));
    }
    let watch = FailoverWatch {
        client: client.clone(),
        sentinels,
        service: service_name.clone(),
        command_timeout,
    };
    tasks.spawn(watch.run(switches, tasks.clone()));
}

/// Moves `subscriber` (a pub/sub connection) whenever `leader` (its command connection)
/// reconnects to another server than the one `subscriber` is on: a pub/sub connection carries no
/// commands of ours that could time out, so nothing else would tell it that its primary went
/// silent. On a Cluster, its slots are read again whenever the leader's primaries change (a
/// silent primary's slots taken over: [`SlotWatch`]), or its `SSUBSCRIBE`s would go on to the
/// old primary. Runs until shutdown.
pub fn follow_leader(
    subscriber: &SubscriberClient,
    leader: &Client,
    config: &Config,
    tasks: &Tasks,
) {
    if config.server.is_clustered() {
        let slots = SubscriberSlots {
            subscriber: subscriber.clone(),
            leader: leader.clone(),
        };
        tasks.spawn(slots.run(tasks.clone()));
        return;
    }
    if !matches!(config.server, ServerConfig::Sentinel { .. }) {
        return;
    }
    let (subscriber, mut moves) = (subscriber.clone(), leader.reconnect_rx());
    let stopping = tasks.clone();
    tasks.spawn(async move {
        loop {
            let server = tokio::select! {
                () = stopping.stopping() => return,
                moved = moves.recv() => match moved {
                    Ok(server) => server,
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            };
            if subscriber.active_connections().contains(&server) {
                continue;
            }
            info!(primary = %server, "the command connection moved to another primary; moving a pub/sub connection too");
            let reconnect = subscriber.force_reconnection();
            if tokio::time::timeout(RECONNECT_LIMIT, reconnect).await.is_err() {
                warn!(primary = %server, "a pub/sub connection did not move within {RECONNECT_LIMIT:?}; it goes on trying");
            }
        }
    });
}

/// A Cluster's pub/sub connection, kept on the primaries its command connection uses.
struct SubscriberSlots {
    subscriber: SubscriberClient,
    leader: Client,
}

impl SubscriberSlots {
    async fn run(self, tasks: Tasks) {
        loop {
            tokio::select! {
                () = tasks.stopping() => return,
                () = tokio::time::sleep(PROBE_EVERY) => {}
            }
            let primaries = |table: Option<fred::types::cluster::ClusterRouting>| {
                let mut nodes = table.map(|t| t.unique_primary_nodes()).unwrap_or_default();
                nodes.sort();
                nodes
            };
            let wanted = primaries(self.leader.cached_cluster_state());
            if wanted.is_empty() || wanted == primaries(self.subscriber.cached_cluster_state()) {
                continue;
            }
            info!(primaries = ?wanted, "the cluster's primaries changed; reading a pub/sub connection's slots again");
            let sync = self.subscriber.sync_cluster();
            match tokio::time::timeout(RECONNECT_LIMIT, sync).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    warn!(%error, "could not read a pub/sub connection's slots again")
                }
                Err(_) => {
                    warn!("a pub/sub connection's slots not read again within {RECONNECT_LIMIT:?}")
                }
            }
        }
    }
}

/// Watches one command connection: moves it when the Sentinels switch, or when it stops
/// answering and the Sentinels name another primary.
struct FailoverWatch {
    client: Client,
    sentinels: Vec<Sentinel>,
    service: String,
    command_timeout: Duration,
}

impl FailoverWatch {
    async fn run(self, mut switches: mpsc::Receiver<Primary>, tasks: Tasks) {
        // Every listener gone (none could be set up): the probe still runs.
        let mut listening = true;
        loop {
            tokio::select! {
                () = tasks.stopping() => return,
                switched = switches.recv(), if listening => match switched {
                    Some(primary) => self.move_to(primary, "the Sentinels switched (+switch-master)").await,
                    None => listening = false,
                },
                () = tokio::time::sleep(PROBE_EVERY) => {
                    if self.silent().await
                        && let Some(primary) = self.ask_sentinels().await
                    {
                        self.move_to(primary, "Redis did not answer; the Sentinels name another primary").await;
                    }
                }
            }
        }
    }

    /// Whether the connection is up by fred's account but a PING gets no answer within the
    /// command timeout: the connection neither answers nor breaks. (A connection fred knows is
    /// down is being reconnected already, and asks the Sentinels itself.)
    async fn silent(&self) -> bool {
        if !self.client.is_connected() {
            return false;
        }
        let ping = self.client.ping::<Value>(None);
        match tokio::time::timeout(self.command_timeout, ping).await {
            Ok(_) => false,
            Err(_) => {
                debug!(
                    "Redis did not answer a PING within {:?}; asking the Sentinels",
                    self.command_timeout
                );
                true
            }
        }
    }

    /// The primary the first Sentinel that answers names, each asked within the command timeout.
    async fn ask_sentinels(&self) -> Option<Primary> {
        for sentinel in &self.sentinels {
            match sentinel.primary(&self.service).await {
                Ok(primary) => return Some(primary),
                Err(error) => {
                    debug!(sentinel = %sentinel.server, %error, "a Sentinel did not name the primary")
                }
            }
        }
        warn!("Redis does not answer and no Sentinel named a primary");
        None
    }

    /// Reconnects (through the Sentinels) unless the connection is on `primary` already.
    async fn move_to(&self, primary: Primary, why: &'static str) {
        let current = self.client.active_connections();
        if current.iter().any(|server| primary.is(server)) {
            return;
        }
        let old: Vec<String> = current.iter().map(ToString::to_string).collect();
        warn!(new = %primary, old = ?old, "{why}: leaving the old primary's connection");
        let reconnect = self.client.force_reconnection();
        match tokio::time::timeout(RECONNECT_LIMIT, reconnect).await {
            Ok(Ok(())) => info!(primary = %primary, "moved to the new primary"),
            Ok(Err(error)) => {
                warn!(%error, "could not reconnect through the Sentinels; fred goes on trying")
            }
            Err(_) => warn!("no reconnection within {RECONNECT_LIMIT:?}; fred goes on trying"),
        }
    }
}

/// Cluster's twin of [`FailoverWatch`]: a primary frozen or cut off keeps its connection, and
/// fred reads the slots again only on a connection's error or a `MOVED` (which a silent node
/// never sends), so commands for its slots went on waiting on it after its replica took over.
/// Each primary is probed with a PING; when one does not answer within the command timeout,
/// the slots are read again (`CLUSTER SLOTS` from a node that answers): once the replica is
/// promoted, the old primary leaves the table, its connection is closed and its commands go to
/// the slots' new owner.
struct SlotWatch {
    client: Client,
    command_timeout: Duration,
}

impl SlotWatch {
    async fn run(self, tasks: Tasks) {
        loop {
            tokio::select! {
                () = tasks.stopping() => return,
                () = tokio::time::sleep(PROBE_EVERY) => {}
            }
            let silent = self.silent_primaries().await;
            if silent.is_empty() {
                continue;
            }
            debug!(silent = ?silent, "cluster primaries did not answer a PING; reading the slots again");
            let sync = self.client.sync_cluster();
            match tokio::time::timeout(RECONNECT_LIMIT, sync).await {
                Ok(Ok(())) => {
                    let table = self.client.cached_cluster_state();
                    let primaries = table
                        .map(|table| table.unique_primary_nodes())
                        .unwrap_or_default();
                    let left: Vec<String> = silent
                        .iter()
                        .filter(|server| !primaries.contains(server))
                        .map(ToString::to_string)
                        .collect();
                    if !left.is_empty() {
                        warn!(left = ?left, "silent cluster primaries replaced by their slots' new owners");
                    }
                }
                Ok(Err(error)) => warn!(%error, "could not read the cluster's slots again"),
                Err(_) => warn!("the cluster's slots not read again within {RECONNECT_LIMIT:?}"),
            }
        }
    }

    /// The primaries (by fred's table) that do not answer a PING within the command timeout,
    /// all asked at once. (fred being reconnecting, they are not asked: it reads the slots then.)
    async fn silent_primaries(&self) -> Vec<Server> {
        if !self.client.is_connected() {
            return Vec::new();
        }
        let Some(table) = self.client.cached_cluster_state() else {
            return Vec::new();
        };
        let probes = table
            .unique_primary_nodes()
            .into_iter()
            .map(|server| async move {
                let node = self.client.with_cluster_node(&server);
                let ping = node.ping::<Value>(None);
                let answered = tokio::time::timeout(self.command_timeout, ping)
                    .await
                    .is_ok();
                (!answered).then_some(server)
            });
        futures_util::future::join_all(probes)
            .await
            .into_iter()
            .flatten()
            .collect()
    }
}

/// One Sentinel: its address and the settings to reach it (the URL's credentials and TLS, as
/// fred itself uses for Sentinels).
#[derive(Clone)]
struct Sentinel {
    server: Server,
    config: Config,
    timeout: Duration,
}

impl Sentinel {
    fn new(server: &Server, config: &Config, timeout: Duration) -> Self {
        let config = Config {
            server: ServerConfig::Centralized {
                server: server.clone(),
            },
            username: config.username.clone(),
            password: config.password.clone(),
            tls: config.tls.clone(),
            ..Config::default()
        };
        Sentinel {
            server: server.clone(),
            config,
            timeout,
        }
    }

    /// `retry`: the first connection is retried like a reconnection, and commands wait for it
    /// (the listener), rather than failing at once (a question).
    fn builder(&self, retry: bool) -> Builder {
        let timeout = self.timeout;
        let mut config = self.config.clone();
        config.fail_fast = !retry;
        let mut builder = Builder::from_config(config);
        builder.with_connection_config(|c| {
            c.connection_timeout = timeout;
            c.internal_command_timeout = timeout;
        });
        builder
    }

    /// `SENTINEL GET-MASTER-ADDR-BY-NAME service` on a connection of its own, each step within
    /// the timeout (a question asked only when Redis is silent: no connection kept for it).
    async fn primary(&self, service: &str) -> Result<Primary, Error> {
        let client = self.builder(false).build()?;
        let ask = async {
            client.init().await?;
            let command = CustomCommand::new_static("SENTINEL", None, false);
            let args = vec!["GET-MASTER-ADDR-BY-NAME".to_owned(), service.to_owned()];
            let answer: Vec<String> = client.custom(command, args).await?;
            match answer.as_slice() {
                [host, port] => port
                    .parse()
                    .map(|port| Primary {
                        host: host.clone(),
                        port,
                    })
                    .map_err(|_| Error::new(ErrorKind::Parse, "a port that is not a number")),
                _ => Err(Error::new(ErrorKind::Sentinel, "no primary named")),
            }
        };
        let answer = tokio::time::timeout(self.timeout * 2, ask).await;
        let _ = tokio::time::timeout(self.timeout, client.quit()).await;
        answer.unwrap_or_else(|_| {
            Err(Error::new(
                ErrorKind::Timeout,
                "the Sentinel did not answer",
            ))
        })
    }

    /// A listener to this Sentinel's `+switch-master` for `service`.
    fn listen(&self, service: String, switched: mpsc::Sender<Primary>) -> SwitchListener {
        SwitchListener {
            sentinel: self.clone(),
            service,
            switched,
        }
    }
}

/// One Sentinel's `+switch-master` messages for the service, passed to the watch.
struct SwitchListener {
    sentinel: Sentinel,
    service: String,
    switched: mpsc::Sender<Primary>,
}

impl SwitchListener {
    /// Subscribes (again after each reconnection, by fred's resubscriber) and passes on every
    /// switch of the service. A Sentinel that cannot be reached is retried by fred's policy; the
    /// others and the probe cover for it meanwhile.
    async fn run(self, tasks: Tasks) {
        let subscriber = match self
            .sentinel
            .builder(true)
            .set_policy(ReconnectPolicy::new_exponential(0, 50, 2_000, 2))
            .build_subscriber_client()
        {
            Ok(subscriber) => subscriber,
            Err(error) => {
                warn!(sentinel = %self.sentinel.server, %error, "cannot listen to a Sentinel's +switch-master");
                return;
            }
        };
        let mut messages = subscriber.message_rx();
        let resubscriber = subscriber.manage_subscriptions();
        drop(subscriber.connect()); // The connection task runs on without its handle.
        // fred holds the SUBSCRIBE until the connection is up: bounded by shutdown only, since a
        // Sentinel down at start may come back any time (the probe covers meanwhile).
        tokio::select! {
            () = tasks.stopping() => {}
            subscribed = subscriber.subscribe(SWITCH_MASTER) => match subscribed {
                Ok(()) => self.pass_on(&mut messages, &tasks).await,
                Err(error) => warn!(sentinel = %self.sentinel.server, %error, "cannot subscribe to a Sentinel's +switch-master"),
            },
        }
        resubscriber.abort();
        let _ = tokio::time::timeout(self.sentinel.timeout, subscriber.quit()).await;
    }

    async fn pass_on(
        &self,
        messages: &mut broadcast::Receiver<fred::types::Message>,
        tasks: &Tasks,
    ) {
        loop {
            let message = tokio::select! {
                () = tasks.stopping() => return,
                message = messages.recv() => match message {
                    Ok(message) => message,
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            };
            if &*message.channel != SWITCH_MASTER {
                continue;
            }
            let Some(text) = message.value.as_string() else {
                continue;
            };
            if let Some(primary) = switched_to(&text, &self.service) {
                info!(sentinel = %self.sentinel.server, primary = %primary, "the Sentinels switched the primary");
                if self.switched.send(primary).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// The new primary a `+switch-master` message names, if it is about `service`.
fn switched_to(message: &str, service: &str) -> Option<Primary> {
    let mut words = message.split_whitespace();
    if words.next()? != service {
        return None;
    }
    let (_old_host, _old_port) = (words.next()?, words.next()?);
    let host = words.next()?.to_owned();
    let port = words.next()?.parse().ok()?;
    Some(Primary { host, port })
}

#[cfg(test)]
mod tests {
    use super::{Primary, switched_to};

    #[test]
    fn a_switch_message_names_the_new_primary_of_its_service_only() {
        let message = "leasehold 10.0.0.2 6379 10.0.0.3 6380";
        assert_eq!(
            switched_to(message, "leasehold"),
            Some(Primary {
                host: "10.0.0.3".to_owned(),
                port: 6380
            })
        );
        assert_eq!(switched_to(message, "other"), None);
        assert_eq!(switched_to("leasehold 10.0.0.2 6379", "leasehold"), None);
        assert_eq!(switched_to("leasehold a 1 b port", "leasehold"), None);
    }
}
