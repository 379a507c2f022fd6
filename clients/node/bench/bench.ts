// Side-by-side figures for BENCHMARKS.md ("From Node"): acquire+release from Node through Leasehold vs
// node-redlock on the same Redis, and hand-off latency (a waiter's wait after the holder lets
// go): Leasehold's pushed wake-up vs node-redlock's retry loop (retryDelay 200 ms, its default).
// Usage: npm run build && node dist/bench/bench.js [rounds] [handoffs]   (LEASEHOLD_BIN as for the tests)
// With LEASEHOLD_SERVER (host:port) and LEASEHOLD_REDIS_PORT set it starts nothing and measures the
// server and Redis given (scripts/bench-peers.sh), beside Node's own direct-Redis baseline (ioredis:
// SET NX PX + the compare-and-delete script), and ends with one "ROW" line per path for that script.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { performance } from "node:perf_hooks";
import { Redis } from "ioredis";
import Redlock from "redlock";
import { connect } from "../src/index.js";
import { BINARY, freePort, redisCli, waitUntil } from "../test/support.js";

const rounds = Number(process.argv[2] ?? 2000);
const handoffs = Number(process.argv[3] ?? 30);
const children: ChildProcess[] = [];

const RELEASE = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`;

/** The server's address and Redis's port: the ones given, or a Redis and a server started here. */
async function target(): Promise<{ address: string; redisPort: number }> {
  const given = process.env["LEASEHOLD_SERVER"];
  const givenRedis = process.env["LEASEHOLD_REDIS_PORT"];
  if (given && givenRedis) return { address: given, redisPort: Number(givenRedis) };
  const redisPort = await freePort();
  children.push(spawn("redis-server", ["--port", String(redisPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", mkdtempSync(join(tmpdir(), "lh-bench-"))], { stdio: "ignore" }));
  await waitUntil(async () => (await redisCli(redisPort, "PING").catch(() => "")) === "PONG", "redis");
  const server = spawn(BINARY, ["serve", "--listen", "127.0.0.1:0", "--redis", `redis://127.0.0.1:${redisPort}`], { stdio: ["ignore", "pipe", "ignore"] });
  children.push(server);
  const line = await new Promise<string>((ok) => createInterface({ input: server.stdout! }).once("line", ok));
  server.stdout!.resume();
  return { address: line.split(" ").at(-1)!, redisPort };
}

async function main(): Promise<void> {
  const { address, redisPort } = await target();
  const client = connect(address);
  const redis = new Redis(redisPort, "127.0.0.1");
  const redlock = new Redlock([redis], { retryCount: 0 });
  // Node's own direct-Redis baseline: what node-redlock does for one Redis, written by hand.
  const direct = async (): Promise<void> => {
    const token = Math.random().toString(36).slice(2) + Date.now().toString(36);
    const set = await redis.set("bench-node-direct", token, "PX", 10_000, "NX");
    const deleted = await redis.eval(RELEASE, 1, "bench-node-direct", token);
    if (set !== "OK" || deleted !== 1) throw new Error(`direct: ${set} ${deleted}`);
  };

  // Warm up every path (connections, scripts loaded).
  for (let i = 0; i < 200; i++) {
    await direct();
    await (await client.lease("bench", { ttl: 10_000 })).release();
    await (await redlock.acquire(["redlock:bench"], 10_000)).release();
  }

  // Interleaved batches, so every path sees the same machine state.
  const dr: number[] = [];
  const lh: number[] = [];
  const rl: number[] = [];
  const elapsed = [0, 0, 0];
  for (let batch = 0; batch < 10; batch++) {
    let started = performance.now();
    for (let i = 0; i < rounds / 10; i++) {
      const t = performance.now();
      await direct();
      dr.push(performance.now() - t);
    }
    elapsed[0]! += performance.now() - started;
    started = performance.now();
    for (let i = 0; i < rounds / 10; i++) {
      const t = performance.now();
      await (await client.lease("bench", { ttl: 10_000 })).release();
      lh.push(performance.now() - t);
    }
    elapsed[1]! += performance.now() - started;
    started = performance.now();
    for (let i = 0; i < rounds / 10; i++) {
      const t = performance.now();
      await (await redlock.acquire(["redlock:bench"], 10_000)).release();
      rl.push(performance.now() - t);
    }
    elapsed[2]! += performance.now() - started;
  }

  // Hand-off: the holder releases; how long until the waiter holds the lock.
  const lhHand: number[] = [];
  const rlHand: number[] = [];
  const waitingRedlock = new Redlock([redis], { retryCount: 1000, retryDelay: 200, retryJitter: 200 });
  for (let i = 0; i < handoffs; i++) {
    {
      const held = await client.lease("handoff", { ttl: 10_000 });
      let inLine!: () => void;
      const queued = new Promise<void>((ok) => (inLine = ok));
      const waiter = client.lease("handoff", { ttl: 10_000, wait: 10_000, onWaiting: () => inLine() });
      await queued;
      const t = performance.now();
      await held.release();
      const next = await waiter;
      lhHand.push(performance.now() - t);
      await next.release();
    }
    {
      const held = await redlock.acquire(["redlock:handoff"], 10_000);
      const waiter = waitingRedlock.acquire(["redlock:handoff"], 10_000);
      await new Promise((ok) => setTimeout(ok, 50 + Math.random() * 400)); // the waiter is mid-retry
      const t = performance.now();
      await held.release();
      const next = await waiter;
      rlHand.push(performance.now() - t);
      await next.release();
    }
  }

  const stats = (xs: number[]) => {
    const s = [...xs].sort((a, b) => a - b);
    const q = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))]!;
    const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
    return { mean, p50: q(0.5), p99: q(0.99) };
  };
  const f = (x: number) => x.toFixed(3);
  const a = stats(lh);
  const b = stats(rl);
  const z = stats(dr);
  console.log(`acquire+release, ${rounds} each, interleaved (ms)`);
  console.log(`| path | mean | p50 | p99 | ops/s |`);
  console.log(`| ioredis SET NX PX + compare-and-delete | ${f(z.mean)} | ${f(z.p50)} | ${f(z.p99)} | ${(1000 / z.mean).toFixed(0)} |`);
  console.log(`| Leasehold (Lease stream, Node client) | ${f(a.mean)} | ${f(a.p50)} | ${f(a.p99)} | ${(1000 / a.mean).toFixed(0)} |`);
  console.log(`| node-redlock (1 Redis, ioredis) | ${f(b.mean)} | ${f(b.p50)} | ${f(b.p99)} | ${(1000 / b.mean).toFixed(0)} |`);
  console.log(`ratio Leasehold / node-redlock: mean ${(a.mean / b.mean).toFixed(2)}x, p50 ${(a.p50 / b.p50).toFixed(2)}x`);
  const c = stats(lhHand);
  const d = stats(rlHand);
  console.log(`hand-off, ${handoffs} each (ms)`);
  console.log(`| Leasehold (fair line, pushed wake-up) | ${f(c.mean)} | ${f(c.p50)} | ${f(c.p99)} |`);
  console.log(`| node-redlock (retryDelay 200, jitter 200) | ${f(d.mean)} | ${f(d.p50)} | ${f(d.p99)} |`);
  console.log(`ratio node-redlock / Leasehold: mean ${(d.mean / c.mean).toFixed(1)}x`);
  const row = (path: string, xs: number[], ms: number) => {
    const s = stats(xs);
    console.log(`ROW\t${path}\t${xs.length}\t${(s.p50 * 1000).toFixed(1)}\t${(s.p99 * 1000).toFixed(1)}\t${ms > 0 ? ((xs.length * 1000) / ms).toFixed(0) : "-"}`);
  };
  row("ioredis SET NX PX + compare-and-delete", dr, elapsed[0]!);
  row("Leasehold Lease stream (Node client)", lh, elapsed[1]!);
  row("node-redlock (1 Redis, ioredis)", rl, elapsed[2]!);
  row("hand-off: Leasehold (pushed wake-up)", lhHand, 0);
  row("hand-off: node-redlock (retryDelay 200, jitter 200)", rlHand, 0);
  client.close();
  redis.disconnect();
}

main()
  .catch((e) => {
    console.error(e);
    process.exitCode = 1;
  })
  .finally(() => {
    for (const child of children) child.kill("SIGKILL");
  });
