// What a lease and a leadership share: one stream that holds it, validity by this process's own
// clock, a signal that aborts when it is lost, resumption on the next replica when the stream
// breaks, and one place (`over`) where every way out ends.
import type { DescMessage, DescMethod, MessageShape } from "@bufbuild/protobuf";
import { Code, LeaseLostError, LeaseholdError, StaleError, describe, lostReasonOf, toError, transient, type LostReason } from "./errors.js";
import { Stream, type Replicas } from "./transport.js";
import { FIRST_BACKOFF_MS, MAX_BACKOFF_MS, MAX_HOLD, RELEASE_TIMEOUT_MS, SILENT, ceilingOf, jitter, now, tokenNumber, vouchedUntil } from "./validity.js";

/** What a message on the stream means. */
export type Heard =
  | {
      kind: "held";
      token: string;
      fencingToken: bigint;
      validForMs: number;
      validToMs: bigint;
      /** Why this answer cannot be believed (not what was asked for), if it cannot. */
      refused?: string;
    }
  | { kind: "extended"; validForMs: number; validToMs: bigint }
  | { kind: "lost"; reason: string; code: LostReason }
  | { kind: "done"; wasHeld: boolean }
  | { kind: "other" };

type State = "starting" | "held" | "resuming" | "over";

/** A deferred promise. */
export class Deferred<T> {
  readonly promise: Promise<T>;
  resolve!: (value: T) => void;
  reject!: (error: unknown) => void;
  settled = false;
  constructor() {
    this.promise = new Promise<T>((resolve, reject) => {
      this.resolve = (v) => {
        this.settled = true;
        resolve(v);
      };
      this.reject = (e) => {
        this.settled = true;
        reject(e);
      };
    });
    this.promise.catch(() => {}); // a rejection nobody awaits is not a crash
  }
}

/** Validity and loss, shared by every kind of held thing (also a session's leases). */
export class Belief {
  private readonly controller = new AbortController();
  private reasonText: string | undefined;
  private reasonCode: LostReason | undefined;
  /** Until when the server last vouched for it, on this process's clock (`performance.now()`). */
  validUntil = 0;

  /** Aborts when it is lost (the server said so, or the validity ran out by this process's
   * clock); its reason is a LeaseLostError. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }
  get lost(): boolean {
    return this.controller.signal.aborted;
  }
  /** Why it was lost; undefined while it is not. */
  get lostReason(): string | undefined {
    return this.reasonText;
  }
  /** Why it was lost, for programs ("taken", "unreachable", "shutdown", "revoked", "unknown");
   * undefined while it is not. */
  get lostCode(): LostReason | undefined {
    return this.reasonCode;
  }
  /** Resolves with the reason once it is lost. */
  whenLost(): Promise<string> {
    if (this.lost) return Promise.resolve(this.reasonText!);
    return new Promise((resolve) =>
      this.signal.addEventListener("abort", () => resolve(this.reasonText!), { once: true }),
    );
  }
  /** @internal */
  markLost(reason: string, code: LostReason): boolean {
    if (this.lost) return false;
    this.reasonText = reason;
    this.reasonCode = code;
    this.controller.abort(new LeaseLostError(reason, code));
    return true;
  }
}

export abstract class StreamHold<I extends DescMessage, O extends DescMessage> extends Belief {
  /** The secret of this acquisition (also its resume token). */
  token = "";
  /** Its fencing token (a leadership's term). */
  fencingToken = 0;
  /** How many times it was taken back on a new stream after its stream broke. */
  resumes = 0;

  protected state: State = "starting";
  protected stream: Stream<I, O> | undefined;
  protected releasing = false;
  protected wasHeld = false;
  protected readonly first = new Deferred<void>();
  private readonly finished = new Deferred<void>();
  private timer: NodeJS.Timeout | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private backoff = FIRST_BACKOFF_MS;
  private lastError: Error | null = null;
  private tried = 0;
  /** The max hold asked for (0: none), and when the hold ends by it on this process's clock. */
  protected maxHold = 0;
  private ceiling = Infinity;
  /** How long a hold lost to its max hold keeps its stream for the server's own word (the
   * server keeps the key until its TTL runs out) before it is released anyway. */
  protected linger = RELEASE_TIMEOUT_MS;

  constructor(
    protected readonly replicas: Replicas,
    private readonly method: DescMethod & { input: I; output: O },
    protected readonly resume: boolean,
    private readonly what: string,
  ) {
    super();
  }

  protected abstract startRequest(resumeToken: string | undefined): MessageShape<I>;
  protected abstract stopRequest(): MessageShape<I>;
  protected abstract hear(message: MessageShape<O>): Heard;
  protected onOther(_message: MessageShape<O>): void {}
  /** Held again on a new stream. */
  protected onResumed(): void {}
  /** Over: every waiter of a subclass is answered. */
  protected onOver(): void {}
  /** Whether the server confirms each renewal (`extended`), so that this process's clock can
   * end the belief when they stop; without (a campaign with no resume grace) the server alone
   * watches it. */
  protected clocked(): boolean {
    return true;
  }
  /** Lets go by the token without a stream (between two streams); whether it was held. */
  protected async releaseByToken(): Promise<boolean> {
    return false;
  }

  /** Opens the first stream; `first` settles when it is held (or cannot be). */
  protected begin(signal?: AbortSignal): void {
    if (signal?.aborted) {
      this.first.reject(signal.reason);
      this.over();
      return;
    }
    signal?.addEventListener(
      "abort",
      () => {
        if (this.state === "starting") {
          this.first.reject(signal.reason);
          this.stream?.cancel();
          this.over();
        }
      },
      { once: true },
    );
    this.open(undefined);
  }

  private open(resumeToken: string | undefined): void {
    const stream: Stream<I, O> = new Stream(
      this.replicas,
      this.method,
      (m) => this.message(stream, m),
      (e) => this.ended(stream, e),
    );
    this.stream = stream;
    stream.send(this.startRequest(resumeToken));
  }

  private message(stream: Stream<I, O>, message: MessageShape<O>): void {
    if (stream !== this.stream || this.state === "over") return;
    const heard = this.hear(message);
    const received = now();
    switch (heard.kind) {
      case "held": {
        if (this.state === "starting") this.ceiling = ceilingOf(stream.opened, this.maxHold);
        const until = vouchedUntil(stream.opened, received, heard.validForMs, heard.validToMs, this.ceiling);
        if (this.state === "starting") {
          if (heard.refused !== undefined) {
            // Held, but not what was asked for (a server that ignored more names): let it go.
            this.sendStop(stream);
            setTimeout(() => stream.cancel(), 1000).unref();
            this.first.reject(new LeaseholdError(Code.UNIMPLEMENTED, heard.refused));
            this.over();
            return;
          }
          if (until <= received) {
            // Held up on its way: it may be someone else's by now. The cancelled stream lets
            // go of it (or keeps it only for its grace).
            stream.cancel();
            this.first.reject(new StaleError(this.what === "lease" ? "acquired" : "elected"));
            this.over();
            return;
          }
          this.token = heard.token;
          this.fencingToken = tokenNumber(heard.fencingToken);
          this.state = "held";
          this.vouch(until);
          this.first.resolve();
          return;
        }
        if (this.state === "resuming") {
          let mismatch: [string, LostReason] | undefined;
          if (heard.token !== this.token || tokenNumber(heard.fencingToken) !== this.fencingToken) {
            mismatch = [`resumed with fencing token ${heard.fencingToken} instead of ${this.fencingToken}`, "taken"];
          } else if (heard.refused !== undefined) {
            mismatch = [`resumed, but ${heard.refused}`, "taken"];
          } else if (until <= received) {
            mismatch = ["could not resume: the news arrived after its validity had run out", "unreachable"];
          }
          if (mismatch !== undefined) {
            stream.cancel();
            this.lose(...mismatch);
            return;
          }
          this.state = "held";
          this.resumes++;
          this.backoff = FIRST_BACKOFF_MS;
          this.vouch(until);
          this.onResumed();
          if (this.releasing) this.sendStop(stream);
        }
        return;
      }
      case "extended":
        if (this.state === "held") this.vouch(vouchedUntil(stream.opened, received, heard.validForMs, heard.validToMs, this.ceiling));
        return;
      case "lost":
        if (this.state === "starting") this.first.reject(new LeaseLostError(heard.reason, heard.code));
        this.lose(heard.reason, heard.code);
        return;
      case "done":
        this.wasHeld = heard.wasHeld;
        this.over();
        return;
      case "other":
        this.onOther(message);
    }
  }

  private ended(stream: Stream<I, O>, error: Error | null): void {
    if (stream !== this.stream) return;
    this.stream = undefined;
    if (this.state === "over") return;
    switch (this.state) {
      case "starting": {
        // A replica that cannot be reached, or that goes away while this waits (a server
        // draining): the next one, once each; a waiter joins the line there anew (as the other
        // clients do), within what is left of its wait.
        const moved = error instanceof LeaseholdError && error.code === Code.UNAVAILABLE;
        if (moved && ++this.tried < this.replicas.addresses.length) {
          this.replicas.failover(stream.index);
          this.open(undefined);
          return;
        }
        this.first.reject(error ?? new Error(`${this.what}: the server ended the stream`));
        this.over();
        return;
      }
      case "held":
        if (this.releasing) {
          if (transient(error)) {
            // Its release may never have arrived: release by the token.
            this.state = "resuming";
            void this.releaseBetweenStreams();
          } else this.over();
          return;
        }
        if (!this.resume || !transient(error)) {
          this.lose(`${this.what} stream ended: ${describe(error)}`, lostReasonOf(error));
          return;
        }
        this.state = "resuming";
        this.lastError = error;
        this.replicas.failover(stream.index);
        this.attempt();
        return;
      case "resuming":
        if (!transient(error)) {
          this.lose(`could not resume the ${this.what}: ${describe(error)}`, lostReasonOf(error));
          return;
        }
        this.lastError = error;
        this.replicas.failover(stream.index);
        if (this.releasing) {
          void this.releaseBetweenStreams();
          return;
        }
        this.retryTimer = setTimeout(() => this.attempt(), Math.max(0, Math.min(jitter(this.backoff), this.validUntil - now())));
        this.backoff = Math.min(2 * this.backoff, MAX_BACKOFF_MS);
    }
  }

  /** One attempt to resume on the current replica. */
  private attempt(): void {
    this.retryTimer = undefined;
    if (this.state !== "resuming" || this.releasing) return;
    if (now() >= this.validUntil) {
      this.lose(this.tooLate(), "unreachable");
      return;
    }
    this.open(this.token);
  }

  private tooLate(): string {
    return `could not resume before the ${this.what}'s validity ran out: ${describe(this.lastError)}`;
  }

  protected vouch(until: number): void {
    this.validUntil = until;
    clearTimeout(this.timer);
    if (!this.clocked()) return; // no `extended` will follow: a timer would end it falsely
    this.timer = setTimeout(() => this.expire(), Math.max(0, until - now()));
  }

  /** Whether it is held now, as far as this process knows: held (or being resumed), not lost,
   * not being let go, and the validity last confirmed not yet run out by this process's clock.
   * The clock is read here, not only by the timer that ends it: a process woken from a freeze
   * that outlasted the validity answers false at once, before that timer has run. */
  protected believed(): boolean {
    if ((this.state !== "held" && this.state !== "resuming") || this.lost || this.releasing) return false;
    return !this.clocked() || now() < this.validUntil;
  }

  private expire(): void {
    if (this.state === "over") return;
    if (now() < this.validUntil) {
      this.vouch(this.validUntil);
      return;
    }
    if (now() >= this.ceiling) this.lose(MAX_HOLD, "max_hold");
    else this.lose(this.state === "resuming" ? this.tooLate() : SILENT.replace("lease", this.what), "unreachable");
  }

  /** Lost: the signal aborts, and whatever stream is left is let go. */
  protected lose(reason: string, code: LostReason): void {
    this.markLost(reason, code);
    const stream = this.stream;
    if (stream !== undefined && !stream.done) {
      // The server may still hold it (frozen, cut off): ask it to let go, then hang up. Not at
      // a max hold: the server keeps the key until its TTL runs out, so that a job still
      // writing is not overlapped by the next holder; its own `lost` ends the stream.
      const letGo = () => {
        if (stream.done) return;
        this.sendStop(stream);
        setTimeout(() => stream.cancel(), 1000).unref();
      };
      if (code === "max_hold") setTimeout(letGo, this.linger).unref();
      else letGo();
    }
    this.over();
  }

  protected sendStop(stream: Stream<I, O>): void {
    stream.send(this.stopRequest());
    stream.end();
  }

  protected over(): void {
    if (this.state === "over") return;
    this.state = "over";
    clearTimeout(this.timer);
    clearTimeout(this.retryTimer);
    if (!this.first.settled) this.first.reject(new LeaseLostError(this.lostReason ?? `${this.what} ended`, this.lostCode));
    this.onOver();
    this.finished.resolve();
  }

  private async releaseBetweenStreams(): Promise<void> {
    this.stream?.cancel();
    this.stream = undefined;
    clearTimeout(this.retryTimer);
    try {
      this.wasHeld = await this.releaseByToken();
    } catch {
      this.wasHeld = false; // it expires by itself
    }
    this.over();
  }

  /** Lets it go: a `release` (or `resign`) on its stream, or by the token between two streams.
   * Resolves with whether it was still held. */
  protected async letGo(): Promise<boolean> {
    if (this.state !== "over" && !this.releasing) {
      this.releasing = true;
      if (this.state === "held" && this.stream !== undefined) {
        this.sendStop(this.stream);
      } else if (this.state === "resuming") {
        void this.releaseBetweenStreams();
      } else {
        this.stream?.cancel();
      }
      const timeout = setTimeout(() => {
        this.stream?.cancel(); // a cancelled stream is let go by its server
        this.over();
      }, RELEASE_TIMEOUT_MS + 5000);
      await this.finished.promise;
      clearTimeout(timeout);
    }
    await this.finished.promise;
    return this.wasHeld && !this.lost;
  }

  /** Resolves once it is over (released, or lost and let go). */
  get done(): Promise<void> {
    return this.finished.promise;
  }
}

export { toError };
