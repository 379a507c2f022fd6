package dev.leasehold;

import io.grpc.Status;

/**
 * Why a lease, a leadership or a session was lost, for programs: the server's {@code Lost.code}
 * (and {@code SessionLeaseLost.code}), or what the client itself found. The text that comes with
 * it ({@code lost()}'s value) is for people; branch on this instead. Read with {@code lostCode()}
 * on a {@link Lease}, {@link Candidate}, {@link SessionLease}, {@link SessionCandidate} or {@link
 * Session}: it is set before {@code lost()} completes, so a callback on that future can read it.
 */
public enum LostReason {
  /**
   * Someone else has it now, or may: its key was deleted, expired, or holds another holder's
   * token, or (resuming) the server no longer knows it.
   */
  TAKEN,
  /**
   * No renewal could be confirmed before it ran out: Redis or every server unreachable or too
   * slow, a frozen server (this process's clock ran the validity out), or no way to resume it (the
   * client was closed meanwhile).
   */
  UNREACHABLE,
  /** The server shut down and the lease had no resume grace to be taken back with. */
  SHUTDOWN,
  /**
   * An operator ended it ({@link LeaseholdClient#revoke}, {@link LeaseholdClient#revokeLeader},
   * {@code leasehold revoke}): it is not resumed, and the next waiter has it with a larger fencing
   * token.
   */
  REVOKED,
  /**
   * It reached the {@code maxHold} it was acquired with: the server stopped renewing it (its key
   * may hold until its TTL runs out) and the client stopped believing, at the latest when its
   * acquire was sent plus the max hold. Final: it is not resumed.
   */
  MAX_HOLD,
  /** A server that predates the code, a code this client does not know, or a refusal. */
  UNKNOWN;

  /** The server's code; {@link #UNKNOWN} for none (an older server) or one added since. */
  static LostReason of(leasehold.v1.Lock.LostReason code) {
    return switch (code) {
      case LOST_REASON_TAKEN -> TAKEN;
      case LOST_REASON_UNREACHABLE -> UNREACHABLE;
      case LOST_REASON_SHUTDOWN -> SHUTDOWN;
      case LOST_REASON_REVOKED -> REVOKED;
      case LOST_REASON_MAX_HOLD -> MAX_HOLD;
      case LOST_REASON_UNSPECIFIED, UNRECOGNIZED -> UNKNOWN;
    };
  }

  /**
   * Why a stream that ended with {@code status} (null: ended by the server without a word) lost
   * what it held: NOT_FOUND (resuming a lease the server no longer has) is {@link #TAKEN}; a break
   * {@link #UNREACHABLE}; any other refusal {@link #UNKNOWN}.
   */
  static LostReason ofStatus(Status status) {
    if (status != null && status.getCode() == Status.Code.NOT_FOUND) {
      return TAKEN;
    }
    return status == null || Resumption.breaks(status) ? UNREACHABLE : UNKNOWN;
  }
}
