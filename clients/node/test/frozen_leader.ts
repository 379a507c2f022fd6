// The leader of conformance_frozen_leader_not_replaced, in a process of its own (forked by the
// test) so that the test can freeze it (SIGSTOP) and wake it (SIGCONT) without freezing itself.
// Arguments: the server's address and the election. It campaigns (TTL 4 s, resume grace 4 s) and
// reports on stdout, one line each: `elected TERM`; then, once it has taken its leadership back on
// a new stream after being woken, `resumed TERM` and `leading TERM` (it believes it leads and the
// server names it, with that term) or `not-leading ...`; or `lost REASON`. On `resign` from stdin
// it steps down: `resigned true|false`.
import { createInterface } from "node:readline";
import { connect } from "../src/index.js";

const [address, election] = process.argv.slice(2) as [string, string];
const say = (line: string): void => {
  process.stdout.write(`${line}\n`); // synchronous on a pipe (Linux)
};
process.channel?.unref(); // the fork's IPC channel alone must not keep this process alive
const commands = createInterface({ input: process.stdin });
const lines = commands[Symbol.asyncIterator]();
const client = connect(address);
try {
  await using leader = client.campaign(election, "frozen", { ttl: 4000, resumeGrace: 4000 });
  const term = await leader.elected();
  say(`elected ${term}`);
  // A bounded poll that spans the freeze: the stream breaks while this process is stopped (the
  // server's keepalive cuts the connection), and the leadership resumes once it is woken.
  const deadline = Date.now() + 60_000;
  while (leader.resumes === 0 && leader.leading && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  if (leader.resumes === 0) {
    say(leader.lost ? `lost ${leader.lostReason}` : "timeout: never resumed");
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
