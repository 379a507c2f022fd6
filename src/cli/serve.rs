//! `leasehold serve`: the server process. Reads its settings (flags, variables, config file),
//! connects to Redis (refusing to start without it), listens, and stops cleanly on Ctrl-C or
//! SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use leasehold::error::Error;
use leasehold::lease::waiting::WaitConfig;
use leasehold::metrics::Metrics;
use leasehold::server::MAX_REQUEST_BYTES;
use leasehold::server::admission::{DEFAULT_MAX_LEASES, DEFAULT_MAX_LEASES_PER_CONNECTION};
use leasehold::server::auth::AuthPolicy;
use leasehold::server::{Listeners, ServerConfig, serve as serve_on};
use leasehold::store::connection::DEFAULT_MAX_IN_FLIGHT;
use leasehold::store::connection::redacted;
use leasehold::store::replication::{Replicas, ReplicationSettings};
use leasehold::store::{RedisSettings, Store};
use leasehold::tls::TlsFiles;
use tokio::net::TcpListener;
use tracing::{info, warn};

use super::LogFormat;

/// Redis is configured so that it may lose held locks (EX_CONFIG).
pub const EXIT_CONFIG: u8 = 78;

/// Runs the server until a shutdown signal.
/// How the server reaches Redis, as `leasehold_info` labels it.
fn redis_mode(args: &ServeArgs) -> &'static str {
    let scheme = args.redis.split("://").next().unwrap_or_default();
    if !args.redlock.is_empty() {
        "redlock"
    } else if scheme.contains("sentinel") {
        "sentinel"
    } else if scheme.contains("cluster") {
        "cluster"
    } else {
        "single"
    }
}

pub async fn serve(args: ServeArgs) -> ExitCode {
    let redis_shown = if args.redlock.is_empty() {
        redacted(&args.redis)
    } else {
        let shown: Vec<String> = args.redlock.iter().map(|url| redacted(url)).collect();
        format!("Redlock over {}", shown.join(","))
    };
    let urls = std::iter::once(&args.redis).chain(&args.redlock);
    let passwords_shown = urls
        .filter(|url| redacted(url) != **url)
        .any(|url| std::env::args().any(|arg| arg.contains(url.as_str())));
    if passwords_shown {
        warn!(
            "the Redis password is on the command line, where every user can read it: use LEASEHOLD_REDIS, the config file or --redis-password-file"
        );
    }
    let config = match server_config(&args) {
        Ok(config) => config,
        Err(problem) => return super::usage(problem),
    };
    let metrics = match args.metrics {
        Some(_) => match Metrics::enabled(args.metrics_name_prefix.clone()) {
            Ok(metrics) => metrics,
            Err(error) => return super::usage(error),
        },
        None => Metrics::default(),
    };
    let redis = RedisSettings {
        url: args.redis.clone(),
        command_timeout: args.redis_timeout,
        ca_file: args.redis_ca.clone(),
        password_file: args.redis_password_file.clone(),
        max_in_flight: args.redis_max_in_flight,
        fail_fast: false,
        allow_eviction: args.redis_allow_eviction,
        replication: ReplicationSettings {
            replicas: args.redis_replicas,
            durable: args.redis_durable,
            restart_hold: args.redis_restart_hold,
        },
    };
    if args.redis_allow_eviction {
        warn!(
            "--redis-allow-eviction: serving even where Redis's maxmemory-policy may evict held locks; under memory pressure Redis may drop a held lock and hand it to the next caller"
        );
    }
    let store = if args.redlock.is_empty() {
        Store::connect(&redis, &args.key_prefix, metrics).await
    } else {
        Store::connect_redlock(&redis, &args.redlock, &args.key_prefix, metrics).await
    };
    let store = match store {
        Ok(store) => store,
        Err(Error::RedisMayEvict { node, policy }) => {
            eprintln!(
                "leasehold: redis {node} has maxmemory-policy {policy}, which may evict held locks; set it to noeviction (CONFIG SET maxmemory-policy noeviction) or start with --redis-allow-eviction to accept the risk"
            );
            return ExitCode::from(EXIT_CONFIG);
        }
        Err(Error::FailedPrecondition(why)) => {
            eprintln!("leasehold: {why}");
            return ExitCode::from(EXIT_CONFIG);
        }
        Err(err) => {
            eprintln!("leasehold: cannot use Redis at {redis_shown}: {err}");
            return ExitCode::FAILURE;
        }
    };
    store.connection().metrics().info(redis_mode(&args));
    store
        .connection()
        .metrics()
        .limit("redis_in_flight", args.redis_max_in_flight);
    let grpc = match TcpListener::bind(args.listen).await {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("leasehold: cannot listen on {}: {err}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    let Ok(metrics) = listen_if_asked(args.metrics, "serve metrics").await else {
        return ExitCode::FAILURE;
    };
    let Ok(console) = listen_if_asked(args.console, "serve the console").await else {
        return ExitCode::FAILURE;
    };
    let addr = grpc.local_addr().unwrap_or(args.listen);
    let tls = config.tls.is_some();
    info!(%addr, redis = %redis_shown, prefix = %args.key_prefix, tls, auth = config.auth.is_some(), "serving");
    // On stdout, for scripts and tests that start us on port 0.
    println!("leasehold: listening on {addr}");
    if let Some(metrics) = metrics.as_ref().and_then(|l| l.local_addr().ok()) {
        println!("leasehold: metrics on http://{metrics}/metrics");
    }
    if let Some(console) = console.as_ref().and_then(|l| l.local_addr().ok()) {
        let scheme = if tls { "https" } else { "http" };
        println!("leasehold: console on {scheme}://{console}/");
    }
    let listeners = Listeners {
        grpc,
        metrics,
        console,
    };
    match serve_on(listeners, store, config, shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("leasehold: server failed: {err}");
            ExitCode::FAILURE
        }
    }
}

/// A listener of its own (`--metrics`, `--console`) if its address was given; `Err` once the
/// reason it cannot be had is said.
async fn listen_if_asked(addr: Option<SocketAddr>, what: &str) -> Result<Option<TcpListener>, ()> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    TcpListener::bind(addr).await.map(Some).map_err(|err| {
        eprintln!("leasehold: cannot {what} on {addr}: {err}");
    })
}

/// The server's settings from the arguments; the auth file is read and checked here.
fn server_config(args: &ServeArgs) -> Result<ServerConfig, String> {
    let auth = match &args.auth_file {
        Some(path) => Some(Arc::new(AuthPolicy::load(path).map_err(|e| e.to_string())?)),
        None => None,
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: args.tls_client_ca.clone(),
        }),
        _ => None,
    };
    Ok(ServerConfig {
        keepalive_interval: args.keepalive_interval,
        keepalive_timeout: args.keepalive_timeout,
        max_leases_per_connection: args.max_leases_per_connection,
        max_leases: args.max_leases,
        max_message_bytes: args.max_message_bytes,
        wakeups: args.wakeups,
        wait: WaitConfig {
            waiter_ttl: args.waiter_ttl,
            max_waiters: args.max_waiters,
            max_waiters_per_lock: args.max_waiters_per_lock as usize,
        },
        drain: args.drain,
        tls,
        auth,
        echo: args.echo,
        traces: args.otlp_endpoint.is_some(),
    })
}

/// Ctrl-C or SIGTERM (what `docker stop`, Kubernetes and systemd send).
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

#[cfg(test)]
mod tests {
    use leasehold::store::connection::redacted;

    #[test]
    fn passwords_never_reach_the_logs() {
        assert_eq!(
            redacted("redis://app:s3cret@redis:6379/0"),
            "redis://app:***@redis:6379/0"
        );
        assert_eq!(redacted("rediss://s3cret@redis"), "rediss://***@redis");
        assert_eq!(redacted("redis://redis:6379"), "redis://redis:6379");
    }
}

/// `leasehold serve`'s options. Every one can also come from a `LEASEHOLD_*` variable and from
/// the `--config` file (its key is the option's name, as `max-leases` or `max_leases`); a flag
/// beats the variable, which beats the file, which beats the default.
#[derive(clap::Args)]
#[command(
    after_help = "Every option also reads a LEASEHOLD_* variable (shown with it) and a key of \
the --config TOML file with the option's name (keepalive-interval = \"5s\"); flags beat variables, \
variables beat the file, the file beats the defaults.\n\nSIGTERM or Ctrl-C: health turns NOT_SERVING, \
no new connection is accepted, and every lease with a resume grace (every client's default) is \
handed over: its stream ends UNAVAILABLE (HANDED_OVER) and the lease stays in Redis for its grace, \
for its client to resume on another replica with the same token and fencing token. Leases \
without a grace are released and their holders told Lost (\"server shutting down\"). The process \
exits 0 within --drain. SIGHUP re-reads the TLS certificate files.\n\nExit status: 0 after \
SIGTERM or Ctrl-C; 64 if an option is refused; 78 if a Redis node's maxmemory-policy may evict \
held locks (see --redis-allow-eviction); 1 if Redis cannot be used, an address cannot be \
listened on, or the server fails."
)]
pub struct ServeArgs {
    /// A TOML file of these options (keys: the option names).
    #[arg(long, env = "LEASEHOLD_CONFIG")]
    config: Option<PathBuf>,
    /// Redis holding the locks: redis://HOST:PORT (one Redis);
    /// redis-sentinel://S1:26379,S2:26379,S3:26379/NAME (behind Sentinel; NAME as in `sentinel
    /// monitor`; the Sentinels take the same user and password as Redis);
    /// redis-cluster://A:7000,B:7001,C:7002 (a Cluster); with TLS, rediss://, rediss-sentinel://
    /// (to the Sentinels and the primary alike) or rediss-cluster://. Put a password in the
    /// variable or the config file, or use --redis-password-file: a command line is visible to
    /// every user.
    #[arg(
        long,
        env = "LEASEHOLD_REDIS",
        default_value = "redis://127.0.0.1:6379",
        hide_env_values = true
    )]
    redis: String,
    /// Redlock instead of --redis: independent Redis primaries (an odd number, at least 3),
    /// comma-separated. A lock is held while a majority holds it; see docs/redis-modes.md.
    #[arg(
        long,
        env = "LEASEHOLD_REDLOCK",
        value_delimiter = ',',
        hide_env_values = true
    )]
    redlock: Vec<String>,
    /// A file whose first line is the Redis password (AUTH, or ACL with the URL's user name).
    #[arg(long, env = "LEASEHOLD_REDIS_PASSWORD_FILE")]
    redis_password_file: Option<PathBuf>,
    /// CA certificates (PEM) to trust for rediss:// instead of the system's.
    #[arg(long, env = "LEASEHOLD_REDIS_CA")]
    redis_ca: Option<PathBuf>,
    /// Longest wait for one Redis command, once sent.
    #[arg(long, env = "LEASEHOLD_REDIS_TIMEOUT", default_value = "2s", value_parser = humantime::parse_duration)]
    redis_timeout: Duration,
    /// Redis commands in flight at once; more wait in line (the timeout starts when one is sent).
    #[arg(long, env = "LEASEHOLD_REDIS_MAX_IN_FLIGHT", default_value_t = DEFAULT_MAX_IN_FLIGHT)]
    redis_max_in_flight: usize,
    /// Serve even where a Redis node's maxmemory-policy is not noeviction, which lets Redis evict
    /// held locks under memory pressure (refused at start with status 78 otherwise); warned of at
    /// every start.
    #[arg(long, env = "LEASEHOLD_REDIS_ALLOW_EVICTION")]
    redis_allow_eviction: bool,
    /// Replicas that must acknowledge (WAIT) every grant, renewal and resume before it is
    /// vouched for, so that a failover cannot lose it: auto (every replica the primary reports
    /// connected; none connected: go on without, warned of), N (refuse grants while fewer are
    /// connected), or 0 (never wait: a failover may lose a lease).
    #[arg(long, env = "LEASEHOLD_REDIS_REPLICAS", default_value = "auto")]
    redis_replicas: Replicas,
    /// Also wait for the primary's own disk (WAITAOF, Redis 7.2+; or appendfsync always), so a
    /// restart of its host loses no lease; refused at start where Redis can do neither.
    #[arg(long, env = "LEASEHOLD_REDIS_DURABLE")]
    redis_durable: bool,
    /// The longest a Redis node that restarted without its data (no AOF) grants nothing, while
    /// leases its old incarnation held may still be believed: the longest TTL this server
    /// vouched for, at most this; 0s: grant at once (two holders possible).
    #[arg(long, env = "LEASEHOLD_REDIS_RESTART_HOLD", default_value = "1h", value_parser = humantime::parse_duration)]
    redis_restart_hold: Duration,
    /// Address to serve gRPC on.
    #[arg(long, env = "LEASEHOLD_LISTEN", default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// Prefix of every Redis key the server touches.
    #[arg(long, env = "LEASEHOLD_KEY_PREFIX", default_value = "leasehold:")]
    key_prefix: String,
    /// TLS certificate chain (PEM) for the gRPC listener; with --tls-key.
    #[arg(long, env = "LEASEHOLD_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) for the gRPC listener; with --tls-cert.
    #[arg(long, env = "LEASEHOLD_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// CA (PEM) that signs client certificates: when given, clients must present one (mTLS).
    #[arg(long, env = "LEASEHOLD_TLS_CLIENT_CA", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// TOML file of grants (hashed bearer tokens or certificate subjects, roles, name
    /// prefixes); when given, every call must present a granted identity.
    #[arg(long, env = "LEASEHOLD_AUTH_FILE")]
    auth_file: Option<PathBuf>,
    /// Serve Prometheus metrics on this address (GET /metrics); off when not given.
    #[arg(long, env = "LEASEHOLD_METRICS")]
    metrics: Option<SocketAddr>,
    /// Serve the web console on this address (a live page of the locks and elections held now,
    /// with Revoke for an admin); off when not given. With the gRPC port's TLS and auth: the page
    /// asks for a bearer token and may do what that token may do through gRPC.
    #[arg(long, env = "LEASEHOLD_CONSOLE")]
    console: Option<SocketAddr>,
    /// Label lease metrics by this lock-name prefix (repeatable, at most 64); others get "".
    #[arg(long, env = "LEASEHOLD_METRICS_NAME_PREFIX", value_delimiter = ',')]
    metrics_name_prefix: Vec<String>,
    /// Log lines as text or as JSON objects (RUST_LOG sets the levels).
    #[arg(long, env = "LEASEHOLD_LOG_FORMAT", default_value = "text")]
    pub(super) log_format: LogFormat,
    /// Send OpenTelemetry spans to this OTLP/gRPC receiver (e.g. http://localhost:4317): each
    /// call (continuing the caller's W3C traceparent), each lease's life, each Redis command.
    /// Off when not given. OTEL_* variables tune the exporter (OTEL_SERVICE_NAME,
    /// OTEL_TRACES_SAMPLER, OTEL_BSP_SCHEDULE_DELAY, ...).
    #[arg(long, env = "LEASEHOLD_OTLP_ENDPOINT")]
    pub(super) otlp_endpoint: Option<String>,
    /// How often to ping client connections (e.g. 5s, 500ms).
    #[arg(long, env = "LEASEHOLD_KEEPALIVE_INTERVAL", default_value = "5s", value_parser = humantime::parse_duration)]
    keepalive_interval: Duration,
    /// How long a ping may go unanswered before the client's connection is dropped. Its leases
    /// are then released, or, with a resume grace (every client's default: the TTL), kept for
    /// that grace for the client to resume: a frozen or vanished client's locks free within
    /// keepalive-interval + keepalive-timeout + its grace.
    #[arg(long, env = "LEASEHOLD_KEEPALIVE_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    keepalive_timeout: Duration,
    /// Leases one client connection may hold or wait for at once (each Lease and Campaign
    /// stream, each Session stream and each lease on it); past it, RESOURCE_EXHAUSTED.
    #[arg(long, env = "LEASEHOLD_MAX_LEASES_PER_CONNECTION", default_value_t = DEFAULT_MAX_LEASES_PER_CONNECTION)]
    max_leases_per_connection: usize,
    /// Leases the whole server may hold or wait for at once (each Lease and Campaign stream, each
    /// Session stream and each lease on it; see docs/operations.md#sizing for the memory they
    /// take); past it, RESOURCE_EXHAUSTED.
    #[arg(long, env = "LEASEHOLD_MAX_LEASES", default_value_t = DEFAULT_MAX_LEASES)]
    max_leases: usize,
    /// Largest request message in bytes; past it, RESOURCE_EXHAUSTED.
    #[arg(long, env = "LEASEHOLD_MAX_MESSAGE_BYTES", default_value_t = MAX_REQUEST_BYTES)]
    max_message_bytes: usize,
    /// Also serve a no-op echo service (leasehold.bench.v1), the transport baseline that
    /// `leasehold bench` measures leases against.
    #[arg(long, env = "LEASEHOLD_ECHO")]
    echo: bool,
    /// Wake waiters by Redis pub/sub when a lock frees (`false`: waiters poll with backoff).
    #[arg(long, env = "LEASEHOLD_WAKEUPS", default_value_t = true, action = clap::ArgAction::Set)]
    wakeups: bool,
    /// How long the line keeps a waiter whose server stopped vouching for it (crashed).
    #[arg(long, env = "LEASEHOLD_WAITER_TTL", default_value = "10s", value_parser = humantime::parse_duration)]
    waiter_ttl: Duration,
    /// Waiters this server accepts at once; past it, RESOURCE_EXHAUSTED.
    #[arg(long, env = "LEASEHOLD_MAX_WAITERS", default_value_t = 10_000)]
    max_waiters: usize,
    /// Waiters this server accepts for one lock; past it, RESOURCE_EXHAUSTED.
    #[arg(long, env = "LEASEHOLD_MAX_WAITERS_PER_LOCK", default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(1..))]
    max_waiters_per_lock: u32,
    /// On shutdown, how long to wait for every lease to be handed over or released before
    /// exiting.
    #[arg(long, env = "LEASEHOLD_DRAIN", default_value = "10s", value_parser = humantime::parse_duration)]
    drain: Duration,
}
