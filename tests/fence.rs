//! The protected-resource helper against a real Redis.

use crate::support;

use leasehold_client::fence::{Fenced, FencedKey};
use support::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_tokens_are_refused_for_reads_and_writes() {
    let redis = RedisServer::start();
    let key = FencedKey::new(redis.client().await, "resource")
        .await
        .unwrap();

    assert_eq!(key.get(5).await.unwrap(), Fenced::Accepted(None));
    assert_eq!(key.set(5, "from 5").await.unwrap(), Fenced::Accepted(()));
    // The same holder again: fine.
    assert_eq!(
        key.set(5, "from 5 again").await.unwrap(),
        Fenced::Accepted(())
    );
    // An older holder is refused and changes nothing.
    assert_eq!(
        key.set(3, "from 3").await.unwrap(),
        Fenced::Stale { highest_seen: 5 }
    );
    assert_eq!(key.get(3).await.unwrap(), Fenced::Stale { highest_seen: 5 });
    // A newer holder's read alone fences out the older one's pending write.
    assert_eq!(
        key.get(1_700_000_000_000_007).await.unwrap(),
        Fenced::Accepted(Some("from 5 again".into()))
    );
    assert_eq!(
        key.set(5, "late write").await.unwrap(),
        Fenced::Stale {
            highest_seen: 1_700_000_000_000_007
        }
    );
    assert_eq!(
        key.get(1_700_000_000_000_007).await.unwrap(),
        Fenced::Accepted(Some("from 5 again".into()))
    );
}
