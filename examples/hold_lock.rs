//! Holds the lock "nightly-report" while it works, stopping if the lock is lost.
//! Run it against `scripts/serve.sh`: `cargo run --example hold_lock`.
use std::time::Duration;

use leasehold_client::{Client, ClientError};

#[tokio::main]
async fn main() -> Result<(), ClientError> {
    let server =
        std::env::var("LEASEHOLD_SERVER").unwrap_or_else(|_| "http://127.0.0.1:50051".into());
    let client = Client::connect(server).await?;
    let guard = client
        .lease("nightly-report")
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(30))
        .holder("report@host-a")
        .acquire()
        .await?;
    println!(
        "holding nightly-report, fencing token {}",
        guard.fencing_token()
    );
    tokio::select! {
        reason = guard.lost() => println!("lost the lock: {reason}"),
        () = tokio::time::sleep(Duration::from_millis(500)) => println!("work done"),
    }
    println!("released: {}", guard.release().await?);
    Ok(())
}
