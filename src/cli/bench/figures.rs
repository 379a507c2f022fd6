//! Latency figures of a measured path, and how they are printed: shared by `leasehold bench`
//! and the peers bench (`benches/peers.rs` includes this file).

use std::time::Duration;

use serde_json::json;

/// Latency figures of one measured path.
#[derive(Debug, Clone)]
pub struct Figures {
    pub path: String,
    pub operations: usize,
    pub per_second: f64,
    pub p50: Duration,
    pub p99: Duration,
    pub p999: Duration,
    /// Mean time per operation.
    pub mean: Duration,
    /// Every sample, sorted, and the time they took together: to combine rounds.
    samples: Vec<Duration>,
    elapsed: Duration,
}

impl Figures {
    pub fn from_samples(path: &str, mut samples: Vec<Duration>, elapsed: Duration) -> Self {
        samples.sort();
        let at = |q: f64| {
            samples
                .get(((samples.len() as f64 * q) as usize).min(samples.len().saturating_sub(1)))
                .copied()
                .unwrap_or_default()
        };
        let total: Duration = samples.iter().sum();
        Figures {
            path: path.to_owned(),
            operations: samples.len(),
            per_second: samples.len() as f64 / elapsed.as_secs_f64().max(1e-9),
            p50: at(0.50),
            p99: at(0.99),
            p999: at(0.999),
            mean: total / u32::try_from(samples.len().max(1)).unwrap_or(u32::MAX),
            samples,
            elapsed,
        }
    }

    /// The figures of several rounds of one path, as if measured at once.
    #[allow(dead_code)] // `leasehold bench` only, not the peers bench that includes this file.
    pub fn combine(rounds: &[Figures]) -> Option<Figures> {
        let path = rounds.first()?.path.clone();
        let samples = rounds
            .iter()
            .flat_map(|r| r.samples.iter().copied())
            .collect();
        let elapsed = rounds.iter().map(|r| r.elapsed).sum();
        Some(Figures::from_samples(&path, samples, elapsed))
    }

    pub fn to_json(&self, baseline: Option<&Figures>) -> serde_json::Value {
        json!({
            "path": self.path,
            "operations": self.operations,
            "per_second": self.per_second,
            "p50_us": self.p50.as_micros() as u64,
            "p99_us": self.p99.as_micros() as u64,
            "p999_us": self.p999.as_micros() as u64,
            "mean_us": self.mean.as_micros() as u64,
            "p50_ratio_to_direct": baseline.map(|b| ratio(self.p50, b.p50)),
        })
    }
}

pub fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

/// Prints uncontended figures as a table, each row's p50 as a ratio to the first row's.
pub fn print_uncontended(title: &str, rows: &[&Figures]) {
    let Some(baseline) = rows.first() else {
        return;
    };
    println!("## {title}\n");
    println!(
        "| path | ops | ops/s | p50 | p99 | p999 | p50 vs {} |",
        baseline.path
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for figures in rows {
        println!(
            "| {} | {} | {:.0} | {:.3} ms | {:.3} ms | {:.3} ms | {:.2}x |",
            figures.path,
            figures.operations,
            figures.per_second,
            ms(figures.p50),
            ms(figures.p99),
            ms(figures.p999),
            ratio(figures.p50, baseline.p50)
        );
    }
}

pub fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}
