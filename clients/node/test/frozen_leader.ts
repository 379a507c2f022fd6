// The leader of conformance_frozen_leader_not_replaced, in a process of its own (forked by the
// test) so that the test can freeze it (SIGSTOP) and wake it (SIGCONT) without freezing itself.
// Arguments: the server's address, the election and the TTL in ms (the resume grace the same). It
// campaigns and reports on stdout, one line each: `elected TERM`; `woken leading=true|false`, the
// first thing it does once woken from a freeze (a poll that finds more than 1.5 s gone), with
// whether it then believes it leads; then, once it has taken its leadership back on a new stream,
// `resumed TERM` and `leading TERM` (it believes it leads and the server names it, with that
// term) or `not-leading ...`; or `lost REASON`. On `resign` from stdin it steps down:
// `resigned true|false`.
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";
import { connect } from "../src/index.js";

const [address, election, ttl] = process.argv.slice(2) as [string, string, string];
/** A gap between two polls longer than this (ms): the process was frozen. */
const FROZEN = 1500;
const say = (line: string): void => {
  process.stdout.write(`${line}\n`); // synchronous on a pipe (Linux)
};
process.channel?.unref(); // the fork's IPC channel alone must not keep this process alive
const commands = createInterface({ input: process.stdin });
const lines = commands[Symbol.asyncIterator]();
const client = connect(address);
try {
  // Connected before the campaign: on a busy machine a first connection can otherwise take
  // longer than a short TTL, and the first `elected` arrives too late to be believed.
  await client.leader(election);
  await using leader = client.campaign(election, "frozen", { ttl: Number(ttl), resumeGrace: Number(ttl) });
  const term = await leader.elected();
  say(`elected ${term}`);
  // A bounded poll that spans the freeze: the stream breaks while this process is stopped (the
  // server's keepalive cuts the connection), and the leadership resumes once it is woken.
  const deadline = performance.now() + 60_000;
  let last = performance.now();
  for (;;) {
    const now = performance.now();
    if (now - last > FROZEN) say(`woken leading=${leader.leading}`);
    last = now;
    if (leader.resumes > 0 || !leader.leading || now > deadline) break;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  if (leader.resumes === 0) {
    say(leader.leading ? "timeout: never resumed" : `lost ${await leader.whenLost()}`);
  } else {
    say(`resumed ${leader.term}`);
    const named = await client.leader(election);
    say(leader.leading && named?.term === term
      ? `leading ${term}`
      : `not-leading: believes ${leader.leading}, the server names ${named?.term}`);
    const command = await lines.next();
    if (command.value === "resign") say(`resigned ${await leader.resign()}`);
  }
} finally {
  commands.close();
  client.close();
}
