//! Run several of these: one leads, every one prints who does.
//!
//! ```text
//! cargo run --example who_leads -- http://127.0.0.1:50051 scheduler alice
//! cargo run --example who_leads -- http://127.0.0.1:50051 scheduler bob
//! cargo run --example who_leads -- http://127.0.0.1:50051 scheduler carol
//! ```
//!
//! Stop the leader with Ctrl-C (it resigns) and another takes over within a moment; kill it
//! and another takes over once its leadership runs out (its TTL, 5 s: the server cannot tell a
//! killed leader from a frozen one, which may still believe it leads until then).

use std::time::Duration;

use leasehold_client::{Client, ClientError};

#[tokio::main]
async fn main() -> Result<(), ClientError> {
    let mut args = std::env::args().skip(1);
    let (Some(server), Some(election), Some(me)) = (args.next(), args.next(), args.next()) else {
        eprintln!("usage: who_leads <server-url> <election> <my-name>");
        std::process::exit(2);
    };
    let client = Client::connect(server).await?;

    // Follow the election: the current leader first, then every change.
    let mut observation = client.observe(election.clone()).await?;
    tokio::spawn(async move {
        while let Ok(leader) = observation.next().await {
            match leader {
                Some(leader) => println!(
                    "leader: {} (term {})",
                    String::from_utf8_lossy(&leader.value),
                    leader.term
                ),
                None => println!("leader: none"),
            }
        }
    });

    // Run for leader; lead until stopped or until the leadership is lost.
    let mut candidate = client
        .campaign(election, me.clone(), Duration::from_secs(5))
        .await?;
    let term = candidate.elected().await?;
    println!("{me}: I lead (term {term})");
    tokio::select! {
        reason = candidate.lost() => println!("{me}: lost the leadership: {reason}"),
        _ = tokio::signal::ctrl_c() => {
            candidate.resign().await?;
            println!("{me}: resigned");
        }
    }
    Ok(())
}
