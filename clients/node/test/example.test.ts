// Runs the README's examples (examples/*.ts, compiled) against the real binary.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { lockKey, redisCli, startServer } from "./support.js";

async function runExample(address: string, name: string): Promise<string[]> {
  const example = join(dirname(fileURLToPath(import.meta.url)), "..", "examples", `${name}.js`);
  const { stdout } = await promisify(execFile)(process.execPath, [example, address], { timeout: 30_000 });
  return stdout.trim().split("\n");
}

test("the README example runs", async (t) => {
  const { address, redisPort } = await startServer(t);
  const lines = await runExample(address, "hold");
  assert.match(lines[0]!, /^holding nightly-report with fencing token \d+$/);
  assert.match(lines[1]!, /^refused: LOCK_HELD held by report@host-a, retry in \d+ ms$/);
  assert.match(lines[2]!, /^report written under fencing token \d+$/);
  const first = Number(lines[0]!.split(" ").at(-1));
  assert.ok(Number(lines[2]!.split(" ").at(-1)) > first);
  assert.equal(await redisCli(redisPort, "EXISTS", lockKey("nightly-report")), "0");
});

test("the README example of several names and a token check runs", async (t) => {
  const { address, redisPort } = await startServer(t);
  const lines = await runExample(address, "fences");
  assert.equal(lines.length, 3, lines.join("\n"));
  assert.match(lines[0]!, /^account-1: fencing token \d+ is current$/);
  assert.match(lines[1]!, /^account-2: fencing token \d+ is current$/);
  assert.equal(lines[2], "released: account-1 is free");
  for (const name of ["account-1", "account-2"]) assert.equal(await redisCli(redisPort, "EXISTS", lockKey(name)), "0");
});
