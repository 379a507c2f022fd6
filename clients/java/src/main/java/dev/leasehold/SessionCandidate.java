package dev.leasehold;

import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * A candidacy in an election, run on a {@link Session}: it waits in line as long as the session
 * lives, then leads. {@link #close()} steps down (or leaves the line), as closing the session
 * does. {@link #lost()} completes if the leadership ends without stepping down: the server says
 * so, no confirmation of the session came before its validity ran out, it could not be resumed
 * after a break, or the whole session was lost.
 */
public final class SessionCandidate implements AutoCloseable {
  private final SessionMember member;
  private final CompletableFuture<Long> elected = new CompletableFuture<>();

  SessionCandidate(SessionMember member) {
    this.member = member;
    member.acquired.whenComplete((ok, error) -> {
      if (error != null) {
        elected.completeExceptionally(error);
      } else {
        elected.complete(term());
      }
    });
  }

  /** The election's name. */
  public String election() {
    return member.name;
  }

  /** Completes with the term once this candidate leads; fails if the candidacy ends first. */
  public CompletableFuture<Long> elected() {
    return elected;
  }

  /** Waits in line until this candidate leads; returns its term (the leadership's fencing token). */
  public long awaitElected(Duration timeout) throws TimeoutException, InterruptedException {
    try {
      return elected.get(timeout.toMillis(), TimeUnit.MILLISECONDS);
    } catch (ExecutionException e) {
      Throwable cause = e.getCause();
      throw cause instanceof RuntimeException runtime ? runtime : new IllegalStateException(cause);
    }
  }

  /** The leader's term: 0 until elected. */
  public long term() {
    synchronized (member.lock()) {
      return member.fencingToken;
    }
  }

  /** Whether this candidate leads now, as far as it knows (elected, not lost, not resigned). */
  public boolean isLeader() {
    return elected.isDone() && !elected.isCompletedExceptionally() && !member.lost.isDone()
        && !member.released.isDone();
  }

  /** The value published now (the last one the server confirmed). */
  public byte[] value() {
    synchronized (member.lock()) {
      return member.value.toByteArray();
    }
  }

  /**
   * Publishes a new value while leading and waits for the server (also while resuming: the
   * resumed leadership publishes it).
   */
  public void proclaim(byte[] value) throws TimeoutException, InterruptedException {
    member.proclaim(value);
  }

  /** Completes with the reason once the leadership is lost; never if it stepped down first. */
  public CompletableFuture<String> lost() {
    return member.lost;
  }

  /** Whether the leadership is known to be lost. */
  public boolean isLost() {
    return member.lost.isDone();
  }

  /** Why the leadership was lost, once it is, in words. */
  public Optional<String> lostReason() {
    return Optional.ofNullable(member.lost.getNow(null));
  }

  /**
   * Why the leadership was lost, for programs, once it is (set before {@link #lost()} completes):
   * {@link LostReason#REVOKED} if an operator revoked it. Empty while it is not lost.
   */
  public Optional<LostReason> lostCode() {
    synchronized (member.lock()) {
      return Optional.ofNullable(member.lostCode);
    }
  }

  /** Steps down (or leaves the line) and waits for the server; {@code true} if it was leading. */
  public boolean resign() {
    return member.release();
  }

  @Override
  public void close() {
    resign();
  }

  /** How many times this leadership was resumed on a new stream. */
  int resumes() {
    synchronized (member.lock()) {
      return member.resumes;
    }
  }
}
