//! `leasehold revoke NAME [--token FENCING_TOKEN] [--election]`: an operator ends a holding by
//! force; its holder is told it is lost (REVOKED) and the next waiter is granted at once.

use std::process::ExitCode;

use super::{ServerArg, fail};

/// `leasehold revoke`'s arguments.
#[derive(clap::Args)]
#[command(after_help = "Examples:
  leasehold revoke nightly-report
  leasehold revoke --token 1733538291000042 encoder   (one permit of a semaphore)
  leasehold revoke --election scheduler

Each holder ended is told it is lost (reason REVOKED) at once and cannot resume; the next waiter
gets the lock with a larger fencing token. Prints one line per holding ended.
Exit status: 0 if something was revoked; 1 if nothing was held (or nothing with that fencing
token); 64 if an argument is refused; 69 if the server could not be reached or could not serve
the request; 77 if the server did not accept the token or certificate, or the grant is not admin
on the name.")]
pub struct RevokeArgs {
    #[command(flatten)]
    server: ServerArg,
    /// The lock's name (or the election's, with --election).
    name: String,
    /// Revoke only the holding with this fencing token (a permit, a shared hold; with
    /// --election, this term); every holder without it.
    #[arg(long = "token", value_name = "FENCING_TOKEN", value_parser = clap::value_parser!(u64).range(1..))]
    fencing_token: Option<u64>,
    /// NAME is an election: revoke its leader (the next candidate is elected).
    #[arg(long)]
    election: bool,
}

/// Revokes every holder of lock `name` (or the one with `fencing_token`), or the leader of
/// election `name` (`election`; the token is then a term). Exit 0 with one line per holding
/// ended, 1 if nothing was held.
pub async fn command(args: RevokeArgs) -> ExitCode {
    let RevokeArgs {
        server,
        name,
        fencing_token,
        election,
    } = args;
    let client = match server.client().await {
        Ok(client) => client,
        Err(code) => return code,
    };
    let ended: Vec<(String, u64)> = if election {
        match client.revoke_leader(name.clone(), fencing_token).await {
            Ok(leader) => leader
                .map(|leader| {
                    let value = String::from_utf8_lossy(&leader.value).into_owned();
                    (value, leader.term)
                })
                .into_iter()
                .collect(),
            Err(error) => return fail(error),
        }
    } else {
        match client.revoke(name.clone(), fencing_token).await {
            Ok(revoked) => revoked
                .into_iter()
                .map(|held| (held.holder, held.fencing_token))
                .collect(),
            Err(error) => return fail(error),
        }
    };
    if ended.is_empty() {
        let what = if election { "election" } else { "lock" };
        eprintln!("leasehold: {what} {name:?} was not held; nothing revoked");
        return ExitCode::FAILURE;
    }
    for (holder, fencing_token) in ended {
        let holder = if holder.is_empty() {
            "(unnamed)"
        } else {
            &holder
        };
        println!("revoked {name:?} (holder {holder}, fencing token {fencing_token})");
    }
    ExitCode::SUCCESS
}
