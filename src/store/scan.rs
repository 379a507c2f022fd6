//! Finding a key space's names by `SCAN`, within a budget: what `List` of locks and of elections
//! share.
//!
//! A listing is for operators, never on a lease's path, and a key space may hold millions of
//! keys: so the scan is bounded in pages (the time it takes), not only in the names it keeps.

use fred::prelude::*;

use super::connection::Connection;
use crate::error::Result;

/// Keys asked of Redis per `SCAN` call.
const SCAN_PAGE: u32 = 1_000;
/// `SCAN` calls at most per listing: 1,000,000 keys looked at.
pub const MAX_SCAN_PAGES: usize = 1_000;

/// One listing's scan over one or more Redis nodes: the names found so far and the pages spent.
pub struct Scan<'a, F> {
    /// A `SCAN MATCH` pattern (see [`super::keys::lock_key_pattern`]).
    pattern: &'a str,
    /// The name a key stands for, or `None` for a key of the pattern that is not one.
    name_of: F,
    /// Names kept at most (one more is looked for, to say the listing is cut).
    limit: usize,
    pages: usize,
    /// Every name found, perhaps twice (Redlock's primaries each hold a copy).
    pub names: Vec<String>,
    /// Whether every node scanned ran to its end.
    pub complete: bool,
}

impl<'a, F: Fn(&str) -> Option<String>> Scan<'a, F> {
    pub fn new(pattern: &'a str, name_of: F, limit: usize) -> Self {
        Scan {
            pattern,
            name_of,
            limit,
            pages: 0,
            names: Vec::new(),
            complete: true,
        }
    }

    /// Scans the Redis behind `connection`: on a cluster every primary, since each holds only
    /// its own slots' keys.
    pub async fn node(&mut self, connection: &Connection) -> Result<()> {
        let client = connection.client();
        if client.is_clustered() {
            let primaries = client
                .cached_cluster_state()
                .map(|state| state.unique_primary_nodes())
                .unwrap_or_default();
            for primary in primaries {
                let node = client.with_cluster_node(primary);
                self.one(connection, &node).await?;
            }
        } else {
            self.one(connection, client).await?;
        }
        Ok(())
    }

    /// Scans one node until its end, the page budget, or a name past the limit.
    async fn one(&mut self, connection: &Connection, node: &impl KeysInterface) -> Result<()> {
        let mut cursor = "0".to_owned();
        loop {
            if self.pages >= MAX_SCAN_PAGES || self.names.len() > self.limit {
                self.complete = false;
                return Ok(());
            }
            self.pages += 1;
            let scan = node.scan_page(cursor, self.pattern, Some(SCAN_PAGE), None);
            let (next, keys): (String, Vec<String>) = connection.bounded("scan", scan).await?;
            self.names
                .extend(keys.iter().filter_map(|key| (self.name_of)(key)));
            cursor = next;
            if cursor == "0" {
                return Ok(());
            }
        }
    }

    /// The names found, each once, at most `limit` of them; `true`: more may exist.
    pub fn finish(mut self) -> (Vec<String>, bool) {
        let mut seen = std::collections::HashSet::new();
        self.names.retain(|name| seen.insert(name.clone()));
        let truncated = !self.complete || self.names.len() > self.limit;
        self.names.truncate(self.limit);
        (self.names, truncated)
    }
}
