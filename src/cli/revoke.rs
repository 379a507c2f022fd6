//! `leasehold revoke NAME [--token FENCING_TOKEN] [--election]`: an operator ends a holding by
//! force; its holder is told it is lost (REVOKED) and the next waiter is granted at once.

use std::process::ExitCode;

use leasehold_client::{Client, ConnectOptions};

use super::fail;

/// Revokes every holder of lock `name` (or the one with `fencing_token`), or the leader of
/// election `name` (`election`; the token is then a term). Exit 0 with one line per holding
/// ended, 1 if nothing was held.
pub async fn revoke(
    connect: ConnectOptions,
    name: String,
    fencing_token: Option<u64>,
    election: bool,
) -> ExitCode {
    let client = match Client::connect_with(connect).await {
        Ok(client) => client,
        Err(error) => return fail(error),
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
