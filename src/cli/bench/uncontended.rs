//! Section 1: uncontended acquire + release, one client at a time, through each path, with
//! what each costs Redis against the seed's own pair.

use super::*;

/// Rounds of the uncontended section: every path runs once per round, in turn, so a slow
/// spell of this shared machine falls on all of them rather than on one.
pub(super) const UNCONTENDED_ROUNDS: usize = 5;

pub(super) async fn uncontended_section(
    options: &BenchOptions,
    redis: &fred::prelude::Client,
    progress: &Progress,
) -> Result<serde_json::Value, BenchError> {
    let operations: usize = if options.quick { 200 } else { 5_000 };
    let per_round = operations.div_ceil(UNCONTENDED_ROUNDS);
    let client = Client::connect_with(options.connect.clone()).await?;
    let with_echo = echo::available(&client).await;
    // direct, stream, unary, echo stream, echo unary, and the two echoes with a Redis PING each
    let mut rounds: [Vec<Figures>; 7] = Default::default();
    // Redis CPU seconds each of direct, stream and unary cost, over all rounds, less what an
    // idle Redis spends over as long (its timers): a slower path would otherwise be charged for
    // Redis's idling while it waits.
    progress.say("uncontended: Redis idle");
    let idle_rate = {
        let (before, started) = (redis_cpu_seconds(redis).await?, Instant::now());
        tokio::time::sleep(Duration::from_secs(1)).await;
        (redis_cpu_seconds(redis).await? - before) / started.elapsed().as_secs_f64()
    };
    let mut redis_cpu = [0.0f64; 3];
    for round in 1..=UNCONTENDED_ROUNDS {
        progress.say(&format!(
            "uncontended: round {round} of {UNCONTENDED_ROUNDS}"
        ));
        let mut busy = Vec::with_capacity(4);
        let mark = async || -> Result<(f64, Instant), BenchError> {
            Ok((redis_cpu_seconds(redis).await?, Instant::now()))
        };
        busy.push(mark().await?);
        rounds[0].push(direct_redis(redis, per_round).await?);
        busy.push(mark().await?);
        rounds[1].push(lease_stream(&client, per_round).await?);
        busy.push(mark().await?);
        rounds[2].push(unary(&client, per_round).await?);
        busy.push(mark().await?);
        for (path, pair) in busy.windows(2).enumerate() {
            let ((cpu_before, at_before), (cpu_after, at_after)) = (pair[0], pair[1]);
            let idle = idle_rate * at_after.duration_since(at_before).as_secs_f64();
            redis_cpu[path] += (cpu_after - cpu_before - idle).max(0.0);
        }
        if with_echo {
            rounds[3].push(echo::stream_pair(&client, per_round, false).await?);
            rounds[4].push(echo::unary_calls(&client, per_round, 2, false).await?);
            rounds[5].push(echo::stream_pair(&client, per_round, true).await?);
            rounds[6].push(echo::unary_calls(&client, per_round, 2, true).await?);
        }
    }
    progress.clear();
    let [
        direct,
        stream,
        unary,
        echo_stream,
        echo_unary,
        ping_stream,
        ping_unary,
    ] = rounds.map(|path| Figures::combine(&path));
    let (Some(direct), Some(stream), Some(unary)) = (direct, stream, unary) else {
        return Err(unexpected("no uncontended rounds ran"));
    };
    let mut rows = vec![&direct, &stream, &unary];
    rows.extend(
        [&echo_stream, &echo_unary, &ping_stream, &ping_unary]
            .into_iter()
            .flatten(),
    );
    print_uncontended("Uncontended acquire + release, one client", &rows);
    let mut figures = json!({
        "paths": rows.iter().map(|row| row.to_json(Some(&direct))).collect::<Vec<_>>(),
    });
    // What each path costs Redis, against the seed's own pair (`SET NX PX`, then the
    // compare-and-delete script) through one client in the same run.
    let cycles = (per_round * UNCONTENDED_ROUNDS) as f64;
    let per_cycle_us = redis_cpu.map(|seconds| seconds * 1e6 / cycles);
    println!(
        "\n| path | Redis CPU per acquire + release | against direct Redis |\n| --- | --- | --- |"
    );
    let mut redis_rows = Vec::new();
    for (path, us) in [&direct, &stream, &unary].iter().zip(per_cycle_us) {
        let against = us / per_cycle_us[0].max(f64::MIN_POSITIVE);
        println!("| {} | {us:.1} µs | {against:.2}x |", path.path);
        redis_rows.push(json!({
            "path": path.path,
            "redis_cpu_us_per_cycle": us,
            "ratio_to_direct_redis": against,
        }));
    }
    figures["redis_cpu"] = json!(redis_rows);
    let (Some(echo_stream), Some(echo_unary), Some(ping_stream), Some(ping_unary)) =
        (echo_stream, echo_unary, ping_stream, ping_unary)
    else {
        println!("\n(no transport baseline: start the server with `--echo` to measure it)");
        return Ok(figures);
    };
    // What the service adds is judged against the round trips it cannot avoid: Redis's (the
    // direct path is exactly the two scripts a lease needs) and gRPC's (the echoes).
    println!("\n| path | against | p50 ratio | mean ratio |\n| --- | --- | --- | --- |");
    // A path against a floor (p50 and mean): one row of the table, and the two ratios.
    let against = |path: &Figures, floor: &str, p50: Duration, mean: Duration| {
        let (p50, mean) = (ratio(path.p50, p50), ratio(path.mean, mean));
        println!("| {} | {floor} | {p50:.2}x | {mean:.2}x |", path.path);
        (p50, mean)
    };
    let mut floors = Vec::new();
    for (path, transport) in [(&stream, &echo_stream), (&unary, &echo_unary)] {
        let floor = format!("direct Redis + {}", transport.path);
        let (p50, mean) = against(
            path,
            &floor,
            direct.p50 + transport.p50,
            direct.mean + transport.mean,
        );
        floors.push(json!({
            "path": path.path,
            "transport": transport.path,
            "p50_ratio_to_redis_plus_transport": p50,
            "mean_ratio_to_redis_plus_transport": mean,
        }));
    }
    figures["against_redis_plus_transport"] = json!(floors);
    // The floor that also counts the server's own hop to Redis (its connection, fred's task,
    // the command timeout): the same echoes, each making the server PING Redis once.
    let mut floors = Vec::new();
    for (path, floor) in [(&stream, &ping_stream), (&unary, &ping_unary)] {
        let (p50, mean) = against(path, &floor.path, floor.p50, floor.mean);
        floors.push(json!({
            "path": path.path,
            "floor": floor.path,
            "p50_ratio": p50,
            "mean_ratio": mean,
        }));
    }
    figures["against_echo_with_redis"] = json!(floors);
    Ok(figures)
}
