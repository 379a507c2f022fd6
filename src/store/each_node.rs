//! Asking every node that holds locks the same question at once: the checks that read each
//! node's configuration (its `maxmemory-policy`, its replicas and persistence) share it.

use std::future::Future;

use fred::clients::WithOptions;
use fred::prelude::*;
use fred::types::config::Options;

/// Asks every node `client` writes to (the one Redis, the Sentinel's primary, every Cluster
/// primary), all at once: one slow node must not hold the others' answers (or the health check)
/// for its whole timeout. Each answer with its node's address; none while not connected.
pub async fn ask_each_node<T, Fut>(
    client: &Client,
    ask: impl Fn(WithOptions<Client>) -> Fut,
) -> Vec<(String, T)>
where
    Fut: Future<Output = T>,
{
    let asked = client.active_connections().into_iter().map(|server| {
        let options = Options {
            cluster_node: client.is_clustered().then(|| server.clone()),
            ..Default::default()
        };
        let answer = ask(client.with_options(&options));
        async move { (server.to_string(), answer.await) }
    });
    futures_util::future::join_all(asked).await
}
