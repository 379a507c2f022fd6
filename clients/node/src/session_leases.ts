// What a session holds, as its caller sees it: a lock (a permit, a shared hold) or a leadership,
// each with its own validity and signal; the session (session.ts) drives them.
import type { Fences } from "./fences.js";
import { Belief } from "./held.js";

/** A lock (a permit, a shared hold) held on a session. `signal` aborts when this lease alone is
 * lost, or when the whole session is. */
export class SessionLease extends Belief implements AsyncDisposable {
  token = "";
  fencingToken = 0;
  /** Each name's fencing token, `name` first (`fencingToken` is the first's). */
  fences: Fences = new Map();
  /** How many times it was resumed on a new stream. */
  resumes = 0;
  /** @internal */
  constructor(
    readonly name: string,
    /** @internal */ readonly stop: () => Promise<boolean>,
  ) {
    super();
  }
  /** Lets this lock go (the session goes on); resolves with whether it was still held. */
  release(): Promise<boolean> {
    return this.stop();
  }
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}

/** A leadership held on a session. */
export class SessionLeader extends Belief implements AsyncDisposable {
  token = "";
  /** The leadership's term (its fencing token). */
  term = 0;
  resumes = 0;
  /** @internal */
  constructor(
    readonly election: string,
    /** @internal */ readonly stop: () => Promise<boolean>,
    /** @internal */ readonly publish: (value: Uint8Array) => Promise<void>,
  ) {
    super();
  }
  /** Steps down; resolves with whether this session was still leading. */
  resign(): Promise<boolean> {
    return this.stop();
  }
  /** Publishes a new value; resolves once it is published. */
  proclaim(value: Uint8Array | string): Promise<void> {
    return this.publish(typeof value === "string" ? new TextEncoder().encode(value) : value);
  }
  async [Symbol.asyncDispose](): Promise<void> {
    await this.resign();
  }
}
