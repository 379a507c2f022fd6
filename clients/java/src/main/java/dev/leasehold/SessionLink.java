package dev.leasehold;

import com.google.protobuf.ByteString;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.lang.System.Logger.Level;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import leasehold.v1.Session.SessionAcquire;
import leasehold.v1.Session.SessionClose;
import leasehold.v1.Session.SessionKeptAlive;
import leasehold.v1.Session.SessionOpen;
import leasehold.v1.Session.SessionRequest;
import leasehold.v1.Session.SessionResponse;
import leasehold.v1.SessionServiceGrpc;
import leasehold.v1.SessionServiceGrpc.SessionServiceStub;

/**
 * A {@link Session}'s link to the servers: one stream at a time, opened again on another server
 * when it breaks (within the resume grace), the session's one validity timer, the close, and the
 * stream's messages routed to the leases on it ({@link SessionMembers}, each a {@link
 * SessionMember}). What each message means for one lease is decided there; here, what it means
 * for the session.
 *
 * <p>Every field, and every member's, is guarded by this object; every method that says "Holds
 * this" is called holding it. Futures complete through {@link #completions}, once it is let go.
 */
final class SessionLink {
  private static final System.Logger LOG = System.getLogger(Session.class.getName());
  private static final long ANSWER_WAIT_MS = 10_000;

  /** Where the session stands. */
  private enum State {
    /** A stream is open (or was opened and has not failed yet). */
    OPEN,
    /** The stream broke: a new one is scheduled, or opened and not yet heard from. */
    RESUMING,
    /** The user closed the session: {@code close} is sent, or will be once resumed. */
    CLOSING,
    /** Nothing more will happen. */
    ENDED
  }

  private final ManagedChannel channel;
  private final SessionServiceStub stub;
  private final ScheduledExecutorService clock;
  private final SessionOpen open;
  private final boolean autoResume;
  private final ValidityClock validity;
  final Completions completions = new Completions(this);
  final CompletableFuture<String> lost = new CompletableFuture<>();
  private final CompletableFuture<Integer> ended = new CompletableFuture<>();

  // Guarded by this.
  private State state = State.OPEN;
  private Stream stream;
  private final SessionMembers members = new SessionMembers();
  private ScheduledFuture<?> retry;
  private Resumption resumption;
  /** When the stream broke, of the run of failed attempts under way. */
  private long brokeNanos;
  private String lastError = "";
  private boolean closeSent;
  private int keptAlives;
  private int resumes;
  /** Why the session ended, for calls made after: the stream's own error when it had one. */
  private Throwable endError;
  /** Why it was lost, set before {@link #lost} completes; null until then. */
  private LostReason lostCode;

  SessionLink(ManagedChannel channel, ScheduledExecutorService clock, SessionOptions options) {
    this.channel = channel;
    this.stub = SessionServiceGrpc.newStub(channel);
    this.clock = clock;
    this.open = options.toOpen();
    this.autoResume = options.autoResume();
    this.validity = new ValidityClock(clock, this::onDeadline);
    synchronized (this) {
      openStream();
    }
  }

  /** How long a caller waits for an answer: long enough for a resume under way to end. */
  long answerWaitMs() {
    return ANSWER_WAIT_MS + open.getTtlMs();
  }

  /** The stream open now, or null between two. Holds this. */
  Stream current() {
    return stream;
  }

  synchronized int keptAlives() {
    return keptAlives;
  }

  synchronized int resumes() {
    return resumes;
  }

  synchronized LostReason lostCode() {
    return lostCode;
  }

  synchronized String state() {
    return state.name();
  }

  synchronized int size() {
    return members.size();
  }

  /**
   * Registers a new lease (a lock when {@code acquire} is not null, else a campaign for {@code
   * value}) and sends it if a stream is open; throws if the session is over.
   */
  SessionMember join(String name, SessionAcquire.Builder acquire, long waitMs, ByteString value) {
    SessionMember member;
    synchronized (this) {
      if (state == State.ENDED || state == State.CLOSING) {
        throw endError instanceof RuntimeException runtime && state == State.ENDED
            ? copy(runtime)
            : new IllegalStateException("the session is " + (lost.isDone()
                ? "lost: " + lost.getNow("") : "closed"));
      }
      member = new SessionMember(this, members.nextId(), name, acquire == null, acquire, waitMs,
          value);
      members.add(member);
      if (stream != null) {
        member.sendOn(stream);
      }
    }
    completions.flush();
    return member;
  }

  /** A fresh exception for each caller (its stack trace theirs), keeping a status as it was. */
  private static RuntimeException copy(RuntimeException error) {
    if (error instanceof StatusRuntimeException status) {
      return new StatusRuntimeException(status.getStatus(), status.getTrailers());
    }
    return new IllegalStateException(error.getMessage(), error);
  }

  /** Holds this. {@code member} is off the session. */
  void remove(SessionMember member) {
    members.remove(member);
  }

  /** Releases every lease and ends the session, waiting for the server (bounded). */
  void close() {
    synchronized (this) {
      if (state != State.ENDED && state != State.CLOSING) {
        state = State.CLOSING;
        members.closing();
        if (stream == null && retry == null) {
          endSession(null, null, null);
        } else {
          maybeSendClose();
        }
      }
    }
    completions.flush();
    try {
      ended.get(answerWaitMs(), TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (ExecutionException | TimeoutException e) {
      // Gone below.
    }
    synchronized (this) {
      if (state != State.ENDED) {
        LOG.log(Level.WARNING,
            "session: not closed within the wait; its leases expire by their TTL");
        endSession(null, null, null);
      }
    }
    completions.flush();
  }

  /** Holds this. Opens a stream: the open, then every lease not on a stream yet. */
  private void openStream() {
    Stream next = new Stream(System.nanoTime()); // Before the server can see it.
    stream = next;
    closeSent = false;
    stub.session(next);
    next.send(SessionRequest.newBuilder().setOpen(open).build());
    members.sendWaiting(next);
    maybeSendClose();
  }

  /** Holds this. Sends {@code close} once no resume is still unanswered. */
  private void maybeSendClose() {
    if (state != State.CLOSING || stream == null || closeSent) {
      return;
    }
    if (members.resuming(stream)) {
      return; // Closed once it is back (or failed), so that the close releases it.
    }
    closeSent = true;
    stream.send(SessionRequest.newBuilder().setClose(SessionClose.getDefaultInstance()).build());
    stream.halfClose();
  }

  /** Holds this. Arms the session's one timer for the earliest validity of a held lease. */
  private void rearm() {
    members.arm(validity);
  }

  /**
   * Holds this. The session is over: {@code reason} not null when it is lost for {@code code}
   * (each lease lost with it), {@code error} what calls made from now on fail with.
   */
  private void endSession(String reason, LostReason code, Throwable error) {
    boolean closing = state == State.CLOSING;
    state = State.ENDED;
    retry = Resumption.cancel(retry);
    validity.stop();
    if (stream != null) {
      Stream gone = stream;
      stream = null;
      gone.cancel(reason != null ? reason : "session closed");
    }
    endError = error;
    members.endAll(reason, code, error);
    if (reason != null && !closing) {
      lostCode = code;
      LOG.log(Level.WARNING, "session lost: {0}", reason);
      completions.later(() -> lost.complete(reason));
    }
    completions.later(() -> ended.complete(0));
  }

  /** Holds this. Schedules the next attempt to open a stream, or gives up. */
  private void scheduleAttempt(long delayMs) {
    retry = channel.isShutdown() ? null : Resumption.schedule(clock, this::attempt, delayMs);
    if (retry == null) {
      endSession("could not resume the session: the client was closed", LostReason.UNREACHABLE,
          null);
    }
  }

  private void attempt() {
    completions.locked(() -> {
      retry = null;
      boolean resuming = state == State.RESUMING || (state == State.CLOSING && !closeSent);
      if (stream != null || !resuming) {
        return;
      }
      Resumption.wake(channel);
      resumes++;
      openStream();
    });
  }

  private void onDeadline() {
    completions.locked(() -> {
      if (!validity.ranOut()) {
        return; // Re-armed meanwhile.
      }
      members.expire(lastError);
      rearm();
    });
  }

  private void onEvent(Stream from, SessionResponse event) {
    completions.locked(() -> {
      if (from != stream) {
        return; // A stream given up on.
      }
      if (state == State.RESUMING) { // Heard from: the new stream works.
        state = State.OPEN;
        resumption = null;
        brokeNanos = 0;
      }
      switch (event.getEventCase()) {
        case ACQUIRED -> {
          SessionMember member = members.get(event.getAcquired().getId());
          if (member != null) {
            member.onAcquired(event.getAcquired(), ValidityClock.vouchedUntil(from.openedNanos,
                event.getAcquired().getValidForMs(), event.getAcquired().getValidToMs()));
            rearm();
          }
        }
        case KEPT_ALIVE -> {
          keptAlives++;
          SessionKeptAlive kept = event.getKeptAlive();
          long until = ValidityClock.vouchedUntil(
              from.openedNanos, kept.getValidForMs(), kept.getValidToMs());
          members.keptAlive(from, until);
          rearm();
        }
        case PROCLAIMED -> {
          SessionMember member = members.get(event.getProclaimed().getId());
          if (member != null) {
            member.published(event.getProclaimed().getValue());
          }
        }
        case RELEASED -> {
          SessionMember member = members.get(event.getReleased().getId());
          if (member != null) {
            member.end(event.getReleased().getWasHeld());
            member.failAcquire(new IllegalStateException("released before it was acquired"));
          }
        }
        case LEASE_LOST -> {
          SessionMember member = members.get(event.getLeaseLost().getId());
          if (member != null) {
            member.onLost(event.getLeaseLost().getReason(),
                LostReason.of(event.getLeaseLost().getCode()));
            rearm();
          }
        }
        case FAILED -> {
          SessionMember member = members.get(event.getFailed().getId());
          if (member != null) {
            member.onFailed(ErrorDetails.failure(event.getFailed()));
            rearm();
          }
        }
        case CLOSED -> {
          int released = event.getClosed().getReleased();
          members.closed();
          state = State.ENDED;
          stream = null;
          validity.stop();
          retry = Resumption.cancel(retry);
          completions.later(() -> ended.complete(released));
        }
        case LOST -> {
          stream = null; // It ends next.
          endSession(event.getLost().getReason(), LostReason.of(event.getLost().getCode()),
              null);
        }
        default -> {} // waiting: nothing to do.
      }
      maybeSendClose();
    });
  }

  /** {@code status} null: the stream ended without a status, after no last word. */
  private void onEnd(Stream from, Status status, Throwable error) {
    completions.locked(() -> {
      if (from != stream) {
        return;
      }
      stream = null;
      boolean breaks = autoResume && Resumption.breaks(status);
      switch (state) {
        case OPEN, RESUMING -> {
          if (!breaks) {
            // A refusal (a bad open) is what later calls fail with; a break is a loss.
            endSession(status == null
                    ? "the server ended the session stream"
                    : "session stream failed: " + Resumption.describe(status),
                LostReason.ofStatus(status),
                status == null || Resumption.breaks(status) ? null : error);
            break;
          }
          lastError = Resumption.describe(status);
          boolean first = state == State.OPEN;
          if (first) {
            state = State.RESUMING;
            brokeNanos = System.nanoTime();
            resumption = Resumption.start();
            LOG.log(Level.DEBUG, "session: stream broke ({0}); resuming", lastError);
          } else if (TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - brokeNanos)
              >= open.getResumeGraceMs()) {
            endSession("could not resume the session within its resume grace: " + lastError,
                LostReason.UNREACHABLE, null);
            break;
          }
          detach(from);
          scheduleAttempt(first ? 0 : resumption.nextDelayMs());
        }
        case CLOSING -> {
          if (breaks && !closeSent
              && TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - brokeNanos())
                  < open.getResumeGraceMs()) {
            lastError = Resumption.describe(status);
            if (resumption == null) {
              resumption = Resumption.start();
            }
            detach(from);
            scheduleAttempt(resumption.nextDelayMs()); // Back first, then closed.
          } else {
            endSession(null, null, null); // Closed, or kept for its grace and expiring.
          }
        }
        case ENDED -> {}
      }
    });
  }

  /** Holds this. When the current run of failed attempts began (now if none). */
  private long brokeNanos() {
    if (brokeNanos == 0) {
      brokeNanos = System.nanoTime();
    }
    return brokeNanos;
  }

  /** Holds this. The leases of a broken stream wait for the next one. */
  private void detach(Stream from) {
    members.detach(from);
    rearm();
  }

  /** One {@code Session} stream. */
  final class Stream extends StreamBase<SessionRequest, SessionResponse> {
    Stream(long openedNanos) {
      super(openedNanos);
    }

    @Override
    void cancel(String why) {
      try {
        super.cancel(why);
      } catch (RuntimeException e) {
        // Over already.
      }
    }

    @Override
    public void onNext(SessionResponse event) {
      onEvent(this, event);
    }

    @Override
    void ended(Status status, Throwable error) {
      onEnd(this, status, error);
    }
  }
}
