//! The other shapes of a lease against the plain lock, in the same run and interleaved rounds:
//! a semaphore's permit and a shared (reader's) hold go through the same stream and the same
//! scripts, which do a little more work for them (a sorted set of holders instead of one key).

use serde_json::json;
use tonic::Code;

use leasehold_client::{Client, ClientError};

use super::figures::{Figures, print_uncontended, ratio};
use super::paths::{BenchError, shaped_lease_stream, unexpected};
use super::{BenchOptions, Progress};

/// Rounds: every shape runs once per round, in turn, so noise falls on all of them.
const ROUNDS: usize = 5;
/// The semaphore measured.
const PERMITS: u32 = 4;

/// How a measured lease holds its name.
#[derive(Clone, Copy)]
enum Shape {
    Lock,
    Permit,
    Shared,
}

impl Shape {
    fn path(self) -> String {
        match self {
            Shape::Lock => "Lease stream, plain lock".to_owned(),
            Shape::Permit => format!("Lease stream, permit of {PERMITS}"),
            Shape::Shared => "Lease stream, shared".to_owned(),
        }
    }
}

/// Acquire + release, one client at a time, in each shape; each against the plain lock.
pub async fn section(
    options: &BenchOptions,
    progress: &Progress,
) -> Result<serde_json::Value, BenchError> {
    let operations: usize = if options.quick { 200 } else { 5_000 };
    let per_round = operations.div_ceil(ROUNDS);
    let client = Client::connect_with(options.connect.clone()).await?;
    let shapes = [Shape::Lock, Shape::Permit, Shape::Shared];
    let mut rounds: [Vec<Figures>; 3] = Default::default();
    let mut refused = Vec::new();
    for round in 1..=ROUNDS {
        progress.say(&format!("primitives: round {round} of {ROUNDS}"));
        for (shape, figures) in shapes.iter().zip(rounds.iter_mut()) {
            match acquire_release(&client, per_round, *shape).await {
                Ok(measured) => figures.push(measured),
                // Redlock refuses semaphores: say so rather than fail the bench.
                Err(BenchError::Client(ClientError::Status(status)))
                    if status.code() == Code::FailedPrecondition =>
                {
                    if round == 1 {
                        refused.push(json!({"path": shape.path(), "refused": status.message()}));
                    }
                }
                Err(error) => return Err(error),
            }
        }
    }
    progress.clear();
    let combined: Vec<Figures> = rounds.iter().filter_map(|r| Figures::combine(r)).collect();
    let Some(lock) = combined.first() else {
        return Err(unexpected("no primitives rounds ran"));
    };
    println!();
    print_uncontended(
        "Acquire + release by shape, one client",
        &combined.iter().collect::<Vec<_>>(),
    );
    for note in &refused {
        println!(
            "\n({}: refused by this server: {})",
            note["path"], note["refused"]
        );
    }
    let paths: Vec<serde_json::Value> = combined
        .iter()
        .map(|figures| {
            let mut json = figures.to_json(None);
            json["p50_ratio_to_lock"] = json!(ratio(figures.p50, lock.p50));
            json["mean_ratio_to_lock"] = json!(ratio(figures.mean, lock.mean));
            json
        })
        .collect();
    Ok(json!({ "paths": paths, "refused": refused }))
}

async fn acquire_release(
    client: &Client,
    operations: usize,
    shape: Shape,
) -> Result<Figures, BenchError> {
    let path = shape.path();
    shaped_lease_stream(client, operations, &path, |lease| match shape {
        Shape::Lock => lease,
        Shape::Permit => lease.limit(PERMITS),
        Shape::Shared => lease.shared(),
    })
    .await
}
