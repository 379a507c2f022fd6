// The entry point: connect(...) and what a client does.
import { create } from "@bufbuild/protobuf";
import { LockService, LeaseMode, TokenState as TokenCode } from "./gen/leasehold/v1/lock_pb.js";
import { Candidate, leader, observe, revokeLeader, type CampaignOptions, type Leader } from "./election.js";
import { follow } from "./follow.js";
import { Lease, type LeaseOptions } from "./lease.js";
import { Session, type SessionOptions } from "./session.js";
import { Replicas, type ConnectOptions } from "./transport.js";
import { tokenNumber } from "./validity.js";

/** One holder of a lock, as Describe and List report it. */
export interface HolderInfo {
  holder: string;
  ttlRemainingMs: number;
  fencingToken: number;
}

/** The state of a lock (Describe, Watch). */
export interface LockState {
  held: boolean;
  holder: string;
  ttlRemainingMs: number;
  fencingToken: number;
  holders: HolderInfo[];
  limit: number;
  shared: boolean;
  /** How many wait for it now. */
  waiting: number;
}

/** A held lock, as List reports it. */
export interface HeldLock extends LockState {
  name: string;
}

/** The locks held now (List): a bounded look for people and tools, not a snapshot. */
export interface Listing {
  locks: HeldLock[];
  /** More locks are held than were returned. */
  truncated: boolean;
}

const EMPTY: Described = { holder: "", ttlRemainingMs: 0, fencingToken: 0n, holders: [], limit: 0, mode: LeaseMode.UNSPECIFIED, waiting: 0 };

type Described = {
  holder: string;
  ttlRemainingMs: number;
  fencingToken: bigint;
  holders: { holder: string; ttlRemainingMs: number; fencingToken: bigint }[];
  limit: number;
  mode: LeaseMode;
  waiting: number;
};

function state(held: boolean, d: Described): LockState {
  return {
    held,
    holder: d.holder,
    ttlRemainingMs: d.ttlRemainingMs,
    fencingToken: tokenNumber(d.fencingToken),
    holders: holders(d.holders),
    limit: d.limit,
    shared: d.mode === LeaseMode.SHARED,
    waiting: d.waiting,
  };
}

function holders(list: Described["holders"]): HolderInfo[] {
  return list.map((h) => ({ holder: h.holder, ttlRemainingMs: h.ttlRemainingMs, fencingToken: tokenNumber(h.fencingToken) }));
}

/** What makes two states of a lock the same for Watch: all but the TTLs, which run down. */
function sameness(s: LockState): string {
  return JSON.stringify([s.held, s.holder, s.fencingToken, s.holders.map((h) => [h.holder, h.fencingToken]), s.limit, s.shared, s.waiting]);
}

export interface WatchOptions {
  /** Ends the watch when it aborts (the `for await` loop ends without an error). */
  signal?: AbortSignal;
}

export interface RevokeOptions {
  /** Ends only the holder with this fencing token (a permit, a shared hold); default: every
   * holder of the name. */
  fencingToken?: number;
}

/**
 * What a fencing token is to its name now (`client.check`):
 * - `"current"`: a live holding of the name has it;
 * - `"superseded"`: the name is held, under other fencing tokens only;
 * - `"free"`: nobody holds the name;
 * - `"unknown"`: a server that predates the answer.
 */
export type TokenState = "current" | "superseded" | "free" | "unknown";

/** The answer of `client.check`. */
export interface TokenCheck {
  state: TokenState;
  /** The current holder's fencing token (the oldest, for several holders); 0 when free. */
  currentFencingToken: number;
}

/** The wire's TokenState as this package's. */
export function tokenState(code: TokenCode): TokenState {
  switch (code) {
    case TokenCode.CURRENT:
      return "current";
    case TokenCode.SUPERSEDED:
      return "superseded";
    case TokenCode.FREE:
      return "free";
    default:
      return "unknown";
  }
}

export interface CheckOptions {
  /** Cancels the call when it aborts (the promise rejects with its reason). */
  signal?: AbortSignal;
}

export interface RevokeLeaderOptions {
  /** Ends the leadership only if this term leads; default: whichever leads. */
  term?: number;
}

/**
 * A client of Leasehold servers: one address (`"10.0.0.1:50051"`) or a comma-separated list of
 * replicas (`"10.0.0.1:50051,10.0.0.2:50051"`). Calls go to one replica at a time, in the order
 * given, and move to the next when it cannot be reached; held leases, leaderships and sessions
 * resume there on their own when their stream breaks.
 */
export class Client implements Disposable {
  /** @internal */
  readonly replicas: Replicas;

  constructor(target: string, options: ConnectOptions = {}) {
    this.replicas = new Replicas(target, options);
  }

  /** Takes lock `name` (waiting up to `wait` ms) and resolves once it is held. Rejects with a
   * NotAcquiredError (reason, holder, retryAfter) when it stays taken, a LeaseholdError for any
   * other refusal, a StaleError for an `acquired` that arrived after its validity ran out. */
  lease(name: string, options: LeaseOptions = {}): Promise<Lease> {
    return new Lease(this.replicas, name, options).acquire();
  }

  /**
   * Holds lock `name` while `work` runs, and releases it afterwards (also when `work` throws).
   * `work` gets an AbortSignal that aborts when the lease is lost: stop the work then.
   */
  async using<T>(name: string, options: LeaseOptions, work: (signal: AbortSignal, lease: Lease) => Promise<T> | T): Promise<T> {
    const lease = await this.lease(name, options);
    try {
      return await work(lease.signal, lease);
    } finally {
      await lease.release();
    }
  }

  /** Runs for leader of `election`, publishing `value`; `await candidate.elected()` waits in
   * line. */
  campaign(election: string, value: Uint8Array | string, options: CampaignOptions = {}): Candidate {
    return new Candidate(this.replicas, election, value, options).start();
  }

  /** The leader of `election` now, or null. */
  leader(election: string): Promise<Leader | null> {
    return leader(this.replicas, election);
  }

  /** The leader of `election` now (null: none), then every change: `for await (const l of
   * client.observe("x"))`. */
  observe(election: string, signal?: AbortSignal): AsyncGenerator<Leader | null, void, undefined> {
    return observe(this.replicas, election, signal);
  }

  /** A session: many locks and campaigns on one stream (`session.lock`, `session.campaign`). */
  async session(options: SessionOptions = {}): Promise<Session> {
    return new Session(this.replicas, options).open();
  }

  /** Who holds lock `name` now. */
  async describe(name: string): Promise<LockState> {
    const answer = await this.replicas.unary(LockService.method.describe, create(LockService.method.describe.input, { name }));
    return state(answer.held, answer);
  }

  /** The locks held now, at most `limit` (0: the server's maximum, 1,000). */
  async list(limit = 0): Promise<Listing> {
    const answer = await this.replicas.unary(LockService.method.list, create(LockService.method.list.input, { limit }));
    return { locks: answer.locks.map((l) => ({ name: l.name, ...state(true, l) })), truncated: answer.truncated };
  }

  /**
   * The state of lock `name` now, then again on every change (taken, released, expired,
   * revoked, a waiter joining or leaving), never the same twice in a row: `for await (const
   * state of client.watch("x", { signal }))`. Leaving the loop or aborting `signal` ends it;
   * a broken stream is followed again on the next replica. Needs the `observe` role on the name.
   */
  watch(name: string, options: WatchOptions = {}): AsyncGenerator<LockState, void, undefined> {
    return follow(this.replicas, LockService.method.watch, { name }, (m) => state(m.state?.held ?? false, m.state ?? EMPTY), sameness, options.signal);
  }

  /**
   * Whether `fencingToken` is the current holding of lock `name`, for the protected resource to
   * ask before each write (one Redis read on the server): `{ state: "current" }`, `"superseded"`
   * (with the current holder's fencing token) or `"free"`. A check is not a conditional write:
   * the holding can end between the answer and the write, so a resource that must never take a
   * stale write fences itself (docs/contract.md). Needs the `observe` role on the name.
   */
  async check(name: string, fencingToken: number, options: CheckOptions = {}): Promise<TokenCheck> {
    const request = create(LockService.method.check.input, { name, fencingToken: BigInt(fencingToken) });
    const answer = await this.replicas.unary(LockService.method.check, request, { signal: options.signal });
    return { state: tokenState(answer.state), currentFencingToken: tokenNumber(answer.currentFencingToken) };
  }

  /**
   * Ends the holding of lock `name` by force, for an operator: every holder, or only the one
   * with `fencingToken`. Each is told `lost` with the reason "revoked" at once, cannot be
   * resumed, and the next waiter is granted. Resolves with the holders ended, as they were just
   * before (empty: nothing was held). Needs the `admin` role on the name (anyone without auth).
   */
  async revoke(name: string, options: RevokeOptions = {}): Promise<HolderInfo[]> {
    const fencingToken = BigInt(options.fencingToken ?? 0);
    const answer = await this.replicas.unary(LockService.method.revoke, create(LockService.method.revoke.input, { name, fencingToken }));
    return holders(answer.revoked);
  }

  /** Ends the leadership of `election` by force (only `term`'s, if given): the leader is told
   * `lost` with the reason "revoked" and the next candidate is elected. Resolves with the
   * revoked leader, or null if none (or another term) led. Needs the `admin` role. */
  revokeLeader(election: string, options: RevokeLeaderOptions = {}): Promise<Leader | null> {
    return revokeLeader(this.replicas, election, options.term ?? 0);
  }

  /** Closes the channels. */
  close(): void {
    this.replicas.close();
  }

  [Symbol.dispose](): void {
    this.close();
  }
}

/** A client of the Leasehold servers at `target` (one address, or a comma-separated list). */
export function connect(target: string = process.env["LEASEHOLD_SERVER"] ?? "127.0.0.1:50051", options: ConnectOptions = {}): Client {
  return new Client(target, options);
}
