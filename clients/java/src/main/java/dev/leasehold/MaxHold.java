package dev.leasehold;

import java.util.concurrent.TimeUnit;

/**
 * The ceiling a {@code max_hold} puts on a held lease, by this process's clock: the moment its
 * acquire was sent plus the max hold. The server stops renewing at its own ceiling, counted from
 * the acquisition (later than the send), so a validity capped here never reaches past the
 * server's: whatever the server vouches, the client stops believing at this ceiling, and a loss
 * there is {@link LostReason#MAX_HOLD}, final (no resume can outlive it). Immutable; {@link #NONE}
 * for a lease without one.
 */
record MaxHold(boolean set, long ceilingNanos) {
  static final MaxHold NONE = new MaxHold(false, 0);

  /** Why a lease that reached its ceiling is lost, in words. */
  static final String REACHED = "the lease reached its max hold: it is not renewed past it";

  /**
   * The ceiling of a lease whose acquire was sent at {@code sentNanos} ({@link System#nanoTime()})
   * with {@code maxHoldMs} (the proto's uint32 {@code max_hold_ms}; 0: none).
   */
  static MaxHold of(long sentNanos, int maxHoldMs) {
    if (maxHoldMs == 0) {
      return NONE;
    }
    return new MaxHold(true,
        sentNanos + TimeUnit.MILLISECONDS.toNanos(Integer.toUnsignedLong(maxHoldMs)));
  }

  /** {@code untilNanos}, a validity the server vouched for, never past the ceiling. */
  long cap(long untilNanos) {
    return set && untilNanos - ceilingNanos > 0 ? ceilingNanos : untilNanos;
  }

  /** Whether a validity that ends at {@code untilNanos} ends at (or past) the ceiling. */
  boolean reachedBy(long untilNanos) {
    return set && untilNanos - ceilingNanos >= 0;
  }
}
