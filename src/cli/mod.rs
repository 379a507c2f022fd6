//! The `leasehold` command line: `serve`, and the client commands `run`, `status`, `release`
//! and `bench`. Not library API: this folder belongs to the binary alone.
//!
//! - here: the arguments (clap) and which command runs;
//! - [`serve`]: the server process (Redis, listener, signals);
//! - [`run`]: hold a lock while a command runs; [`progress`]: its waiting line on a terminal;
//! - [`inspect`]: `status` and `release`;
//! - [`bench`]: what a lease costs against direct Redis.

mod bench;
mod inspect;
mod progress;
mod run;
mod serve;

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use leasehold::client::ClientError;
use leasehold::server::admission::DEFAULT_MAX_LEASES_PER_CONNECTION;
use tonic::Code;

/// The lock stayed taken for the whole wait (EX_TEMPFAIL).
pub const EXIT_NOT_ACQUIRED: u8 = 75;
/// The lease was lost while the command ran; the command was stopped.
pub const EXIT_LOST: u8 = 76;
/// The server could not be reached, or could not serve the request (EX_UNAVAILABLE).
pub const EXIT_UNAVAILABLE: u8 = 69;
/// An argument was refused, here or by the server (EX_USAGE).
pub const EXIT_USAGE: u8 = 64;

/// A refused argument: one plain sentence, and the usage status.
fn usage(problem: impl std::fmt::Display) -> ExitCode {
    eprintln!("leasehold: {problem}");
    ExitCode::from(EXIT_USAGE)
}

/// A client command's failure, as one plain sentence: a request the server refused as invalid
/// is the caller's to fix (usage, 64); anything else means the service could not serve it (69).
fn fail(error: ClientError) -> ExitCode {
    let ClientError::Status(status) = &error else {
        eprintln!("leasehold: {error}");
        return ExitCode::from(EXIT_UNAVAILABLE);
    };
    let message = status.message();
    match status.code() {
        Code::InvalidArgument | Code::OutOfRange | Code::FailedPrecondition => usage(message),
        Code::Unavailable => {
            eprintln!("leasehold: the server is unavailable: {message}");
            ExitCode::from(EXIT_UNAVAILABLE)
        }
        Code::ResourceExhausted => {
            eprintln!("leasehold: the server is at a limit: {message}");
            ExitCode::from(EXIT_UNAVAILABLE)
        }
        code => {
            eprintln!("leasehold: the server answered {code:?}: {message}");
            ExitCode::from(EXIT_UNAVAILABLE)
        }
    }
}

#[derive(Parser)]
#[command(
    name = "leasehold",
    version,
    about = "A distributed lock service on Redis, held for the life of a gRPC stream"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the lock server.
    ///
    /// Example: leasehold serve --redis redis://127.0.0.1:6379 --listen 127.0.0.1:50051
    Serve(ServeArgs),
    /// Hold a lock while a command runs.
    #[command(after_help = "Examples:
  leasehold run nightly-report -- ./report.sh
  leasehold run --ttl 30s --wait 5m backup -- pg_dump -f /backups/db.sql mydb

The command gets LEASEHOLD_FENCING_TOKEN and LEASEHOLD_LOCK in its environment.
Exit status: the command's own; 75 if the lock stayed taken for the whole wait; 76 if the lease
was lost while the command ran (it gets SIGTERM, then SIGKILL after --grace); 64 if an argument
is refused; 69 if the server could not be reached or could not serve the request; 130/143 when
interrupted.")]
    Run(RunArgs),
    /// Show who holds locks: the named ones, or every held lock.
    #[command(after_help = "Examples:
  leasehold status
  leasehold status nightly-report
  leasehold status --json backup nightly-report")]
    Status(StatusArgs),
    /// Measure a running server against direct Redis (starts nothing itself).
    #[command(after_help = "Examples:
  leasehold bench --server http://127.0.0.1:50051 --redis redis://127.0.0.1:6379
  leasehold bench --quick --json bench.json")]
    Bench(BenchArgs),
    /// Release a lock by its token (taken with the unary Acquire call).
    #[command(after_help = "Example:
  leasehold release nightly-report 3f2a9c...")]
    Release(ReleaseArgs),
}

#[derive(clap::Args)]
struct ServerArg {
    /// The Leasehold server.
    #[arg(
        long,
        env = "LEASEHOLD_SERVER",
        default_value = "http://127.0.0.1:50051"
    )]
    server: String,
}

#[derive(clap::Args)]
struct RunArgs {
    #[command(flatten)]
    server: ServerArg,
    /// How long the lock outlives this process if it dies with its server (500ms, 30s, 5m).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    ttl: Duration,
    /// How long to wait for a taken lock (0s: fail at once).
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    wait: Duration,
    /// How others see this holder (default: host and pid).
    #[arg(long)]
    holder: Option<String>,
    /// Between SIGTERM and SIGKILL when the lease is lost or we are interrupted.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// The lock's name.
    name: String,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

#[derive(clap::Args)]
struct StatusArgs {
    #[command(flatten)]
    server: ServerArg,
    /// Print JSON, for scripts.
    #[arg(long)]
    json: bool,
    /// Lock names (none: every held lock, up to 1,000).
    names: Vec<String>,
}

#[derive(clap::Args)]
struct BenchArgs {
    #[command(flatten)]
    server: ServerArg,
    /// The Redis the server uses, for the direct baseline.
    #[arg(
        long,
        env = "LEASEHOLD_REDIS",
        default_value = "redis://127.0.0.1:6379"
    )]
    redis: String,
    /// A smoke run of a few seconds (figures not to be judged).
    #[arg(long)]
    quick: bool,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Lease counts to hold at once in the held-leases section [default: 1000,10000,50000, or
    /// 200 with --quick].
    #[arg(long, value_delimiter = ',')]
    held: Option<Vec<usize>>,
    /// Run only these sections (default: all).
    #[arg(long, value_delimiter = ',')]
    only: Vec<bench::Section>,
    /// The server's process id, to report its memory per held lease (same machine only).
    #[arg(long)]
    server_pid: Option<u32>,
}

#[derive(clap::Args)]
struct ReleaseArgs {
    #[command(flatten)]
    server: ServerArg,
    /// The lock's name.
    name: String,
    /// The token returned by Acquire.
    token: String,
}

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Redis holding the locks.
    #[arg(
        long,
        env = "LEASEHOLD_REDIS",
        default_value = "redis://127.0.0.1:6379"
    )]
    redis: String,
    /// Address to serve gRPC on.
    #[arg(long, env = "LEASEHOLD_LISTEN", default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// Prefix of every Redis key the server touches.
    #[arg(long, env = "LEASEHOLD_KEY_PREFIX", default_value = "leasehold:")]
    key_prefix: String,
    /// How often to ping client connections (e.g. 5s, 500ms).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    keepalive_interval: Duration,
    /// How long a ping may go unanswered before the client's leases are released.
    /// A frozen client loses its locks within keepalive-interval + keepalive-timeout.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    keepalive_timeout: Duration,
    /// Open lease streams one client connection may have; past it, RESOURCE_EXHAUSTED.
    #[arg(long, default_value_t = DEFAULT_MAX_LEASES_PER_CONNECTION)]
    max_leases_per_connection: usize,
    /// Wake waiters by Redis pub/sub when a lock frees (`false`: waiters poll with backoff).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    wakeups: bool,
    /// How long the line keeps a waiter whose server stopped vouching for it (crashed).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    waiter_ttl: Duration,
    /// Waiters this server accepts at once; past it, RESOURCE_EXHAUSTED.
    #[arg(long, default_value_t = 10_000)]
    max_waiters: usize,
    /// Longest wait for one Redis command.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    redis_timeout: Duration,
}

/// Parses the command line and runs the command.
pub async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "leasehold=info".into()),
        )
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal: no escape codes in files and log collectors.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::serve(args).await,
        Command::Run(args) => {
            run::run(run::RunOptions {
                server: args.server.server,
                name: args.name,
                ttl: args.ttl,
                wait: args.wait,
                holder: args.holder,
                grace: args.grace,
                command: args.command,
            })
            .await
        }
        Command::Status(args) => inspect::status(args.server.server, args.names, args.json).await,
        Command::Bench(args) => run_bench(args).await,
        Command::Release(args) => inspect::release(args.server.server, args.name, args.token).await,
    }
}

async fn run_bench(args: BenchArgs) -> ExitCode {
    let options = bench::BenchOptions {
        server: args.server.server,
        redis: args.redis,
        held: match (args.held, args.quick) {
            (Some(held), _) => held,
            (None, true) => vec![200],
            (None, false) => vec![1_000, 10_000, 50_000],
        },
        sections: args.only,
        server_pid: args.server_pid,
        quick: args.quick,
    };
    let figures = match bench::run(&options).await {
        Ok(figures) => figures,
        Err(error) => {
            eprintln!("leasehold: bench failed: {error}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(path) = args.json {
        if let Err(error) = std::fs::write(&path, figures.to_string()) {
            eprintln!("leasehold: cannot write {}: {error}", path.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
