// Runs the README's example (examples/hold.ts, compiled) against the real binary.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { lockKey, redisCli, startServer } from "./support.js";

test("the README example runs", async (t) => {
  const { address, redisPort } = await startServer(t);
  const example = join(dirname(fileURLToPath(import.meta.url)), "..", "examples", "hold.js");
  const { stdout } = await promisify(execFile)(process.execPath, [example, address], { timeout: 30_000 });
  const lines = stdout.trim().split("\n");
  assert.match(lines[0]!, /^holding nightly-report with fencing token \d+$/);
  assert.match(lines[1]!, /^refused: LOCK_HELD held by report@host-a, retry in \d+ ms$/);
  assert.match(lines[2]!, /^report written under fencing token \d+$/);
  const first = Number(lines[0]!.split(" ").at(-1));
  assert.ok(Number(lines[2]!.split(" ").at(-1)) > first);
  assert.equal(await redisCli(redisPort, "EXISTS", lockKey("nightly-report")), "0");
});
