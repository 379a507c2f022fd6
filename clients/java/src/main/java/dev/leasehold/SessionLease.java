package dev.leasehold;

import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;

/**
 * A lock (a permit, a shared hold) held on a {@link Session}: released on {@link #close()}, or with
 * the session. {@link #lost()} completes if it is lost without being released: the server says so
 * (its key was deleted or taken), no confirmation of the session came before its validity ran out
 * by this process's clock, it could not be resumed after a break, or the whole session was lost.
 */
public final class SessionLease implements AutoCloseable {
  private final SessionMember member;

  SessionLease(SessionMember member) {
    this.member = member;
  }

  /** The lock's name. */
  public String name() {
    return member.name;
  }

  /** The fencing token of this acquisition: pass it to the resource the lock protects. */
  public long fencingToken() {
    synchronized (member.lock()) {
      return member.fencingToken;
    }
  }

  /**
   * Each name's fencing token, in the order asked (its name first, then {@link
   * Session.AcquireOptions#names}): unmodifiable. {@link #fencingToken()} is the first's.
   */
  public Map<String, Long> fences() {
    synchronized (member.lock()) {
      return member.fences;
    }
  }

  /** The acquisition's secret (also its resume token). Never log it. */
  public String token() {
    synchronized (member.lock()) {
      return member.token;
    }
  }

  /** Whether the lock is known to be lost already. */
  public boolean isLost() {
    return member.lost.isDone();
  }

  /** Why the lock was lost, once it is, in words. */
  public Optional<String> lostReason() {
    return Optional.ofNullable(member.lost.getNow(null));
  }

  /**
   * Why the lock was lost, for programs, once it is (set before {@link #lost()} completes):
   * {@link LostReason#REVOKED} if an operator revoked it. Empty while it is not lost.
   */
  public Optional<LostReason> lostCode() {
    synchronized (member.lock()) {
      return Optional.ofNullable(member.lostCode);
    }
  }

  /** Completes with the reason once the lock is lost; never completes if released first. */
  public CompletableFuture<String> lost() {
    return member.lost;
  }

  /**
   * Releases the lock and waits for the server (bounded); {@code true} if it was still held.
   * Between streams it is first taken back, then released.
   */
  public boolean release() {
    return member.release();
  }

  @Override
  public void close() {
    release();
  }

  /** Whether the session's current stream holds the lease now (not lost, not between streams). */
  boolean attached() {
    return member.attached();
  }

  /** How many times this lease was resumed on a new stream. */
  int resumes() {
    synchronized (member.lock()) {
      return member.resumes;
    }
  }

  @Override
  public String toString() {
    return "SessionLease[" + member.name + ", fencing token " + fencingToken() + "]";
  }
}
