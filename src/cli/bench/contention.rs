//! Section 2: clients looping on one lock, through the fair `Lease` stream and by polling
//! Redis directly: waits and hand-offs.

use super::*;

pub(super) async fn contention_section(
    options: &BenchOptions,
    window: Duration,
    progress: &Progress,
) -> Result<serde_json::Value, BenchError> {
    let contenders: &[usize] = if options.quick {
        &[2, 16]
    } else {
        &[2, 16, 128]
    };
    let mut contention_rows = Vec::new();
    println!("\n## Contention: clients looping on one lock\n");
    println!(
        "Lease stream (fair line, wake-ups) against a polling client on Redis directly (`SET NX PX`, 50 ms retry).\n"
    );
    println!(
        "| clients | path | acquisitions/s | wait p50 | wait p99 | hand-off p50 | hand-off p99 | hand-off p50 ratio (polling / stream) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for &clients in contenders {
        progress.say(&format!("contention: {clients} clients, Lease stream"));
        let stream = contention(&options.connect, clients, window).await?;
        progress.say(&format!("contention: {clients} clients, polling"));
        let polling = polling_contention(&options.redis, clients, window).await?;
        progress.clear();
        let handoff_ratio = ratio(polling.handoffs.p50, stream.handoffs.p50);
        for (run, shown_ratio) in [
            (&stream, String::new()),
            (&polling, format!("{handoff_ratio:.0}x")),
        ] {
            println!(
                "| {clients} | {} | {:.0} | {:.3} ms | {:.3} ms | {:.3} ms | {:.3} ms | {shown_ratio} |",
                run.waits.path,
                run.waits.per_second,
                ms(run.waits.p50),
                ms(run.waits.p99),
                ms(run.handoffs.p50),
                ms(run.handoffs.p99),
            );
        }
        contention_rows.push(json!({
            "clients": clients,
            "stream_waits": stream.waits.to_json(None),
            "stream_handoffs": stream.handoffs.to_json(None),
            "polling_waits": polling.waits.to_json(None),
            "polling_handoffs": polling.handoffs.to_json(None),
            "handoff_p50_ratio_polling_to_stream": handoff_ratio,
        }));
    }
    Ok(json!(contention_rows))
}

/// One holding of the lock in a contention run: when it began and when its release was sent.
pub(super) type Holding = (Instant, Instant);

/// What a contention run measured: each acquisition's wait, and each hand-off's latency (from
/// one holder sending its release to the next holder having the lock).
pub struct Contention {
    pub waits: Figures,
    pub handoffs: Figures,
}

impl Contention {
    fn from_holdings(
        path: &str,
        clients: Vec<(Vec<Duration>, Vec<Holding>)>,
        elapsed: Duration,
    ) -> Self {
        let mut waits = Vec::new();
        let mut holdings = Vec::new();
        for (client_waits, client_holdings) in clients {
            waits.extend(client_waits);
            holdings.extend(client_holdings);
        }
        holdings.sort();
        let handoffs = holdings
            .windows(2)
            .map(|pair| pair[1].0.saturating_duration_since(pair[0].1))
            .collect();
        Contention {
            waits: Figures::from_samples(path, waits, elapsed),
            handoffs: Figures::from_samples(path, handoffs, elapsed),
        }
    }
}

/// `clients` loop on one lock for `window` through the fair `Lease` stream.
pub(super) async fn contention(
    server: &ConnectOptions,
    clients: usize,
    window: Duration,
) -> Result<Contention, BenchError> {
    let name = format!("bench-contention-{}", Token::random().lease_id());
    let deadline = Instant::now() + window;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let client = Client::connect_with(server.clone()).await?;
        let name = name.clone();
        tasks.push(tokio::spawn(async move {
            let (mut waits, mut holdings) = (Vec::new(), Vec::new());
            while Instant::now() < deadline {
                let begun = Instant::now();
                let guard = client
                    .lease(name.clone())
                    .ttl(Duration::from_secs(30))
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await?;
                let acquired = Instant::now();
                waits.push(acquired - begun);
                holdings.push((acquired, Instant::now()));
                guard.release().await?;
            }
            Ok::<_, ClientError>((waits, holdings))
        }));
    }
    let results = join_clients(tasks).await?;
    Ok(Contention::from_holdings(
        "Lease stream",
        results,
        started.elapsed(),
    ))
}

/// Retry interval of the polling baseline: what a hand-rolled `SET NX` loop sleeps between tries.
pub(super) const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// The baseline for hand-off: `clients` loop directly on Redis, each trying `SET NX PX` and,
/// whether or not it got the lock, sleeping 50 ms before its next try.
pub(super) async fn polling_contention(
    redis_url: &str,
    clients: usize,
    window: Duration,
) -> Result<Contention, BenchError> {
    let key = format!("leasehold-bench-polling:{}", Token::random().lease_id());
    let release = Script::from_lua(RELEASE_SCRIPT);
    let deadline = Instant::now() + window;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let redis = Builder::from_config(Config::from_url(redis_url)?).build()?;
        redis.init().await?;
        release.load(&redis).await?;
        let (key, release) = (key.clone(), release.clone());
        tasks.push(tokio::spawn(async move {
            let (mut waits, mut holdings) = (Vec::new(), Vec::new());
            let mut begun = Instant::now();
            while Instant::now() < deadline {
                let token = Token::random();
                let set: Option<String> = redis
                    .set(
                        &key,
                        token.secret(),
                        Some(Expiration::PX(30_000)),
                        Some(SetOptions::NX),
                        false,
                    )
                    .await?;
                if set.is_some() {
                    let acquired = Instant::now();
                    waits.push(acquired - begun);
                    holdings.push((acquired, Instant::now()));
                    let _: i64 = release
                        .evalsha(&redis, key.as_str(), token.secret())
                        .await?;
                }
                tokio::time::sleep(POLL_INTERVAL).await;
                if set.is_some() {
                    begun = Instant::now();
                }
            }
            Ok::<_, fred::error::Error>((waits, holdings))
        }));
    }
    let results = join_clients(tasks).await?;
    Ok(Contention::from_holdings(
        "polling",
        results,
        started.elapsed(),
    ))
}
