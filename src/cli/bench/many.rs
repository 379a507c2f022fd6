//! Section 3: many clients, one distinct name each, all at once.

use super::*;

pub(super) async fn many_section(
    options: &BenchOptions,
    progress: &Progress,
) -> Result<serde_json::Value, BenchError> {
    let names = if options.quick { 100 } else { 1_000 };
    progress.say(&format!("many locks: {names} clients on {names} names"));
    let many = many_locks(&options.connect, names).await?;
    progress.clear();
    println!(
        "\n## Many locks: {names} clients, one distinct name each, acquire + release at once\n"
    );
    println!("| ops | ops/s | p50 | p99 |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| {} | {:.0} | {:.3} ms | {:.3} ms |",
        many.operations,
        many.per_second,
        ms(many.p50),
        ms(many.p99)
    );
    Ok(many.to_json(None))
}

/// `names` clients, each acquiring and releasing its own name once, all at once.
pub(super) async fn many_locks(
    server: &ConnectOptions,
    names: usize,
) -> Result<Figures, BenchError> {
    let client = Client::connect_with(server.clone()).await?;
    let prefix = format!("bench-many-{}", Token::random().lease_id());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..names {
        let client = client.clone();
        let name = format!("{prefix}-{i}");
        tasks.push(tokio::spawn(async move {
            let begun = Instant::now();
            let guard = client
                .lease(name)
                .ttl(Duration::from_secs(30))
                .acquire()
                .await?;
            guard.release().await?;
            Ok::<_, ClientError>(begun.elapsed())
        }));
    }
    let mut samples = Vec::with_capacity(names);
    samples.extend(join_clients(tasks).await?);
    Ok(Figures::from_samples(
        "many locks",
        samples,
        started.elapsed(),
    ))
}
