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

  /** The server vouched for {@code validForMs} from now: the timer fires then, not before. */
  void arm(long validForMs) {
    validUntilNanos = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(validForMs);
    stop();
    deadline = Resumption.schedule(clock, onDeadline, validForMs);
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
