// The README's example: hold a lock while doing work, stop if it is lost, and see a refusal.
// Usage: node dist/examples/hold.js [host:port[,host:port...]]
import { setTimeout as sleep } from "node:timers/promises";
import { NotAcquiredError, connect } from "../src/index.js";

const client = connect(process.argv[2] ?? process.env["LEASEHOLD_SERVER"] ?? "127.0.0.1:50051");
try {
  {
    // Released when the block ends, however it ends.
    await using lease = await client.lease("nightly-report", { ttl: 10_000, wait: 30_000, holder: "report@host-a" });
    console.log(`holding nightly-report with fencing token ${lease.fencingToken}`);

    // Another worker finds it taken: typed fields from the server's error details.
    try {
      await client.lease("nightly-report");
    } catch (error) {
      if (!(error instanceof NotAcquiredError)) throw error;
      console.log(`refused: ${error.reason} held by ${error.holder}, retry in ${Math.round(error.retryAfter ?? 0)} ms`);
    }

    // Work that stops when the lease is lost (lease.signal aborts).
    await sleep(100, undefined, { signal: lease.signal });
  }

  // The same with a callback: the lock is held while it runs.
  const rows = await client.using("nightly-report", { ttl: 10_000 }, async (signal, lease) => {
    signal.throwIfAborted();
    return `report written under fencing token ${lease.fencingToken}`;
  });
  console.log(rows);
} finally {
  client.close();
}
