//! Redis's own durability as the service will rely on it: what a write survives once Redis has
//! acknowledged it (`WAIT` for replicas, `WAITAOF` for the disk).

use crate::support::newer_redis;

use fred::prelude::{ClientLike, KeysInterface};

/// The newer server `scripts/redis.sh` installs runs here and has what Debian's Redis 7.0
/// lacks: `WAITAOF` on a Redis with an append-only file counts the local fsync it waited for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_newer_redis_answers_waitaof_with_the_local_fsync() {
    let redis = newer_redis::start_with(&["--appendonly", "yes"]);
    // Each of its commands is bounded by EVENT_TIMEOUT.
    let client = redis.client().await;
    let () = client.set("k", "v", None, None, false).await.expect("SET");
    let acknowledged: Vec<i64> = client
        .custom(fred::cmd!("WAITAOF"), vec![1, 0, 1000])
        .await
        .expect("WAITAOF answers (Redis 7.2+)");
    // The write on this Redis's disk (1), and no replica to count (0).
    assert_eq!(acknowledged, vec![1, 0]);
}

/// `--redis-durable` on a Redis with `WAITAOF`: refused at start without an append-only file (in
/// one sentence, status 78), and with one every grant is answered only once it is on disk (a
/// `WAITAOF` behind each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_waits_for_the_disk_with_waitaof_and_is_refused_without_an_aof() {
    use crate::eviction::{serve, started};
    use crate::support::{EVENT_TIMEOUT, connect, unary_acquire, within};

    let without = newer_redis::start_with(&[]);
    let child = serve(&["--redis", &without.url()], &["--redis-durable"]);
    let output = within(EVENT_TIMEOUT, "serve exits", child.wait_with_output())
        .await
        .expect("serve's output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(78), "{stderr}");
    assert!(
        stderr
            .trim_end()
            .ends_with("has appendonly no: set them, upgrade, or drop --redis-durable"),
        "{stderr}"
    );

    let redis = newer_redis::start_with(&["--appendonly", "yes"]);
    let mut child = serve(
        &["--redis", &redis.url()],
        &["--redis-durable", "--redis-replicas", "0"],
    );
    let (addr, _) = started(&mut child, false).await;
    let mut client = connect(&addr).await;
    let granted = client
        .acquire(unary_acquire("on-disk", 5_000, 0, "a"))
        .await
        .expect("granted once on disk")
        .into_inner();
    assert!(granted.acquired);
    // Every grant waited for the disk: WAITAOF ran (Redis counts its calls).
    let stats = crate::support::redis_cli(redis.port(), &["info", "commandstats"]);
    assert!(stats.contains("cmdstat_waitaof:calls="), "{stats}");
}
