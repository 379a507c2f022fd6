package dev.leasehold;

import io.grpc.ConnectivityState;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.stub.StreamObserver;
import java.lang.System.Logger.Level;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import leasehold.v1.Lock.Acquired;
import leasehold.v1.Lock.Extended;
import leasehold.v1.Lock.LeaseAcquire;
import leasehold.v1.Lock.LeaseRelease;
import leasehold.v1.Lock.LeaseRequest;
import leasehold.v1.Lock.LeaseResponse;
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
 */
public final class Lease implements AutoCloseable {
  private static final System.Logger LOG = System.getLogger(Lease.class.getName());
  private static final String SILENT =
      "no renewal confirmed before the lease ran out (server silent)";
  private static final String STALE =
      "acquired, but the news arrived after its validity had run out";
  private static final Duration RELEASE_DEADLINE = Duration.ofSeconds(5);
  private static final Duration RELEASE_WAIT = Duration.ofSeconds(10);

  private enum State {
    /** The first stream is taking the lock. */
    ACQUIRING,
    /** A stream holds the lease. */
    HELD,
    /** Between streams: an attempt to resume is scheduled or under way. */
    RESUMING,
    /** The user released: a release is on its way (on the stream, or unary). */
    RELEASING,
    /** Nothing more will happen. */
    ENDED
  }

  private final ManagedChannel channel;
  private final LockServiceStub stub;
  private final ScheduledExecutorService clock;
  private final LeaseAcquire request;
  private final boolean autoResume;
  private final CompletableFuture<LeaseResponse> acquired = new CompletableFuture<>();
  private final CompletableFuture<String> lost = new CompletableFuture<>();
  private final CompletableFuture<Boolean> released = new CompletableFuture<>();
  private final long startedNanos = System.nanoTime();

  // Guarded by this.
  private State state = State.ACQUIRING;
  private Stream stream;
  private final ValidityClock validity;
  private ScheduledFuture<?> retry;
  private Resumption resumption;
  private String lastError = "";
  private boolean releaseRequested;
  private boolean lostKnown;
  private int resumes;
  private int acquireAttempts = 1;
  private long fencingToken;
  private String token;

  Lease(ManagedChannel channel, ScheduledExecutorService clock, LeaseAcquire request,
      boolean autoResume) throws NotAcquiredException {
    this.channel = channel;
    this.stub = LockServiceGrpc.newStub(channel);
    this.clock = clock;
    this.validity = new ValidityClock(clock, this::onDeadline);
    this.request = request;
    this.autoResume = autoResume && request.getResumeGraceMs() > 0;
    synchronized (this) {
      open(request);
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
  public long fencingToken() {
    synchronized (this) {
      return fencingToken;
    }
  }

  /** The acquisition's secret, for the unary Extend and Release calls. Never log it. */
  public String token() {
    synchronized (this) {
      return token;
    }
  }

  /** Whether the lock is known to be lost already. */
  public boolean isLost() {
    return lost.isDone();
  }

  /** Completes with the reason once the lock is lost; never completes if released first. */
  public CompletableFuture<String> lost() {
    return lost;
  }

  /** Whether a stream holds the lease now (not between streams, not lost, not released). */
  synchronized boolean attached() {
    return state == State.HELD && !lostKnown;
  }

  /** The lease's state, for tests: ACQUIRING, HELD, RESUMING, RELEASING or ENDED. */
  synchronized String state() {
    return state.name();
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
      releaseRequested = true;
      switch (state) {
        case HELD -> {
          state = State.RELEASING;
          stream.release();
        }
        case RESUMING -> {
          state = State.RELEASING;
          cancelRetry();
          unhooked = stream; // An attempt under way: ignored from now on, cancelled below.
          stream = null;
          unary = true;
        }
        case ACQUIRING, RELEASING, ENDED -> {}
      }
    }
    if (unary) {
      releaseUnary(unhooked);
    }
    try {
      return released.get(RELEASE_WAIT.toMillis(), TimeUnit.MILLISECONDS) && !lost.isDone();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    } catch (ExecutionException | TimeoutException e) {
      return false;
    }
  }

  @Override
  public void close() {
    release();
  }

  /** Opens a stream asking for {@code acquire}; it becomes the current one. Holds this. */
  private Stream open(LeaseAcquire acquire) {
    Stream next = new Stream(System.nanoTime()); // Before the server can see it.
    stream = next;
    stub.lease(next);
    next.requests.onNext(LeaseRequest.newBuilder().setAcquire(acquire).build());
    return next;
  }

  /** Holds this. */
  private void arm(long validUntilNanos) {
    validity.arm(validUntilNanos);
  }

  /** Holds this. */
  private void stopClock() {
    validity.stop();
  }

  /** Holds this. */
  private void cancelRetry() {
    retry = Resumption.cancel(retry);
  }

  /**
   * Holds this. Notes that the lease is lost (if {@code reason} is not null) and returns the
   * reason to report, or null when the user released first.
   */
  private String lossOf(String reason) {
    if (reason == null) {
      return null;
    }
    lostKnown = true;
    return releaseRequested ? null : reason;
  }

  /** Completes the futures outside the lock (their callbacks run here, and may call us). */
  private void settle(String lossReason, Boolean releaseResult) {
    if (releaseResult != null) {
      released.complete(releaseResult);
    }
    if (lossReason != null) {
      lost.complete(lossReason);
    }
  }

  /** Holds this. Schedules the next resume attempt, or gives up if the client is closed. */
  private String scheduleAttempt(long delayMs) {
    retry = channel.isShutdown() ? null : Resumption.schedule(clock, this::attempt, delayMs);
    if (retry == null) {
      state = State.ENDED;
      stopClock();
      return "could not resume the lease: the client was closed";
    }
    return null;
  }

  private void attempt() {
    synchronized (this) {
      retry = null;
      if (state != State.RESUMING || stream != null) {
        return;
      }
      if (channel.getState(false) == ConnectivityState.TRANSIENT_FAILURE) {
        channel.resetConnectBackoff(); // Try every server again now, not at the channel's pace.
      }
      open(request.toBuilder().setResumeToken(token).build());
    }
  }

  private void retryAcquire() {
    synchronized (this) {
      retry = null;
      if (state != State.ACQUIRING || stream != null) {
        return;
      }
      acquireAttempts++;
      long elapsedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startedNanos);
      open(request.toBuilder()
          .setWaitMs((int) Math.max(0, request.getWaitMs() - elapsedMs)).build());
    }
  }

  private void onDeadline() {
    String loss = null;
    Boolean releaseResult = null;
    synchronized (this) {
      if (!validity.ranOut()) {
        return; // Re-armed meanwhile.
      }
      switch (state) {
        case HELD, RELEASING -> loss = lossOf(SILENT); // The stream stays; it may still end well.
        case RESUMING -> {
          state = State.ENDED;
          cancelRetry();
          if (stream != null) {
            stream.cancel("the lease's validity ran out while resuming");
            stream = null;
          }
          loss = lossOf("could not resume before the lease's validity ran out: " + lastError);
          releaseResult = false;
          LOG.log(Level.WARNING, "lease {0}: {1}", request.getName(), loss);
        }
        case ACQUIRING, ENDED -> {}
      }
    }
    settle(loss, releaseResult);
  }

  private void onEvent(Stream from, LeaseResponse event) {
    String loss = null;
    Boolean releaseResult = null;
    Throwable acquireError = null;
    boolean first = false;
    synchronized (this) {
      if (from != stream) {
        return; // A stream given up on.
      }
      switch (event.getEventCase()) {
        case ACQUIRED -> {
          Acquired answer = event.getAcquired();
          long until = ValidityClock.vouchedUntil(
              from.openedNanos, answer.getValidForMs(), answer.getValidToMs());
          // Held up on its way (a healed partition): the lease may be someone else's by now, so
          // it is not one. Cancelling the stream lets go of it (or keeps it only for its grace).
          boolean stale = ValidityClock.passed(until);
          if (state == State.ACQUIRING && stale) {
            state = State.ENDED;
            stream = null;
            from.cancel(STALE);
            acquireError = new IllegalStateException(STALE);
          } else if (state == State.ACQUIRING) {
            token = answer.getToken();
            fencingToken = answer.getFencingToken();
            state = State.HELD;
            resumption = null;
            arm(until);
            first = true;
          } else if (state == State.RESUMING && stale) {
            state = State.ENDED;
            cancelRetry();
            stopClock();
            stream = null;
            from.cancel(STALE);
            loss = lossOf("could not resume the lease: " + STALE);
            releaseResult = false;
            LOG.log(Level.WARNING, "lease {0}: {1}", request.getName(), loss);
          } else if (state == State.RESUMING) {
            if (answer.getFencingToken() != fencingToken || !answer.getToken().equals(token)) {
              state = State.ENDED;
              stopClock();
              stream = null;
              from.cancel("resumed as another acquisition");
              loss = lossOf("the lease was resumed as another acquisition (fencing token "
                  + answer.getFencingToken() + ", not " + fencingToken + ")");
              releaseResult = false;
            } else {
              state = State.HELD;
              resumes++;
              resumption = null;
              arm(until);
              LOG.log(Level.DEBUG, "lease {0}: resumed (fencing token {1})",
                  request.getName(), fencingToken);
            }
          }
        }
        case EXTENDED -> {
          if (state == State.HELD || state == State.RELEASING) {
            Extended extended = event.getExtended();
            arm(ValidityClock.vouchedUntil(
                from.openedNanos, extended.getValidForMs(), extended.getValidToMs()));
          }
        }
        case LOST -> loss = lossOf(event.getLost().getReason()); // The stream ends next.
        case RELEASED -> {
          state = State.ENDED;
          stopClock();
          stream = null;
          releaseResult = event.getReleased().getWasHeld();
        }
        default -> {}
      }
    }
    if (first) {
      acquired.complete(event);
    }
    if (acquireError != null) {
      acquired.completeExceptionally(acquireError);
    }
    settle(loss, releaseResult);
  }

  /** {@code status} null: the stream ended without a status, after no last word. */
  private void onEnd(Stream from, Status status, Throwable error) {
    String loss = null;
    Boolean releaseResult = null;
    Throwable acquireError = null;
    boolean unary = false;
    synchronized (this) {
      if (from != stream) {
        return;
      }
      stream = null;
      switch (state) {
        case ACQUIRING -> {
          // A server going away (or answering UNAVAILABLE) before the lock was ours: try a fresh
          // acquire on another for what is left of the wait, or at least three times. (A waiter
          // that moves loses its place in line.)
          long elapsedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startedNanos);
          if (autoResume && status != null && status.getCode() == Status.Code.UNAVAILABLE
              && (elapsedMs < request.getWaitMs() || acquireAttempts < 3)
              && !channel.isShutdown()) {
            if (resumption == null) {
              resumption = Resumption.start();
            }
            retry = Resumption.schedule(clock, this::retryAcquire, resumption.nextDelayMs());
          }
          if (retry == null) {
            state = State.ENDED;
            acquireError = error != null
                ? error
                : new IllegalStateException("the server ended the lease stream before acquired");
          }
        }
        case HELD -> {
          if (autoResume && !lostKnown && Resumption.breaks(status)) {
            state = State.RESUMING;
            resumption = Resumption.start();
            lastError = Resumption.describe(status);
            LOG.log(Level.DEBUG, "lease {0}: stream broke ({1}); resuming",
                request.getName(), lastError);
            loss = lossOf(scheduleAttempt(0));
            releaseResult = state == State.ENDED ? false : null;
          } else {
            state = State.ENDED;
            stopClock();
            loss = lossOf(status == null
                ? "the server ended the lease stream"
                : "lease stream failed: " + status);
            releaseResult = false;
          }
        }
        case RESUMING -> {
          if (!lostKnown && Resumption.breaks(status)) {
            lastError = Resumption.describe(status);
            loss = lossOf(scheduleAttempt(resumption.nextDelayMs()));
            releaseResult = state == State.ENDED ? false : null;
          } else {
            state = State.ENDED;
            stopClock();
            loss = lossOf("could not resume the lease: " + Resumption.describe(status));
            releaseResult = false;
            LOG.log(Level.WARNING, "lease {0}: {1}", request.getName(), loss);
          }
        }
        case RELEASING -> {
          // The stream broke before the server confirmed the release: release by token instead.
          if (autoResume && Resumption.breaks(status)) {
            unary = true;
          } else {
            state = State.ENDED;
            stopClock();
            releaseResult = false;
          }
        }
        case ENDED -> {}
      }
    }
    if (acquireError != null) {
      acquired.completeExceptionally(acquireError);
    }
    if (unary) {
      releaseUnary(null);
    }
    settle(loss, releaseResult);
  }

  /**
   * Releases by token with the unary call (any server, bounded by a deadline), then cancels
   * {@code attempt}, a resume attempt given up on (cancelling first would let its server release
   * a lease it had just resumed, and the Release would answer "not held").
   */
  private void releaseUnary(Stream attempt) {
    ReleaseRequest ask = ReleaseRequest.newBuilder()
        .setName(request.getName()).setToken(token()).build();
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
          stopClock();
        }
        if (attempt != null) {
          attempt.cancel("released");
        }
        settle(null, wasHeld);
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

  /** One {@code Lease} stream. */
  private final class Stream extends StreamBase<LeaseRequest, LeaseResponse> {
    Stream(long openedNanos) {
      super(openedNanos);
    }

    void release() {
      // A send that fails (the call is over) leaves a half-close that fails alike.
      send(LeaseRequest.newBuilder().setRelease(LeaseRelease.getDefaultInstance()).build());
      halfClose();
    }

    @Override
    public void onNext(LeaseResponse event) {
      onEvent(this, event);
    }

    @Override
    void ended(Status status, Throwable error) {
      onEnd(this, status, error);
    }
  }

  static Duration positive(Duration duration, String what) {
    if (duration.isNegative()) {
      throw new IllegalArgumentException(what + " is negative: " + duration);
    }
    return duration;
  }
}
