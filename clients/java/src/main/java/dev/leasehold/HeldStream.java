package dev.leasehold;

import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.stub.ClientResponseObserver;
import java.lang.System.Logger.Level;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;

/**
 * The held-stream core that {@link Lease} and {@link Candidate} sit on (as Node's {@code held.ts}):
 * one stream that holds the lease, the validity its server last confirmed by this process's clock,
 * resumption on another server when the stream breaks, and one place ({@link #fail}) where every
 * way out ends. A subclass says how it asks (the first request, the resume, the let-go), what its
 * messages mean (calling {@link #held} and {@link #extended}), and what its waiters are told.
 *
 * <p>Every field is guarded by this object; the subclass's hooks are called holding it, and the
 * futures they complete go through {@link #completions}, run once it is let go.
 */
abstract class HeldStream<Req, Resp> extends Holding {
  /** Where the lease stands. */
  enum State {
    /** The first stream is taking it (or waiting in line), or a fresh start is scheduled. */
    STARTING,
    /** A stream holds it. */
    HELD,
    /** Held, between streams: an attempt to resume is scheduled or under way. */
    RESUMING,
    /** The user let go: its release is on its way (on the stream, or unary). */
    STOPPING,
    /** Nothing more will happen. */
    ENDED
  }

  private final System.Logger log = System.getLogger(getClass().getName());
  final ManagedChannel channel;
  private final ScheduledExecutorService clock;
  final boolean autoResume;
  /** What is held, in messages: "lease", "leadership". */
  private final String what;
  /** What the stream is called, in messages: "lease", "campaign". */
  private final String streamName;
  /** Who speaks in the log: "lease NAME", "election NAME". */
  private final String subject;
  final Completions completions = new Completions(this);
  final ValidityClock validity;

  // Guarded by this.
  State state = State.STARTING;
  Stream stream;
  private ScheduledFuture<?> retry;
  Resumption resumption;
  private String lastError = "";
  /** The max hold's ceiling on the validity, fixed when first held. */
  private MaxHold maxHold = MaxHold.NONE;

  HeldStream(ManagedChannel channel, ScheduledExecutorService clock, boolean autoResume,
      String what, String streamName, String subject) {
    this.channel = channel;
    this.clock = clock;
    this.autoResume = autoResume;
    this.what = what;
    this.streamName = streamName;
    this.subject = subject;
    this.validity = new ValidityClock(clock, this::onDeadline);
  }

  // ---- What the subclass says. Each is called holding this. ----

  /** Starts the call on the channel (Lease, Campaign) with {@code observer}. */
  abstract void call(ClientResponseObserver<Req, Resp> observer);

  /** The request that takes the lease back on a new stream (it carries {@link #token}). */
  abstract Req resumeRequest();

  /** The request that lets go on the stream: release, resign. */
  abstract Req stopRequest();

  /** What one message of the current stream means: it calls {@link #held}, ... */
  abstract void onMessage(Stream from, Resp event);

  /** The stream ended while {@link State#STARTING}: the loss to report, if any. */
  abstract String startEnded(Status status, Throwable error);

  /** A fresh start scheduled while {@link State#STARTING} is due: open it. */
  abstract void startAgain();

  /** Taken the first time: {@code event} is the news. */
  abstract void onHeld(Resp event);

  /** Taken the first time, but the news arrived too late; the stream is cancelled. */
  abstract String onStaleStart();

  /** It ended ({@link #fail}); {@code failure} (or {@code reason}) is what waiters are told. */
  abstract void onEnded(String reason, Throwable failure);

  /** Why a stale {@code acquired} or {@code elected} is no lease. */
  abstract String stale();

  /** Why a resume answered with {@code token}, {@code fencingToken} is another lease, or null. */
  String mismatch(String token, long fencingToken) {
    if (fencingToken != this.fencingToken || !token.equals(this.token)) {
      return "the " + what + " was resumed as another acquisition (fencing token " + fencingToken
          + ", not " + this.fencingToken + ")";
    }
    return null;
  }

  /**
   * The max hold asked for, in milliseconds (the proto's uint32 {@code max_hold_ms}; 0: none): the
   * validity never reaches past the moment the first request was sent plus this.
   */
  int maxHoldMs() {
    return 0;
  }

  /** Held again on {@code on} after a break. */
  void onResumed(Stream on) {}

  /** The loss when a resume is due and the client is closed. */
  String closedReason() {
    return "could not resume the " + what + ": the client was closed";
  }

  /**
   * Whether the server confirms each renewal ({@code extended}), so that this process's clock can
   * end the lease when they stop; without (a campaign with no resume grace) the server alone
   * watches it.
   */
  boolean clocked() {
    return true;
  }

  /** The stream ended while {@link State#STOPPING}: by default it is over, not held. */
  String stopEnded(Status status, Throwable error) {
    return fail(null, null, null);
  }

  /** A resume is due: by default, open it. */
  void resumeAgain() {
    Resumption.wake(channel);
    open(resumeRequest());
  }

  // ---- What the subclass uses. Each is called holding this. ----

  /** Opens a stream asking {@code first}; it becomes the current one. */
  final void open(Req first) {
    Stream next = new Stream(System.nanoTime()); // Before the server can see it.
    stream = next;
    call(next);
    next.send(first);
  }

  /** Lets go on {@code on}: the stop request, then the half-close. */
  final void sendStop(Stream on) {
    // A send that fails (the call is over) leaves a half-close that fails alike.
    on.send(stopRequest());
    on.halfClose();
  }

  /** Reports {@code loss} (if not null) once the lock is let go. */
  final void tell(String loss) {
    if (loss != null) {
      completions.later(() -> lost.complete(loss));
    }
  }

  /** Logs a loss the user may not be listening for (resuming failed). */
  final void warn(String loss) {
    log.log(Level.WARNING, "{0}: {1}", subject, loss);
  }

  /** Logs {@code format} (its {1} is {@code arg}) for the debugging eye. */
  final void debug(String format, Object arg) {
    log.log(Level.DEBUG, "{0}: " + format, subject, arg);
  }

  final void cancelRetry() {
    retry = Resumption.cancel(retry);
  }

  /** Runs a fresh start or a resume after {@code delayMs}; false if the clock is shut down. */
  final boolean retryIn(long delayMs) {
    retry = Resumption.schedule(clock, this::attempt, delayMs);
    return retry != null;
  }

  /** Schedules the next attempt, or ends it if the client is closed; the loss to report. */
  final String scheduleAttempt(long delayMs) {
    return !channel.isShutdown() && retryIn(delayMs)
        ? null
        : fail(closedReason(), LostReason.UNREACHABLE, null);
  }

  /**
   * Ends it: no clock, no retry; the waiters are told; the loss to report (lost for {@code
   * code}), if any.
   */
  final String fail(String reason, LostReason code, Throwable failure) {
    state = State.ENDED;
    validity.stop();
    cancelRetry();
    onEnded(reason, failure);
    return lossOf(reason, code);
  }

  /** Ends it because {@code status} ended the stream; the loss to report, if any. */
  final String failStream(Status status, Throwable error) {
    return fail(status == null
            ? "the server ended the " + streamName + " stream"
            : streamName + " stream failed: " + status,
        LostReason.ofStatus(status),
        error != null ? error : new IllegalStateException("the " + streamName + " stream ended"));
  }

  /** Whether a stream that ended with {@code status} broke on the way and can be resumed. */
  final boolean broke(Status status) {
    return autoResume && !lostKnown && Resumption.breaks(status);
  }

  /** Why resuming failed when the validity ran out first. */
  final String tooLate() {
    return "could not resume before the " + what + "'s validity ran out: " + lastError;
  }

  /**
   * The server says it holds ({@code acquired}, {@code elected}): the first time, or resumed.
   * Returns the loss to report, if any.
   */
  final String held(Stream from, Resp event, String token, long fencingToken, int validForMs,
      long validToMs) {
    long until = ValidityClock.vouchedUntil(from.openedNanos, validForMs, validToMs);
    // Held up on its way (a healed partition): the lease may be someone else's by now, so it is
    // not one. Cancelling the stream lets go of it (or keeps it only for its grace).
    boolean stale = ValidityClock.passed(until);
    if (state == State.STARTING && stale) {
      state = State.ENDED;
      stream = null;
      validity.stop();
      from.cancel(stale());
      return onStaleStart();
    } else if (state == State.STARTING) {
      this.token = token;
      this.fencingToken = fencingToken;
      state = State.HELD;
      resumption = null;
      maxHold = MaxHold.of(from.openedNanos, maxHoldMs()); // Sent as the stream opened.
      arm(until);
      onHeld(event);
    } else if (state == State.RESUMING && stale) {
      stream = null;
      from.cancel(stale());
      String loss = fail("could not resume the " + what + ": " + stale(),
          LostReason.UNREACHABLE, null);
      warn(loss);
      return loss;
    } else if (state == State.RESUMING) {
      String mismatch = mismatch(token, fencingToken);
      if (mismatch != null) {
        stream = null;
        from.cancel("resumed as another acquisition");
        return fail(mismatch, LostReason.TAKEN, null);
      }
      state = State.HELD;
      resumes++;
      resumption = null;
      arm(until);
      onResumed(from);
    }
    return null;
  }

  /** The server confirmed a renewal ({@code extended}). */
  final void extended(Stream from, int validForMs, long validToMs) {
    if (state == State.HELD || state == State.STOPPING) {
      arm(ValidityClock.vouchedUntil(from.openedNanos, validForMs, validToMs));
    }
  }

  private void arm(long validUntilNanos) {
    if (clocked()) {
      validity.arm(maxHold.cap(validUntilNanos));
    }
  }

  /** Whether the validity ran out at the max hold's ceiling: lost for good, as MAX_HOLD. */
  private boolean atCeiling() {
    return maxHold.reachedBy(validity.validUntilNanos());
  }

  // ---- What happens on its own: attempts, the validity's end, the stream's end. ----

  private void attempt() {
    completions.locked(() -> {
      retry = null;
      if (stream != null || (state != State.STARTING && state != State.RESUMING)) {
        return;
      }
      if (state == State.STARTING) {
        startAgain();
      } else {
        resumeAgain();
      }
    });
  }

  private void onDeadline() {
    completions.locked(() -> {
      if (!validity.ranOut()) {
        return; // Re-armed meanwhile.
      }
      switch (state) {
        case HELD, STOPPING -> // The stream stays; it may still end well.
            tell(atCeiling()
                ? lossOf(MaxHold.REACHED, LostReason.MAX_HOLD)
                : lossOf("no renewal confirmed before the " + what + " ran out (server silent)",
                    LostReason.UNREACHABLE));
        case RESUMING -> {
          if (stream != null) {
            stream.cancel("the " + what + "'s validity ran out while resuming");
            stream = null;
          }
          String loss = atCeiling()
              ? fail(MaxHold.REACHED, LostReason.MAX_HOLD, null)
              : fail(tooLate(), LostReason.UNREACHABLE, null);
          warn(loss);
          tell(loss);
        }
        case STARTING, ENDED -> {}
      }
    });
  }

  private void onEvent(Stream from, Resp event) {
    completions.locked(() -> {
      if (from != stream) {
        return; // A stream given up on.
      }
      onMessage(from, event);
    });
  }

  /** {@code status} null: the stream ended without a status, after no last word. */
  private void onEnd(Stream from, Status status, Throwable error) {
    completions.locked(() -> {
      if (from != stream) {
        return;
      }
      stream = null;
      tell(switch (state) {
        case STARTING -> startEnded(status, error);
        case HELD -> heldEnded(status, error);
        case RESUMING -> resumeEnded(status, error);
        case STOPPING -> stopEnded(status, error);
        case ENDED -> null;
      });
    });
  }

  private String heldEnded(Status status, Throwable error) {
    if (!broke(status)) {
      return failStream(status, error);
    }
    state = State.RESUMING;
    resumption = Resumption.start();
    lastError = Resumption.describe(status);
    debug("stream broke ({1}); resuming", lastError);
    return scheduleAttempt(0);
  }

  private String resumeEnded(Status status, Throwable error) {
    if (broke(status)) {
      lastError = Resumption.describe(status);
      return scheduleAttempt(resumption.nextDelayMs());
    }
    String loss = fail("could not resume the " + what + ": " + Resumption.describe(status),
        LostReason.ofStatus(status),
        error != null ? error : new IllegalStateException("the " + streamName + " stream ended"));
    warn(loss);
    return loss;
  }

  /** One stream: its messages and its end come back here. */
  final class Stream extends StreamBase<Req, Resp> {
    Stream(long openedNanos) {
      super(openedNanos);
    }

    @Override
    public void onNext(Resp event) {
      onEvent(this, event);
    }

    @Override
    void ended(Status status, Throwable error) {
      onEnd(this, status, error);
    }
  }
}
