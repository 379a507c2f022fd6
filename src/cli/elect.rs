//! `leasehold elect` and `leasehold leader`: an election from the shell, as `etcdctl elect`.
//!
//! - `elect NAME -- CMD`: campaigns, and while this process leads runs CMD as `run` runs its
//!   command ([`super::job`]: its own process group, the watchdog), with `LEASEHOLD_ELECTION`
//!   and `LEASEHOLD_TERM` in its environment. When CMD ends it resigns (the next candidate is
//!   elected at once) and exits with CMD's status; when the leadership is lost, CMD is stopped and
//!   it exits [`EXIT_LOST`](super::EXIT_LOST) (76). A server stopped or crashed under the
//!   leadership is not a loss: it resumes on another replica of `--server`, with the same term.
//! - `elect --observe NAME`: each leader as it changes, until SIGINT or SIGTERM (exit 0).
//! - `leader NAME`: the leader now; exit 1 when there is none.

use std::process::ExitCode;
use std::time::Duration;

use leasehold::lease::spec::{self, LockName};
use leasehold_client::{Candidate, Client, ClientError, ConnectOptions, Leader};
use tokio::time::Instant;

use super::job::{self, Held, Interrupts, Job};
use super::progress::StatusLine;
use super::{EXIT_UNAVAILABLE, ServerArg, fail, usage};

/// `leasehold elect`'s arguments.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  leasehold elect scheduler -- ./schedule.sh
  leasehold elect --value host-a:8080 --ttl 5s primary -- ./serve-as-primary.sh
  leasehold elect --observe scheduler

The command gets LEASEHOLD_ELECTION and LEASEHOLD_TERM (the leadership's term, a fencing token)
in its environment, and is stopped as run stops its command: its whole process group gets
SIGTERM, then SIGKILL after --grace, when the leadership is lost or elect is interrupted; if elect
is killed, a watchdog process does the same. When the command ends, elect resigns (the next
candidate is elected at once). With --observe it prints each leader as it changes until SIGINT
or SIGTERM (exit 0).
Exit status: the command's own; 76 if the leadership was lost while the command ran; 64 if an
argument is refused; 69 if the server could not be reached or could not serve the request; 77 if
the server did not accept the token or certificate, or the grant does not cover the election; 127
if the command could not be started; 130/143 when interrupted (SIGINT/SIGTERM).")]
pub struct ElectArgs {
    #[command(flatten)]
    server: ServerArg,
    /// Follow the election instead of running for it: print each leader as it changes (one line
    /// each; "no leader" when none), until interrupted.
    #[arg(long, conflicts_with_all = ["value", "command"])]
    observe: bool,
    /// With --observe: print JSON lines, for scripts.
    #[arg(long, requires = "observe")]
    json: bool,
    /// What observers see while this process leads, such as its address (default: host and
    /// pid).
    #[arg(long)]
    value: Option<String>,
    /// How long the election stays led by this process if it dies with its server (500ms, 10s).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    ttl: Duration,
    /// Between SIGTERM and SIGKILL (to the command's whole process group) when the leadership is
    /// lost or we are interrupted.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// The election's name.
    name: String,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required_unless_present = "observe")]
    command: Vec<String>,
}

/// `leasehold leader`'s arguments.
#[derive(clap::Args)]
#[command(after_help = "Example:
  leasehold leader scheduler

Exit status: 0 if the election has a leader; 1 if it has none; 64 if an argument is refused; 69
if the server could not be reached or could not serve the request; 77 if the server did not
accept the token or certificate, or the grant does not cover the election.")]
pub struct LeaderArgs {
    #[command(flatten)]
    server: ServerArg,
    /// Print JSON, for scripts.
    #[arg(long)]
    json: bool,
    /// The election's name.
    name: String,
}

/// `leasehold elect`: campaigns and runs the command, or follows the election (`--observe`).
pub async fn command(args: ElectArgs) -> ExitCode {
    let connect = match args.server.options() {
        Ok(connect) => connect,
        Err(problem) => return usage(problem),
    };
    match args.observe {
        true => observe(connect, args.name, args.json).await,
        false => elect(connect, args).await,
    }
}

/// Campaigns in `name`; runs the command while leader.
async fn elect(connect: ConnectOptions, options: ElectArgs) -> ExitCode {
    if options.command.is_empty() {
        return usage("no command to run (leasehold elect NAME -- CMD ARGS...)");
    }
    let value = options
        .value
        .clone()
        .unwrap_or_else(|| job::this_process("elect"));
    let checked = check_name(&options.name)
        .and_then(|()| job::check_ttl(options.ttl))
        .and_then(|()| spec::election_value(value.into_bytes()).map_err(|e| e.to_string()));
    let value = match checked {
        Ok(value) => value,
        Err(problem) => return usage(problem),
    };
    let client = match Client::connect_with(connect).await {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    // Watched from the start: an interrupt while in line leaves the line.
    let Some(mut interrupts) = Interrupts::watch() else {
        return ExitCode::from(EXIT_UNAVAILABLE);
    };
    let campaign = client.campaign(options.name.clone(), value, options.ttl);
    let mut candidate = match campaign.await {
        Ok(candidate) => candidate,
        Err(error) => return fail(error),
    };
    let term = match wait_to_lead(&client, &mut candidate, &options.name, &mut interrupts).await {
        Ok(term) => term,
        Err(Waited::Interrupted(code)) => {
            resign(candidate, options.ttl).await;
            return ExitCode::from(code);
        }
        Err(Waited::Failed(error)) => return fail(error),
    };
    let validity = candidate.validity();
    let valid_until = || validity.as_ref().map_or_else(Instant::now, |v| *v.borrow());
    let job = Job {
        command: &options.command,
        env: vec![
            ("LEASEHOLD_ELECTION", options.name.clone()),
            ("LEASEHOLD_TERM", term.to_string()),
        ],
        grace: options.grace,
        ttl: options.ttl,
    };
    let held = Held {
        what: format!("leadership of {:?}", options.name),
        lost: candidate.lost(),
        valid_until: &valid_until,
        resumable: true,
    };
    let ended = job::run_while_held(&job, held, &mut interrupts).await;
    // A lost leadership's stream has ended: nothing to resign, and no resume to try.
    if !ended.lost {
        resign(candidate, options.ttl).await;
    }
    ExitCode::from(ended.code)
}

/// Steps down (or leaves the line), waiting for the server's answer no longer than `ttl`:
/// past it the leadership has run out anyway.
async fn resign(candidate: Candidate, ttl: Duration) {
    let _ = tokio::time::timeout(ttl, candidate.resign()).await;
}

/// Why a candidate stopped waiting without leading.
enum Waited {
    /// SIGINT or SIGTERM: the exit status it calls for.
    Interrupted(u8),
    Failed(ClientError),
}

/// Waits in line until elected (its term), showing on a terminal who leads meanwhile.
async fn wait_to_lead(
    client: &Client,
    candidate: &mut Candidate,
    name: &str,
    interrupts: &mut Interrupts,
) -> Result<u64, Waited> {
    let mut line = StatusLine::new();
    // Who leads, followed only for a person to see.
    let mut observation = match line.enabled() {
        true => client.observe(name.to_owned()).await.ok(),
        false => None,
    };
    let mut leader = None;
    let elected = candidate.elected();
    tokio::pin!(elected);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let result = loop {
        tokio::select! {
            result = &mut elected => break result.map_err(Waited::Failed),
            code = interrupts.next() => break Err(Waited::Interrupted(code)),
            next = async {
                match observation.as_mut() {
                    Some(observation) => observation.next().await,
                    None => std::future::pending().await,
                }
            } => match next {
                Ok(now) => leader = now,
                Err(_) => observation = None,
            },
            _ = tick.tick() => line.show(&StatusLine::election_led(name, leader.as_ref())),
        }
    };
    line.clear();
    result
}

/// `leasehold elect --observe NAME`: prints every leader as it changes until interrupted.
async fn observe(connect: ConnectOptions, name: String, json: bool) -> ExitCode {
    if let Err(problem) = check_name(&name) {
        return usage(problem);
    }
    let client = match Client::connect_with(connect).await {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    let Some(mut interrupts) = Interrupts::watch() else {
        return ExitCode::from(EXIT_UNAVAILABLE);
    };
    let mut observation = match client.observe(name.clone()).await {
        Ok(observation) => observation,
        Err(error) => return fail(error),
    };
    loop {
        tokio::select! {
            next = observation.next() => match next {
                Ok(leader) => println!("{}", shown(&name, leader.as_ref(), json)),
                Err(error) => return fail(error),
            },
            // Interrupting is how an observation ends.
            _ = interrupts.next() => return ExitCode::SUCCESS,
        }
    }
}

/// `leasehold leader NAME`: the leader now (exit 0), or that there is none (exit 1).
pub async fn leader(args: LeaderArgs) -> ExitCode {
    let LeaderArgs { server, json, name } = args;
    let connect = match server.options() {
        Ok(connect) => connect,
        Err(problem) => return usage(problem),
    };
    if let Err(problem) = check_name(&name) {
        return usage(problem);
    }
    let client = match Client::connect_with(connect).await {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    match client.leader(name.clone()).await {
        Ok(leader) => {
            println!("{}", shown(&name, leader.as_ref(), json));
            match leader {
                Some(_) => ExitCode::SUCCESS,
                None => ExitCode::FAILURE,
            }
        }
        Err(error) => fail(error),
    }
}

fn check_name(name: &str) -> Result<(), String> {
    LockName::parse_election(name.to_owned())
        .map(|_| ())
        .map_err(|error| error.to_string())
}

/// One state of an election as a line: `NAME<TAB>led by VALUE<TAB>term N`, or
/// `NAME<TAB>no leader`; a JSON object with `--json`.
fn shown(name: &str, leader: Option<&Leader>, json: bool) -> String {
    let value = leader.map(|l| String::from_utf8_lossy(&l.value).into_owned());
    if json {
        return serde_json::json!({
            "election": name,
            "has_leader": leader.is_some(),
            "value": value,
            "term": leader.map_or(0, |l| l.term),
        })
        .to_string();
    }
    match (leader, value) {
        (Some(leader), Some(value)) => format!("{name}\tled by {value}\tterm {}", leader.term),
        _ => format!("{name}\tno leader"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_is_one_line_of_text_or_json() {
        let leader = Leader {
            term: 7,
            value: b"host-a:8080".to_vec(),
        };
        assert_eq!(
            shown("db", Some(&leader), false),
            "db\tled by host-a:8080\tterm 7"
        );
        assert_eq!(shown("db", None, false), "db\tno leader");
        let json: serde_json::Value =
            serde_json::from_str(&shown("db", Some(&leader), true)).unwrap();
        assert_eq!(json["value"], "host-a:8080");
        assert_eq!(json["term"], 7);
        let none: serde_json::Value = serde_json::from_str(&shown("db", None, true)).unwrap();
        assert_eq!(none["has_leader"], false);
        assert!(none["value"].is_null());
    }
}
