package dev.leasehold;

import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.stub.ClientResponseObserver;
import io.grpc.stub.StreamObserver;
import java.lang.System.Logger.Level;
import java.time.Duration;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import leasehold.v1.Lock.Acquired;
import leasehold.v1.Lock.Extended;
import leasehold.v1.Lock.LeaseAcquire;
import leasehold.v1.Lock.LeaseRelease;
import leasehold.v1.Lock.LeaseRequest;
import leasehold.v1.Lock.LeaseResponse;
import leasehold.v1.Lock.Lost;
import leasehold.v1.Lock.ReleaseRequest;
import leasehold.v1.Lock.ReleaseResponse;
import leasehold.v1.LockServiceGrpc;
import leasehold.v1.LockServiceGrpc.LockServiceStub;

/**
 * A held lock: released on {@link #close()}, like Curator's {@code InterProcessMutex} or
 * Redisson's {@code RLock}, but never silently lost. {@link #lost()} completes when the server says
 * the lease is lost, when the stream breaks and the lease cannot be resumed, or when the validity
 * the server last confirmed runs out by this process's clock (a frozen server cannot keep you
 * believing you hold it).
 *
 * <p>By default ({@link LeaseholdClient.LeaseBuilder#autoResume(boolean)}) the lease outlives its
 * stream and its server: when the stream breaks (the server was stopped for a deploy, crashed, or
 * the connection failed), the lease quietly opens a new stream on another server and takes the
 * same lease back (same token, same fencing token), retrying with backoff until the validity the
 * server last confirmed runs out. Nothing is reported unless that fails; then {@link #lost()}
 * completes, no later than that validity's end.
 *
 * <p>What it shares with a {@link Candidate} (the stream, the validity, resuming, the loss) lives
 * in {@link HeldStream}; here are what a lock asks and how it lets go.
 */
public final class Lease extends HeldStream<LeaseRequest, LeaseResponse> implements AutoCloseable {
  private static final System.Logger LOG = System.getLogger(Lease.class.getName());
  private static final String STALE =
      "acquired, but the news arrived after its validity had run out";
  private static final Duration RELEASE_DEADLINE = Duration.ofSeconds(5);
  private static final Duration RELEASE_WAIT = Duration.ofSeconds(10);

  private final LockServiceStub stub;
  private final LeaseAcquire request;
  private final CompletableFuture<LeaseResponse> acquired = new CompletableFuture<>();
  private final CompletableFuture<Boolean> released = new CompletableFuture<>();
  private final long startedNanos = System.nanoTime();

  // Guarded by this.
  private int acquireAttempts = 1;

  Lease(ManagedChannel channel, ScheduledExecutorService clock, LeaseAcquire request,
      boolean autoResume) throws NotAcquiredException {
    super(channel, clock, autoResume && request.getResumeGraceMs() > 0, "lease", "lease",
        "lease " + request.getName());
    this.stub = LockServiceGrpc.newStub(channel);
    this.request = request;
    synchronized (this) {
      open(LeaseRequest.newBuilder().setAcquire(request).build());
    }
    try {
      acquired.get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      synchronized (this) {
        state = State.ENDED;
        cancelRetry();
        if (stream != null) {
          stream.halfClose(); // Stops waiting; releases the lock if it was just taken.
          stream = null;
        }
      }
      throw new IllegalStateException("interrupted while acquiring " + request.getName(), e);
    } catch (ExecutionException e) {
      throw ErrorDetails.failure(e.getCause());
    }
  }

  /** The fencing token of this acquisition: pass it to the resource the lock protects. */
  public synchronized long fencingToken() {
    return fencingToken;
  }

  /**
   * Each name's fencing token, in the order asked (the builder's name first, then {@link
   * LeaseholdClient.LeaseBuilder#names}): unmodifiable. {@link #fencingToken()} is the first's.
   */
  public synchronized Map<String, Long> fences() {
    return fences;
  }

  /** The acquisition's secret, for the unary Extend and Release calls. Never log it. */
  public synchronized String token() {
    return token;
  }

  /** Whether the lock is known to be lost already. */
  public boolean isLost() {
    return lost.isDone();
  }

  /**
   * Completes with the reason once the lock is lost; never completes if released first. The
   * reason is for people: {@link #lostCode()} says why for programs.
   */
  public CompletableFuture<String> lost() {
    return lost;
  }

  /**
   * Why the lock was lost, once it is (set before {@link #lost()} completes): {@link
   * LostReason#REVOKED} if an operator revoked it, {@link LostReason#TAKEN} if its key was
   * deleted or taken, ... Empty while it is not lost.
   */
  public synchronized Optional<LostReason> lostCode() {
    return Optional.ofNullable(lostCode);
  }

  /** Whether a stream holds the lease now (not between streams, not lost, not released). */
  synchronized boolean attached() {
    return state == State.HELD && !lostKnown;
  }

  /** The lease's state, for tests: ACQUIRING, HELD, RESUMING, RELEASING or ENDED. */
  synchronized String state() {
    return switch (state) {
      case STARTING -> "ACQUIRING";
      case STOPPING -> "RELEASING";
      default -> state.name();
    };
  }

  /** How many times this lease was resumed on a new stream. */
  synchronized int resumes() {
    return resumes;
  }

  /** When ({@link System#nanoTime()}) the validity the server last confirmed runs out. */
  synchronized long validUntilNanos() {
    return validity.validUntilNanos();
  }

  /**
   * Releases the lock and waits for the server; {@code true} if it was still held. Between
   * streams (while resuming) it releases with the unary Release call on any server.
   */
  public boolean release() {
    Stream unhooked = null;
    boolean unary = false;
    synchronized (this) {
      letGo = true;
      switch (state) {
        case HELD -> {
          state = State.STOPPING;
          sendStop(stream);
        }
        case RESUMING -> {
          state = State.STOPPING;
          cancelRetry();
          unhooked = stream; // An attempt under way: ignored from now on, cancelled below.
          stream = null;
          unary = true;
        }
        case STARTING, STOPPING, ENDED -> {}
      }
    }
    if (unary) {
      releaseUnary(unhooked);
    }
    return stillHeld(released, RELEASE_WAIT.toMillis());
  }

  @Override
  public void close() {
    release();
  }

  @Override
  void call(ClientResponseObserver<LeaseRequest, LeaseResponse> observer) {
    stub.lease(observer);
  }

  @Override
  LeaseRequest resumeRequest() {
    return LeaseRequest.newBuilder()
        .setAcquire(request.toBuilder().setResumeToken(token)).build();
  }

  @Override
  LeaseRequest stopRequest() {
    return LeaseRequest.newBuilder().setRelease(LeaseRelease.getDefaultInstance()).build();
  }

  @Override
  String stale() {
    return STALE;
  }

  @Override
  void onMessage(Stream from, LeaseResponse event) {
    switch (event.getEventCase()) {
      case ACQUIRED -> {
        Acquired answer = event.getAcquired();
        tell(held(from, event, answer.getToken(), answer.getFencingToken(),
            answer.getValidForMs(), answer.getValidToMs()));
      }
      case EXTENDED -> {
        Extended extended = event.getExtended();
        extended(from, extended.getValidForMs(), extended.getValidToMs());
      }
      case LOST -> { // The stream ends next.
        Lost news = event.getLost();
        tell(lossOf(news.getReason(), LostReason.of(news.getCode())));
      }
      case RELEASED -> {
        state = State.ENDED;
        validity.stop();
        stream = null;
        boolean wasHeld = event.getReleased().getWasHeld();
        completions.later(() -> released.complete(wasHeld));
      }
      default -> {}
    }
  }

  @Override
  int maxHoldMs() {
    return request.getMaxHoldMs();
  }

  @Override
  void onHeld(LeaseResponse event) {
    fences = fences(event.getAcquired().getFencesList(), request.getName(), fencingToken);
    completions.later(() -> acquired.complete(event));
  }

  @Override
  String onStaleStart() {
    completions.later(() -> acquired.completeExceptionally(new IllegalStateException(STALE)));
    return null;
  }

  @Override
  void onResumed(Stream on) {
    debug("resumed (fencing token {1})", fencingToken);
  }

  @Override
  void onEnded(String reason, Throwable failure) {
    completions.later(() -> released.complete(false));
  }

  @Override
  String startEnded(Status status, Throwable error) {
    // A server going away (or answering UNAVAILABLE) before the lock was ours: try a fresh
    // acquire on another for what is left of the wait, or at least three times. (A waiter that
    // moves loses its place in line.)
    long elapsedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startedNanos);
    boolean again = false;
    if (autoResume && status != null && status.getCode() == Status.Code.UNAVAILABLE
        && (elapsedMs < request.getWaitMs() || acquireAttempts < 3)
        && !channel.isShutdown()) {
      if (resumption == null) {
        resumption = Resumption.start();
      }
      again = retryIn(resumption.nextDelayMs());
    }
    if (!again) {
      state = State.ENDED;
      Throwable failure = error != null
          ? error
          : new IllegalStateException("the server ended the lease stream before acquired");
      completions.later(() -> acquired.completeExceptionally(failure));
    }
    return null;
  }

  @Override
  void startAgain() {
    acquireAttempts++;
    long elapsedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startedNanos);
    open(LeaseRequest.newBuilder().setAcquire(request.toBuilder()
        .setWaitMs((int) Math.max(0, request.getWaitMs() - elapsedMs))).build());
  }

  @Override
  String stopEnded(Status status, Throwable error) {
    // The stream broke before the server confirmed the release: release by token instead.
    if (autoResume && Resumption.breaks(status)) {
      completions.later(() -> releaseUnary(null));
      return null;
    }
    return fail(null, null, null);
  }

  /**
   * Releases by token with the unary call (any server, bounded by a deadline), then cancels
   * {@code attempt}, a resume attempt given up on (cancelling first would let its server release
   * a lease it had just resumed, and the Release would answer "not held").
   */
  private void releaseUnary(Stream attempt) {
    ReleaseRequest ask = ReleaseRequest.newBuilder()
        .setName(request.getName()).addAllMoreNames(request.getMoreNamesList())
        .setToken(token()).build();
    StreamObserver<ReleaseResponse> answer = new StreamObserver<>() {
      @Override
      public void onNext(ReleaseResponse response) {
        finish(response.getReleased());
      }

      @Override
      public void onError(Throwable error) {
        LOG.log(Level.WARNING, "lease {0}: release failed: {1}", request.getName(),
            Resumption.describe(Status.fromThrowable(error)));
        finish(false);
      }

      @Override
      public void onCompleted() {}

      private void finish(boolean wasHeld) {
        synchronized (Lease.this) {
          state = State.ENDED;
          validity.stop();
        }
        if (attempt != null) {
          attempt.cancel("released");
        }
        released.complete(wasHeld);
      }
    };
    try {
      LockServiceGrpc.newStub(channel)
          .withDeadlineAfter(RELEASE_DEADLINE.toMillis(), TimeUnit.MILLISECONDS)
          .withWaitForReady()
          .release(ask, answer);
    } catch (RuntimeException e) {
      answer.onError(e);
    }
  }

  /** {@code duration} in milliseconds for a uint32 field (past its range: the largest). */
  static int millis(Duration duration, String what) {
    return (int) Math.min(0xFFFF_FFFFL, positive(duration, what).toMillis());
  }

  static Duration positive(Duration duration, String what) {
    if (duration.isNegative()) {
      throw new IllegalArgumentException(what + " is negative: " + duration);
    }
    return duration;
  }
}
