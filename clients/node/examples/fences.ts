// The README's second example: two names held at once (all or none) with a ceiling on the hold
// and a lock-delay, and the token check a protected resource makes before each write.
// Usage: node dist/examples/fences.js [host:port[,host:port...]]
import { connect } from "../src/index.js";

const client = connect(process.argv[2] ?? process.env["LEASEHOLD_SERVER"] ?? "127.0.0.1:50051");
try {
  let fencingToken = 0;
  {
    // Both accounts or neither. Lost as a whole (lostCode "max_hold") a minute after the acquire
    // at the latest; if lost, neither name can be taken for 5 s more.
    await using transfer = await client.lease("account-1", { names: ["account-2"], wait: 10_000, maxHold: 60_000, lockDelay: 5_000 });
    fencingToken = transfer.fencingToken;
    for (const [name, token] of transfer.fences) {
      // What the resource asks before it takes a write under this fencing token.
      const { state } = await client.check(name, token, { signal: transfer.signal });
      console.log(`${name}: fencing token ${token} is ${state}`);
    }
  }
  const { state } = await client.check("account-1", fencingToken);
  console.log(`released: account-1 is ${state}`);
} finally {
  client.close();
}
