//! `leasehold serve`: the server process. Connects to Redis (refusing to start without it),
//! listens, and stops cleanly on Ctrl-C or SIGTERM.

use std::process::ExitCode;

use leasehold::lease::waiting::WaitConfig;
use leasehold::server::{ServerConfig, serve as serve_on};
use leasehold::store::Store;
use tokio::net::TcpListener;
use tracing::info;

use super::ServeArgs;

/// Runs the server until a shutdown signal.
pub async fn serve(args: ServeArgs) -> ExitCode {
    let store = match Store::connect(&args.redis, &args.key_prefix, args.redis_timeout).await {
        Ok(store) => store,
        Err(err) => {
            eprintln!("leasehold: cannot use Redis at {}: {err}", args.redis);
            return ExitCode::FAILURE;
        }
    };
    let listener = match TcpListener::bind(args.listen).await {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("leasehold: cannot listen on {}: {err}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    let addr = listener.local_addr().unwrap_or(args.listen);
    info!(%addr, redis = %args.redis, prefix = %args.key_prefix, "serving");
    // On stdout, for scripts and tests that start us on port 0.
    println!("leasehold: listening on {addr}");
    let config = ServerConfig {
        keepalive_interval: args.keepalive_interval,
        keepalive_timeout: args.keepalive_timeout,
        max_leases_per_connection: args.max_leases_per_connection,
        wakeups: args.wakeups,
        wait: WaitConfig {
            waiter_ttl: args.waiter_ttl,
            max_waiters: args.max_waiters,
        },
    };
    match serve_on(listener, store, config, shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("leasehold: server failed: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Ctrl-C or SIGTERM (what `docker stop` and systemd send).
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
