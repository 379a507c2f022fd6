//! The `leasehold` command line: `serve`, and the client commands `run`, `elect`, `leader`,
//! `status`, `watch`, `check`, `release`, `revoke`, `health` and `bench`; `completions` and
//! `manpage` for installing it. Not library API: this
//! folder belongs to the binary alone.
//!
//! - here: the arguments (clap) and which command runs;
//! - [`serve`]: the server process (Redis, listener, signals);
//! - [`run`]: hold a lock while a command runs; [`progress`]: its waiting line on a terminal;
//!   [`group`]: the command's process group; [`watchdog`]: stops that group if `run` dies;
//! - [`elect`]: `elect` (a command run while leader, as [`job`] runs `run`'s), `leader`;
//! - [`inspect`]: `status` and `release`; [`revoke`]: an operator's `revoke`; [`watch`]: `watch`,
//!   a line per change; [`check`]: `check`, whether a fencing token is current;
//! - [`bench`]: what a lease costs against direct Redis;
//! - [`install`]: `completions` and `manpage`, for installing the binary as a tool.

mod bench;
mod check;
mod config;
mod elect;
mod group;
mod inspect;
mod install;
mod job;
mod progress;
mod revoke;
mod run;
mod serve;
use serve::ServeArgs;
mod telemetry;
mod watch;
mod watchdog;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use leasehold_client::{ClientError, ConnectOptions};
use tonic::Code;

/// The lock stayed taken for the whole wait (EX_TEMPFAIL).
pub const EXIT_NOT_ACQUIRED: u8 = 75;
/// The lease was lost while the command ran; the command was stopped.
pub const EXIT_LOST: u8 = 76;
/// The server could not be reached, or could not serve the request (EX_UNAVAILABLE).
pub const EXIT_UNAVAILABLE: u8 = 69;
/// An argument was refused, here or by the server (EX_USAGE).
pub const EXIT_USAGE: u8 = 64;
/// The server did not recognise the caller, or its grant does not cover the call (EX_NOPERM).
pub const EXIT_NOPERM: u8 = 77;

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
        Code::Unauthenticated | Code::PermissionDenied => {
            eprintln!("leasehold: not allowed: {message}");
            ExitCode::from(EXIT_NOPERM)
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
    // The commit built (build.rs): `leasehold 0.1.0 (a097d5b 2026-12-07)`.
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("LEASEHOLD_COMMIT"), ")"),
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
    Serve(Box<ServeArgs>),
    /// Hold a lock while a command runs.
    #[command(after_help = "Examples:
  leasehold run nightly-report -- ./report.sh
  leasehold run --ttl 30s --wait 5m backup -- pg_dump -f /backups/db.sql mydb
  leasehold run --limit 4 --wait 1h encoder -- ./encode.sh   (at most 4 at once)
  leasehold run --shared --wait 1m catalog -- ./read-catalog.sh
  leasehold run --wait 1m account-17 account-42 -- ./transfer.sh   (both names, all or none)
  leasehold run --max-hold 6h --lock-delay 15s nightly-report -- ./report.sh

The command gets LEASEHOLD_FENCING_TOKEN and LEASEHOLD_LOCK (the first name's) and
LEASEHOLD_FENCING_TOKENS (a name=token line per name, in the order given) in its environment. It
runs in a process group of its own: when run stops it (lease lost, SIGINT or SIGTERM to run), the
whole group gets SIGTERM, then SIGKILL after --grace, and so do processes it leaves running when
it ends; if run is killed, a watchdog process does the same, by the lease's end at the latest. A
process that leaves the group (setsid, a daemon) escapes all of this.
Exit status: the command's own; 75 if the lock stayed taken for the whole wait; 76 if the lease
was lost, or reached --max-hold, while the command ran (it gets SIGTERM, then SIGKILL after
--grace); 64 if an argument is refused; 69 if the server could not be reached or could not serve
the request; 77 if the server did not accept the token or certificate, or the grant does not
cover the lock; 127 if the command could not be started; 130/143 when interrupted (SIGINT/SIGTERM).")]
    Run(RunArgs),
    /// Show who holds locks: the named ones, or every held lock.
    #[command(after_help = "Examples:
  leasehold status
  leasehold status nightly-report
  leasehold status --json backup nightly-report")]
    Status(StatusArgs),
    /// Print each named lock's state now, then a line per change, until interrupted.
    #[command(after_help = "Examples:
  leasehold watch nightly-report
  leasehold watch --json backup nightly-report

Each line: NAME held by HOLDER (fencing token N, ttl T ms, K waiting), or NAME free. Changes
closer together than a round trip to Redis may show as one line (the newest state). If the
server stops, the watch goes on through the next server given (or the same one back), for
about 25 seconds before giving up.
Exit status: 0 when interrupted (SIGINT/SIGTERM); 1 if SIGINT and SIGTERM cannot be handled; 64
if an argument is refused; 69 if the server could not be reached or could not serve the request
(also when no server came back to go on with); 77 if the server did not accept the token or
certificate, or the grant does not cover the lock.")]
    Watch(WatchArgs),
    /// Measure a running server against direct Redis (starts nothing itself).
    #[command(after_help = "Examples:
  leasehold bench --server http://127.0.0.1:50051 --redis redis://127.0.0.1:6379
  leasehold bench --quick --json bench.json

Exit status: 0 when every section was measured; 1 if a measurement failed (or the JSON file
could not be written); 64 if an argument is refused.")]
    Bench(BenchArgs),
    /// Ask a server whether it can serve (gRPC health): exit 0 if SERVING, 69 if not.
    #[command(after_help = "Example (a container's HEALTHCHECK):
  leasehold health --server http://127.0.0.1:50051")]
    Health(HealthArgs),
    /// Release a lock by its token (taken with the unary Acquire call).
    #[command(after_help = "Example:
  leasehold release nightly-report 3f2a9c...

Exit status: 0 if released; 1 if that token no longer held the lock (left alone); 64 if an
argument is refused; 69 if the server could not be reached or could not serve the request; 77 if
the server did not accept the token or certificate, or the grant does not cover the lock.")]
    Release(ReleaseArgs),
    /// End a holding by force (an operator's call; needs the admin role): every holder of a lock,
    /// one by its fencing token, or an election's leader.
    Revoke(revoke::RevokeArgs),
    /// Whether a fencing token is the current holding of a lock: exit 0 if so, 1 if not.
    Check(check::CheckArgs),
    /// Run a command while leader of an election (or, with --observe, follow who leads).
    Elect(elect::ElectArgs),
    /// Show who leads an election (its value and term): exit 0, or 1 if nobody does.
    Leader(elect::LeaderArgs),
    /// Print a completion script for bash, zsh or fish to stdout.
    #[command(after_help = "Examples:
  leasehold completions bash > ~/.local/share/bash-completion/completions/leasehold
  leasehold completions zsh > ~/.zfunc/_leasehold   (with ~/.zfunc in fpath)
  leasehold completions fish > ~/.config/fish/completions/leasehold.fish

Exit status: 0 when written; 1 if the script could not be written; 64 if an argument is refused.")]
    Completions(install::CompletionsArgs),
    /// Print the man page, leasehold(1), to stdout (or a page per command with --out).
    #[command(after_help = "Examples:
  leasehold manpage > ~/.local/share/man/man1/leasehold.1
  leasehold manpage --out ~/.local/share/man/man1

Exit status: 0 when written; 1 if a page could not be written; 64 if an argument is refused.")]
    Manpage(install::ManpageArgs),
    /// Started by `run` beside its command (not for people): stops the command's process group
    /// if `run` dies.
    #[command(name = watchdog::SUBCOMMAND, hide = true)]
    RunWatchdog(RunWatchdogArgs),
}

#[derive(clap::Args)]
struct RunWatchdogArgs {
    /// `run --grace`.
    #[arg(long, value_parser = humantime::parse_duration)]
    grace: Duration,
}

#[derive(clap::Args)]
struct ServerArg {
    /// The Leasehold server (https:// for TLS), or a comma-separated list of its replicas (a
    /// host name stands for every address it resolves to); on failure the next is used.
    #[arg(
        long,
        env = "LEASEHOLD_SERVER",
        default_value = "http://127.0.0.1:50051"
    )]
    server: String,
    /// A file holding the bearer token to present (or set LEASEHOLD_TOKEN; never a flag, which
    /// every user could read in the process list).
    #[arg(long, env = "LEASEHOLD_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// CA (PEM) to trust for the server's certificate (https://).
    #[arg(long, env = "LEASEHOLD_TLS_CA")]
    tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS; with --tls-key.
    #[arg(long, env = "LEASEHOLD_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// Client key (PEM) for mutual TLS; with --tls-cert.
    #[arg(long, env = "LEASEHOLD_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

impl ServerArg {
    /// A client of the server, or the exit status that says why there is none.
    async fn client(&self) -> Result<leasehold_client::Client, ExitCode> {
        let connect = self.options().map_err(usage)?;
        leasehold_client::Client::connect_with(connect)
            .await
            .map_err(fail)
    }

    /// How to connect: the address, TLS files read, and the token (file, else LEASEHOLD_TOKEN).
    fn options(&self) -> Result<ConnectOptions, String> {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|error| format!("cannot read {}: {error}", path.display()))
        };
        let token = match &self.token_file {
            Some(path) => Some(String::from_utf8_lossy(&read(path)?).trim().to_owned()),
            None => std::env::var("LEASEHOLD_TOKEN").ok(),
        };
        let mut options = ConnectOptions::new(&self.server).token(token);
        if let Some(ca) = &self.tls_ca {
            options = options.ca_pem(read(ca)?);
        }
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            options = options.identity_pem(read(cert)?, read(key)?);
        }
        Ok(options)
    }
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
    /// Between SIGTERM and SIGKILL (to the command's whole process group) when the lease is
    /// lost or we are interrupted.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// Let up to N holders run at once (a counting semaphore; 0 or 1: a plain lock); every
    /// holder of the name must give the same N.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=i64::from(leasehold::lease::spec::MAX_LIMIT)))]
    limit: u32,
    /// Hold the lock shared (a reader): shared holders run together; a run without --shared (a
    /// writer) runs alone, and readers that arrive after a waiting writer wait behind it.
    #[arg(long, conflicts_with = "limit")]
    shared: bool,
    /// Do not resume the lease on another server when its stream breaks (the server is
    /// stopped for a deploy or crashes): stop the command at once instead (exit 76).
    #[arg(long)]
    no_resume: bool,
    /// Lock-delay: if the lease is lost (expired, revoked, its server gone past its grace), its
    /// names cannot be taken for this long after (15s); a release frees them at once.
    #[arg(long, value_parser = humantime::parse_duration)]
    lock_delay: Option<Duration>,
    /// A ceiling on the hold (6h): at it the command is stopped as on a lost lease (exit 76).
    /// At least --ttl.
    #[arg(long, value_parser = humantime::parse_duration)]
    max_hold: Option<Duration>,
    /// The lock's name; several names are held together, all or none (plain locks only).
    #[arg(required = true)]
    names: Vec<String>,
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
struct WatchArgs {
    #[command(flatten)]
    server: ServerArg,
    /// Print one JSON object per line, for scripts.
    #[arg(long)]
    json: bool,
    /// Lock names.
    #[arg(required = true)]
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
    /// TTL of the held leases (renewed every third of it).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    held_ttl: Duration,
    /// How long to measure the held leases once they are all held (default: 10 s, 2 s with
    /// --quick). Longer than the TTL/3 covers a whole renewal period.
    #[arg(long, value_parser = humantime::parse_duration)]
    held_window: Option<Duration>,
    /// Hold the held-leases section's leases on sessions of this many leases each (one Session
    /// stream per this many leases) instead of one Lease stream each.
    #[arg(long)]
    per_session: Option<usize>,
    /// Run only these sections (default: all).
    #[arg(long, value_delimiter = ',')]
    only: Vec<bench::Section>,
    /// The server's process id, to report its memory per held lease (same machine only).
    #[arg(long)]
    server_pid: Option<u32>,
}

#[derive(clap::Args)]
struct HealthArgs {
    #[command(flatten)]
    server: ServerArg,
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

/// How the server writes its log lines.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Parses the command line (and `serve`'s config file) and runs the command.
pub async fn main() -> ExitCode {
    let cli = match parse() {
        Ok(cli) => cli,
        Err(problem) => return usage(problem),
    };
    let (log_format, otlp) = match &cli.command {
        Command::Serve(args) => (args.log_format, args.otlp_endpoint.clone()),
        _ => (LogFormat::Text, None),
    };
    let traces = match telemetry::init(log_format, otlp.as_deref()) {
        Ok(traces) => traces,
        Err(problem) => return usage(problem),
    };
    let code = match cli.command {
        Command::Serve(args) => serve::serve(*args).await,
        Command::Run(args) => run::command(args).await,
        Command::Elect(args) => elect::command(args).await,
        Command::Leader(args) => elect::leader(args).await,
        Command::Status(args) => match args.server.options() {
            Ok(connect) => inspect::status(connect, args.names, args.json).await,
            Err(problem) => usage(problem),
        },
        Command::Watch(args) => match args.server.options() {
            Ok(connect) => watch::watch(connect, args.names, args.json).await,
            Err(problem) => usage(problem),
        },
        Command::Bench(args) => run_bench(args).await,
        Command::Release(args) => match args.server.options() {
            Ok(connect) => inspect::release(connect, args.name, args.token).await,
            Err(problem) => usage(problem),
        },
        Command::Revoke(args) => revoke::command(args).await,
        Command::Check(args) => check::command(args).await,
        Command::Health(args) => match args.server.options() {
            Ok(connect) => inspect::health(connect).await,
            Err(problem) => usage(problem),
        },
        Command::Completions(args) => install::completions(args),
        Command::Manpage(args) => install::manpage(args),
        Command::RunWatchdog(args) => watchdog::watch(args.grace),
    };
    if let Some(traces) = traces {
        traces.finish().await;
    }
    code
}

/// The command line, with `serve --config FILE` entries added where no flag or variable gave
/// the option. `--help` and `--version` exit here as clap prints them; a refused argument is one
/// sentence for [`usage`] (exit 64), like every other refusal.
fn parse() -> Result<Cli, String> {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let command = Cli::command();
    let matches = command
        .clone()
        .try_get_matches_from(&argv)
        .map_err(refused)?;
    let extra = match matches.subcommand() {
        Some(("serve", serve)) => match serve.get_one::<PathBuf>("config") {
            Some(path) => {
                let definition = command.find_subcommand("serve").ok_or("no serve command")?;
                config::file_args(path, definition, serve)?
            }
            None => Vec::new(),
        },
        _ => Vec::new(),
    };
    let matches = match extra.is_empty() {
        true => matches,
        false => command
            .try_get_matches_from(argv.into_iter().chain(extra))
            .map_err(|error| {
                let error = error.to_string();
                let first = error.lines().next().unwrap_or_default();
                format!(
                    "in the config file: {}",
                    first.trim_start_matches("error: ")
                )
            })?,
    };
    Cli::from_arg_matches(&matches).map_err(refused)
}

/// clap's refusal as one sentence (its first line, which names the argument and the problem),
/// pointing at `--help` for the rest; help and version requests print and exit 0 as usual.
fn refused(error: clap::Error) -> String {
    use clap::error::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
    ) {
        error.exit();
    }
    let text = error.to_string();
    let first = text.lines().next().unwrap_or_default();
    let first = first.trim_start_matches("error: ");
    match error.kind() {
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand => {
            "a command is needed: serve, run, elect, leader, status, watch, check, release, revoke, health, bench, completions or manpage (see leasehold --help)"
                .to_owned()
        }
        _ => format!("{first} (see --help)"),
    }
}

async fn run_bench(args: BenchArgs) -> ExitCode {
    let connect = match args.server.options() {
        Ok(connect) => connect,
        Err(problem) => return usage(problem),
    };
    let options = bench::BenchOptions {
        connect,
        redis: args.redis,
        held: match (args.held, args.quick) {
            (Some(held), _) => held,
            (None, true) => vec![200],
            (None, false) => vec![1_000, 10_000, 50_000],
        },
        held_ttl: args.held_ttl,
        held_window: args.held_window,
        per_session: args.per_session.filter(|&k| k > 0),
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
