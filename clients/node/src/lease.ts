// A lock held by one Lease stream.
import { create } from "@bufbuild/protobuf";
import {
  LeaseMode,
  LeaseRequestSchema,
  LockService,
  type LeaseRequest,
  type LeaseResponse,
  type LeaseRequestSchema as Req,
  type LeaseResponseSchema as Res,
} from "./gen/leasehold/v1/lock_pb.js";
import { lostReason } from "./errors.js";
import { readFences, sameFences, wireNames, type Fences } from "./fences.js";
import { StreamHold, type Heard } from "./held.js";
import { now } from "./validity.js";
import type { Replicas } from "./transport.js";

/** Who holds a lock the caller waits for, as the server reports it while waiting. */
export interface WaitingInfo {
  holder: string;
  /** The holder's remaining TTL in milliseconds (0: free, but others are ahead in line). */
  holderTtlRemainingMs: number;
  /** This waiter's place in line: 1 is next (0: not in line, `fair: false`). */
  position: number;
}

export interface LeaseOptions {
  /** Further names to hold together with `name`, all or none: the lease is held only once every
   * name is taken (waiting holds none of them, so overlapping sets in any order cannot
   * deadlock), renewed together, and lost as a whole. Each name's fencing token is in
   * `lease.fences`. Plain exclusive locks only; at most 32 names in all. */
  names?: string[];
  /** Lock-delay in milliseconds (at most 1 hour): when this lease is lost (expired, revoked, its
   * stream broke past its grace), its names cannot be taken for this long more, so an unfenced
   * resource is not written by the next holder while this one may still be writing. A clean
   * release frees them at once. Default 0: none. */
  lockDelay?: number;
  /** A ceiling on the hold, in milliseconds from the acquire (at least `ttl`, at most 7 days):
   * the server stops renewing it then and the lease is lost with `lostCode` "max_hold" (by this
   * process's clock no later than the acquire's sending + maxHold), while its key holds until
   * its TTL runs out. Default 0: none. */
  maxHold?: number;
  /** Time to live in Redis without renewal, in milliseconds (100 ..= 3,600,000); default 30 s.
   * The server renews it every third of it while the lease is held. */
  ttl?: number;
  /** How long to wait for a taken lock, in milliseconds; 0 (the default) fails at once with
   * NotAcquiredError. */
  wait?: number;
  /** Shown to others who find the lock taken. */
  holder?: string;
  /** Let up to `limit` leases hold the name at once (a semaphore); 0 or 1: a plain lock. */
  limit?: number;
  /** Hold together with other shared leases (readers); exclusive ones (writers) wait for them. */
  shared?: boolean;
  /** Wait in line (default true); false races for the lock whenever it frees. */
  fair?: boolean;
  /** How long the lease outlives a broken stream so it can be resumed, in milliseconds (at most
   * ttl). Default: ttl, or 0 with `resume: false`. */
  resumeGrace?: number;
  /** Resume automatically on the next replica when the stream breaks (default true). */
  resume?: boolean;
  /** Reattach to the lease this token holds instead of taking a new one. */
  resumeToken?: string;
  /** Stops waiting for the lock when it aborts. */
  signal?: AbortSignal;
  /** Told each time the server says the lock is taken and it waits. */
  onWaiting?: (waiting: WaitingInfo) => void;
}

export const DEFAULT_TTL_MS = 30_000;

/**
 * A held lock. `signal` aborts when it is lost (the server said so, its stream broke and it could
 * not be resumed, or the validity the server last confirmed ran out by this process's clock).
 * `await using lease = await client.lease(...)` releases it at the end of the block.
 */
export class Lease extends StreamHold<typeof Req, typeof Res> implements AsyncDisposable {
  /** Every name it holds: `name` first, then `options.names`. */
  readonly names: readonly string[];
  /** Each name's fencing token, in the order of `names` (`fencingToken` is the first's). */
  fences: Fences = new Map();
  private readonly request: LeaseRequest;
  /** When the wait ends (set when the first attempt is sent), on `performance.now()`'s clock. */
  private deadline: number | undefined;

  /** @internal Use `client.lease(...)`. */
  constructor(
    replicas: Replicas,
    readonly name: string,
    private readonly options: LeaseOptions,
  ) {
    const ttl = options.ttl ?? DEFAULT_TTL_MS;
    const resume = options.resume ?? true;
    super(replicas, LockService.method.lease, resume, "lease");
    const wire = wireNames(name, options.names);
    this.names = [name, ...wire.moreNames];
    this.maxHold = options.maxHold ?? 0;
    this.linger = ttl;
    this.request = create(LeaseRequestSchema, {
      action: {
        case: "acquire",
        value: {
          ...wire,
          lockDelayMs: options.lockDelay ?? 0,
          maxHoldMs: this.maxHold,
          ttlMs: ttl,
          waitMs: options.wait ?? 0,
          holder: options.holder ?? "",
          fair: options.fair,
          limit: options.limit ?? 0,
          mode: options.shared ? LeaseMode.SHARED : LeaseMode.EXCLUSIVE,
          resumeGraceMs: options.resumeGrace ?? (resume ? ttl : 0),
          resumeToken: options.resumeToken ?? "",
        },
      },
    });
  }

  /** @internal */
  async acquire(): Promise<this> {
    this.begin(this.options.signal);
    await this.first.promise;
    return this;
  }

  protected startRequest(resumeToken: string | undefined): LeaseRequest {
    if (resumeToken === undefined) {
      // Asked again on another replica: only what is left of the wait.
      const acquire = this.request.action.value as Extract<LeaseRequest["action"], { case: "acquire" }>["value"];
      this.deadline ??= now() + acquire.waitMs;
      const waitMs = Math.max(0, Math.round(this.deadline - now()));
      return create(LeaseRequestSchema, { action: { case: "acquire", value: { ...acquire, waitMs } } });
    }
    const acquire = this.request.action.value as Extract<LeaseRequest["action"], { case: "acquire" }>["value"];
    return create(LeaseRequestSchema, {
      action: {
        case: "acquire",
        value: { name: this.name, moreNames: acquire.moreNames, ttlMs: acquire.ttlMs, resumeGraceMs: acquire.resumeGraceMs, resumeToken },
      },
    });
  }

  protected stopRequest(): LeaseRequest {
    return create(LeaseRequestSchema, { action: { case: "release", value: {} } });
  }

  protected hear(message: LeaseResponse): Heard {
    const event = message.event;
    switch (event.case) {
      case "acquired": {
        const fences = readFences(this.names, event.value.fences, event.value.fencingToken);
        let refused: string | undefined;
        if (typeof fences === "string") refused = fences;
        else if (this.fences.size === 0) this.fences = fences;
        else if (!sameFences(fences, this.fences)) refused = "with other fencing tokens per name";
        return {
          kind: "held",
          token: event.value.token,
          fencingToken: event.value.fencingToken,
          validForMs: event.value.validForMs,
          validToMs: event.value.validToMs,
          ...(refused === undefined ? {} : { refused }),
        };
      }
      case "extended":
        return { kind: "extended", validForMs: event.value.validForMs, validToMs: event.value.validToMs };
      case "lost":
        return { kind: "lost", reason: event.value.reason, code: lostReason(event.value.code) };
      case "released":
        return { kind: "done", wasHeld: event.value.wasHeld };
      case "waiting":
        this.options.onWaiting?.({
          holder: event.value.holder,
          holderTtlRemainingMs: event.value.holderTtlRemainingMs,
          position: event.value.position,
        });
        return { kind: "other" };
      default:
        return { kind: "other" };
    }
  }

  protected override async releaseByToken(): Promise<boolean> {
    const release = create(LockService.method.release.input, { ...wireNames(this.name, this.names.slice(1)), token: this.token });
    const answer = await this.replicas.unary(LockService.method.release, release);
    return answer.released;
  }

  /** Gives the lock up (a `release` message, so the server frees it at once); resolves with
   * whether it was still held. */
  release(): Promise<boolean> {
    return this.letGo();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}
