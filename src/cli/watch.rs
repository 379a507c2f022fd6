//! `leasehold watch NAME...`: a line per change of each named lock, until interrupted.

use std::process::ExitCode;

use leasehold_client::pb;
use leasehold_client::{Client, ConnectOptions};
use tokio::signal::unix::{SignalKind, signal};
use tokio_stream::{StreamExt, StreamMap};

use super::fail;
use super::inspect::{as_json, shown};

/// Watches every name in `names` (each once) and prints each state as it comes: the state now,
/// then one line per change. Ends with 0 on SIGINT or SIGTERM. A server that stops is left to the
/// client, which watches again through the next replica (or the same server back) for about 25
/// seconds before giving up: then 69.
pub async fn watch(connect: ConnectOptions, mut names: Vec<String>, json: bool) -> ExitCode {
    let (mut interrupt, mut terminate) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(interrupt), Ok(terminate)) => (interrupt, terminate),
        (Err(error), _) | (_, Err(error)) => {
            eprintln!("leasehold: cannot handle signals: {error}");
            return ExitCode::FAILURE;
        }
    };
    let client = match Client::connect_with(connect).await {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    names.sort();
    names.dedup();
    let mut watches = StreamMap::new();
    for name in names {
        match client.watch(name.clone()).await {
            Ok(states) => {
                watches.insert(name, states);
            }
            Err(error) => return fail(error),
        }
    }
    loop {
        let (name, state) = tokio::select! {
            _ = interrupt.recv() => return ExitCode::SUCCESS,
            _ = terminate.recv() => return ExitCode::SUCCESS,
            next = watches.next() => match next {
                Some(next) => next,
                // Every watch ended without an error: nothing is left to watch.
                None => return ExitCode::SUCCESS,
            },
        };
        match state {
            Ok(state) if json => println!("{}", as_json(&name, &state)),
            Ok(state) => println!("{}", line(&name, &state)),
            Err(error) => return fail(error),
        }
    }
}

/// `NAME held by HOLDER (fencing token N, ttl T ms, K waiting)`, `NAME free`; a semaphore's or
/// shared lock's holders each in parentheses after the count.
fn line(name: &str, state: &pb::DescribeResponse) -> String {
    let waiting = match state.waiting {
        0 => String::new(),
        n => format!(", {n} waiting"),
    };
    if !state.held {
        return match state.waiting {
            0 => format!("{name} free"),
            n => format!("{name} free ({n} waiting)"),
        };
    }
    let holder = |h: &pb::Holder| {
        format!(
            "{} (fencing token {}, ttl {} ms",
            shown(&h.holder),
            h.fencing_token,
            h.ttl_remaining_ms
        )
    };
    let several = state.limit > 1 || state.mode() == pb::LeaseMode::Shared;
    if !several && let Some(first) = state.holders.first() {
        return format!("{name} held by {}{waiting})", holder(first));
    }
    let how = match state.mode() {
        pb::LeaseMode::Shared => "shared".to_owned(),
        _ => format!("of limit {}", state.limit),
    };
    let holders: Vec<String> = state.holders.iter().map(|h| holder(h) + ")").collect();
    format!(
        "{name} held by {} {how}: {}{}",
        state.holders.len(),
        holders.join(", "),
        waiting.replacen(", ", "; ", 1)
    )
}
