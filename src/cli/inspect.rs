//! `leasehold status`, `leasehold release` and `leasehold health`: look at locks (named ones, or
//! every held one), let go of one by its token, and ask whether a server can serve.

use std::process::ExitCode;

use leasehold_client::pb;
use leasehold_client::{Client, ConnectOptions};

use super::fail;

/// `leasehold status [NAME...]`: who holds each named lock, or every held lock when none is
/// named (at most the server's listing limit, with a note when there are more).
pub async fn status(connect: ConnectOptions, names: Vec<String>, json: bool) -> ExitCode {
    let client = match Client::connect_with(connect).await {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    let mut rows = Vec::new();
    if names.is_empty() {
        match client.list(0).await {
            Ok(listed) => {
                rows.extend(listed.locks.into_iter().map(|lock| {
                    let described = pb::DescribeResponse {
                        held: true,
                        holder: lock.holder,
                        ttl_remaining_ms: lock.ttl_remaining_ms,
                        fencing_token: lock.fencing_token,
                        holders: lock.holders,
                        limit: lock.limit,
                        mode: lock.mode,
                        waiting: lock.waiting,
                    };
                    (lock.name, described)
                }));
                rows.sort_by(|a, b| a.0.cmp(&b.0));
                if listed.truncated {
                    eprintln!(
                        "leasehold: more locks are held than the {} shown",
                        rows.len()
                    );
                }
            }
            Err(error) => return fail(error),
        }
    }
    for name in names {
        match client.describe(name.clone()).await {
            Ok(described) => rows.push((name, described)),
            Err(error) => return fail(error),
        }
    }
    if json {
        let items: Vec<serde_json::Value> = rows.iter().map(|(name, d)| as_json(name, d)).collect();
        println!("{}", serde_json::Value::Array(items));
    } else {
        if rows.is_empty() {
            // As kubectl does: a person sees it, a script reading stdout gets no lines.
            eprintln!("leasehold: no locks are held");
        }
        for (name, d) in rows {
            // Only when someone waits: the columns a script reads stay as they were.
            let waiting = match d.waiting {
                0 => String::new(),
                n => format!("\t{n} waiting"),
            };
            let several = d.limit > 1 || d.mode() == pb::LeaseMode::Shared;
            if d.held && several {
                // A semaphore or a shared lock: every holder on a line of its own.
                let how = match d.mode() {
                    pb::LeaseMode::Shared => "shared".to_owned(),
                    _ => format!("of limit {}", d.limit),
                };
                println!("{name}	{} held {how}{waiting}", d.holders.len());
                for h in &d.holders {
                    println!(
                        "	held by {}	ttl {} ms	fencing token {}",
                        shown(&h.holder),
                        h.ttl_remaining_ms,
                        h.fencing_token
                    );
                }
            } else if d.held {
                println!(
                    "{name}\theld by {}\tttl {} ms\tfencing token {}{waiting}",
                    shown(&d.holder),
                    d.ttl_remaining_ms,
                    d.fencing_token
                );
            } else {
                println!("{name}\tfree{waiting}");
            }
        }
    }
    ExitCode::SUCCESS
}

/// A lock's state as `status --json` and `watch --json` print it.
pub(super) fn as_json(name: &str, d: &pb::DescribeResponse) -> serde_json::Value {
    serde_json::json!({
        "name": name,
        "held": d.held,
        "holder": d.holder,
        "ttl_remaining_ms": d.ttl_remaining_ms,
        "fencing_token": d.fencing_token,
        "limit": d.limit,
        "waiting": d.waiting,
        "shared": d.mode() == pb::LeaseMode::Shared,
        "holders": d.holders.iter().map(|h| serde_json::json!({
            "holder": h.holder,
            "ttl_remaining_ms": h.ttl_remaining_ms,
            "fencing_token": h.fencing_token,
        })).collect::<Vec<_>>(),
    })
}

/// `leasehold release NAME TOKEN`: exit 0 if released, 1 if the token no longer held it.
pub async fn release(connect: ConnectOptions, name: String, token: String) -> ExitCode {
    let client = match Client::connect_with(connect).await {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    match client.release(name.clone(), token).await {
        Ok(true) => {
            println!("released {name:?}");
            ExitCode::SUCCESS
        }
        Ok(false) => {
            eprintln!("leasehold: lock {name:?} was not held by that token; left alone");
            ExitCode::FAILURE
        }
        Err(error) => fail(error),
    }
}

/// `leasehold health`: exit 0 if the server reports SERVING (Redis answers), 69 if not.
pub async fn health(connect: ConnectOptions) -> ExitCode {
    let client = match Client::connect_with(connect).await {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    match client.serving().await {
        Ok(true) => {
            println!("SERVING");
            ExitCode::SUCCESS
        }
        Ok(false) => {
            println!("NOT_SERVING");
            ExitCode::from(super::EXIT_UNAVAILABLE)
        }
        Err(error) => fail(error),
    }
}

/// A holder as `status` shows it: a lease acquired without a holder name says so rather than
/// leaving an empty column.
pub(super) fn shown(holder: &str) -> &str {
    if holder.is_empty() {
        "(unnamed)"
    } else {
        holder
    }
}
