// The client beyond the conformance list: validity arithmetic, error details, using(), elections
// (observe, resumption), sessions' refusals, a bearer token and TLS, against the real binary.
import { create } from "@bufbuild/protobuf";
import { anyPack, DurationSchema } from "@bufbuild/protobuf/wkt";
import { toBinary } from "@bufbuild/protobuf";
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import assert from "node:assert/strict";
import { performance } from "node:perf_hooks";
import { describe, test } from "node:test";
import { ErrorInfoSchema, RetryInfoSchema } from "../src/gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../src/gen/google/rpc/status_pb.js";
import { failedError, lostReason, lostReasonOf } from "../src/errors.js";
import { LostReason as LostCode } from "../src/gen/leasehold/v1/lock_pb.js";
import { ceilingOf, vouchedUntil } from "../src/validity.js";
import { readFences, sameFences } from "../src/fences.js";
import { tokenState } from "../src/client.js";
import { TokenState as TokenCode } from "../src/gen/leasehold/v1/lock_pb.js";
import { Code, LeaseLostError, LeaseholdError, NotAcquiredError, connect, type Leader } from "../src/index.js";
import {
  ChildScript,
  CuttableProxy,
  Server,
  abortsWithin,
  freePort,
  lockKey,
  redisCli,
  startCluster,
  startRedis,
  startServer,
  waitForLine,
  waitUntil,
  within,
} from "./support.js";

describe("validity", () => {
  test("valid_for from receipt, capped by valid_to from the stream's opening", () => {
    assert.equal(vouchedUntil(1000, 1010, 500, 0n), 1510); // an old server: receipt alone
    assert.equal(vouchedUntil(1000, 1010, 500, 600n), 1510);
    // Held up on its way: valid_to from the opening ends it sooner.
    assert.equal(vouchedUntil(1000, 1400, 500, 600n), 1600);
    assert.ok(vouchedUntil(1000, 2000, 500, 600n) <= 2000); // stale: ends before receipt
  });

  test("never past the max hold counted from the acquire's sending, whatever the server vouches", () => {
    assert.equal(ceilingOf(1000, 0), Infinity); // no max hold
    const ceiling = ceilingOf(1000, 1000);
    assert.equal(ceiling, 2000);
    assert.equal(vouchedUntil(1000, 1010, 500, 600n, ceiling), 1510); // inside it: as vouched
    assert.equal(vouchedUntil(1000, 1900, 3000, 0n, ceiling), 2000); // an old server's word: capped
    assert.equal(vouchedUntil(1000, 1900, 3000, 5000n, ceiling), 2000);
    assert.ok(vouchedUntil(1000, 2100, 3000, 5000n, ceiling) <= 2100); // past it: stale
  });
});

describe("several names", () => {
  const fence = (name: string, token: number) => ({ name, fencingToken: BigInt(token) });
  test("each name's fencing token, in the order asked", () => {
    const fences = readFences(["b", "a"], [fence("b", 7), fence("a", 3)], 7n);
    assert.ok(typeof fences !== "string", String(fences));
    assert.deepEqual([...fences], [["b", 7], ["a", 3]]);
    // A server that predates fences: believed for one name alone.
    assert.deepEqual([...(readFences(["x"], [], 5n) as Map<string, number>)], [["x", 5]]);
  });

  test("an answer that is not what was asked for is refused", () => {
    assert.match(readFences(["a", "b"], [], 5n) as string, /predates several names/); // more_names ignored
    assert.match(readFences(["a", "b"], [fence("b", 1), fence("a", 2)], 1n) as string, /not for the names asked/);
    assert.match(readFences(["a", "b"], [fence("a", 1)], 1n) as string, /not for the names asked/);
    assert.match(readFences(["a"], [fence("a", 2)], 1n) as string, /fencing token 2/);
    assert.ok(sameFences(new Map([["a", 1], ["b", 2]]), new Map([["a", 1], ["b", 2]])));
    assert.ok(!sameFences(new Map([["a", 1], ["b", 2]]), new Map([["a", 1], ["b", 3]])));
  });
});

describe("check", () => {
  test("a token's state is typed", () => {
    assert.deepEqual(
      [TokenCode.CURRENT, TokenCode.SUPERSEDED, TokenCode.FREE, TokenCode.UNSPECIFIED, 9 as TokenCode].map(tokenState),
      ["current", "superseded", "free", "unknown", "unknown"],
    );
  });
});

describe("errors", () => {
  test("a session's failed status is read from its serialized google.rpc.Status", () => {
    const status = create(StatusSchema, {
      code: Code.ABORTED,
      message: "lock x is held by h",
      details: [
        anyPack(ErrorInfoSchema, create(ErrorInfoSchema, { domain: "leasehold", reason: "LOCK_HELD", metadata: { lock: "x", holder: "h" } })),
        anyPack(RetryInfoSchema, create(RetryInfoSchema, { retryDelay: create(DurationSchema, { seconds: 1n, nanos: 500_000_000 }) })),
      ],
    });
    const error = failedError(Code.ABORTED, "lock x is held by h", toBinary(StatusSchema, status));
    assert.ok(error instanceof NotAcquiredError);
    assert.equal(error.reason, "LOCK_HELD");
    assert.equal(error.holder, "h");
    assert.equal(error.retryAfter, 1500);
    const plain = failedError(Code.NOT_FOUND, "gone", new Uint8Array());
    assert.ok(!(plain instanceof NotAcquiredError));
    assert.equal(plain.reason, "");
    assert.equal(plain.retryAfter, undefined);
  });

  test("a lost code is a typed reason; a stream's end is placed by its status", () => {
    assert.deepEqual(
      [LostCode.TAKEN, LostCode.UNREACHABLE, LostCode.SHUTDOWN, LostCode.REVOKED, LostCode.MAX_HOLD, LostCode.UNSPECIFIED, 99 as LostCode].map(
        lostReason,
      ),
      ["taken", "unreachable", "shutdown", "revoked", "max_hold", "unknown", "unknown"],
    );
    assert.equal(lostReasonOf(null), "unreachable");
    assert.equal(lostReasonOf(new LeaseholdError(Code.UNAVAILABLE, "gone")), "unreachable");
    assert.equal(lostReasonOf(new LeaseholdError(Code.NOT_FOUND, "no lease")), "taken");
    assert.equal(lostReasonOf(new LeaseholdError(Code.PERMISSION_DENIED, "no")), "unknown");
    assert.equal(new LeaseLostError("why").code, "unknown");
  });
});

describe("client", { concurrency: 4 }, () => {
  test("using() aborts its signal when the lease is lost, and releases after", async (t) => {
    const { address, redisPort } = await startServer(t);
    const c = connect(address);
    t.after(() => c.close());
    const reason = await c.using("job", { ttl: 1500 }, async (signal) => {
      assert.equal(await redisCli(redisPort, "EXISTS", lockKey("job")), "1");
      await redisCli(redisPort, "DEL", lockKey("job"));
      assert.ok(await abortsWithin(signal, 10_000));
      return (signal.reason as LeaseLostError).reason;
    });
    assert.match(reason, /deleted or taken/);
    const value = await c.using("job", {}, () => 42);
    assert.equal(value, 42);
    assert.equal(await redisCli(redisPort, "EXISTS", lockKey("job")), "0");
  });

  test("a waiter hears who holds the lock, and an abort stops its wait", async (t) => {
    const { address } = await startServer(t);
    const c = connect(address);
    t.after(() => c.close());
    await using _held = await c.lease("job", { holder: "holder-a" });
    const stop = new AbortController();
    const waited = c.lease("job", {
      wait: 60_000,
      signal: stop.signal,
      onWaiting: (w) => {
        assert.equal(w.holder, "holder-a");
        stop.abort(new Error("enough"));
      },
    });
    await assert.rejects(within(waited, 10_000, "the wait never stopped"), /enough/);
  });

  test("wait expired: WAIT_EXPIRED with the holder", async (t) => {
    const { address } = await startServer(t);
    const c = connect(address);
    t.after(() => c.close());
    await using _held = await c.lease("job", { holder: "holder-a" });
    const error = await c.lease("job", { wait: 200 }).then(
      () => assert.fail("acquired"),
      (e: unknown) => e,
    );
    assert.ok(error instanceof NotAcquiredError);
    assert.equal(error.reason, "WAIT_EXPIRED");
    assert.equal(error.holder, "holder-a");
  });

  test("observe follows the leader; proclaim publishes", async (t) => {
    const { address } = await startServer(t);
    const c = connect(address);
    t.after(() => c.close());
    const stop = new AbortController();
    const seen: (Leader | null)[] = [];
    const watching = (async () => {
      for await (const leader of c.observe("vote", stop.signal)) {
        seen.push(leader);
        if (seen.length === 4) stop.abort();
      }
    })();
    await waitUntil(() => seen.length === 1, "the first state");
    assert.equal(seen[0], null);
    const a = c.campaign("vote", "a", { ttl: 2000 });
    const term = await a.elected();
    await waitUntil(() => seen.length === 2, "the leader");
    await a.proclaim("a2");
    await waitUntil(() => seen.length === 3, "the new value");
    assert.equal(await a.resign(), true);
    await within(watching, 10_000, "observe never ended");
    assert.deepEqual(
      seen.map((l) => l && [l.term, Buffer.from(l.value).toString()]),
      [null, [term, "a"], [term, "a2"], null],
    );
  });

  test("a revoked leader is lost with the reason revoked, and the next candidate leads", async (t) => {
    const { address, redisPort } = await startServer(t);
    const c = connect(address);
    t.after(() => c.close());
    await using a = c.campaign("vote", "a", { ttl: 5000 });
    const termA = await a.elected();
    await using b = c.campaign("vote", "b", { ttl: 5000 });
    await waitForLine(redisPort, "leasehold:election:{vote}:line", 1);
    assert.equal(await c.revokeLeader("vote", { term: termA + 1000 }), null); // another term: nothing
    assert.equal(a.lost, false);
    const told = abortsWithin(a.signal, 2000);
    const revoked = await c.revokeLeader("vote");
    assert.deepEqual(revoked && [revoked.term, Buffer.from(revoked.value).toString()], [termA, "a"]);
    assert.ok(await told, "the leader was not told");
    assert.equal(a.lostCode, "revoked", a.lostReason);
    assert.equal(a.leading, false);
    assert.ok((await within(b.elected(), 2000, "b never led")) > termA);
    assert.equal(await a.resign(), false);
    assert.equal(await c.revokeLeader("nobody"), null);
  });

  test("a session's lease revoked by fencing token is lost alone, with the reason revoked", async (t) => {
    const { address } = await startServer(t);
    const c = connect(address);
    t.after(() => c.close());
    await using other = await c.lease("pool", { limit: 2, holder: "other" });
    await using session = await c.session({ ttl: 2000 });
    const permit = await session.lock("pool", { limit: 2 });
    const plain = await session.lock("plain");
    const revoked = await c.revoke("pool", { fencingToken: permit.fencingToken });
    assert.deepEqual(revoked.map((h) => h.fencingToken), [permit.fencingToken]);
    assert.ok(await abortsWithin(permit.signal, 2000), "the permit was not told");
    assert.equal(permit.lostCode, "revoked", permit.lostReason);
    assert.ok(permit.signal.reason instanceof LeaseLostError && permit.signal.reason.code === "revoked");
    assert.equal(plain.lost || session.lost || other.lost, false);
    const left = await c.describe("pool");
    assert.deepEqual(left.holders.map((h) => h.fencingToken), [other.fencingToken]);
    assert.equal(await permit.release(), false);
    assert.equal(await plain.release(), true);
  });

  test("a watch starts on the next replica if the first is down; it ends when its signal aborts, and when its loop is left", async (t) => {
    const { address } = await startServer(t);
    const c = connect(`127.0.0.1:${await freePort()},${address}`); // nothing listens on the first
    t.after(() => c.close());
    const stop = new AbortController();
    const states = c.watch("job", { signal: stop.signal });
    assert.equal((await within(states.next(), 2000, "the first state")).value?.held, false);
    const waiting = states.next(); // nothing changes: it waits until the abort
    stop.abort();
    assert.deepEqual(await within(waiting, 2000, "the watch never ended"), { done: true, value: undefined });
    let seen = 0;
    for await (const state of c.watch("job")) {
      seen++;
      assert.equal(state.held, false);
      break; // leaving the loop cancels the call
    }
    assert.equal(seen, 1);
  });

  test("a leader resumes on another replica when its server crashes, with its term", async (t) => {
    const { servers, list } = await startCluster(t, 2);
    const c = connect(list);
    t.after(() => c.close());
    await using leader = c.campaign("vote", "a", { ttl: 2000 });
    const term = await leader.elected();
    const before = leader.validUntil;
    await servers[0]!.kill();
    await waitUntil(() => {
      assert.equal(leader.lost, false, leader.lostReason);
      return leader.validUntil > before && leader.resumes >= 1;
    }, "resumed");
    assert.equal(leader.term, term);
    const other = connect(servers[1]!.address);
    t.after(() => other.close());
    assert.equal((await other.leader("vote"))?.term, term);
    assert.equal(await leader.resign(), true);
    assert.equal(await other.leader("vote"), null);
  });

  test("a leader without a resume grace is not lost by its own clock: no `extended` comes", async (t) => {
    const { address } = await startServer(t);
    const c = connect(address);
    t.after(() => c.close());
    await using leader = c.campaign("vote", "a", { ttl: 2000, resume: false });
    await leader.elected();
    // Past two TTLs: the server renews it all along but, with no grace, confirms nothing.
    assert.equal(await abortsWithin(leader.signal, 5000), false, leader.lostReason);
    assert.equal(leader.leading, true);
    assert.equal(await leader.resign(), true);
    assert.equal(leader.leading, false);
  });

  test("a leader frozen past its validity stops believing the moment it wakes", async (t) => {
    const { address, redisPort } = await startServer(t, ["--keepalive-interval", "200ms", "--keepalive-timeout", "300ms"]);
    const c = connect(address);
    t.after(() => c.close());
    const leader = new ChildScript(t, "frozen_leader.js", [address, "frozen", "1500"]);
    const elected = await leader.next(30_000);
    assert.match(elected, /^elected \d+$/);
    const term = Number(elected.split(" ")[1]);
    await using second = c.campaign("frozen", "second", { ttl: 4000 });
    const secondTerm = second.elected();
    await waitForLine(redisPort, "leasehold:election:{frozen}:line", 1);
    leader.signal("SIGSTOP");
    try {
      // Its validity (1.5 s) runs out while it is frozen; its connection cut by the keepalive,
      // the server keeps the leadership for its grace (1.5 s), then elects the second.
      assert.ok((await within(secondTerm, 10_000, "the second candidate never led")) > term);
      await new Promise((resolve) => setTimeout(resolve, 1000)); // the rest of the freeze: only time
    } finally {
      leader.signal("SIGCONT");
    }
    // By its own clock, before any word from the server or its own timer.
    assert.equal(await leader.next(10_000), "woken leading=false");
    assert.match(await leader.next(10_000), /^lost .*(validity ran out|server silent)/);
    assert.equal(second.leading, true);
  });

  test("a leader resigned while it resumes resigns on the server, which lets it go at once", async (t) => {
    const { servers, list } = await startCluster(t, 2);
    const proxy = new CuttableProxy(servers[0]!.address);
    await proxy.listen();
    t.after(() => proxy.cut());
    const c = connect(`${proxy.address},${servers[1]!.address}`);
    t.after(() => c.close());
    const other = connect(servers[0]!.address);
    t.after(() => other.close());
    const leader = c.campaign("vote", "a", { ttl: 10_000 });
    const term = await leader.elected();
    await using second = other.campaign("vote", "b", { ttl: 10_000 });
    const secondTerm = second.elected();
    servers[1]!.signal("SIGSTOP"); // the next replica: a resume there waits, unanswered
    proxy.cut(); // the leader's stream breaks; the server keeps the leadership for its grace
    const state = () => (leader as unknown as { state: string }).state;
    await waitUntil(() => state() === "resuming", "the leader to be resuming");
    const resigned = leader.resign();
    servers[1]!.signal("SIGCONT");
    assert.equal(await within(resigned, 10_000, "resign never settled"), true);
    // Resigned on the server: well within the 10 s grace it would otherwise keep the leadership.
    assert.ok((await within(secondTerm, 5000, "the second candidate never led")) > term);
  });

  test("a session holds several names at once with a fencing token each; a max hold ends its lease alone", async (t) => {
    const { address, redisPort } = await startServer(t);
    const c = connect(address);
    t.after(() => c.close());
    await using session = await c.session({ ttl: 1000 });
    const pair = await session.lock("a", { names: ["b"] });
    assert.deepEqual([...pair.fences.keys()], ["a", "b"]);
    assert.equal(pair.fences.get("a"), pair.fencingToken);
    for (const name of ["a", "b"]) assert.equal((await redisCli(redisPort, "GET", lockKey(name))).split(":", 1)[0], pair.token);
    const before = performance.now();
    const capped = await session.lock("c", { maxHold: 1500 });
    const sent = performance.now(); // the acquire was sent before
    await waitUntil(() => {
      assert.ok(capped.validUntil <= sent + 1500, `valid until ${(capped.validUntil - sent).toFixed(0)} ms after the acquire`);
      return capped.lost;
    }, "the capped lease to be lost", 3000);
    assert.equal(capped.lostCode, "max_hold", capped.lostReason);
    assert.ok(performance.now() - before >= 1500);
    assert.equal(pair.lost, false, pair.lostReason);
    assert.equal(session.lost, false, session.lostReason);
    assert.equal(await pair.release(), true);
    for (const name of ["a", "b"]) assert.equal(await redisCli(redisPort, "EXISTS", lockKey(name)), "0");
  });

  test("a check is cancelled by its signal", async () => {
    const c = connect(`127.0.0.1:${await freePort()}`);
    try {
      const stop = new AbortController();
      stop.abort(new Error("stopped"));
      await assert.rejects(c.check("job", 1, { signal: stop.signal }), /stopped/);
    } finally {
      c.close();
    }
  });

  test("a session's refused lock is a NotAcquiredError with details; the session goes on", async (t) => {
    const { address } = await startServer(t);
    const c = connect(address);
    t.after(() => c.close());
    await using held = await c.lease("x", { holder: "holder-a" });
    await using session = await c.session({ ttl: 2000 });
    const error = await session.lock("x").then(
      () => assert.fail("acquired"),
      (e: unknown) => e,
    );
    assert.ok(error instanceof NotAcquiredError);
    assert.equal(error.reason, "LOCK_HELD");
    assert.equal(error.holder, "holder-a");
    assert.ok(error.retryAfter! > 0);
    await using y = await session.lock("y");
    assert.ok(y.fencingToken > 0);
    assert.equal(await held.release(), true);
    await using x = await session.lock("x", { wait: 5000 });
    assert.ok(x.fencingToken > held.fencingToken);
  });

  test("a bearer token opens its prefixes; no token is UNAUTHENTICATED", async (t) => {
    const redisPort = await startRedis(t);
    const dir = mkdtempSync(join(tmpdir(), "leasehold-auth-"));
    const grants = join(dir, "auth.toml");
    const digest = createHash("sha256").update("node-secret").digest("hex");
    writeFileSync(grants, `[[grant]]\nname = "node"\ntoken_sha256 = "${digest}"\nrole = "hold"\nlocks = ["node/"]\n`);
    const server = new Server("127.0.0.1:0", redisPort, ["--auth-file", grants]);
    const address = await server.start();
    t.after(() => server.close());
    const c = connect(address, { token: "node-secret" });
    const anonymous = connect(address);
    t.after(() => {
      c.close();
      anonymous.close();
    });
    const lease = await c.lease("node/job", { ttl: 5000 });
    const outside = await c.lease("other/job").then(() => assert.fail("acquired"), (e: unknown) => e);
    assert.ok(outside instanceof LeaseholdError);
    assert.equal(outside.code, Code.PERMISSION_DENIED);
    const nobody = await anonymous.lease("node/job").then(() => assert.fail("acquired"), (e: unknown) => e);
    assert.ok(nobody instanceof LeaseholdError);
    assert.equal(nobody.code, Code.UNAUTHENTICATED);
    const notAdmin = await c.revoke("node/job").then(() => assert.fail("revoked without the admin role"), (e: unknown) => e);
    assert.ok(notAdmin instanceof LeaseholdError);
    assert.equal(notAdmin.code, Code.PERMISSION_DENIED);
    assert.equal(lease.lost, false);
    assert.equal(await lease.release(), true);
  });

  test("TLS with the server's certificate as the root", async (t) => {
    const redisPort = await startRedis(t);
    const dir = mkdtempSync(join(tmpdir(), "leasehold-tls-"));
    const [cert, key] = [join(dir, "server.pem"), join(dir, "server.key")];
    await promisify(execFile)("openssl", [
      "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
      "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=localhost",
      "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
    ]);
    const server = new Server("127.0.0.1:0", redisPort, ["--tls-cert", cert, "--tls-key", key]);
    const address = await server.start();
    t.after(() => server.close());
    const c = connect(address, { tls: { ca: readFileSync(cert) } });
    const plain = connect(address);
    t.after(() => {
      c.close();
      plain.close();
    });
    const lease = await c.lease("tls/job", { ttl: 5000 });
    assert.equal(await lease.release(), true);
    const error = await plain.lease("tls/job").then(() => assert.fail("acquired over plaintext"), (e: unknown) => e);
    assert.ok(error instanceof LeaseholdError);
    assert.equal(error.code, Code.UNAVAILABLE);
  });
});

test("a session the server refuses rejects its calls with the server's status", async (t) => {
  const { address } = await startServer(t);
  const c = connect(address);
  t.after(() => c.close());
  const session = await c.session({ ttl: 10 }); // below the 100 ms minimum
  const error = await session.lock("x").then(() => assert.fail("acquired"), (e: unknown) => e);
  assert.ok(error instanceof LeaseholdError, String(error));
  assert.equal(error.code, Code.INVALID_ARGUMENT);
  assert.ok(session.lost);
});

describe("waiting across replicas", () => {
  test("a waiter whose server drains joins the line on the next replica and gets the lock there", async (t) => {
    const { servers, redisPort } = await startCluster(t, 2);
    const [first, second] = servers as [Server, Server];
    const holder = connect(second.address);
    t.after(() => holder.close());
    const held = await holder.lease("job", { ttl: 5_000 });
    // The waiter's client tries the first server first.
    const waiter = connect(`${first.address},${second.address}`);
    t.after(() => waiter.close());
    let waited = 0;
    const waiting = waiter.lease("job", { ttl: 5_000, wait: 20_000, onWaiting: () => waited++ });
    await waitUntil(() => waited > 0, "the waiter in line on the first server");
    await first.stop(); // a deploy: its waiters hear UNAVAILABLE
    // In line again, now on the second server.
    await waitUntil(async () => (await redisCli(redisPort, "ZCARD", "leasehold:{job}:line")) === "1", "the waiter in line again");
    assert.equal(await held.release(), true);
    const lease = await within(waiting, 10_000, "the lock after the hand-off");
    assert.ok(lease.fencingToken > held.fencingToken);
    assert.equal(await lease.release(), true);
  });
});
