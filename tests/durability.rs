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
