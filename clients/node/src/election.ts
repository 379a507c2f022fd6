// Leader election: a candidate holds the election's lease on one Campaign stream.
import { create } from "@bufbuild/protobuf";
import {
  CampaignRequestSchema,
  ElectionService,
  type CampaignRequest,
  type CampaignResponse,
  type CampaignRequestSchema as Req,
  type CampaignResponseSchema as Res,
} from "./gen/leasehold/v1/election_pb.js";
import { LeaseLostError, lostReason } from "./errors.js";
import { follow } from "./follow.js";
import { Deferred, StreamHold, type Heard } from "./held.js";
import { Stream, type Replicas } from "./transport.js";
import { RELEASE_TIMEOUT_MS, tokenNumber } from "./validity.js";

export interface CampaignOptions {
  /** Time to live of the leadership lease in milliseconds (default 30 s). */
  ttl?: number;
  /** How long the leadership outlives a broken stream (default ttl; 0 with `resume: false`). */
  resumeGrace?: number;
  /** Resume the leadership on the next replica when the stream breaks (default true). */
  resume?: boolean;
  /** Leaves the line when it aborts (before being elected). */
  signal?: AbortSignal;
}

/** The leader of an election: its term (fencing token) and published value. */
export interface Leader {
  term: number;
  value: Uint8Array;
}

const bytes = (value: Uint8Array | string): Uint8Array =>
  typeof value === "string" ? new TextEncoder().encode(value) : value;

/**
 * A candidate in an election. `await candidate.elected()` waits in line and gives the term;
 * `signal` aborts when the leadership is lost; `resign()` (or leaving an `await using` block)
 * steps down.
 */
export class Candidate extends StreamHold<typeof Req, typeof Res> implements AsyncDisposable {
  private value: Uint8Array;
  private readonly ttl: number;
  private readonly grace: number;
  private proclaims: Deferred<void>[] = [];
  private covered: Deferred<void>[] = [];

  /** @internal Use `client.campaign(...)`. */
  constructor(
    replicas: Replicas,
    readonly election: string,
    value: Uint8Array | string,
    private readonly options: CampaignOptions,
  ) {
    const resume = options.resume ?? true;
    super(replicas, ElectionService.method.campaign, resume, "leadership");
    this.value = bytes(value);
    this.ttl = options.ttl ?? 30_000;
    this.grace = options.resumeGrace ?? (resume ? this.ttl : 0);
  }

  /** @internal */
  start(): this {
    this.begin(this.options.signal);
    return this;
  }

  /** The term once elected (undefined before). */
  get term(): number | undefined {
    return this.state === "starting" ? undefined : this.fencingToken || undefined;
  }

  /** Whether this candidate leads now, as far as it knows: elected, neither lost nor resigning,
   * and (with a resume grace, the default, under which its server confirms every renewal) the
   * validity last confirmed not yet run out by this process's clock; also while it resumes
   * within that validity. */
  get leading(): boolean {
    return this.believed();
  }

  /** Waits in line until this candidate leads; resolves with its term. */
  async elected(): Promise<number> {
    await this.first.promise;
    return this.fencingToken;
  }

  /** Publishes a new value while leading; resolves once it is published. */
  async proclaim(value: Uint8Array | string): Promise<void> {
    if (this.state !== "held" && this.state !== "resuming") {
      throw new Error(`election ${this.election}: not leading${this.lostReason ? ` (${this.lostReason})` : ""}`);
    }
    this.value = bytes(value);
    const done = new Deferred<void>();
    if (this.state === "held" && this.stream !== undefined) {
      this.proclaims.push(done);
      this.stream.send(create(CampaignRequestSchema, { action: { case: "proclaim", value: { value: this.value } } }));
    } else {
      this.covered.push(done); // the resume publishes it
    }
    return done.promise;
  }

  protected startRequest(resumeToken: string | undefined): CampaignRequest {
    return create(CampaignRequestSchema, {
      action: {
        case: "start",
        value: {
          election: this.election,
          value: this.value,
          ttlMs: this.ttl,
          resumeGraceMs: this.grace,
          resumeToken: resumeToken ?? "",
        },
      },
    });
  }

  protected stopRequest(): CampaignRequest {
    return create(CampaignRequestSchema, { action: { case: "resign", value: {} } });
  }

  protected hear(message: CampaignResponse): Heard {
    const event = message.event;
    switch (event.case) {
      case "elected":
        return {
          kind: "held",
          token: event.value.token,
          fencingToken: event.value.term,
          validForMs: event.value.validForMs,
          validToMs: event.value.validToMs,
        };
      case "extended":
        return { kind: "extended", validForMs: event.value.validForMs, validToMs: event.value.validToMs };
      case "lost":
        return { kind: "lost", reason: event.value.reason, code: lostReason(event.value.code) };
      case "resigned":
        return { kind: "done", wasHeld: event.value.wasLeader };
      case "proclaimed":
        this.proclaims.shift()?.resolve();
        return { kind: "other" };
      default:
        return { kind: "other" };
    }
  }

  protected override clocked(): boolean {
    return this.grace > 0; // without a grace the server sends no `extended`
  }

  /** Resigned between two streams (its stream broke, a resume was under way): takes the
   * leadership back with its token on a stream of its own and resigns there at once, so that
   * the server lets it go now rather than keep it for its grace. */
  protected override releaseByToken(): Promise<boolean> {
    return new Promise((resolve) => {
      let resigning = false;
      const stream: Stream<typeof Req, typeof Res> = new Stream(
        this.replicas,
        ElectionService.method.campaign,
        (message) => {
          const event = message.event;
          if (event.case === "elected" && !resigning) {
            resigning = true;
            stream.send(this.stopRequest());
            stream.end();
          } else if (event.case === "resigned") {
            resolve(event.value.wasLeader);
          } else if (event.case === "lost") {
            resolve(false);
          }
        },
        () => {
          clearTimeout(timer);
          resolve(false); // refused (gone by now, or not ours) or ended: settled if it resigned
        },
      );
      const timer = setTimeout(() => stream.cancel(), RELEASE_TIMEOUT_MS);
      stream.send(this.startRequest(this.token));
    });
  }

  protected override onResumed(): void {
    // The resumed stream published the latest value.
    for (const d of [...this.proclaims, ...this.covered]) d.resolve();
    this.proclaims = [];
    this.covered = [];
  }

  protected override onOver(): void {
    const error = new LeaseLostError(this.lostReason ?? "resigned", this.lostCode);
    for (const d of [...this.proclaims, ...this.covered]) d.reject(error);
    this.proclaims = [];
    this.covered = [];
  }

  /** Steps down (or leaves the line); resolves with whether it was leading. */
  resign(): Promise<boolean> {
    return this.letGo();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.resign();
  }
}

/** The leader of `election` now, or null. */
export async function leader(replicas: Replicas, election: string): Promise<Leader | null> {
  const answer = await replicas.unary(
    ElectionService.method.leader,
    create(ElectionService.method.leader.input, { election }),
  );
  return answer.hasLeader ? { term: tokenNumber(answer.term), value: answer.value } : null;
}

/**
 * The leader of `election` now (null for none), then every change, in order; follows the
 * election again on the next replica when the stream breaks. Leave the `for await` loop (or
 * abort `signal`) to stop.
 */
export function observe(replicas: Replicas, election: string, signal?: AbortSignal): AsyncGenerator<Leader | null, void, undefined> {
  return follow(
    replicas,
    ElectionService.method.observe,
    { election },
    (state): Leader | null => (state.hasLeader ? { term: tokenNumber(state.term), value: state.value } : null),
    (now) => (now === null ? "" : `${now.term}:${Buffer.from(now.value).toString("hex")}`),
    signal,
  );
}

/** Ends the leadership of `election` by force (of `term` only, if given): the revoked leader,
 * or null if none (or another term) led. */
export async function revokeLeader(replicas: Replicas, election: string, term = 0): Promise<Leader | null> {
  const answer = await replicas.unary(
    ElectionService.method.revoke,
    create(ElectionService.method.revoke.input, { election, term: BigInt(term) }),
  );
  return answer.revoked ? { term: tokenNumber(answer.term), value: answer.value } : null;
}
