// Test fixtures: a real redis-server and the real leasehold binary, on free loopback ports,
// stopped when the test ends (t.after). Nothing here sleeps to synchronise: it waits for a
// line the process prints, or polls a condition with a bound.
import { execFile, fork, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import type { TestContext } from "node:test";

const run = promisify(execFile);
// dist/test/support.js -> the repository's root is four levels up.
export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
export const BINARY = process.env["LEASEHOLD_BIN"] ?? join(ROOT, "target", "debug", "leasehold");

export async function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const server = net.createServer();
    server.on("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => ok(port));
    });
  });
}

export async function redisCli(port: number, ...args: string[]): Promise<string> {
  const { stdout } = await run("redis-cli", ["-p", String(port), ...args]);
  return stdout.trim();
}

/** The token in a lock key's value (`<token>:<fencing token>:<attachment>:<holder>`). */
export async function lockToken(port: number, key: string): Promise<string> {
  return (await redisCli(port, "GET", key)).split(":", 1)[0] ?? "";
}

export const lockKey = (name: string): string => `leasehold:{${name}}:lock`;

/** Polls `condition` until it holds (a bounded poll, not a guessed sleep). */
export async function waitUntil(condition: () => boolean | Promise<boolean>, what: string, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`gave up waiting: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

export async function waitForLine(port: number, line: string, length: number): Promise<void> {
  await waitUntil(async () => (await redisCli(port, "ZCARD", line)) === String(length), `${line} to have ${length} waiters`, 10_000);
}

function exited(proc: ChildProcess): Promise<number | null> {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve(proc.exitCode);
  return new Promise((ok) => proc.once("exit", (code) => ok(code)));
}

/** A redis-server on a free port, killed when the test ends. */
export async function startRedis(t: TestContext): Promise<number> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "leasehold-node-"));
  const proc = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir], {
    stdio: "ignore",
  });
  t.after(async () => {
    proc.kill("SIGKILL");
    await exited(proc);
    rmSync(dir, { recursive: true, force: true });
  });
  await waitUntil(async () => {
    try {
      return (await redisCli(port, "PING")) === "PONG";
    } catch {
      return false;
    }
  }, "redis-server to start", 5000);
  return port;
}

/** One leasehold server process: started, stopped (SIGTERM), killed, frozen. */
export class Server {
  proc: ChildProcess | undefined;
  constructor(
    readonly address: string,
    private readonly redisPort: number,
    private readonly extra: string[] = [],
  ) {}

  /** Starts it; resolves with the address it listens on, once it prints so. */
  async start(): Promise<string> {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const proc = spawn(BINARY, ["serve", "--listen", this.address, "--redis", `redis://127.0.0.1:${this.redisPort}`, ...this.extra], {
        stdio: ["ignore", "pipe", "ignore"],
      });
      const line = await new Promise<string>((ok) => {
        const lines = createInterface({ input: proc.stdout! });
        lines.once("line", (l) => ok(l));
        proc.once("exit", () => ok(""));
      });
      proc.stdout!.resume();
      if (line.startsWith("leasehold: listening on ")) {
        this.proc = proc;
        return line.split(" ").at(-1)!;
      }
      await exited(proc); // the port is not free yet (a closing socket): again
      if (Date.now() > deadline) throw new Error(`${this.address}: could not start: ${line}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** SIGTERM, as a deploy does; resolves once it has exited. */
  async stop(): Promise<void> {
    const proc = this.proc!;
    proc.kill("SIGTERM");
    const code = await exited(proc);
    if (code !== 0) throw new Error(`server exited with ${code}`);
  }

  /** SIGKILL: it does nothing more; its connections drop. */
  async kill(): Promise<void> {
    const proc = this.proc!;
    proc.kill("SIGKILL");
    await exited(proc);
  }

  signal(signal: NodeJS.Signals): void {
    this.proc!.kill(signal);
  }

  async close(): Promise<void> {
    const proc = this.proc;
    if (proc && proc.exitCode === null && proc.signalCode === null) {
      proc.kill("SIGCONT");
      proc.kill("SIGKILL");
      await exited(proc);
    }
  }
}

/** Redis and one server (on a port the server picks, with `extra` arguments for `serve`); both
 * stopped when the test ends. */
export async function startServer(t: TestContext, extra: string[] = []): Promise<{ address: string; redisPort: number; server: Server }> {
  const redisPort = await startRedis(t);
  const server = new Server("127.0.0.1:0", redisPort, extra);
  const address = await server.start();
  t.after(() => server.close());
  return { address, redisPort, server };
}

/** Redis and `n` servers on ports of their own (to stop and start again on the same port). */
export async function startCluster(t: TestContext, n = 3): Promise<{ servers: Server[]; redisPort: number; list: string }> {
  const redisPort = await startRedis(t);
  const servers: Server[] = [];
  for (let i = 0; i < n; i++) {
    const server = new Server(`127.0.0.1:${await freePort()}`, redisPort, ["--drain", "5s"]);
    await server.start();
    servers.push(server);
  }
  t.after(async () => {
    for (const server of servers) await server.close();
  });
  return { servers, redisPort, list: servers.map((s) => s.address).join(",") };
}

/** A TCP proxy in front of a server whose connections can all be cut at once, as a network
 * break would (a reset, no gRPC goodbye). */
export class CuttableProxy {
  address = "";
  private readonly sockets = new Set<net.Socket>();
  private readonly listener: net.Server;

  constructor(private readonly upstream: string) {
    this.listener = net.createServer((client) => {
      const [host, port] = [upstream.slice(0, upstream.lastIndexOf(":")), Number(upstream.slice(upstream.lastIndexOf(":") + 1))];
      const server = net.connect(port, host);
      for (const s of [client, server]) {
        this.sockets.add(s);
        s.on("error", () => {});
        s.on("close", () => this.sockets.delete(s));
      }
      client.pipe(server);
      server.pipe(client);
    });
  }

  async listen(): Promise<string> {
    await new Promise<void>((ok) => this.listener.listen(0, "127.0.0.1", ok));
    this.address = `127.0.0.1:${(this.listener.address() as net.AddressInfo).port}`;
    return this.address;
  }

  cut(): void {
    this.listener.close();
    for (const s of this.sockets) s.resetAndDestroy();
    this.sockets.clear();
  }
}

/** A script of dist/test forked in a process of its own, so that a test can freeze it (SIGSTOP)
 * and wake it (SIGCONT): its stdout lines are read with a deadline each, commands go to its
 * stdin; killed (woken first) when the test ends. */
export class ChildScript {
  private readonly proc: ChildProcess;
  private readonly lines: string[] = [];
  private readonly seen: string[] = [];
  private ended = false;
  private wake: (() => void) | undefined;

  constructor(t: TestContext, script: string, args: string[]) {
    const here = dirname(fileURLToPath(import.meta.url));
    this.proc = fork(join(here, script), args, { stdio: ["pipe", "pipe", "inherit", "ipc"] });
    const out = createInterface({ input: this.proc.stdout! });
    out.on("line", (line) => {
      this.lines.push(line);
      this.wake?.();
    });
    out.on("close", () => {
      this.ended = true;
      this.wake?.();
    });
    t.after(async () => {
      if (this.proc.exitCode === null && this.proc.signalCode === null) {
        this.proc.kill("SIGCONT");
        this.proc.kill("SIGKILL");
      }
      await exited(this.proc);
    });
  }

  /** The next line it reports, within `ms`. */
  async next(ms: number): Promise<string> {
    const deadline = Date.now() + ms;
    while (this.lines.length === 0) {
      if (this.ended) throw new Error(`the child exited after reporting ${JSON.stringify(this.seen)}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`the child reported nothing within ${ms} ms after ${JSON.stringify(this.seen)}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.wake = undefined;
    }
    const line = this.lines.shift()!;
    this.seen.push(line);
    return line;
  }

  send(line: string): void {
    this.proc.stdin!.write(`${line}\n`);
  }

  signal(signal: NodeJS.Signals): void {
    this.proc.kill(signal);
  }
}

/** Waits (bounded) until the lease behind `key` is renewed: its PTTL rises. */
export async function waitRenewed(port: number, key: string): Promise<void> {
  let last = Number(await redisCli(port, "PTTL", key));
  await waitUntil(async () => {
    const now = Number(await redisCli(port, "PTTL", key));
    const rose = now > last;
    last = now;
    return rose;
  }, `${key} to be renewed`, 10_000);
}

/** Settles within `ms` or fails with `what`. */
export async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, fail) => {
        timer = setTimeout(() => fail(new Error(`timed out: ${what}`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** Resolves true if `signal` aborts within `ms`, false otherwise (a bounded wait for an event
 * that must not happen). */
export function abortsWithin(signal: AbortSignal, ms: number): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(true);
  return new Promise((ok) => {
    const timer = setTimeout(() => ok(false), ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      ok(true);
    }, { once: true });
  });
}
