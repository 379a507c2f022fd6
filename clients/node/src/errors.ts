// Errors: every status the server answers becomes a LeaseholdError whose fields come from the
// status details (google.rpc.ErrorInfo, google.rpc.RetryInfo in grpc-status-details-bin), never
// from the message, which may be reworded (docs/errors.md).
import { fromBinary } from "@bufbuild/protobuf";
import { anyIs, anyUnpack } from "@bufbuild/protobuf/wkt";
import { status as Code, type Metadata, type ServiceError } from "@grpc/grpc-js";
import { ErrorInfoSchema, RetryInfoSchema } from "./gen/google/rpc/error_details_pb.js";
import { StatusSchema, type Status } from "./gen/google/rpc/status_pb.js";
import { LostReason as LostCode } from "./gen/leasehold/v1/lock_pb.js";

export { Code };

/** The domain of the google.rpc.ErrorInfo the server attaches to every error. */
export const ERROR_DOMAIN = "leasehold";

/** A status the server (or the transport) ended a call with, and its details as fields. */
export class LeaseholdError extends Error {
  /** The gRPC status code (`Code.ABORTED`, `Code.NOT_FOUND`, ...). */
  readonly code: Code;
  /** The status message, for people. */
  readonly details: string;
  /** The ErrorInfo reason: LOCK_HELD, WAIT_EXPIRED, LIMIT_MISMATCH, ... ("" without details). */
  readonly reason: string;
  /** The ErrorInfo metadata (all strings): "lock", "holder", "waited_ms", ... */
  readonly metadata: Readonly<Record<string, string>>;
  /** The holder of the lock (metadata "holder"), for LOCK_HELD and WAIT_EXPIRED. */
  readonly holder: string | undefined;
  /** RetryInfo: milliseconds after which a retry is worth it (the holder's remaining TTL for a
   * taken lock); undefined when the server gave none. */
  readonly retryAfter: number | undefined;

  constructor(code: Code, details: string, status?: Status) {
    super(`${Code[code] ?? code}: ${details}`);
    this.name = "LeaseholdError";
    this.code = code;
    this.details = details;
    let reason = "";
    let metadata: Record<string, string> = {};
    let retryAfter: number | undefined;
    for (const detail of status?.details ?? []) {
      if (anyIs(detail, ErrorInfoSchema)) {
        const info = anyUnpack(detail, ErrorInfoSchema);
        if (info && info.domain === ERROR_DOMAIN && reason === "") {
          reason = info.reason;
          metadata = { ...info.metadata };
        }
      } else if (anyIs(detail, RetryInfoSchema)) {
        const delay = anyUnpack(detail, RetryInfoSchema)?.retryDelay;
        if (delay) retryAfter = Math.max(0, Number(delay.seconds) * 1000 + delay.nanos / 1e6);
      }
    }
    this.reason = reason;
    this.metadata = metadata;
    this.holder = metadata["holder"];
    this.retryAfter = retryAfter;
  }
}

/** The lock stayed taken (ABORTED: LOCK_HELD with no wait, WAIT_EXPIRED, NO_MAJORITY). */
export class NotAcquiredError extends LeaseholdError {
  constructor(code: Code, details: string, status?: Status) {
    super(code, details, status);
    this.name = "NotAcquiredError";
    this.message = `lock not acquired: ${details}`;
  }
}

/**
 * Why a lease (a leadership, a session) was lost, for programs (`Lost.code`):
 * - `"taken"`: its key was deleted, expired or taken by another holder (also: a resume found it
 *   gone, or held with another fencing token);
 * - `"unreachable"`: no renewal could be confirmed before it ran out (Redis or the server
 *   unreachable, a server silent or frozen, a stream that broke and could not be resumed in time);
 * - `"shutdown"`: its server shut down and it had no resume grace;
 * - `"revoked"`: an operator revoked it (`client.revoke`, `client.revokeLeader`);
 * - `"max_hold"`: it reached the `maxHold` it was taken with (the server stopped renewing it, or
 *   this process's clock reached the ceiling first); final, never resumed: stop work now;
 * - `"unknown"`: a server that predates the code, or a refusal the client cannot place.
 */
export type LostReason = "taken" | "unreachable" | "shutdown" | "revoked" | "max_hold" | "unknown";

/** The wire's LostReason as this package's. */
export function lostReason(code: LostCode): LostReason {
  switch (code) {
    case LostCode.TAKEN:
      return "taken";
    case LostCode.UNREACHABLE:
      return "unreachable";
    case LostCode.SHUTDOWN:
      return "shutdown";
    case LostCode.REVOKED:
      return "revoked";
    case LostCode.MAX_HOLD:
      return "max_hold";
    default:
      return "unknown";
  }
}

/** Why a stream that ended with `error` loses what it held: a break is "unreachable", a lease
 * the server no longer has (NOT_FOUND on resume) "taken", any other refusal "unknown". */
export function lostReasonOf(error: Error | null): LostReason {
  if (transient(error)) return "unreachable";
  return error instanceof LeaseholdError && error.code === Code.NOT_FOUND ? "taken" : "unknown";
}

/** A lease (or leadership, or session) is no longer ours: the reason of an AbortSignal. */
export class LeaseLostError extends Error {
  constructor(
    /** Why, in words. */
    readonly reason: string,
    /** Why, for programs. */
    readonly code: LostReason = "unknown",
  ) {
    super(`lease lost: ${reason}`);
    this.name = "LeaseLostError";
  }
}

/** An `acquired` or `elected` that arrived after the validity it gave had run out (held up on
 * its way): no lease, since the lock may be someone else's by now. */
export class StaleError extends Error {
  constructor(what: string) {
    super(`${what}, but the news arrived after its validity had run out`);
    this.name = "StaleError";
  }
}

/** The session was closed before the call could be answered. */
export class SessionClosedError extends Error {
  constructor() {
    super("session closed");
    this.name = "SessionClosedError";
  }
}

/** A status (code, message, serialized google.rpc.Status) as this package's error. */
export function statusError(code: Code, details: string, status?: Status): LeaseholdError {
  return code === Code.ABORTED
    ? new NotAcquiredError(code, details, status)
    : new LeaseholdError(code, details, status);
}

function detailsOf(metadata: Metadata | undefined): Status | undefined {
  const raw = metadata?.get("grpc-status-details-bin")[0];
  if (raw === undefined || typeof raw === "string") return undefined;
  try {
    return fromBinary(StatusSchema, raw);
  } catch {
    return undefined;
  }
}

/** A grpc-js error (a ServiceError, or anything else thrown) as this package's error. */
export function toError(error: unknown): Error {
  if (error instanceof LeaseholdError) return error;
  const e = error as Partial<ServiceError> | undefined;
  if (e && typeof e.code === "number") {
    return statusError(e.code, e.details ?? String(e.message), detailsOf(e.metadata));
  }
  return error instanceof Error ? error : new Error(String(error));
}

/** A session's `failed`: its code and message, and the serialized google.rpc.Status. */
export function failedError(code: number, message: string, status: Uint8Array): LeaseholdError {
  let parsed: Status | undefined;
  if (status.length > 0) {
    try {
      parsed = fromBinary(StatusSchema, status);
    } catch {
      parsed = undefined;
    }
  }
  return statusError(code === 0 ? Code.UNKNOWN : code, message, parsed);
}

/** A break worth resuming after (the transport failed, the server went away), as opposed to
 * the server's answer (NOT_FOUND, PERMISSION_DENIED, ...). */
export function transient(error: Error | null): boolean {
  if (error === null) return true; // the stream ended without its last word
  if (!(error instanceof LeaseholdError)) return false;
  switch (error.code) {
    case Code.UNAVAILABLE:
    case Code.UNKNOWN:
    case Code.INTERNAL:
    case Code.CANCELLED:
    case Code.DEADLINE_EXCEEDED:
      return true;
    default:
      return false;
  }
}

/** An error in words, for a lost reason. */
export function describe(error: Error | null): string {
  if (error === null) return "the stream ended";
  return error instanceof LeaseholdError ? error.message : String(error.message);
}
