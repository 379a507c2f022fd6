//! `leasehold serve`: the server process. Reads its settings (flags, variables, config file),
//! connects to Redis (refusing to start without it), listens, and stops cleanly on Ctrl-C or
//! SIGTERM.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use leasehold::error::Error;
use leasehold::lease::waiting::WaitConfig;
use leasehold::metrics::Metrics;
use leasehold::server::auth::AuthPolicy;
use leasehold::server::{Listeners, ServerConfig, serve as serve_on};
use leasehold::store::connection::redacted;
use leasehold::store::{RedisSettings, Store};
use leasehold::tls::TlsFiles;
use tokio::net::TcpListener;
use tracing::{info, warn};

use super::ServeArgs;

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
