// The conformance scenarios (clients/conformance/scenarios.txt) for the Node client, against the
// real binary and a real redis-server: the Rust, Go, Python and Java clients run the same list.
// Each test starts its own Redis and servers, so they run concurrently.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { performance } from "node:perf_hooks";
import { Code, LeaseLostError, LeaseholdError, NotAcquiredError, connect, type Client, type Lease, type LockState } from "../src/index.js";
import {
  ChildScript,
  CuttableProxy,
  abortsWithin,
  lockKey,
  lockToken,
  redisCli,
  startCluster,
  startServer,
  waitForLine,
  waitRenewed,
  waitUntil,
  within,
  type Server,
} from "./support.js";

const LOCK_KEY = lockKey("job");

function client(t: { after(fn: () => unknown): void }, target: string): Client {
  const c = connect(target);
  t.after(() => c.close());
  return c;
}

async function refused(promise: Promise<unknown>): Promise<LeaseholdError> {
  try {
    const held = await promise;
    await (held as Lease).release();
  } catch (error) {
    assert.ok(error instanceof LeaseholdError, `not a LeaseholdError: ${error}`);
    return error;
  }
  assert.fail("acquired, but should have been refused");
}

/** The lease is not lost, Redis holds its token and fencing token, and a thief through each of
 * `servers` is refused. */
async function stillHeld(lease: Lease, token: string, fencingToken: number, redisPort: number, servers: Server[]): Promise<void> {
  assert.equal(lease.lost, false, lease.lostReason);
  assert.equal(lease.token, token);
  assert.equal(lease.fencingToken, fencingToken);
  assert.equal(await lockToken(redisPort, LOCK_KEY), token);
  for (const server of servers) {
    const other = connect(server.address);
    try {
      assert.equal((await other.describe("job")).fencingToken, fencingToken);
      assert.ok((await refused(other.lease("job", { resume: false }))) instanceof NotAcquiredError);
    } finally {
      other.close();
    }
  }
}

/** Waits until the lease is vouched for beyond `before` (confirmed again), failing if lost. */
async function confirmedAfter(lease: { validUntil: number; lost: boolean; lostReason?: string | undefined }, before: number): Promise<void> {
  await waitUntil(() => {
    assert.equal(lease.lost, false, lease.lostReason);
    return lease.validUntil > before;
  }, "confirmed again", 10_000);
}

describe("conformance", { concurrency: 4 }, () => {
  test("conformance_acquire_release", async (t) => {
    const { address, redisPort } = await startServer(t);
    const c = client(t, address);
    {
      await using lease = await c.lease("job");
      assert.equal(await lockToken(redisPort, LOCK_KEY), lease.token);
    }
    assert.equal(await redisCli(redisPort, "EXISTS", LOCK_KEY), "0");
  });

  test("conformance_fail_fast_names_holder", async (t) => {
    const { address } = await startServer(t);
    const c = client(t, address);
    await using _held = await c.lease("job", { holder: "holder-a" });
    const error = await refused(c.lease("job"));
    assert.ok(error instanceof NotAcquiredError);
    assert.match(error.message, /holder-a/);
  });

  test("conformance_wait_then_handoff", async (t) => {
    const { address, redisPort } = await startServer(t);
    const c = client(t, address);
    const first = await c.lease("job");
    const waiter = c.lease("job", { wait: 10_000 });
    await waitForLine(redisPort, "leasehold:{job}:line", 1);
    assert.equal(await first.release(), true);
    await using second = await within(waiter, 10_000, "no hand-off");
    assert.ok(second.fencingToken > first.fencingToken, `${second.fencingToken} after ${first.fencingToken}`);
  });

  test("conformance_fencing_tokens_grow", async (t) => {
    const { address } = await startServer(t);
    const c = client(t, address);
    let last = 0;
    for (let i = 0; i < 5; i++) {
      await using lease = await c.lease("job");
      assert.ok(lease.fencingToken > last);
      last = lease.fencingToken;
    }
  });

  test("conformance_lost_when_key_deleted", async (t) => {
    const { address, redisPort } = await startServer(t);
    const c = client(t, address);
    await using lease = await c.lease("job", { ttl: 1500 }); // renewed every 500 ms: the server tells it well before its own clock would
    await redisCli(redisPort, "DEL", LOCK_KEY);
    assert.ok(await abortsWithin(lease.signal, 10_000), "the signal never aborted");
    assert.match(lease.lostReason!, /deleted or taken/);
    assert.equal(lease.lostCode, "taken");
  });

  test("conformance_lost_by_client_clock", async (t) => {
    const { address, server } = await startServer(t);
    const c = client(t, address);
    const lease = await c.lease("job", { ttl: 500 });
    server.signal("SIGSTOP");
    try {
      assert.ok(await abortsWithin(lease.signal, 10_000), "the signal never aborted while the server was frozen");
      assert.match(lease.lostReason!, /server silent/);
      assert.equal(lease.lostCode, "unreachable");
      assert.ok(lease.signal.reason instanceof LeaseLostError);
      assert.equal(lease.signal.reason.code, "unreachable");
    } finally {
      server.signal("SIGCONT");
    }
    assert.equal(await lease.release(), false);
  });

  test("conformance_bad_input_refused", async (t) => {
    const { address } = await startServer(t);
    const c = client(t, address);
    const error = await refused(c.lease(""));
    assert.equal(error.code, Code.INVALID_ARGUMENT);
    assert.match(error.details, /lock name is empty/);
  });

  test("conformance_election_handover", async (t) => {
    const { address, redisPort } = await startServer(t);
    const c = client(t, address);
    await using a = c.campaign("vote", "a", { ttl: 2000 });
    const termA = await a.elected();
    await using b = c.campaign("vote", "b", { ttl: 2000 });
    await waitForLine(redisPort, "leasehold:election:{vote}:line", 1);
    assert.equal(await a.resign(), true);
    const termB = await within(b.elected(), 10_000, "b never led");
    assert.ok(termB > termA);
    const leader = await c.leader("vote");
    assert.equal(leader?.term, termB);
    assert.equal(Buffer.from(leader!.value).toString(), "b");
  });

  test("conformance_semaphore_limit", async (t) => {
    const { address } = await startServer(t);
    const c = client(t, address);
    await using first = await c.lease("pool", { limit: 2 });
    await using second = await c.lease("pool", { limit: 2 });
    assert.notEqual(first.fencingToken, second.fencingToken);
    const third = await refused(c.lease("pool", { limit: 2 }));
    assert.ok(third instanceof NotAcquiredError);
    assert.equal(third.code, Code.ABORTED);
    const other = await refused(c.lease("pool", { limit: 3 }));
    assert.equal(other.code, Code.FAILED_PRECONDITION);
    assert.match(other.details, /limit 2/);
    assert.match(other.details, /limit 3/);
  });

  test("conformance_shared_readers", async (t) => {
    const { address, redisPort } = await startServer(t);
    const c = client(t, address);
    const first = await c.lease("catalog", { shared: true });
    const second = await c.lease("catalog", { shared: true });
    const readers = Math.max(first.fencingToken, second.fencingToken);
    let writerIn = false;
    const writer = c.lease("catalog", { wait: 10_000 }).then((l) => {
      writerIn = true;
      return l;
    });
    await waitForLine(redisPort, "leasehold:{catalog}:line", 1);
    assert.equal(writerIn, false, "the writer got in beside the readers");
    assert.equal(await first.release(), true);
    assert.equal(await second.release(), true);
    await using held = await within(writer, 10_000, "the writer never got in");
    assert.ok(held.fencingToken > readers);
  });

  test("conformance_resume_after_break", async (t) => {
    const { address, redisPort } = await startServer(t);
    const proxy = new CuttableProxy(address);
    const cuttable = client(t, await proxy.listen());
    t.after(() => proxy.cut());
    // By hand: resume false, so the broken stream is reported lost and resumed below.
    const held = await cuttable.lease("job", { ttl: 3000, resumeGrace: 2000, resume: false });
    proxy.cut(); // the connection breaks; the lease is kept for its grace
    assert.ok(await abortsWithin(held.signal, 10_000), "the break was never noticed");
    await waitUntil(async () => {
      const pttl = Number(await redisCli(redisPort, "PTTL", LOCK_KEY));
      return pttl >= 0 && pttl <= 2000;
    }, "the lease shortened to its grace", 10_000);
    const c = client(t, address);
    const wrong = await refused(c.lease("job", { ttl: 3000, resumeToken: "0".repeat(32), resume: false }));
    assert.equal(wrong.code, Code.NOT_FOUND);
    const resumed = await c.lease("job", { ttl: 3000, resumeToken: held.token, resume: false });
    assert.equal(resumed.fencingToken, held.fencingToken);
    assert.equal(await lockToken(redisPort, LOCK_KEY), held.token);
    assert.equal(await resumed.release(), true);
    assert.equal(await redisCli(redisPort, "EXISTS", LOCK_KEY), "0");
  });

  test("conformance_survives_rolling_restart", async (t) => {
    const { servers, redisPort, list } = await startCluster(t);
    const c = client(t, list);
    const lease = await c.lease("job", { ttl: 2000 });
    const { token, fencingToken } = lease;
    await stillHeld(lease, token, fencingToken, redisPort, servers);
    for (const server of servers) {
      await server.stop();
      await confirmedAfter(lease, lease.validUntil);
      await stillHeld(lease, token, fencingToken, redisPort, servers.filter((s) => s !== server));
      await server.start();
      await stillHeld(lease, token, fencingToken, redisPort, servers);
    }
    // Its first server stopped, so its stream broke: it was resumed.
    assert.ok(lease.resumes >= 1);
    // Longer than its TTL: still held, so the resumed stream renews it.
    assert.equal(await abortsWithin(lease.signal, 2500), false, lease.lostReason);
    await stillHeld(lease, token, fencingToken, redisPort, servers);
    assert.equal(await lease.release(), true);
    assert.equal(await redisCli(redisPort, "EXISTS", LOCK_KEY), "0");
  });

  test("conformance_survives_server_crash", async (t) => {
    const { servers, redisPort, list } = await startCluster(t);
    const c = client(t, list);
    const lease = await c.lease("job", { ttl: 2000 });
    const { token, fencingToken } = lease;
    const before = lease.validUntil;
    await servers[0]!.kill(); // its server: no goodbye, the connection just drops
    await servers[1]!.kill();
    await confirmedAfter(lease, before);
    assert.ok(lease.resumes >= 1);
    await stillHeld(lease, token, fencingToken, redisPort, [servers[2]!]);
    assert.equal(await abortsWithin(lease.signal, 2500), false, lease.lostReason); // longer than its TTL
    await stillHeld(lease, token, fencingToken, redisPort, [servers[2]!]);
    assert.equal(await lease.release(), true);
    assert.equal(await redisCli(redisPort, "EXISTS", LOCK_KEY), "0");
  });

  test("conformance_refusal_details", async (t) => {
    const { address } = await startServer(t);
    const c = client(t, address);
    const ttl = 30_000;
    await using _held = await c.lease("job", { holder: "holder-a", ttl });
    const error = await refused(c.lease("job"));
    // Typed fields, read from the status details: nothing here parses the message.
    assert.ok(error instanceof NotAcquiredError);
    assert.equal(error.code, Code.ABORTED);
    assert.equal(error.reason, "LOCK_HELD");
    assert.equal(error.holder, "holder-a");
    assert.equal(error.metadata["lock"], "job");
    assert.ok(error.retryAfter !== undefined && error.retryAfter > 0 && error.retryAfter <= ttl, `retryAfter ${error.retryAfter}`);
  });

  test("conformance_lists_held_locks", async (t) => {
    const { address } = await startServer(t);
    const c = client(t, address);
    const lease = await c.lease("job", { holder: "holder-a" });
    const listed = await c.list();
    assert.equal(listed.truncated, false);
    const job = listed.locks.filter((l) => l.name === "job");
    assert.equal(job.length, 1);
    assert.equal(job[0]!.holder, "holder-a");
    assert.equal(job[0]!.fencingToken, lease.fencingToken);
    assert.equal(await lease.release(), true);
    assert.ok(!(await c.list()).locks.some((l) => l.name === "job"));
  });

  test("conformance_session_holds_many", async (t) => {
    const { address, redisPort } = await startServer(t);
    const c = client(t, address);
    const session = await c.session({ ttl: 5000, holder: "session-a" });
    const a = await session.lock("a");
    const b = await session.lock("b");
    const permit = await session.lock("pool", { limit: 2 });
    assert.equal(await lockToken(redisPort, lockKey("a")), a.token);
    assert.equal(await lockToken(redisPort, lockKey("b")), b.token);
    assert.notEqual(await redisCli(redisPort, "ZSCORE", `${lockKey("pool")}:holders`, permit.token), "");
    assert.equal(new Set([a.token, b.token, permit.token]).size, 3);
    for (const name of ["a", "b"]) {
      const error = await refused(c.lease(name, { resume: false }));
      assert.ok(error instanceof NotAcquiredError);
      assert.match(error.message, /session-a/);
    }
    assert.equal(await a.release(), true); // frees "a" alone
    assert.equal(await redisCli(redisPort, "EXISTS", lockKey("a")), "0");
    {
      await using next = await c.lease("a");
      assert.ok(next.fencingToken > a.fencingToken);
    }
    assert.ok((await refused(c.lease("b", { resume: false }))) instanceof NotAcquiredError);
    assert.equal(await lockToken(redisPort, lockKey("b")), b.token);
    assert.notEqual(await redisCli(redisPort, "ZSCORE", `${lockKey("pool")}:holders`, permit.token), "");
    assert.equal(b.lost || permit.lost, false);
    await session.close();
    for (const key of [lockKey("b"), `${lockKey("pool")}:holders`, lockKey("pool")]) {
      assert.equal(await redisCli(redisPort, "EXISTS", key), "0", key);
    }
    assert.equal(b.lost || permit.lost || session.lost, false);
    await assert.rejects(session.lock("c"), /session closed/);
  });

  test("conformance_session_lease_lost_alone", async (t) => {
    const { address, redisPort } = await startServer(t);
    const c = client(t, address);
    await using session = await c.session({ ttl: 1500 }); // renewals leave 1 s for a late confirmation
    const a = await session.lock("a");
    const b = await session.lock("b");
    await redisCli(redisPort, "DEL", lockKey("a"));
    assert.ok(await abortsWithin(a.signal, 10_000), "a's signal never aborted");
    assert.match(a.lostReason!, /deleted or taken/);
    assert.equal(b.lost, false, b.lostReason);
    await confirmedAfter(b, b.validUntil); // the server confirmed the session again
    assert.equal(await lockToken(redisPort, lockKey("b")), b.token);
    assert.equal(await a.release(), false); // already lost
    assert.equal(await abortsWithin(b.signal, 2000), false, b.lostReason); // longer than the TTL
    assert.equal(await lockToken(redisPort, lockKey("b")), b.token);
    assert.equal(session.lost, false);
    assert.equal(await b.release(), true);
  });

  test("conformance_session_campaign", async (t) => {
    const { address, redisPort } = await startServer(t);
    const c = client(t, address);
    const first = await c.session({ ttl: 2000 });
    await using second = await c.session({ ttl: 2000 });
    const a = await first.campaign("vote", "a");
    assert.ok(a.term > 0);
    await a.proclaim("a2");
    assert.equal(Buffer.from((await c.leader("vote"))!.value).toString(), "a2");
    let bLeads = false;
    const elected = second.campaign("vote", "b").then((l) => {
      bLeads = true;
      return l;
    });
    await waitForLine(redisPort, "leasehold:election:{vote}:line", 1);
    assert.equal(bLeads, false, "the second session leads beside the first");
    await first.close(); // the first session's end lets its leadership go
    const b = await within(elected, 10_000, "the second session never led");
    assert.ok(b.term > a.term);
    const leader = await c.leader("vote");
    assert.equal(leader?.term, b.term);
    assert.equal(Buffer.from(leader!.value).toString(), "b");
    assert.equal(a.lost, false); // let go by the close, not lost
    assert.equal(await b.resign(), true);
    assert.equal(await c.leader("vote"), null);
  });

  test("conformance_session_survives_server_crash", async (t) => {
    const { servers, redisPort, list } = await startCluster(t);
    const c = client(t, list);
    const session = await c.session({ ttl: 2000 });
    const a = await session.lock("a");
    const b = await session.lock("b");
    const [validA, validB] = [a.validUntil, b.validUntil];
    await servers[0]!.kill(); // the one the session is on: the first address
    await confirmedAfter(a, validA);
    await confirmedAfter(b, validB);
    assert.ok(a.resumes >= 1 && b.resumes >= 1 && session.resumes >= 1);
    const other = client(t, servers[2]!.address);
    for (const lease of [a, b]) {
      assert.equal(await lockToken(redisPort, lockKey(lease.name)), lease.token);
      const described = await other.describe(lease.name);
      assert.ok(described.held);
      assert.equal(described.fencingToken, lease.fencingToken);
      assert.ok((await refused(other.lease(lease.name, { resume: false }))) instanceof NotAcquiredError);
    }
    const cLock = await session.lock("c"); // the resumed session takes new locks
    assert.equal(await lockToken(redisPort, lockKey("c")), cLock.token);
    assert.ok(cLock.fencingToken > 0);
    assert.equal(await abortsWithin(a.signal, 2500), false, a.lostReason); // longer than the TTL
    assert.equal(a.lost || b.lost || session.lost, false);
    await session.close();
    for (const name of ["a", "b", "c"]) assert.equal(await redisCli(redisPort, "EXISTS", lockKey(name)), "0", name);
    assert.equal(a.lost, false);
  });

  test("conformance_frozen_leader_not_replaced", async (t) => {
    // The server's keepalive (200 ms + 300 ms) cuts the frozen leader's connection long before it
    // is woken: what the server then does with its leadership is what this checks.
    const { address, redisPort } = await startServer(t, ["--keepalive-interval", "200ms", "--keepalive-timeout", "300ms"]);
    const c = client(t, address);
    const leader = new ChildScript(t, "frozen_leader.js", [address, "frozen", "4000"]);
    const elected = await leader.next(30_000);
    assert.match(elected, /^elected \d+$/);
    const term = Number(elected.split(" ")[1]);
    await using second = c.campaign("frozen", "second", { ttl: 4000, resumeGrace: 4000 });
    let secondTerm: number | undefined;
    const secondElected = second.elected().then((elected) => (secondTerm = elected));
    await waitForLine(redisPort, "leasehold:election:{frozen}:line", 1);
    // Frozen just after a renewal, so that the 2 s stay well inside the 4 s validity the leader
    // was last confirmed (renewals come every third of the TTL).
    await waitRenewed(redisPort, "leasehold:election:{frozen}:lock");
    leader.signal("SIGSTOP");
    try {
      await new Promise((resolve) => setTimeout(resolve, 2000)); // the freeze itself: only time
      assert.equal(secondTerm, undefined, "the second candidate was elected while the leader was frozen and still believed");
    } finally {
      leader.signal("SIGCONT");
    }
    assert.equal(await leader.next(10_000), "woken leading=true");
    assert.equal(await leader.next(10_000), `resumed ${term}`);
    assert.equal(await leader.next(10_000), `leading ${term}`);
    const named = await c.leader("frozen");
    assert.equal(named?.term, term);
    assert.equal(Buffer.from(named!.value).toString(), "frozen");
    assert.equal(secondTerm, undefined);
    leader.send("resign");
    assert.equal(await leader.next(10_000), "resigned true");
    const next = await within(secondElected, 10_000, "the second candidate never led");
    assert.ok(next > term, `${next} after ${term}`);
    assert.equal(second.leading, true);
  });

  test("conformance_revoke_ends_holding", async (t) => {
    const { servers, redisPort } = await startCluster(t, 2);
    const c = client(t, servers[0]!.address);
    const admin = client(t, servers[1]!.address);
    const lease = await c.lease("job", { holder: "holder-a" }); // resumable: a revoke must end it anyway
    const waiter = c.lease("job", { wait: 10_000 });
    await waitForLine(redisPort, "leasehold:{job}:line", 1);
    const told = abortsWithin(lease.signal, 2000);
    const revoked = await within(admin.revoke("job"), 2000, "the revoke was not answered");
    assert.deepEqual(revoked.map((h) => [h.holder, h.fencingToken]), [["holder-a", lease.fencingToken]]);
    assert.ok(await told, "the holder was not told within 2 s");
    assert.equal(lease.lostCode, "revoked", lease.lostReason);
    assert.ok(lease.signal.reason instanceof LeaseLostError);
    assert.equal(lease.signal.reason.code, "revoked");
    const next = await within(waiter, 2000, "the waiter did not get the lock within 2 s");
    assert.ok(next.fencingToken > lease.fencingToken, `${next.fencingToken} after ${lease.fencingToken}`);
    assert.equal(lease.resumes, 0);
    assert.equal(await lockToken(redisPort, LOCK_KEY), next.token);
    assert.equal(await lease.release(), false);
    assert.equal(await next.release(), true);
    assert.deepEqual(await admin.revoke("job"), []);
  });

  test("conformance_watch_reports_changes", async (t) => {
    const { address, redisPort } = await startServer(t);
    const c = client(t, address);
    const stop = new AbortController();
    t.after(() => stop.abort());
    const states = c.watch("job", { signal: stop.signal });
    const seen: LockState[] = [];
    /** The next state, within 2 s; states `skip` accepts before it are passed over. */
    const next = async (what: string, skip: (s: LockState) => boolean = () => false): Promise<LockState> => {
      const deadline = Date.now() + 2000;
      for (;;) {
        const got = await within(states.next(), Math.max(0, deadline - Date.now()), `not reported within 2 s: ${what}`);
        assert.ok(!got.done, "the watch ended");
        seen.push(got.value);
        if (!skip(got.value)) return got.value;
      }
    };
    const free = await next("free");
    assert.equal(free.held, false);
    const first = await c.lease("job", { holder: "holder-a" });
    const a = await next("held by holder-a");
    assert.deepEqual([a.held, a.holder, a.fencingToken, a.waiting], [true, "holder-a", first.fencingToken, 0]);
    const waiter = c.lease("job", { holder: "holder-b", wait: 10_000 });
    const waiting = await next("a waiter");
    assert.deepEqual([waiting.held, waiting.holder, waiting.fencingToken, waiting.waiting], [true, "holder-a", first.fencingToken, 1]);
    assert.equal(await first.release(), true);
    const b = await next("held by the waiter", (s) => !s.held); // free in between, or not
    const second = await within(waiter, 2000, "the waiter did not get the lock");
    assert.deepEqual([b.held, b.holder, b.fencingToken, b.waiting], [true, "holder-b", second.fencingToken, 0]);
    assert.ok(b.fencingToken > a.fencingToken);
    assert.equal(await second.release(), true);
    const end = await next("free again");
    assert.deepEqual([end.held, end.waiting], [false, 0]);
    const key = (s: LockState) => JSON.stringify({ ...s, ttlRemainingMs: 0, holders: s.holders.map((h) => [h.holder, h.fencingToken]) });
    for (let i = 1; i < seen.length; i++) assert.notEqual(key(seen[i]!), key(seen[i - 1]!), `reported twice in a row: ${key(seen[i]!)}`);
    assert.equal(await redisCli(redisPort, "EXISTS", LOCK_KEY), "0");
    await states.return(); // leaving the loop cancels the call
  });

  test("conformance_all_or_none", async (t) => {
    const { address, redisPort } = await startServer(t);
    const c = client(t, address);
    const other = client(t, address);
    const b = await other.lease("b", { holder: "holder-b" });
    const refusal = await refused(c.lease("a", { names: ["b"] }));
    assert.ok(refusal instanceof NotAcquiredError, refusal.message);
    assert.equal(refusal.code, Code.ABORTED);
    assert.equal(await (await c.lease("a")).release(), true, "the refused pair left a taken");
    // Both wait while b is held: each is told it waits, holding neither name meanwhile.
    const told: (() => void)[] = [];
    const waiting = [0, 1].map(() => new Promise<void>((resolve) => told.push(resolve)));
    const asked = [["a", "b"], ["b", "a"]] as const;
    const pairs = asked.map(([first, second], i) =>
      c.lease(first, { names: [second], wait: 20_000, onWaiting: () => told[i]!() }).then((lease) => ({ lease, i })),
    );
    await within(Promise.all(waiting), 5000, "both pairs did not wait");
    assert.equal(await b.release(), true);
    /** The pair is held whole: a fencing token per name, each key holding the lease's token, each
     * name refused to a wait-0 acquire. */
    const holdsBoth = async (lease: Lease, names: readonly string[]) => {
      assert.deepEqual([...lease.fences.keys()], names);
      assert.equal(lease.fences.get(names[0]!), lease.fencingToken);
      for (const name of names) {
        assert.ok((lease.fences.get(name) ?? 0) > 0, `no fencing token for ${name}`);
        assert.equal(await lockToken(redisPort, lockKey(name)), lease.token, `${name}'s key`);
        assert.equal((await other.describe(name)).fencingToken, lease.fences.get(name));
        assert.ok((await refused(other.lease(name))) instanceof NotAcquiredError);
      }
    };
    const first = await within(Promise.race(pairs), 5000, "neither pair was granted within 5 s of b's release");
    await holdsBoth(first.lease, asked[first.i]!);
    assert.equal(await first.lease.release(), true);
    const second = await within(pairs[1 - first.i]!, 5000, "the second pair was not granted within 5 s (deadlock?)");
    await holdsBoth(second.lease, asked[second.i]!);
    assert.equal(await second.lease.release(), true);
    for (const name of ["a", "b"]) assert.equal(await redisCli(redisPort, "EXISTS", lockKey(name)), "0", `${name} left held`);
  });

  test("conformance_lock_delay_after_loss", async (t) => {
    const { address } = await startServer(t);
    const c = client(t, address);
    const other = client(t, address);
    const lease = await c.lease("job", { lockDelay: 1000 });
    const told = abortsWithin(lease.signal, 2000);
    const sent = performance.now();
    await within(other.revoke("job"), 2000, "the revoke was not answered");
    assert.ok(await told, "the holder was not told within 2 s");
    assert.equal(lease.lostCode, "revoked", lease.lostReason);
    assert.ok((await refused(other.lease("job"))) instanceof NotAcquiredError, "taken inside the lock-delay");
    const next = await within(other.lease("job", { wait: 10_000 }), 5000, "the waiter did not get the name within 5 s");
    const waited = performance.now() - sent;
    assert.ok(waited >= 1000, `granted ${waited.toFixed(0)} ms after the revoke`);
    assert.equal(await next.release(), true);
    const clean = await c.lease("job", { lockDelay: 1000 });
    assert.equal(await clean.release(), true);
    assert.equal(await (await other.lease("job")).release(), true, "a clean release left a lock-delay");
  });

  test("conformance_max_hold_ends_lease", async (t) => {
    const { address, redisPort } = await startServer(t);
    const c = client(t, address);
    const before = performance.now();
    const lease = await c.lease("job", { ttl: 1000, maxHold: 1000 });
    // The acquire was sent between `before` and now: sampled until it is lost (a bounded poll),
    // the validity never reaches past now + 1 s.
    const sent = performance.now();
    await waitUntil(() => {
      assert.ok(lease.validUntil <= sent + 1000, `valid until ${(lease.validUntil - sent).toFixed(0)} ms after the acquire`);
      return lease.lost;
    }, "the lease to be lost at its max hold", 3000);
    const lostAfter = performance.now() - before;
    assert.equal(lease.lostCode, "max_hold", lease.lostReason);
    assert.ok(lostAfter >= 1000 && lostAfter <= 3000, `lost ${lostAfter.toFixed(0)} ms after the acquire`);
    assert.equal(await lockToken(redisPort, LOCK_KEY), lease.token, "the key no longer held at the loss");
    const other = client(t, address);
    assert.ok((await refused(other.lease("job"))) instanceof NotAcquiredError, "taken just after the max hold");
    // No resume and no renewal: the key runs out by its TTL and the name is free.
    await waitUntil(async () => (await redisCli(redisPort, "EXISTS", LOCK_KEY)) === "0", "the key to run out", 5000);
    assert.equal(lease.resumes, 0);
    assert.equal(await lease.release(), false);
    assert.equal(await (await other.lease("job")).release(), true);
  });

  test("conformance_token_check", async (t) => {
    const { address } = await startServer(t);
    const c = client(t, address);
    assert.deepEqual(await c.check("job", 1), { state: "free", currentFencingToken: 0 });
    const earlier = await c.lease("job");
    assert.equal(await earlier.release(), true);
    const lease = await c.lease("job");
    assert.ok(lease.fencingToken > earlier.fencingToken);
    assert.deepEqual(await c.check("job", lease.fencingToken), { state: "current", currentFencingToken: lease.fencingToken });
    assert.deepEqual(await c.check("job", earlier.fencingToken), { state: "superseded", currentFencingToken: lease.fencingToken });
    assert.equal(await lease.release(), true);
    assert.deepEqual(await c.check("job", lease.fencingToken), { state: "free", currentFencingToken: 0 });
  });
});
