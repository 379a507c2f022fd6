//! `leasehold check NAME FENCING_TOKEN`: whether a fencing token is the current holding of a
//! lock, for a script that guards a resource (exit 0 if current, 1 if not).

use std::process::ExitCode;

use leasehold_client::{TokenCheck, TokenState};

use super::{ServerArg, fail};

/// `leasehold check`'s arguments.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  leasehold check nightly-report 1733538291000042
  leasehold check --json nightly-report \"$LEASEHOLD_FENCING_TOKEN\"

Prints whether the token is current; if not, the current fencing token (superseded), or that
nobody holds the lock (free). One Redis read; not a conditional write: the holding can end right
after the answer (docs/contract.md).
Exit status: 0 if the token is current; 1 if it is not (superseded, or the lock is free); 64 if
an argument is refused; 69 if the server could not be reached or could not serve the request; 77
if the server did not accept the token or certificate, or the grant does not cover the lock.")]
pub struct CheckArgs {
    #[command(flatten)]
    server: ServerArg,
    /// Print one JSON object, for scripts: {"name", "fencing_token", "state", "current_fencing_token"}.
    #[arg(long)]
    json: bool,
    /// The lock's name.
    name: String,
    /// The fencing token to check (as `run` gives it in LEASEHOLD_FENCING_TOKEN).
    #[arg(value_parser = clap::value_parser!(u64).range(1..))]
    fencing_token: u64,
}

/// Asks the server; exit 0 if `fencing_token` is current, 1 if not.
pub async fn command(args: CheckArgs) -> ExitCode {
    let CheckArgs {
        server,
        json,
        name,
        fencing_token,
    } = args;
    let client = match server.client().await {
        Ok(client) => client,
        Err(code) => return code,
    };
    let check = match client.check(name.clone(), fencing_token).await {
        Ok(check) => check,
        Err(error) => return fail(error),
    };
    if json {
        println!("{}", as_json(&name, fencing_token, &check));
    } else {
        println!("{}", line(&name, fencing_token, &check));
    }
    match check.state {
        TokenState::Current => ExitCode::SUCCESS,
        TokenState::Superseded | TokenState::Free => ExitCode::FAILURE,
    }
}

/// The answer in words: `"job": fencing token N is current`, `... is superseded by M`, or
/// `"job" is free: fencing token N is not current`.
fn line(name: &str, fencing_token: u64, check: &TokenCheck) -> String {
    match check.state {
        TokenState::Current => format!("{name:?}: fencing token {fencing_token} is current"),
        TokenState::Superseded => format!(
            "{name:?}: fencing token {fencing_token} is superseded; the current fencing token is {}",
            check.current_fencing_token
        ),
        TokenState::Free => {
            format!("{name:?} is free: fencing token {fencing_token} is not current")
        }
    }
}

fn as_json(name: &str, fencing_token: u64, check: &TokenCheck) -> serde_json::Value {
    let state = match check.state {
        TokenState::Current => "current",
        TokenState::Superseded => "superseded",
        TokenState::Free => "free",
    };
    serde_json::json!({
        "name": name,
        "fencing_token": fencing_token,
        "state": state,
        "current_fencing_token": check.current_fencing_token,
    })
}
