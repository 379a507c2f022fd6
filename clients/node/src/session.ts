// Sessions: many leases (locks, permits, shared holds, leaderships) on one Session stream,
// renewed and confirmed together, resumed together on the next replica when the stream breaks.
import { create } from "@bufbuild/protobuf";
import {
  SessionRequestSchema,
  SessionService,
  type SessionResponse,
  type SessionRequestSchema as Req,
  type SessionResponseSchema as Res,
} from "./gen/leasehold/v1/session_pb.js";
import { LeaseMode } from "./gen/leasehold/v1/lock_pb.js";
import {
  Code,
  LeaseLostError,
  LeaseholdError,
  SessionClosedError,
  StaleError,
  describe,
  failedError,
  lostReason,
  lostReasonOf,
  transient,
  type LostReason,
} from "./errors.js";
import { readFences, sameFences, wireNames, type Fences } from "./fences.js";
import { Belief, Deferred } from "./held.js";
import { SessionLeader, SessionLease } from "./session_leases.js";
import { Stream, type Replicas } from "./transport.js";
import {
  FIRST_BACKOFF_MS,
  MAX_BACKOFF_MS,
  MAX_HOLD,
  RELEASE_TIMEOUT_MS,
  SILENT,
  ceilingOf,
  jitter,
  now,
  tokenNumber,
  vouchedUntil,
} from "./validity.js";

export interface SessionOptions {
  /** Time to live of every lease on the session, in milliseconds (default 30 s). */
  ttl?: number;
  /** How long the session's leases outlive a broken stream (default ttl; 0 with `resume: false`). */
  resumeGrace?: number;
  /** The holder of every lock on the session that names none of its own. */
  holder?: string;
  /** Resume the session on the next replica when its stream breaks (default true). */
  resume?: boolean;
}

export interface SessionLockOptions {
  /** How long to wait for a taken lock, in milliseconds (default 0: fail at once). */
  wait?: number;
  holder?: string;
  limit?: number;
  shared?: boolean;
  fair?: boolean;
  /** Further names held together with `name`, all or none (as `LeaseOptions.names`). */
  names?: string[];
  /** Lock-delay in milliseconds after this lease is lost (as `LeaseOptions.lockDelay`). */
  lockDelay?: number;
  /** A ceiling on this lease's hold in milliseconds (as `LeaseOptions.maxHold`): at it this
   * lease alone is lost with `lostCode` "max_hold". */
  maxHold?: number;
  /** Stops waiting when it aborts. */
  signal?: AbortSignal;
}

interface Entry {
  id: bigint;
  hold: SessionLease | SessionLeader;
  acquire?: {
    name: string;
    moreNames: string[];
    waitMs: number;
    holder: string;
    fair?: boolean;
    limit: number;
    mode: LeaseMode;
    lockDelayMs: number;
    maxHoldMs: number;
  };
  waitEnd: number;
  /** When its first acquire was sent, and the end of its hold by its max hold (Infinity: none). */
  sentAt?: number;
  ceiling: number;
  fences: Fences;
  campaign?: { election: string; value: Uint8Array };
  token: string;
  fencingToken: number;
  result: Deferred<void> | undefined;
  held: boolean;
  sent: boolean;
  confirmed: boolean;
  releasing: Deferred<boolean>[];
  proclaimed: Deferred<void>[];
  covered: Deferred<void>[];
  unsent: { value: Uint8Array; done: Deferred<void> }[];
}

interface Outcome {
  closed: boolean;
  reason: string;
  /** Why it was lost (not for a close). */
  code?: LostReason;
  error: Error;
}

type SStream = Stream<typeof Req, typeof Res>;

/**
 * Many leases on one Session stream. `signal` aborts when the whole session is lost; `close()`
 * (or leaving an `await using` block) releases every lease on it.
 */
export class Session extends Belief implements AsyncDisposable {
  /** How many times the session was opened again on a new stream after its stream broke. */
  resumes = 0;
  private stream: SStream | undefined;
  private readonly entries = new Map<bigint, Entry>();
  private nextId = 0n;
  private readonly ttl: number;
  private readonly grace: number;
  private readonly holder: string;
  private readonly resume: boolean;
  private validity: NodeJS.Timeout | undefined;
  private validityAt = 0;
  private lastError: Error | null = null;
  private backoff = FIRST_BACKOFF_MS;
  private resumeBy = 0;
  private resumeByTimer: NodeJS.Timeout | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private closing = false;
  private closeSent = false;
  private closeByTimer: NodeJS.Timeout | undefined;
  private outcome: Outcome | undefined;
  private broken = false;
  private readonly finished = new Deferred<void>();

  /** @internal Use `client.session(...)`. */
  constructor(
    private readonly replicas: Replicas,
    options: SessionOptions,
  ) {
    super();
    this.ttl = options.ttl ?? 30_000;
    const resume = options.resume ?? true;
    this.grace = options.resumeGrace ?? (resume ? this.ttl : 0);
    this.resume = resume && this.grace > 0;
    this.holder = options.holder ?? "";
  }

  /** @internal */
  open(): this {
    const stream: SStream = new Stream(
      this.replicas,
      SessionService.method.session,
      (m) => this.received(stream, m),
      (e) => this.ended(stream, e),
    );
    this.stream = stream;
    stream.send(
      create(SessionRequestSchema, {
        action: { case: "open", value: { ttlMs: this.ttl, resumeGraceMs: this.grace, holder: this.holder } },
      }),
    );
    return this;
  }

  /** Resolves once the session has ended (closed, or lost). */
  get done(): Promise<void> {
    return this.finished.promise;
  }

  /** Takes lock `name` on the session and resolves once it is held (NotAcquiredError when it
   * stays taken). It is held until released, lost, or the session ends. */
  async lock(name: string, options: SessionLockOptions = {}): Promise<SessionLease> {
    const entry = this.entry(
      new SessionLease(name, () => this.release(entry)),
      {
        acquire: {
          ...wireNames(name, options.names),
          lockDelayMs: options.lockDelay ?? 0,
          maxHoldMs: options.maxHold ?? 0,
          waitMs: options.wait ?? 0,
          holder: options.holder ?? "",
          fair: options.fair,
          limit: options.limit ?? 0,
          mode: options.shared ? LeaseMode.SHARED : LeaseMode.EXCLUSIVE,
        },
        waitEnd: now() + (options.wait ?? 0),
      },
    );
    await this.take(entry, options.signal);
    const lease = entry.hold as SessionLease;
    lease.token = entry.token;
    lease.fencingToken = entry.fencingToken;
    lease.fences = entry.fences;
    return lease;
  }

  /** Runs for leader of `election` on the session and resolves once it leads. */
  async campaign(election: string, value: Uint8Array | string, options: { signal?: AbortSignal } = {}): Promise<SessionLeader> {
    const bytes = typeof value === "string" ? new TextEncoder().encode(value) : value;
    const entry = this.entry(
      new SessionLeader(
        election,
        () => this.release(entry),
        (v) => this.proclaim(entry, v),
      ),
      { campaign: { election, value: bytes }, waitEnd: 0 },
    );
    await this.take(entry, options.signal);
    const leader = entry.hold as SessionLeader;
    leader.token = entry.token;
    leader.term = entry.fencingToken;
    return leader;
  }

  /** Releases every lease on the session and ends it. Resolves once the server confirmed it;
   * rejects with the reason if the session was lost instead. */
  async close(): Promise<void> {
    this.startClose();
    this.sendCloseWhenSettled();
    await this.finished.promise;
    if (this.outcome && !this.outcome.closed) throw this.outcome.error;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.close();
    } catch {
      // lost: nothing left to release
    }
  }

  private entry(hold: SessionLease | SessionLeader, parts: Partial<Entry>): Entry {
    return {
      id: 0n,
      hold,
      waitEnd: 0,
      ceiling: Infinity,
      fences: new Map(),
      token: "",
      fencingToken: 0,
      result: new Deferred<void>(),
      held: false,
      sent: false,
      confirmed: false,
      releasing: [],
      proclaimed: [],
      covered: [],
      unsent: [],
      ...parts,
    };
  }

  private async take(entry: Entry, signal?: AbortSignal): Promise<void> {
    if (this.outcome) throw this.outcome.error;
    if (this.closing) throw new SessionClosedError();
    entry.id = ++this.nextId;
    this.entries.set(entry.id, entry);
    if (this.stream !== undefined) this.sendEntry(entry);
    const onAbort = () => {
      if (this.entries.get(entry.id) !== entry) return;
      this.entries.delete(entry.id);
      this.sendRelease(entry);
      entry.result?.reject(signal!.reason);
      entry.result = undefined;
    };
    if (signal?.aborted) onAbort();
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      await entry.result!.promise;
    } finally {
      signal?.removeEventListener("abort", onAbort);
    }
  }

  private release(entry: Entry): Promise<boolean> {
    if (this.entries.get(entry.id) !== entry || !entry.held) return Promise.resolve(false);
    const done = new Deferred<boolean>();
    entry.releasing.push(done);
    if (entry.releasing.length === 1 && entry.confirmed) this.sendRelease(entry);
    return done.promise;
  }

  private proclaim(entry: Entry, value: Uint8Array): Promise<void> {
    if (this.entries.get(entry.id) !== entry || !entry.held) {
      return Promise.reject(new LeaseLostError(entry.hold.lostReason ?? "no longer leading: resigned", entry.hold.lostCode));
    }
    const done = new Deferred<void>();
    entry.campaign!.value = value;
    if (entry.confirmed) this.sendProclaim(entry, value, done);
    else if (entry.sent) entry.unsent.push({ value, done });
    else entry.covered.push(done);
    return done.promise;
  }

  private send(action: Parameters<typeof create<typeof SessionRequestSchema>>[1]): void {
    this.stream?.send(create(SessionRequestSchema, action));
  }

  private sendEntry(e: Entry): void {
    e.sent = true;
    if (e.campaign) {
      this.send({
        action: {
          case: "campaign",
          value: { id: e.id, election: e.campaign.election, value: e.campaign.value, resumeToken: e.held ? e.token : "" },
        },
      });
      return;
    }
    const a = e.acquire!;
    if (!e.held) e.sentAt ??= now();
    const value = e.held
      ? { id: e.id, name: a.name, moreNames: a.moreNames, resumeToken: e.token }
      : { id: e.id, ...a, waitMs: a.waitMs > 0 ? Math.max(0, Math.round(e.waitEnd - now())) : 0 };
    this.send({ action: { case: "acquire", value } });
  }

  private sendRelease(e: Entry): void {
    if (this.stream !== undefined && e.sent) this.send({ action: { case: "release", value: { id: e.id } } });
  }

  private sendProclaim(e: Entry, value: Uint8Array, done: Deferred<void>): void {
    e.proclaimed.push(done);
    this.send({ action: { case: "proclaim", value: { id: e.id, value } } });
  }

  private received(stream: SStream, message: SessionResponse): void {
    if (stream !== this.stream || this.outcome) return;
    this.backoff = FIRST_BACKOFF_MS;
    if (this.broken) {
      this.broken = false;
      this.resumes++;
    }
    this.resumeBy = 0;
    clearTimeout(this.resumeByTimer);
    const event = message.event;
    switch (event.case) {
      case "acquired":
        this.acquired(stream, event.value);
        break;
      case "keptAlive": {
        const until = vouchedUntil(stream.opened, now(), event.value.validForMs, event.value.validToMs);
        for (const e of this.entries.values()) {
          if (!e.confirmed) continue;
          e.hold.validUntil = Math.min(until, e.ceiling);
          this.armAt(e.hold.validUntil);
        }
        this.validUntil = until;
        this.armAt(until);
        break;
      }
      case "proclaimed":
        this.entries.get(event.value.id)?.proclaimed.shift()?.resolve();
        break;
      case "released": {
        const e = this.entries.get(event.value.id);
        if (e === undefined) break;
        this.entries.delete(e.id);
        for (const d of e.releasing) d.resolve(event.value.wasHeld);
        this.answerProclaims(e, new Error("resigned"));
        break;
      }
      case "leaseLost": {
        const e = this.entries.get(event.value.id);
        if (e) this.loseEntry(e, event.value.reason, lostReason(event.value.code), false);
        break;
      }
      case "failed": {
        const e = this.entries.get(event.value.id);
        if (e === undefined) break;
        const error = failedError(event.value.code, event.value.message, event.value.status);
        if (!e.held) {
          this.entries.delete(e.id);
          e.result?.reject(error);
          e.result = undefined;
        } else if (!e.confirmed) {
          this.loseEntry(e, `could not resume the lease: ${describe(error)}`, lostReasonOf(error), false);
        } else {
          e.proclaimed.shift()?.reject(error);
        }
        break;
      }
      case "closed":
        this.finish({ closed: true, reason: "", error: new SessionClosedError() });
        break;
      case "lost":
        this.loseSession(event.value.reason, lostReason(event.value.code));
        break;
    }
    this.sendCloseWhenSettled();
  }

  private acquired(
    stream: SStream,
    a: { id: bigint; token: string; fencingToken: bigint; validForMs: number; validToMs: bigint; fences: { name: string; fencingToken: bigint }[] },
  ): void {
    const e = this.entries.get(a.id);
    if (e === undefined) return; // let go meanwhile
    const received = now();
    if (!e.held && e.acquire) e.ceiling = ceilingOf(e.sentAt ?? received, e.acquire.maxHoldMs);
    const until = vouchedUntil(stream.opened, received, a.validForMs, a.validToMs, e.ceiling);
    const fences = e.acquire ? readFences([e.acquire.name, ...e.acquire.moreNames], a.fences, a.fencingToken) : new Map<string, number>();
    if (typeof fences === "string" || (e.held && e.acquire && !sameFences(fences, e.fences))) {
      const why = typeof fences === "string" ? fences : "with other fencing tokens per name";
      if (e.held) {
        this.loseEntry(e, `resumed, but ${why}`, "taken", true);
        return;
      }
      // Held, but not what was asked for (a server that ignored more names): let it go.
      this.entries.delete(e.id);
      this.sendRelease(e);
      e.result?.reject(new LeaseholdError(Code.UNIMPLEMENTED, why));
      e.result = undefined;
      return;
    }
    if (until <= received) {
      if (e.held) {
        this.loseEntry(e, "resumed, but the news arrived after its validity had run out", "unreachable", true);
        return;
      }
      this.entries.delete(e.id);
      this.sendRelease(e);
      e.result?.reject(new StaleError("acquired"));
      e.result = undefined;
      return;
    }
    if (e.held) {
      if (a.token !== e.token || tokenNumber(a.fencingToken) !== e.fencingToken) {
        this.loseEntry(e, `resumed with fencing token ${a.fencingToken} instead of ${e.fencingToken}`, "taken", true);
        return;
      }
      e.hold.resumes++;
    } else {
      e.held = true;
      e.token = a.token;
      e.fencingToken = tokenNumber(a.fencingToken);
      e.fences = fences;
    }
    e.confirmed = true;
    e.hold.validUntil = until;
    this.armAt(until);
    if (e.result) {
      const result = e.result;
      e.result = undefined;
      result.resolve();
    }
    for (const d of e.covered) d.resolve(); // the resume published the latest value
    e.covered = [];
    for (const { value, done } of e.unsent) this.sendProclaim(e, value, done);
    e.unsent = [];
    if (e.releasing.length > 0) this.sendRelease(e);
  }

  private answerProclaims(e: Entry, error: Error): void {
    for (const d of [...e.proclaimed, ...e.covered, ...e.unsent.map((u) => u.done)]) d.reject(error);
    e.proclaimed = [];
    e.covered = [];
    e.unsent = [];
  }

  private loseEntry(e: Entry, reason: string, code: LostReason, letGo: boolean): void {
    this.entries.delete(e.id);
    if (letGo) this.sendRelease(e);
    const error = new LeaseLostError(reason, code);
    if (e.result) {
      e.result.reject(error);
      e.result = undefined;
    }
    if (e.held) e.hold.markLost(reason, code);
    for (const d of e.releasing) d.resolve(false);
    this.answerProclaims(e, error);
  }

  private armAt(at: number): void {
    if (this.validityAt === 0 || at < this.validityAt) {
      this.validityAt = at;
      clearTimeout(this.validity);
      this.validity = setTimeout(() => this.expire(), Math.max(0, at - now()));
    }
  }

  private expire(): void {
    this.validityAt = 0;
    if (this.outcome) return;
    const t = now();
    let next = 0;
    for (const e of [...this.entries.values()]) {
      if (!e.held) continue;
      const until = e.hold.validUntil;
      if (t >= e.ceiling) {
        // At its max hold: the server keeps the key until its TTL runs out (a job still
        // writing is not overlapped), and says so itself; let go only if it does not.
        this.loseEntry(e, MAX_HOLD, "max_hold", false);
        setTimeout(() => this.sendRelease(e), this.ttl).unref();
      } else if (t >= until) {
        const reason = e.confirmed
          ? SILENT
          : `could not resume before the lease's validity ran out${this.lastError ? `: ${describe(this.lastError)}` : ""}`;
        this.loseEntry(e, reason, "unreachable", true);
      } else if (next === 0 || until < next) {
        next = until;
      }
    }
    if (next !== 0) this.armAt(next);
    this.sendCloseWhenSettled();
  }

  private ended(stream: SStream, error: Error | null): void {
    if (stream !== this.stream) return;
    this.stream = undefined;
    if (this.outcome) return;
    this.closeSent = false;
    if (!this.resume || !transient(error)) {
      this.loseSession(`session stream ended: ${describe(error)}`, lostReasonOf(error), error);
      return;
    }
    this.lastError = error;
    this.broken = true;
    for (const e of this.entries.values()) {
      e.sent = false;
      e.confirmed = false;
      e.covered.push(...e.proclaimed, ...e.unsent.map((u) => u.done));
      e.proclaimed = [];
      e.unsent = [];
    }
    if (this.resumeBy === 0) {
      let by = now() + this.grace;
      for (const e of this.entries.values()) if (e.held && e.hold.validUntil > by) by = e.hold.validUntil;
      this.resumeBy = by;
      this.resumeByTimer = setTimeout(() => {
        if (this.stream === undefined || this.broken) {
          this.loseSession(`could not resume the session before its grace ran out: ${describe(this.lastError)}`, "unreachable");
        }
      }, Math.max(0, by - now()));
    }
    this.replicas.failover(stream.index);
    this.retryTimer = setTimeout(() => this.reopen(), jitter(this.backoff));
    this.backoff = Math.min(2 * this.backoff, MAX_BACKOFF_MS);
  }

  private reopen(): void {
    if (this.outcome) return;
    if (this.closing && ![...this.entries.values()].some((e) => e.held)) {
      this.finish({ closed: true, reason: "", error: new SessionClosedError() });
      return;
    }
    this.open();
    const ids = [...this.entries.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    for (const id of ids) this.sendEntry(this.entries.get(id)!);
    this.sendCloseWhenSettled();
  }

  private startClose(): void {
    if (this.closing || this.outcome) return;
    this.closing = true;
    this.closeByTimer = setTimeout(
      () => this.loseSession("the session's close was not confirmed in time: its leases expire by their TTL", "unreachable"),
      RELEASE_TIMEOUT_MS,
    );
    let held = 0;
    for (const [id, e] of this.entries) {
      if (e.held) {
        held++;
        continue;
      }
      this.entries.delete(id);
      e.result?.reject(new SessionClosedError());
      e.result = undefined;
    }
    if (held === 0 && this.stream === undefined) {
      this.finish({ closed: true, reason: "", error: new SessionClosedError() });
    }
  }

  private sendCloseWhenSettled(): void {
    if (!this.closing || this.closeSent || this.stream === undefined || this.outcome) return;
    for (const e of this.entries.values()) if (e.held && !e.confirmed) return; // its resume first
    this.closeSent = true;
    this.send({ action: { case: "close", value: {} } });
  }

  private loseSession(reason: string, code: LostReason, cause?: Error | null): void {
    // A refusal (a bad `open`, no grant) is the caller's error as the server gave it.
    const error = cause instanceof LeaseholdError ? cause : new LeaseLostError(reason, code);
    this.finish({ closed: false, reason, code, error });
  }

  private finish(outcome: Outcome): void {
    if (this.outcome) return;
    this.outcome = outcome;
    clearTimeout(this.validity);
    clearTimeout(this.resumeByTimer);
    clearTimeout(this.retryTimer);
    clearTimeout(this.closeByTimer);
    const stream = this.stream;
    if (stream !== undefined && !stream.done) {
      if (outcome.closed) {
        stream.end();
        setTimeout(() => stream.cancel(), 1000).unref();
      } else stream.cancel();
    }
    for (const e of this.entries.values()) {
      e.result?.reject(outcome.closed ? new SessionClosedError() : outcome.error);
      e.result = undefined;
      if (e.held && !outcome.closed) e.hold.markLost(outcome.reason, outcome.code ?? "unknown");
      for (const d of e.releasing) d.resolve(outcome.closed);
      this.answerProclaims(e, outcome.error);
    }
    this.entries.clear();
    if (!outcome.closed) this.markLost(outcome.reason, outcome.code ?? "unknown");
    this.finished.resolve();
  }
}
