package dev.leasehold;

import com.google.protobuf.ByteString;
import io.grpc.StatusRuntimeException;
import java.lang.System.Logger.Level;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import leasehold.v1.Session.SessionAcquire;
import leasehold.v1.Session.SessionAcquired;
import leasehold.v1.Session.SessionCampaign;
import leasehold.v1.Session.SessionProclaim;
import leasehold.v1.Session.SessionRelease;
import leasehold.v1.Session.SessionRequest;

/**
 * One lease of a {@link Session} (a lock or a leadership) and its life on the session's streams:
 * what it asks, what the server's answers about it mean, and how it lets go. The handles ({@link
 * SessionLease}, {@link SessionCandidate}) call it; {@link SessionLink} routes the stream's
 * messages to it. Guarded by the link: every method that says "Holds the link" is called holding
 * it, and the futures complete through its {@link Completions}.
 */
final class SessionMember extends Holding {
  private static final System.Logger LOG = System.getLogger(Session.class.getName());
  static final String SILENT =
      "no renewal of the session confirmed before the lease ran out (server silent)";
  static final String STALE = "acquired, but the news arrived after its validity had run out";

  /** Where one lease of the session stands. */
  enum State {
    /** Its first {@code acquire} or {@code campaign} is sent (or will be, on the next stream). */
    WAITING,
    /** Held on {@link #on}. */
    HELD,
    /** Held, between streams: its resume is to be sent, or sent on {@link #on}. */
    RESUMING,
    /** Its {@code release} is sent on {@link #on}. */
    RELEASING,
    /** Nothing more will happen. */
    ENDED
  }

  private final SessionLink link;
  final long id;
  /** The lock's or the election's name. */
  final String name;
  final boolean campaign;
  /** A lock's request, without id and wait (set for each send). */
  private final SessionAcquire.Builder acquire;
  private final long waitMs;
  private final long startedNanos = System.nanoTime();
  final CompletableFuture<Void> acquired = new CompletableFuture<>();
  final CompletableFuture<Boolean> released = new CompletableFuture<>();

  // Guarded by the link.
  State state = State.WAITING;
  /** The stream its last request went on; null while it waits for the next stream. */
  SessionLink.Stream on;
  long validUntilNanos;
  /** When ({@link System#nanoTime()}) its last fresh acquire was sent. */
  private long sentNanos;
  /** The max hold's ceiling on {@link #validUntilNanos}, fixed when held. */
  private MaxHold maxHold = MaxHold.NONE;
  /** A leadership's value now, and the one being published. */
  ByteString value;
  private ByteString proclaiming;
  /** The value its last campaign request carried. */
  private ByteString sentValue;
  private CompletableFuture<Void> proclaim;

  SessionMember(SessionLink link, long id, String name, boolean campaign,
      SessionAcquire.Builder acquire, long waitMs, ByteString value) {
    this.link = link;
    this.id = id;
    this.name = name;
    this.campaign = campaign;
    this.acquire = acquire;
    this.waitMs = waitMs;
    this.value = value;
  }

  /** The lock every field is guarded by. */
  Object lock() {
    return link;
  }

  /** Whether its validity is watched: held (or being resumed or released), not yet lost. */
  boolean vouched() {
    return token != null && !lostKnown
        && (state == State.HELD || state == State.RESUMING || state == State.RELEASING);
  }

  /** Holds the link. Its first request failed (or will never be answered): tells the caller. */
  void failAcquire(Throwable error) {
    if (!acquired.isDone()) {
      link.completions.later(() -> acquired.completeExceptionally(error));
    }
  }

  /** Holds the link. It is over: off the session, its release answered. */
  void end(boolean wasHeld) {
    state = State.ENDED;
    link.remove(this);
    link.completions.later(() -> released.complete(wasHeld));
    if (proclaim != null) {
      CompletableFuture<Void> pending = proclaim;
      proclaim = null;
      link.completions.later(() -> pending.completeExceptionally(
          new IllegalStateException("the leadership ended before the value was published")));
    }
  }

  /** Holds the link. Reports it lost for {@code code} (unless its release was asked for first). */
  void lose(String reason, LostReason code) {
    if (lostKnown) {
      return;
    }
    String told = lossOf(reason, code);
    if (told != null && token != null) {
      link.completions.later(() -> lost.complete(told));
    }
  }

  // ---- Requests. ----

  /** Holds the link. Sends its acquire or campaign on {@code stream} (a resume if it holds one). */
  void sendOn(SessionLink.Stream stream) {
    on = stream;
    boolean resume = state == State.RESUMING;
    SessionRequest.Builder request = SessionRequest.newBuilder();
    if (campaign) {
      sentValue = proclaiming != null ? proclaiming : value;
      SessionCampaign.Builder start = SessionCampaign.newBuilder()
          .setId(id)
          .setElection(name)
          .setValue(sentValue);
      if (resume) {
        start.setResumeToken(token);
      }
      request.setCampaign(start);
    } else if (resume) {
      request.setAcquire(SessionAcquire.newBuilder().setId(id).setName(name)
          .addAllMoreNames(acquire.getMoreNamesList()).setResumeToken(token));
    } else {
      // A lease asked again on a new stream waits what is left of its wait.
      long elapsedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startedNanos);
      long leftMs = Math.max(0, waitMs - elapsedMs);
      sentNanos = System.nanoTime();
      request.setAcquire(acquire.clone()
          .setId(id).setWaitMs((int) Math.min(Integer.MAX_VALUE, leftMs)));
    }
    stream.send(request.build());
  }

  /** Holds the link. Sends its release on its stream. */
  private void sendRelease() {
    state = State.RELEASING;
    on.send(SessionRequest.newBuilder()
        .setRelease(SessionRelease.newBuilder().setId(id)).build());
  }

  /** Holds the link. */
  private void sendProclaim(ByteString bytes) {
    on.send(SessionRequest.newBuilder().setProclaim(
        SessionProclaim.newBuilder().setId(id).setValue(bytes)).build());
  }

  // ---- What the server says about it. Each holds the link. ----

  /** {@code acquired} (or {@code elected}, a campaign's) vouching until {@code until}. */
  void onAcquired(SessionAcquired answer, long until) {
    // Held up on its way (a healed partition): the lease may be someone else's by now.
    boolean stale = ValidityClock.passed(until);
    switch (state) {
      case WAITING -> {
        token = answer.getToken();
        fencingToken = answer.getFencingToken();
        fences = fences(answer.getFencesList(), name, fencingToken);
        if (!campaign) {
          maxHold = MaxHold.of(sentNanos, acquire.getMaxHoldMs());
        }
        vouch(until);
        if (stale) {
          lostKnown = true; // Never reported: the caller hears it as a failure.
          sendRelease();
          failAcquire(new IllegalStateException(STALE));
        } else {
          state = State.HELD;
          link.completions.later(() -> acquired.complete(null));
        }
      }
      case RESUMING -> {
        if (lostKnown) {
          sendRelease(); // Reported lost meanwhile: let it go.
        } else if (stale) {
          lose("could not resume the lease: " + STALE, LostReason.UNREACHABLE);
          sendRelease();
        } else if (answer.getFencingToken() != fencingToken || !answer.getToken().equals(token)) {
          lose("the lease was resumed as another acquisition (fencing token "
              + answer.getFencingToken() + ", not " + fencingToken + ")", LostReason.TAKEN);
          sendRelease();
        } else {
          resumed(until);
        }
      }
      case RELEASING -> { // Its release (asked while waiting) is on its way after this.
        token = answer.getToken();
        fencingToken = answer.getFencingToken();
      }
      case HELD, ENDED -> {}
    }
  }

  /**
   * Holds the link. The server vouches for it until {@code until}: its validity, never past its
   * max hold's ceiling.
   */
  void vouch(long until) {
    validUntilNanos = maxHold.cap(until);
  }

  private void resumed(long until) {
    state = State.HELD;
    vouch(until);
    resumes++;
    LOG.log(Level.DEBUG, "session lease {0}: resumed (fencing token {1})", name, fencingToken);
    if (campaign && proclaiming != null && proclaiming.equals(sentValue)) { // Published by it.
      published(proclaiming);
    } else if (campaign && proclaiming != null && !letGo) {
      sendProclaim(proclaiming); // Asked for after the resume was sent.
    }
    if (letGo) {
      sendRelease();
    }
  }

  /** {@code proclaimed}: {@code bytes} is its value now. */
  void published(ByteString bytes) {
    value = bytes;
    proclaiming = null;
    CompletableFuture<Void> pending = proclaim;
    proclaim = null;
    if (pending != null) {
      link.completions.later(() -> pending.complete(null));
    }
  }

  /** {@code failed}: its request was refused with {@code error}. */
  void onFailed(StatusRuntimeException error) {
    String why = Resumption.describe(error.getStatus());
    LostReason code = LostReason.ofStatus(error.getStatus());
    switch (state) {
      case WAITING, RELEASING -> {
        end(false);
        failAcquire(error);
        if (token != null) {
          lose("failed: " + why, code);
        }
      }
      case RESUMING -> {
        lose("could not resume the lease: " + why, code);
        LOG.log(Level.WARNING, "session lease {0}: could not resume: {1}", name, why);
        end(false);
      }
      case HELD -> { // A proclaim refused; the leadership goes on.
        CompletableFuture<Void> pending = proclaim;
        proclaim = null;
        proclaiming = null;
        if (pending != null) {
          link.completions.later(() -> pending.completeExceptionally(error));
        }
      }
      case ENDED -> {}
    }
  }

  /** {@code lease_lost}: the server let it go, for {@code code}. */
  void onLost(String reason, LostReason code) {
    if (token == null) { // A leadership lost the moment it was won.
      failAcquire(new IllegalStateException("lost on acquisition: " + reason));
    }
    lose(reason, code);
    end(false);
  }

  /** Its stream broke: it waits for the next one. */
  void detach() {
    on = null;
    switch (state) {
      case WAITING -> {} // Asked again, fresh (a waiter that moves loses its place in line).
      case HELD, RESUMING -> {
        if (lostKnown) {
          end(false); // Kept for its grace by the server, and expires.
        } else {
          state = State.RESUMING;
        }
      }
      case RELEASING -> {
        if (token != null && !lostKnown) {
          state = State.RESUMING; // Released once back.
          letGo = true;
        } else {
          end(false);
          failAcquire(new IllegalStateException("released before it was acquired"));
        }
      }
      case ENDED -> {}
    }
  }

  /** Its validity ran out by this process's clock; {@code lastError} broke the stream, if any. */
  void expire(String lastError) {
    if (maxHold.reachedBy(validUntilNanos)) {
      // Final: the server lets it go too (lease_lost), or it is not asked back.
      lose(MaxHold.REACHED, LostReason.MAX_HOLD);
      if (state == State.RESUMING && on == null) {
        end(false);
      }
    } else if (state == State.RESUMING) {
      lose("could not resume before the lease's validity ran out: " + lastError,
          LostReason.UNREACHABLE);
      LOG.log(Level.WARNING, "session lease {0}: could not resume before its validity ran out",
          name);
      if (on == null) {
        end(false); // Not asked back: nothing to let go on a stream.
      } // Else let go when its answer comes.
    } else {
      // The stream stays: the server may still answer (and the user releases as usual).
      lose(SILENT, LostReason.UNREACHABLE);
    }
  }

  // ---- What the handles call. Each takes the link's lock. ----

  /** Lets it go: {@code true} if it was still held. */
  boolean release() {
    synchronized (link) {
      letGo = true;
      switch (state) {
        case HELD -> sendRelease();
        case WAITING -> {
          if (on != null) {
            sendRelease();
          } else {
            end(false); // Not asked for yet on this stream: nothing to let go.
            failAcquire(new IllegalStateException("released before it was acquired"));
          }
        }
        case RESUMING -> {
          if (lostKnown && on == null) {
            end(false);
          } // Else released once back (or lost).
        }
        case RELEASING, ENDED -> {}
      }
    }
    link.completions.flush();
    return stillHeld(released, link.answerWaitMs());
  }

  /** Publishes {@code bytes}, a leadership's new value; waits for the server. */
  void proclaim(byte[] bytes) throws TimeoutException, InterruptedException {
    CompletableFuture<Void> pending = new CompletableFuture<>();
    synchronized (link) {
      if (proclaim != null) {
        throw new IllegalStateException("a proclaim is already under way");
      }
      ByteString next = ByteString.copyFrom(bytes);
      switch (state) {
        case HELD -> {
          proclaiming = next;
          proclaim = pending;
          sendProclaim(next);
        }
        case RESUMING -> {
          // Published by the resume, or (its resume sent already) once it is answered: a
          // proclaim for a lease not yet held would end the session.
          proclaiming = next;
          proclaim = pending;
        }
        default -> throw new IllegalStateException("not leading: cannot proclaim");
      }
    }
    try {
      pending.get(link.answerWaitMs(), TimeUnit.MILLISECONDS);
    } catch (ExecutionException e) {
      Throwable cause = e.getCause();
      throw cause instanceof RuntimeException runtime ? runtime : new IllegalStateException(cause);
    }
  }

  /** The caller gave up waiting (interrupted): stop waiting, let it go if just taken. */
  void abandon() {
    synchronized (link) {
      letGo = true;
      if (state == State.WAITING && on != null) {
        sendRelease();
      } else if (state == State.WAITING) {
        end(false);
      } else if (state == State.HELD) {
        sendRelease();
      }
      failAcquire(new IllegalStateException("interrupted"));
    }
    link.completions.flush();
  }

  /** Whether the session's current stream holds it now (not lost, not between streams). */
  boolean attached() {
    synchronized (link) {
      return state == State.HELD && on != null && on == link.current() && !lostKnown;
    }
  }
}
