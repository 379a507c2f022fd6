//! The connection to the Redis that holds the locks: set-up, reconnects, bounded calls, and the
//! work that must outlive the stream that asked for it.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::prelude::*;
use fred::types::scripts::Script;
use fred::types::{ClusterHash, CustomCommand};
use tokio::sync::{Semaphore, broadcast, watch};
use tokio::time::Instant;
use tracing::{Instrument, info, warn};

use super::eviction::Eviction;
use super::replication::{Replication, ReplicationSettings};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::tasks::Tasks;

/// Default for `--redis-max-in-flight`.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 1_000;

/// How to reach Redis, and how hard to use it.
#[derive(Clone, Debug)]
pub struct RedisSettings {
    /// `redis://` or `rediss://` (TLS); a password may be in it, or in `password_file`.
    pub url: String,
    /// Longest wait for one command, once sent.
    pub command_timeout: Duration,
    /// CA certificates (PEM) trusted for `rediss://`, instead of the system's roots.
    pub ca_file: Option<PathBuf>,
    /// A file whose first line is the Redis password (AUTH, or ACL with the URL's user name), so
    /// that it never appears on a command line or in a process list.
    pub password_file: Option<PathBuf>,
    /// Commands in flight at once. More wait in line for a place, and the command timeout only
    /// starts once a command is sent: a burst of acquisitions queues instead of timing out.
    pub max_in_flight: usize,
    /// Fail a command at once while the connection is down, instead of holding it until Redis
    /// is back: for Redlock's primaries, where a majority answers without the missing node and a
    /// command held for later would land long after its caller gave up.
    pub fail_fast: bool,
    /// Serve on a Redis whose `maxmemory-policy` may evict held locks (`--redis-allow-eviction`):
    /// warned of instead of refused (see [`super::eviction`]).
    pub allow_eviction: bool,
    /// How sure of a write the server must be before vouching for a lease: replicas
    /// (`--redis-replicas`), disk (`--redis-durable`), a node that came back empty
    /// (`--redis-restart-hold`). See [`super::replication`].
    pub replication: ReplicationSettings,
}

impl RedisSettings {
    /// Defaults for everything but the URL.
    pub fn new(url: impl Into<String>) -> Self {
        RedisSettings {
            url: url.into(),
            command_timeout: Duration::from_secs(2),
            ca_file: None,
            password_file: None,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            fail_fast: false,
            allow_eviction: false,
            replication: ReplicationSettings::default(),
        }
    }

    /// The fred configuration: URL, password file, CA file.
    fn config(&self) -> Result<Config> {
        let url = node_list_url(&self.url);
        let mut config = Config::from_url(&url).map_err(Error::redis("url parse"))?;
        if let Some(path) = &self.password_file {
            let password = std::fs::read_to_string(path).map_err(|error| {
                Error::invalid(format!(
                    "cannot read the Redis password file {}: {error}",
                    path.display()
                ))
            })?;
            config.password = Some(password.lines().next().unwrap_or_default().to_owned());
        }
        if let Some(path) = &self.ca_file {
            if config.tls.is_none() {
                return Err(Error::invalid(format!(
                    "a Redis CA file ({}) needs a rediss:// URL",
                    path.display()
                )));
            }
            let client = crate::tls::client_config(path)?;
            config.tls = Some(fred::types::config::TlsConnector::from(client).into());
        }
        Ok(config)
    }
}

/// A connection to Redis. Cheap to clone: one pointer, since every lease keeps one for its
/// whole life.
#[derive(Clone)]
pub struct Connection(Arc<Shared>);

struct Shared {
    client: Client,
    /// Kept to open pub/sub connections with the same settings.
    config: Config,
    command_timeout: Duration,
    /// Places for commands in flight (see [`RedisSettings::max_in_flight`]).
    in_flight: Semaphore,
    /// See [`RedisSettings::fail_fast`].
    fail_fast: bool,
    metrics: Metrics,
    /// Counts reconnections to Redis. Leases watch it and re-check their key at once, because a
    /// Redis that dropped the connection may have restarted empty or failed over.
    reconnects: watch::Receiver<u64>,
    /// The server's background tasks; the reconnect watcher is one of them.
    tasks: Tasks,
    /// Each node's `maxmemory-policy`: while one may evict, no new lease is taken on it.
    eviction: Arc<Eviction>,
    /// Each node's replicas and persistence, and the `WAIT`s that vouch for its writes.
    replication: Arc<Replication>,
}

impl Connection {
    /// Connects, and fails at once if Redis cannot be reached, so a misconfigured server refuses
    /// to start instead of refusing every request.
    ///
    /// A Redlock primary ([`RedisSettings::fail_fast`]) may be down at start: the server starts
    /// with a majority, and the connection keeps trying in the background.
    ///
    /// Refuses ([`Error::RedisMayEvict`]) a Redis whose `maxmemory-policy` may evict held locks,
    /// unless [`RedisSettings::allow_eviction`].
    pub async fn open(settings: &RedisSettings, metrics: Metrics, tasks: Tasks) -> Result<Self> {
        let command_timeout = settings.command_timeout;
        let mut config = settings.config()?;
        if settings.fail_fast {
            config.fail_fast = false; // The first connection retries like any reconnection.
        }
        let client = Builder::from_config(config.clone())
            .with_connection_config(|c| {
                c.connection_timeout = command_timeout;
                c.internal_command_timeout = command_timeout;
                // A connection that stops answering (paused Redis, black-holed network) is
                // dropped and reconnected rather than trusted forever.
                // (Only while it is idle: fred counts from the latest write, so a connection
                // written to every second never looks unresponsive; see super::failover.)
                c.unresponsive = fred::types::config::UnresponsiveConfig {
                    max_timeout: Some(command_timeout * 2),
                    interval: (command_timeout / 4).max(Duration::from_millis(10)),
                };
                // A black-holed link fails a write the kernel cannot deliver, instead of
                // retransmitting for minutes with fred's router task waiting on it.
                c.tcp.user_timeout =
                    Some((command_timeout * 2).max(super::failover::LEAST_TCP_USER_TIMEOUT));
            })
            .set_policy(reconnect_policy())
            .build()
            .map_err(Error::redis("client setup"))?;
        if settings.fail_fast {
            drop(client.connect()); // The connection task runs on without its handle.
            if bounded(command_timeout, "connect", client.wait_for_connect())
                .await
                .is_err()
            {
                warn!(url = %redacted(&settings.url), "Redis primary unreachable at start; still trying");
            }
        } else {
            client.init().await.map_err(Error::redis("connect"))?;
        }
        let (reconnected, reconnects) = watch::channel(0);
        let eviction = Arc::new(Eviction::new(settings.allow_eviction, metrics.clone()));
        let failover_expected = config.server.is_sentinel() || config.server.is_clustered();
        let replication = Arc::new(Replication::new(
            settings.replication,
            metrics.clone(),
            failover_expected,
        ));
        let connection = Connection(Arc::new(Shared {
            client,
            config,
            command_timeout,
            in_flight: Semaphore::new(settings.max_in_flight.max(1)),
            fail_fast: settings.fail_fast,
            metrics,
            reconnects,
            tasks,
            eviction: eviction.clone(),
            replication: replication.clone(),
        }));
        let run_id = match connection.run_id().await {
            Ok(run_id) => run_id,
            Err(_) if settings.fail_fast => "unknown".to_owned(),
            // INFO renamed or not granted (managed Redis): a restart still shows as a reconnection.
            Err(Error::Redis { source, .. }) if super::eviction::refused(&source) => {
                "unknown".to_owned()
            }
            Err(error) => return Err(error),
        };
        info!(%run_id, "connected to Redis");
        connection.check_eviction().await;
        if let Some(refusal) = eviction.refusal() {
            return Err(refusal);
        }
        eviction.started();
        replication
            .check(&connection.0.client, command_timeout)
            .await;
        // A Redlock primary down at start is read when it is back (its first reconnection).
        replication.start()?;
        // The watcher keeps only the fred client, not this connection, so it never keeps the
        // connection alive by itself; it ends with the server's shutdown signal.
        let watcher = ReconnectWatcher {
            client: connection.0.client.clone(),
            command_timeout,
            run_id,
            reconnected,
            eviction,
            replication,
        };
        connection
            .tasks()
            .spawn(watcher.run(connection.tasks().clone()));
        // Sentinel: follow a failover even when the old primary's connection goes silent.
        super::failover::follow(
            &connection.0.client,
            &connection.0.config,
            command_timeout,
            connection.tasks(),
        );
        Ok(connection)
    }

    /// The command connection, for calls no script covers (`SCAN`).
    pub fn client(&self) -> &Client {
        &self.0.client
    }

    /// The server's background tasks and shutdown signal.
    pub fn tasks(&self) -> &Tasks {
        &self.0.tasks
    }

    /// The server's metrics (every layer reaches them through its connection).
    pub fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    /// A new connection for pub/sub (a subscribed connection can run nothing else), with the same
    /// settings as the command connection. Fails if Redis cannot be reached.
    pub async fn subscriber(&self) -> Result<SubscriberClient> {
        let subscriber = Builder::from_config(self.0.config.clone())
            .with_connection_config(|c| c.connection_timeout = self.0.command_timeout)
            .set_policy(reconnect_policy())
            .build_subscriber_client()
            .map_err(Error::redis("subscriber setup"))?;
        super::failover::follow_leader(&subscriber, &self.0.client, &self.0.config, self.tasks());
        if self.0.fail_fast {
            // A Redlock primary: subscriptions need only a majority, so each connects in the
            // background (the first connection retries like a reconnection), none waited for.
            drop(subscriber.connect());
        } else {
            // A connection set-up, not a command: on a cluster it reaches every node and reads
            // the slot map, which a loaded machine does not always do within a short command
            // timeout (300 ms in the fault tests), and failing here stops the server.
            let limit = self.0.command_timeout.max(SUBSCRIBER_CONNECT_LEAST);
            bounded(limit, "subscriber connect", subscriber.init()).await?;
        }
        Ok(subscriber)
    }

    /// Changes after every reconnection to Redis: leases re-check their keys then.
    pub fn reconnects(&self) -> watch::Receiver<u64> {
        self.0.reconnects.clone()
    }

    /// Reads every node's `maxmemory-policy`, replicas and persistence again (the health check
    /// does, every second).
    pub async fn check_eviction(&self) {
        let (client, timeout) = (&self.0.client, self.0.command_timeout);
        tokio::join!(
            self.0.eviction.check(client, timeout),
            self.0.replication.check(client, timeout)
        );
    }

    /// Why no new lease may be taken on `key`'s node now, for want of replicas or because it
    /// came back empty (see [`super::replication`]).
    pub fn replication_refusal(&self, key: &str) -> Option<Error> {
        self.0.replication.refusal(&self.0.client, key)
    }

    /// Why no new lease may be taken on this connection's Redis now: a node whose
    /// `maxmemory-policy` may evict it (unless `--redis-allow-eviction`).
    pub fn eviction_refusal(&self) -> Option<Error> {
        self.0.eviction.refusal()
    }

    /// Whether the command connection is up now.
    pub fn is_up(&self) -> bool {
        self.0.client.is_connected()
    }

    /// A Redlock primary that is down now: its commands fail at once (see
    /// [`RedisSettings::fail_fast`]).
    fn failing_fast(&self) -> bool {
        self.0.fail_fast && !self.is_up()
    }

    /// Loads a script into Redis's cache, so later calls can run it by SHA. A Redlock primary
    /// that is down is skipped: the first call after it is back loads the script (`NOSCRIPT`).
    pub async fn load(&self, script: &Script) -> Result<()> {
        if self.failing_fast() {
            return Ok(());
        }
        self.bounded("script load", script.load(&self.0.client))
            .await
    }

    /// Runs a script by SHA, loading it again if Redis forgot it (restart, `SCRIPT FLUSH`),
    /// within the command timeout.
    ///
    /// `arguments` builds the script's keys and arguments; it is called again for each retry
    /// (`NOSCRIPT`, `TRYAGAIN`) instead of a copy being kept for one: fred's
    /// `evalsha_with_reload` clones both for every call, and those copies and their drops were
    /// a tenth of a unary `Acquire`'s own CPU.
    ///
    /// On a cluster, a script refused with `TRYAGAIN` (its keys' slot is moving and they are
    /// split between the two nodes for now; the script did not run) runs again after a short
    /// pause, within the same timeout: the move is usually over in milliseconds, and a release
    /// or a hand-over refused meanwhile would otherwise wait for a TTL.
    ///
    /// The call's future is boxed: it is large (both `EVALSHA`s and the reload), and every
    /// caller's future up to the gRPC handler would otherwise carry it and copy it at each move
    /// (2-4 % of a unary `Acquire`'s CPU went to those copies).
    pub async fn eval<R: FromValue>(
        &self,
        script: &Script,
        context: &'static str,
        arguments: impl Fn() -> (Vec<String>, Vec<Value>),
    ) -> Result<R> {
        let client = &self.0.client;
        let clustered = self.0.config.server.is_clustered();
        let call = Box::pin(async move {
            let mut pause = TRY_AGAIN_FIRST_PAUSE;
            loop {
                match evalsha_with_reload(client, script, &arguments).await {
                    Err(error) if clustered && is_try_again(&error) => {
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(TRY_AGAIN_LAST_PAUSE);
                    }
                    answer => return answer,
                }
            }
        });
        self.bounded(context, call).await
    }

    /// Runs a script whose effect the server vouches for (a grant, a renewal, a resume, an
    /// announcement), and answers only once the replicas (and disk) `--redis-replicas` and
    /// `--redis-durable` ask for have it, when `written` says the answer wrote something to
    /// vouch for: [`Error::NotReplicated`] otherwise (the caller gives a grant back; a renewal
    /// extends nothing).
    ///
    /// When no `WAIT` is in flight on the node, this call's own follows its script in the same
    /// write (a pipeline: one round trip; not on a Cluster, see below); otherwise it waits for
    /// the next one sent after its script answered, shared with every call that came meanwhile
    /// (see [`super::acknowledgement`]).
    pub async fn eval_vouched<R: FromValue>(
        &self,
        script: &Script,
        context: &'static str,
        ttl: Duration,
        written: impl Fn(&R) -> bool,
        arguments: impl Fn() -> (Vec<String>, Vec<Value>),
    ) -> Result<R> {
        let (keys, args) = arguments();
        let key = keys.first().cloned().unwrap_or_default();
        let client = &self.0.client;
        let Some(plan) = self.0.replication.plan(client, &key, ttl, context)? else {
            return self.eval(script, context, arguments).await;
        };
        let wait = self.wait_timeout();
        // On a Cluster a script may be redirected (MOVED) to another node than the one its
        // `WAIT` was sent to in the same write: there the `WAIT` goes after the answer, to the
        // node the slot map names then.
        let clustered = client.is_clustered();
        if !clustered && let Some(lead) = plan.try_lead() {
            let slot = fred::util::redis_keyslot(key.as_bytes());
            let pipeline = client.pipeline();
            let evalsha = CustomCommand::new_static("EVALSHA", ClusterHash::Custom(slot), false);
            let mut call: Vec<Value> = Vec::with_capacity(2 + keys.len() + args.len());
            call.push(script.sha1().clone().into());
            call.push(Value::from(keys.len() as i64));
            call.extend(keys.into_iter().map(Value::from));
            call.extend(args);
            let (wait_command, wait_args) = plan.wait_command(slot, wait);
            let queued = async {
                pipeline.custom::<(), _>(evalsha, call).await?;
                pipeline.custom::<(), _>(wait_command, wait_args).await?;
                Ok::<_, fred::error::Error>(pipeline.try_all::<Value>().await)
            };
            let mut replies = self.bounded(context, queued).await?.into_iter();
            let (reply, acked) = (replies.next(), replies.next());
            let acked = match acked {
                Some(Ok(reply)) => plan.acked(&reply),
                _ => None,
            };
            lead.finish(acked);
            match reply {
                Some(Ok(reply)) => {
                    let answer = R::from_value(reply).map_err(Error::redis(context))?;
                    if written(&answer) {
                        plan.check(acked)?;
                    }
                    return Ok(answer);
                }
                // NOSCRIPT (a restart, SCRIPT FLUSH), TRYAGAIN (a slot moving): the plain path
                // below reloads or retries; its acknowledgement is the shared one.
                Some(Err(error))
                    if error.details().starts_with("NOSCRIPT") || is_try_again(&error) => {}
                Some(Err(error)) => return Err(Error::redis(context)(error)),
                None => return Err(Error::NotConnected { context }),
            }
        }
        let answer: R = self.eval(script, context, arguments).await?;
        if !written(&answer) {
            return Ok(answer);
        }
        let plan = match clustered {
            // The slot map as it is now, after any redirection the script followed.
            true => match self.0.replication.plan(client, &key, ttl, context)? {
                Some(plan) => plan,
                None => return Ok(answer),
            },
            false => plan,
        };
        let acked = plan
            .rounds_covering(client, wait, self.0.command_timeout * 2)
            .await;
        plan.check(acked)?;
        Ok(answer)
    }

    /// How long one `WAIT` may block: half the command timeout, so that it answers (with too
    /// few) well within it.
    fn wait_timeout(&self) -> Duration {
        (self.0.command_timeout / 2).max(Duration::from_millis(1))
    }

    /// Bounds a Redis call by the command timeout, so no caller waits on a dead connection.
    /// The call first waits its turn among the commands in flight; the timeout starts when it
    /// is sent.
    ///
    /// With traces on, the call is a span (`redis <context>`) under the call or the lease that
    /// sent it; a call of nobody's (the scheduler's batched renewals) starts no trace of its own.
    pub async fn bounded<T>(
        &self,
        context: &'static str,
        call: impl Future<Output = Result<T, fred::error::Error>>,
    ) -> Result<T> {
        if tracing::enabled!(target: crate::TRACES, tracing::Level::TRACE)
            && !tracing::Span::current().is_none()
        {
            let span = tracing::trace_span!(
                target: crate::TRACES,
                "redis",
                otel.name = %format_args!("redis {context}"),
                otel.kind = "client",
                db.system = "redis",
                db.operation = context,
            );
            return self.bounded_untraced(context, call).instrument(span).await;
        }
        self.bounded_untraced(context, call).await
    }

    async fn bounded_untraced<T>(
        &self,
        context: &'static str,
        call: impl Future<Output = Result<T, fred::error::Error>>,
    ) -> Result<T> {
        if self.failing_fast() {
            return Err(Error::NotConnected { context });
        }
        let _place = self
            .0
            .in_flight
            .acquire()
            .await
            .map_err(|_| Error::ShuttingDown)?;
        let _in_flight = self.0.metrics.redis_command();
        let sent = Instant::now();
        let answer = bounded(self.0.command_timeout, context, call).await;
        self.0.metrics.redis_round_trip(sent.elapsed());
        answer
    }

    /// Runs `call` as a background task of the server, for exits that cannot wait for Redis: a
    /// failure is only logged, with what it costs (`fallback`), since nobody is left to hear of
    /// it. Shutdown waits for these too.
    pub fn in_background(
        &self,
        span: tracing::Span,
        fallback: &'static str,
        call: impl Future<Output = Result<()>> + Send + 'static,
    ) {
        if tokio::runtime::Handle::try_current().is_err() {
            span.in_scope(|| warn!("no runtime left; {fallback}"));
            return;
        }
        self.tasks().spawn(
            async move {
                if let Err(error) = call.await {
                    warn!(%error, "{fallback}");
                }
            }
            .instrument(span),
        );
    }

    /// Whether Redis answers a PING within the command timeout. Not queued behind the commands
    /// in flight: it asks whether Redis is there, not how busy we are.
    pub async fn reachable(&self) -> bool {
        let ping = self.0.client.ping::<Value>(None);
        bounded(self.0.command_timeout, "ping", ping).await.is_ok()
    }

    /// Closes the connection: for the end of `serve`, once every lease has let go.
    pub async fn close(&self) {
        if let Err(error) = self.bounded("quit", self.0.client.quit()).await {
            warn!(%error, "could not close the Redis connection cleanly");
        }
    }

    /// The Redis process's identity: it changes when Redis restarts.
    async fn run_id(&self) -> Result<String> {
        run_id(&self.0.client, self.0.command_timeout).await
    }
}

/// Announces each reconnection, and says whether Redis restarted (its `run_id` changed), in
/// which case it has probably lost every lock.
struct ReconnectWatcher {
    client: Client,
    command_timeout: Duration,
    run_id: String,
    reconnected: watch::Sender<u64>,
    eviction: Arc<Eviction>,
    replication: Arc<Replication>,
}

impl ReconnectWatcher {
    async fn run(mut self, tasks: Tasks) {
        let mut events = self.client.reconnect_rx();
        loop {
            tokio::select! {
                event = events.recv() => match event {
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                () = tasks.stopping() => return,
            }
            // First what the node is now: one that came back empty must hold new grants back
            // before anything else goes on (see `replication`).
            self.replication
                .check(&self.client, self.command_timeout)
                .await;
            match run_id(&self.client, self.command_timeout).await {
                Ok(new) if new != self.run_id => {
                    warn!(old = %self.run_id, new = %new, "Redis restarted (new run_id): its locks may be gone; re-checking every lease");
                    self.run_id = new;
                }
                Ok(_) => info!("reconnected to Redis; re-checking every lease"),
                Err(error) => {
                    warn!(%error, "reconnected to Redis but could not read its run_id; re-checking every lease")
                }
            }
            self.reconnected.send_modify(|count| *count += 1);
            // A new primary (failover, restart) may be configured differently. Read after the
            // leases were told, so that their re-check waits for nothing.
            self.eviction
                .check(&self.client, self.command_timeout)
                .await;
        }
    }
}

/// The node lists operators write, as fred reads them:
/// - `redis-cluster://a:1,b:2,c:3` -> `redis-cluster://a:1?node=b:2&node=c:3`;
/// - `redis-sentinel://a:1,b:2/service` -> `redis-sentinel://a:1?node=b:2&sentinelServiceName=service`
///   (a number after the slash stays the database, as fred reads it).
///
/// Any other URL is returned as it is.
fn node_list_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let sentinel = scheme.ends_with("-sentinel");
    if !sentinel && !scheme.ends_with("-cluster") {
        return url.to_owned();
    }
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let (credentials, hosts) = match authority.rsplit_once('@') {
        Some((credentials, hosts)) => (format!("{credentials}@"), hosts),
        None => (String::new(), authority),
    };
    let mut nodes = hosts.split(',').filter(|node| !node.is_empty());
    let Some(first) = nodes.next() else {
        return url.to_owned();
    };
    let mut params: Vec<String> = nodes.map(|node| format!("node={node}")).collect();
    let (path, query) = match tail.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (tail, None),
    };
    let mut path = path.to_owned();
    if sentinel {
        let name = path.trim_start_matches('/');
        if !name.is_empty() && name.parse::<u8>().is_err() {
            params.push(format!("sentinelServiceName={name}"));
            path.clear();
        }
    }
    if params.is_empty() {
        return url.to_owned();
    }
    let query = match query {
        Some(query) => format!("{query}&{}", params.join("&")),
        None => params.join("&"),
    };
    format!("{scheme}://{credentials}{first}{path}?{query}")
}

/// The Redis URL with its password (if any) replaced, for logs and errors.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((credentials, host)) = rest.rsplit_once('@') else {
        return url.to_owned();
    };
    match credentials.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => format!("{scheme}://***@{host}"),
    }
}

async fn run_id(client: &Client, timeout: Duration) -> Result<String> {
    let info: String = bounded(
        timeout,
        "info",
        client.info(Some(fred::types::InfoKind::Server)),
    )
    .await?;
    Ok(info
        .lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .unwrap_or("unknown")
        .trim()
        .to_owned())
}

async fn bounded<T>(
    timeout: Duration,
    context: &'static str,
    call: impl Future<Output = Result<T, fred::error::Error>>,
) -> Result<T> {
    match tokio::time::timeout(timeout, call).await {
        Ok(result) => result.map_err(Error::redis(context)),
        Err(_) => Err(Error::RedisTimeout { context, timeout }),
    }
}

/// A duration as the milliseconds argument of a command or script (`PX`, a TTL), saturating:
/// every key space states its TTLs this way.
pub fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// The least time a subscriber connection is given to connect (see [`Connection::subscriber`]).
const SUBSCRIBER_CONNECT_LEAST: Duration = Duration::from_secs(5);

/// The first pause before a script refused with `TRYAGAIN` runs again; it doubles up to
/// [`TRY_AGAIN_LAST_PAUSE`].
const TRY_AGAIN_FIRST_PAUSE: Duration = Duration::from_millis(5);
const TRY_AGAIN_LAST_PAUSE: Duration = Duration::from_millis(100);

/// `EVALSHA`; on `NOSCRIPT`, `SCRIPT LOAD` (on every node of a cluster) and `EVALSHA` once more,
/// with the arguments built again: fred's `Script::evalsha_with_reload` without its copies.
async fn evalsha_with_reload<R: FromValue>(
    client: &Client,
    script: &Script,
    arguments: &impl Fn() -> (Vec<String>, Vec<Value>),
) -> Result<R, fred::error::Error> {
    let (keys, args) = arguments();
    match script.evalsha(client, keys, args).await {
        Err(error) if error.details().starts_with("NOSCRIPT") => {
            script.load(client).await?;
            let (keys, args) = arguments();
            script.evalsha(client, keys, args).await
        }
        answer => answer,
    }
}

/// Whether Redis refused a command with `TRYAGAIN`: a cluster slot in migration with the
/// command's keys on both sides of it. The command did not run.
fn is_try_again(error: &fred::error::Error) -> bool {
    error.details().starts_with("TRYAGAIN")
}

/// After start, lost connections are retried forever (50 ms doubling to 2 s); leases meanwhile
/// run on their own validity clocks and report `Lost` when it runs out.
fn reconnect_policy() -> ReconnectPolicy {
    ReconnectPolicy::new_exponential(0, 50, 2_000, 2)
}

#[cfg(test)]
mod tests {
    use super::node_list_url;

    #[test]
    fn node_lists_become_fred_s_parameters() {
        assert_eq!(
            node_list_url("redis-cluster://a:1,b:2,c:3"),
            "redis-cluster://a:1?node=b:2&node=c:3"
        );
        assert_eq!(
            node_list_url("rediss-cluster://u:p@a:1,b:2?x=y"),
            "rediss-cluster://u:p@a:1?x=y&node=b:2"
        );
        assert_eq!(node_list_url("redis://a:1"), "redis://a:1");
        assert_eq!(
            node_list_url("redis-cluster://a:1?node=b:2"),
            "redis-cluster://a:1?node=b:2"
        );
        assert_eq!(
            node_list_url("redis-sentinel://a:1,b:2,c:3/leasehold"),
            "redis-sentinel://a:1?node=b:2&node=c:3&sentinelServiceName=leasehold"
        );
        assert_eq!(
            node_list_url("redis-sentinel://a:1/2?sentinelServiceName=s"),
            "redis-sentinel://a:1/2?sentinelServiceName=s"
        );
    }
}
