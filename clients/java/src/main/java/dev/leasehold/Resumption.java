package dev.leasehold;

import io.grpc.ConnectivityState;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

/** What leases, candidates and sessions share to resume a broken stream on another server. */
final class Resumption {
  private static final long FIRST_BACKOFF_MS = 20;
  private static final long MAX_BACKOFF_MS = 500;

  private long backoffMs = FIRST_BACKOFF_MS;

  private Resumption() {}

  static Resumption start() {
    return new Resumption();
  }

  /**
   * Whether a stream that ended so (null: it ended without a last word) broke on the way rather
   * than being answered: the lease it held may live on, to be resumed elsewhere.
   */
  static boolean breaks(Status status) {
    if (status == null) {
      return true;
    }
    return switch (status.getCode()) {
      case UNAVAILABLE, UNKNOWN, INTERNAL, CANCELLED, DEADLINE_EXCEEDED -> true;
      default -> false;
    };
  }

  /** A status in words, with its cause (e.g. "Connection refused"); never holds a token. */
  static String describe(Status status) {
    if (status == null) {
      return "the server ended the stream";
    }
    StringBuilder text = new StringBuilder(status.getCode().toString());
    if (status.getDescription() != null) {
      text.append(": ").append(status.getDescription());
    }
    if (status.getCause() != null && status.getCause().getMessage() != null) {
      text.append(" (").append(status.getCause().getMessage()).append(')');
    }
    return text.toString();
  }

  /** The wait before the next attempt: 20 ms doubling to 500 ms, each drawn in [half, whole]. */
  long nextDelayMs() {
    long delay = backoffMs;
    backoffMs = Math.min(MAX_BACKOFF_MS, backoffMs * 2);
    return delay / 2 + ThreadLocalRandom.current().nextLong(delay / 2 + 1);
  }

  /**
   * Before an attempt: if no server answered lately, tries every server again now, not at the
   * channel's pace (its connect backoff grows to minutes).
   */
  static void wake(ManagedChannel channel) {
    if (channel.getState(false) == ConnectivityState.TRANSIENT_FAILURE) {
      channel.resetConnectBackoff();
    }
  }

  /** Cancels {@code timer} if there is one; null, for the field that held it. */
  static ScheduledFuture<?> cancel(ScheduledFuture<?> timer) {
    if (timer != null) {
      timer.cancel(false);
    }
    return null;
  }

  /** Runs {@code task} after {@code delayMs}; null if the clock is shut down (client closed). */
  static ScheduledFuture<?> schedule(ScheduledExecutorService clock, Runnable task, long delayMs) {
    try {
      return clock.schedule(task, Math.max(0, delayMs), TimeUnit.MILLISECONDS);
    } catch (RejectedExecutionException e) {
      return null;
    }
  }
}
