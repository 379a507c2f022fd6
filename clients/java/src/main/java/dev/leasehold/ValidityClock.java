package dev.leasehold;

import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

/**
 * The validity a server last confirmed to a lease or a leadership, by this process's clock, and
 * the one timer that fires when it runs out. Leases and candidates share it. Not thread-safe: its
 * owner calls it holding its own lock, and asks {@link #ranOut()} when the timer fires, since it
 * may have been armed again meanwhile.
 */
final class ValidityClock {
  private final ScheduledExecutorService clock;
  private final Runnable onDeadline;
  private ScheduledFuture<?> deadline;
  private long validUntilNanos;

  ValidityClock(ScheduledExecutorService clock, Runnable onDeadline) {
    this.clock = clock;
    this.onDeadline = onDeadline;
  }

  /**
   * Until when ({@link System#nanoTime()}) a message received at {@code receivedNanos} vouches for
   * a lease or a leadership: {@code validForMs} (the proto's uint32 {@code valid_for_ms}) from its
   * receipt, and never past {@code validToMs} (uint64 {@code valid_to_ms}) after {@code
   * openedNanos}, when this client opened the stream. The server counts {@code valid_to_ms} from
   * when the stream reached it, which is later, so that bound still holds when the message was
   * held up on its way: a healed partition delivers old messages late, and one read as fresh would
   * keep its client believing past the key. {@code validToMs} 0: a server that predates it. A
   * result not after {@code receivedNanos} means the message came too late to vouch for anything.
   */
  static long vouchedUntil(long openedNanos, long receivedNanos, int validForMs, long validToMs) {
    long forNanos = TimeUnit.MILLISECONDS.toNanos(Integer.toUnsignedLong(validForMs));
    if (validToMs <= 0) { // 0: not sent; negative: a uint64 beyond any reach.
      return receivedNanos + forNanos;
    }
    // What the opening's bound leaves after receipt (toNanos saturates, so this cannot overflow).
    long sinceOpened = Math.max(0, receivedNanos - openedNanos);
    long toNanos = TimeUnit.MILLISECONDS.toNanos(validToMs) - sinceOpened;
    return receivedNanos + Math.min(forNanos, toNanos);
  }

  /** As {@link #vouchedUntil(long, long, int, long)} for a message received now. */
  static long vouchedUntil(long openedNanos, int validForMs, long validToMs) {
    return vouchedUntil(openedNanos, System.nanoTime(), validForMs, validToMs);
  }

  /** Whether {@code nanos} ({@link System#nanoTime()}) has come. */
  static boolean passed(long nanos) {
    return nanos - System.nanoTime() <= 0;
  }

  /**
   * The server vouched until {@code untilNanos} (see {@link #vouchedUntil}): the timer fires then,
   * not before (at once if that has passed).
   */
  void arm(long untilNanos) {
    validUntilNanos = untilNanos;
    stop();
    // Rounded up: a timer that fired early would find the validity not yet run out, and stop.
    long leftNanos = untilNanos - System.nanoTime();
    long delayMs = leftNanos <= 0 ? 0 : (leftNanos + 999_999) / 1_000_000;
    deadline = Resumption.schedule(clock, onDeadline, delayMs);
  }

  /** No more firing (the lease or leadership ended). */
  void stop() {
    deadline = Resumption.cancel(deadline);
  }

  /** The timer fired: whether the validity really ran out (false if armed again meanwhile). */
  boolean ranOut() {
    if (System.nanoTime() - validUntilNanos < 0) {
      return false;
    }
    deadline = null;
    return true;
  }

  /** When ({@link System#nanoTime()}) the validity last confirmed runs out. */
  long validUntilNanos() {
    return validUntilNanos;
  }
}
