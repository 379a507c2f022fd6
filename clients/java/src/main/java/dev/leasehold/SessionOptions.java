package dev.leasehold;

import java.time.Duration;
import leasehold.v1.Session.SessionOpen;

/**
 * Options of a {@link Session}, shared by every lease on it: finish with {@link
 * LeaseholdClient#session(SessionOptions)}.
 *
 * <p>By default a session lives 30 s without renewal (its TTL), is kept that long after its
 * stream breaks (its resume grace), and resumes on its own on another server.
 */
public final class SessionOptions {
  private Duration ttl = Duration.ofSeconds(30);
  private Duration resumeGrace;
  private String holder = "";
  private boolean noResume;

  /** The defaults: TTL 30 s, resume grace the TTL, no holder description, auto-resume on. */
  public SessionOptions() {}

  /**
   * How long every lease of the session outlives this process if it dies with its server
   * (default 30 s; the server accepts 100 ms to 1 h). The server renews them all every third of
   * it (or of the resume grace, if shorter).
   */
  public SessionOptions ttl(Duration ttl) {
    this.ttl = Lease.positive(ttl, "ttl");
    return this;
  }

  /**
   * How long the session's leases outlive a broken stream or their server's shutdown, so the
   * session can take them back on another server (at most the TTL; default: the TTL). The
   * session resumes until then, and each lease until the validity its server last confirmed runs
   * out.
   */
  public SessionOptions resumeGrace(Duration grace) {
    this.resumeGrace = Lease.positive(grace, "resume grace");
    return this;
  }

  /** How others see the holder of every lock taken on the session that names none of its own. */
  public SessionOptions holder(String holder) {
    this.holder = holder == null ? "" : holder;
    return this;
  }

  /**
   * No resume grace and no resumption: when the stream breaks, the server releases every lease
   * and the whole session is lost ({@link Session#lost()}).
   */
  public SessionOptions noResume() {
    this.noResume = true;
    return this;
  }

  /** Whether the session resumes on its own (it has a grace to resume within). */
  boolean autoResume() {
    return !noResume && graceMs() > 0;
  }

  int ttlMs() {
    return (int) Math.min(Integer.MAX_VALUE, ttl.toMillis());
  }

  int graceMs() {
    if (noResume) {
      return 0;
    }
    return resumeGrace == null
        ? ttlMs()
        : (int) Math.min(Integer.MAX_VALUE, resumeGrace.toMillis());
  }

  SessionOpen toOpen() {
    return SessionOpen.newBuilder()
        .setTtlMs(ttlMs())
        .setResumeGraceMs(graceMs())
        .setHolder(holder)
        .build();
  }
}
