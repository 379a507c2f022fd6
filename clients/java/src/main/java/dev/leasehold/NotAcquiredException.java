package dev.leasehold;

import java.time.Duration;
import java.util.Map;
import java.util.Optional;

/**
 * The lock was taken (status ABORTED): at once when the lease did not wait, or for the whole wait.
 * The message is for people; a program reads {@link #reason()}, {@link #holder()}, {@link
 * #retryAfter()} and {@link #metadata()}, which the server sends as gRPC's standard error details
 * (docs/errors.md), so nothing here depends on the message's wording.
 */
public final class NotAcquiredException extends Exception {
  private static final long serialVersionUID = 1L;

  private final String reason;
  private final String holder;
  private final Duration retryAfter;
  private final Map<String, String> metadata;

  /** A refusal known only by its message (no details: reason and holder empty, no retry delay). */
  public NotAcquiredException(String message) {
    this(message, "", "", null, Map.of());
  }

  /**
   * A refusal with the server's details: {@code retryAfter} null when the server gave no delay.
   */
  public NotAcquiredException(String message, String reason, String holder, Duration retryAfter,
      Map<String, String> metadata) {
    super(message);
    this.reason = reason == null ? "" : reason;
    this.holder = holder == null ? "" : holder;
    this.retryAfter = retryAfter;
    this.metadata = metadata == null ? Map.of() : Map.copyOf(metadata);
  }

  /**
   * Why: {@code LOCK_HELD} (taken, and the lease did not wait), {@code WAIT_EXPIRED} (taken for the
   * whole wait) or {@code NO_MAJORITY} (Redlock: contenders split the primaries). Empty when the
   * server sent no details (a server older than them).
   */
  public String reason() {
    return reason;
  }

  /** The holder's description as it gave it (empty if it gave none, or the server did not say). */
  public String holder() {
    return holder;
  }

  /**
   * When a retry is worth it: for a taken lock, the holder's remaining TTL (the earliest it can
   * free on its own). Empty when the server gave no delay: the key has no expiry, the lock is free
   * but others are ahead in line, or the server sent no details.
   */
  public Optional<Duration> retryAfter() {
    return Optional.ofNullable(retryAfter);
  }

  /**
   * Every named value the server sent, all strings: {@code lock} and {@code holder}, and {@code
   * waited_ms} for {@code WAIT_EXPIRED}. Unmodifiable; empty without details.
   */
  public Map<String, String> metadata() {
    return metadata;
  }
}
