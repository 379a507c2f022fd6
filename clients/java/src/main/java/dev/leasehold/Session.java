package dev.leasehold;

import com.google.protobuf.ByteString;
import com.google.protobuf.InvalidProtocolBufferException;
import io.grpc.ConnectivityState;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.lang.System.Logger.Level;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import leasehold.v1.Lock.LeaseMode;
import leasehold.v1.Session.SessionAcquire;
import leasehold.v1.Session.SessionAcquired;
import leasehold.v1.Session.SessionCampaign;
import leasehold.v1.Session.SessionClose;
import leasehold.v1.Session.SessionFailed;
import leasehold.v1.Session.SessionKeptAlive;
import leasehold.v1.Session.SessionOpen;
import leasehold.v1.Session.SessionProclaim;
import leasehold.v1.Session.SessionRelease;
import leasehold.v1.Session.SessionRequest;
import leasehold.v1.Session.SessionResponse;
import leasehold.v1.SessionServiceGrpc;
import leasehold.v1.SessionServiceGrpc.SessionServiceStub;

/**
 * Many leases on one stream, as etcd's {@code concurrency.Session} hangs any number of mutexes and
 * elections on one lease: every lease shares the session's TTL and resume grace, and the server
 * renews them together and confirms them all with one message per renewal period. {@link #close()}
 * releases every lease still held.
 *
 * <pre>{@code
 * try (Session session = client.session(new SessionOptions().ttl(Duration.ofSeconds(10)));
 *      SessionLease a = session.acquire("shard-1");
 *      SessionLease b = session.acquire("shard-2", new Session.AcquireOptions().limit(2))) {
 *   session.lost().thenAccept(reason -> stopAll(reason));
 *   a.lost().thenAccept(reason -> stopShard1(reason));
 *   work(a.fencingToken(), b.fencingToken());
 * } // released here
 * }</pre>
 *
 * <p>Each lease is believed held until the validity the server last vouched for it runs out by
 * this process's clock: its {@code acquired}, then every later confirmation of the session. One
 * lease can be lost alone ({@link SessionLease#lost()}: its key was deleted or taken, or no
 * confirmation came in time); the whole session is lost ({@link #lost()}, and every lease with it)
 * when the server says so or when it cannot be resumed.
 *
 * <p>By default the session outlives its stream and its server: when the stream breaks (a server
 * stopped or crashed, the connection failed), it opens a new stream on another server and takes
 * every held lease back (same token, same fencing token) without telling anyone, retrying with
 * backoff within the resume grace; a lease still waiting for its lock asks again there. Nothing is
 * reported unless that fails.
 */
public final class Session implements AutoCloseable {
  private static final System.Logger LOG = System.getLogger(Session.class.getName());
  static final String SILENT =
      "no renewal of the session confirmed before the lease ran out (server silent)";
  static final String STALE = "acquired, but the news arrived after its validity had run out";
  private static final Duration ANSWER_WAIT = Duration.ofSeconds(10);

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

  /** Where one lease of the session stands. */
  enum MemberState {
    /** Its first {@code acquire} or {@code campaign} is sent (or will be, on the next stream). */
    WAITING,
    /** Held on {@link Member#on}. */
    HELD,
    /** Held, between streams: its resume is to be sent, or sent on {@link Member#on}. */
    RESUMING,
    /** Its {@code release} is sent on {@link Member#on}. */
    RELEASING,
    /** Nothing more will happen. */
    ENDED
  }

  private final ManagedChannel channel;
  private final SessionServiceStub stub;
  private final ScheduledExecutorService clock;
  private final SessionOpen open;
  private final boolean autoResume;
  private final ValidityClock validity;
  private final CompletableFuture<String> lost = new CompletableFuture<>();
  private final CompletableFuture<Integer> ended = new CompletableFuture<>();

  // Guarded by this.
  private State state = State.OPEN;
  private Stream stream;
  private final Map<Long, Member> members = new LinkedHashMap<>();
  private long nextId = 1;
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
  /** Futures to complete once the lock is let go (their callbacks run user code). */
  private final List<Runnable> deferred = new ArrayList<>();

  Session(ManagedChannel channel, ScheduledExecutorService clock, SessionOptions options) {
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

  /** Options of one lock on a session; the session gives the TTL, grace and default holder. */
  public static final class AcquireOptions {
    private Duration wait = Duration.ZERO;
    private String holder = "";
    private Boolean fair;
    private int limit;
    private boolean shared;

    /** Fail at once if the lock is taken, exclusive, the session's holder: the defaults. */
    public AcquireOptions() {}

    /** How long to wait for a taken lock (default: fail at once). */
    public AcquireOptions waitUpTo(Duration wait) {
      this.wait = Lease.positive(wait, "wait");
      return this;
    }

    /** How others see this holder (default: the session's). */
    public AcquireOptions holder(String holder) {
      this.holder = holder == null ? "" : holder;
      return this;
    }

    /** Wait in line (the default) or race for the lock whenever it frees. */
    public AcquireOptions fair(boolean fair) {
      this.fair = fair;
      return this;
    }

    /**
     * Lets up to {@code limit} leases hold the name at once (a semaphore; default 1, a plain
     * lock). Every holder of one name must give the same limit (else FAILED_PRECONDITION).
     */
    public AcquireOptions limit(int limit) {
      if (limit < 1) {
        throw new IllegalArgumentException("limit must be at least 1, got " + limit);
      }
      this.limit = limit;
      return this;
    }

    /** Holds the name with other shared leases (readers); an exclusive one waits for them all. */
    public AcquireOptions shared() {
      this.shared = true;
      return this;
    }

    SessionAcquire.Builder request(String name) {
      SessionAcquire.Builder request = SessionAcquire.newBuilder()
          .setName(name)
          .setHolder(holder)
          .setLimit(limit);
      if (fair != null) {
        request.setFair(fair);
      }
      if (shared) {
        request.setMode(LeaseMode.LEASE_MODE_SHARED);
      }
      return request;
    }
  }

  /** Takes lock {@code name} on the session, failing at once if it is taken. */
  public SessionLease acquire(String name) throws NotAcquiredException {
    return acquire(name, new AcquireOptions());
  }

  /**
   * Takes lock {@code name} on the session, waiting as {@code options} say. Throws {@link
   * NotAcquiredException} (with the server's details) when the lock stays taken, a {@link
   * StatusRuntimeException} when the server refuses it otherwise (INVALID_ARGUMENT,
   * FAILED_PRECONDITION, ...), and {@link IllegalStateException} when the session is over.
   */
  public SessionLease acquire(String name, AcquireOptions options) throws NotAcquiredException {
    Member member;
    synchronized (this) {
      member = add(new Member(nextId++, name, false, options.request(name),
          options.wait.toMillis(), null));
    }
    flush();
    try {
      member.acquired.get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      member.abandon();
      throw new IllegalStateException("interrupted while acquiring " + name, e);
    } catch (ExecutionException e) {
      throw ErrorDetails.failure(e.getCause());
    }
    return new SessionLease(member);
  }

  /**
   * Runs for leader of {@code election} on the session, publishing {@code value}; returns at once
   * ({@link SessionCandidate#awaitElected} waits). The candidate waits in line as long as the
   * session lives.
   */
  public SessionCandidate campaign(String election, byte[] value) {
    Member member;
    synchronized (this) {
      member = add(new Member(nextId++, election, true, null, 0, ByteString.copyFrom(value)));
    }
    flush();
    return new SessionCandidate(member);
  }

  /**
   * Completes with the reason once the whole session is lost: every lease on it is then lost too
   * (each one's own signal says so). Never completes if the session was closed first.
   */
  public CompletableFuture<String> lost() {
    return lost;
  }

  /** Whether the whole session is known to be lost. */
  public boolean isLost() {
    return lost.isDone();
  }

  /**
   * Releases every lease of the session and ends it, waiting for the server (bounded); between
   * streams it first takes them back, then releases them. Leases still waiting stop waiting.
   */
  @Override
  public void close() {
    synchronized (this) {
      if (state != State.ENDED && state != State.CLOSING) {
        state = State.CLOSING;
        for (Member member : new ArrayList<>(members.values())) {
          member.releaseRequested = true;
          if (member.state == MemberState.WAITING) { // Stops waiting with the session.
            end(member, false);
            member.failAcquire(new IllegalStateException("the session was closed"));
          }
        }
        if (stream == null && retry == null) {
          endSession(null, null);
        } else {
          maybeSendClose();
        }
      }
    }
    flush();
    try {
      ended.get(ANSWER_WAIT.toMillis() + open.getTtlMs(), TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (ExecutionException | TimeoutException e) {
      // Gone below.
    }
    synchronized (this) {
      if (state != State.ENDED) {
        LOG.log(Level.WARNING, "session: not closed within the wait; its leases expire by their TTL");
        endSession(null, null);
      }
    }
    flush();
  }

  /** How many times the server confirmed the session (its {@code kept_alive} messages heard). */
  synchronized int keptAlives() {
    return keptAlives;
  }

  /** How many times the session was opened again on a new stream after a break. */
  synchronized int resumes() {
    return resumes;
  }

  /** The session's state, for tests: OPEN, RESUMING, CLOSING or ENDED. */
  synchronized String state() {
    return state.name();
  }

  /** The number of leases open on the session (waiting or held). */
  synchronized int size() {
    return members.size();
  }

  // ---- Internals. Every method below that says "Holds this" is called holding the lock. ----

  /** Holds this. Registers a new lease and sends it if a stream is open. */
  private Member add(Member member) {
    if (state == State.ENDED || state == State.CLOSING) {
      throw endError instanceof RuntimeException runtime && state == State.ENDED
          ? copy(runtime)
          : new IllegalStateException("the session is " + (isLost()
              ? "lost: " + lost.getNow("") : "closed"));
    }
    members.put(member.id, member);
    if (stream != null) {
      send(member, stream);
    }
    return member;
  }

  /** A fresh exception for each caller (its stack trace theirs), keeping a status as it was. */
  private static RuntimeException copy(RuntimeException error) {
    if (error instanceof StatusRuntimeException status) {
      return new StatusRuntimeException(status.getStatus(), status.getTrailers());
    }
    return new IllegalStateException(error.getMessage(), error);
  }

  /** Runs the futures' completions deferred while holding the lock. */
  private void flush() {
    while (true) {
      List<Runnable> todo;
      synchronized (this) {
        if (deferred.isEmpty()) {
          return;
        }
        todo = new ArrayList<>(deferred);
        deferred.clear();
      }
      for (Runnable task : todo) {
        try {
          task.run();
        } catch (RuntimeException e) {
          LOG.log(Level.WARNING, "session: a callback failed", e);
        }
      }
    }
  }

  /** Holds this. */
  private void later(Runnable task) {
    deferred.add(task);
  }

  /** Holds this. Opens a stream: the open, then every lease not on a stream yet. */
  private void openStream() {
    Stream next = new Stream(System.nanoTime()); // Before the server can see it.
    stream = next;
    closeSent = false;
    stub.session(next);
    next.send(SessionRequest.newBuilder().setOpen(open).build());
    for (Member member : members.values()) {
      if (member.on == null
          && (member.state == MemberState.WAITING || member.state == MemberState.RESUMING)) {
        send(member, next);
      }
    }
    maybeSendClose();
  }

  /** Holds this. Sends {@code member}'s acquire or campaign (a resume if it holds a token). */
  private void send(Member member, Stream on) {
    member.on = on;
    boolean resume = member.state == MemberState.RESUMING;
    SessionRequest.Builder request = SessionRequest.newBuilder();
    if (member.campaign) {
      member.sentValue = member.proclaiming != null ? member.proclaiming : member.value;
      SessionCampaign.Builder campaign = SessionCampaign.newBuilder()
          .setId(member.id)
          .setElection(member.name)
          .setValue(member.sentValue);
      if (resume) {
        campaign.setResumeToken(member.token);
      }
      request.setCampaign(campaign);
    } else if (resume) {
      request.setAcquire(SessionAcquire.newBuilder()
          .setId(member.id).setName(member.name).setResumeToken(member.token));
    } else {
      // A lease asked again on a new stream waits what is left of its wait.
      long elapsedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - member.startedNanos);
      long waitMs = Math.max(0, member.waitMs - elapsedMs);
      request.setAcquire(member.acquire.clone()
          .setId(member.id).setWaitMs((int) Math.min(Integer.MAX_VALUE, waitMs)));
    }
    on.send(request.build());
  }

  /** Holds this. Sends {@code close} once no resume is still unanswered. */
  private void maybeSendClose() {
    if (state != State.CLOSING || stream == null || closeSent) {
      return;
    }
    for (Member member : members.values()) {
      if (member.state == MemberState.RESUMING && member.on == stream) {
        return; // Closed once it is back (or failed), so that the close releases it.
      }
    }
    closeSent = true;
    stream.send(SessionRequest.newBuilder().setClose(SessionClose.getDefaultInstance()).build());
    stream.halfClose();
  }

  /** Holds this. Sends {@code member}'s release on its stream. */
  private void sendRelease(Member member) {
    member.state = MemberState.RELEASING;
    member.on.send(SessionRequest.newBuilder()
        .setRelease(SessionRelease.newBuilder().setId(member.id)).build());
  }

  /** Holds this. */
  private void sendProclaim(Member member, ByteString value) {
    member.on.send(SessionRequest.newBuilder().setProclaim(
        SessionProclaim.newBuilder().setId(member.id).setValue(value)).build());
  }

  /** Holds this. {@code member} is over: off the session, its release answered. */
  private void end(Member member, boolean wasHeld) {
    member.state = MemberState.ENDED;
    members.remove(member.id);
    later(() -> member.released.complete(wasHeld));
    if (member.proclaim != null) {
      CompletableFuture<Void> pending = member.proclaim;
      member.proclaim = null;
      later(() -> pending.completeExceptionally(
          new IllegalStateException("the leadership ended before the value was published")));
    }
  }

  /** Holds this. Reports {@code member} lost (unless its release was asked for first). */
  private void loseMember(Member member, String reason) {
    if (member.lostKnown) {
      return;
    }
    member.lostKnown = true;
    if (!member.releaseRequested && member.token != null) {
      later(() -> member.lost.complete(reason));
    }
  }

  /** Holds this. Arms the session's one timer for the earliest validity of a held lease. */
  private void rearm() {
    long earliest = 0;
    boolean any = false;
    for (Member member : members.values()) {
      if (member.vouched()) {
        if (!any || member.validUntilNanos - earliest < 0) {
          earliest = member.validUntilNanos;
        }
        any = true;
      }
    }
    if (any) {
      validity.arm(earliest);
    } else {
      validity.stop();
    }
  }

  /** Holds this. */
  private void cancelRetry() {
    retry = Resumption.cancel(retry);
  }

  /**
   * Holds this. The session is over: {@code reason} not null when it is lost (each lease lost
   * with it), {@code error} what calls made from now on fail with.
   */
  private void endSession(String reason, Throwable error) {
    boolean closing = state == State.CLOSING;
    state = State.ENDED;
    cancelRetry();
    validity.stop();
    if (stream != null) {
      Stream gone = stream;
      stream = null;
      gone.cancel(reason != null ? reason : "session closed");
    }
    endError = error;
    String loss = reason == null ? "the session ended" : reason;
    for (Member member : new ArrayList<>(members.values())) {
      if (member.token != null) {
        loseMember(member, "the session was lost: " + loss);
      }
      end(member, false);
      member.failAcquire(error != null ? error
          : new IllegalStateException("the session " + (reason == null ? "was closed" : "was lost: " + reason)));
    }
    if (reason != null && !closing) {
      LOG.log(Level.WARNING, "session lost: {0}", reason);
      later(() -> lost.complete(reason));
    }
    later(() -> ended.complete(0));
  }

  /** Holds this. Schedules the next attempt to open a stream, or gives up. */
  private void scheduleAttempt(long delayMs) {
    retry = channel.isShutdown() ? null : Resumption.schedule(clock, this::attempt, delayMs);
    if (retry == null) {
      endSession("could not resume the session: the client was closed", null);
    }
  }

  private void attempt() {
    synchronized (this) {
      retry = null;
      boolean resuming = state == State.RESUMING || (state == State.CLOSING && !closeSent);
      if (stream != null || !resuming) {
        return;
      }
      if (channel.getState(false) == ConnectivityState.TRANSIENT_FAILURE) {
        channel.resetConnectBackoff(); // Try every server again now, not at the channel's pace.
      }
      resumes++;
      openStream();
    }
    flush();
  }

  private void onDeadline() {
    synchronized (this) {
      if (!validity.ranOut()) {
        return; // Re-armed meanwhile.
      }
      for (Member member : new ArrayList<>(members.values())) {
        if (!member.vouched() || !ValidityClock.passed(member.validUntilNanos)) {
          continue;
        }
        if (member.state == MemberState.RESUMING) {
          loseMember(member, "could not resume before the lease's validity ran out: " + lastError);
          LOG.log(Level.WARNING, "session lease {0}: could not resume before its validity ran out",
              member.name);
          if (member.on == null) {
            end(member, false); // Not asked back: nothing to let go on a stream.
          } // Else let go when its answer comes.
        } else {
          // The stream stays: the server may still answer (and the user releases as usual).
          loseMember(member, SILENT);
        }
      }
      rearm();
    }
    flush();
  }

  private void onEvent(Stream from, SessionResponse event) {
    synchronized (this) {
      if (from != stream) {
        return; // A stream given up on.
      }
      if (state == State.RESUMING) { // Heard from: the new stream works.
        state = State.OPEN;
        resumption = null;
        brokeNanos = 0;
      }
      switch (event.getEventCase()) {
        case ACQUIRED -> onAcquired(from, event.getAcquired());
        case KEPT_ALIVE -> {
          keptAlives++;
          SessionKeptAlive kept = event.getKeptAlive();
          long until = ValidityClock.vouchedUntil(
              from.openedNanos, kept.getValidForMs(), kept.getValidToMs());
          for (Member member : members.values()) {
            // Vouches for every lease acquired on this stream before it.
            if (member.vouched() && member.on == from && member.state != MemberState.RESUMING) {
              member.validUntilNanos = until;
            }
          }
          rearm();
        }
        case PROCLAIMED -> {
          Member member = members.get(event.getProclaimed().getId());
          if (member != null) {
            member.value = event.getProclaimed().getValue();
            member.proclaiming = null;
            CompletableFuture<Void> pending = member.proclaim;
            member.proclaim = null;
            if (pending != null) {
              later(() -> pending.complete(null));
            }
          }
        }
        case RELEASED -> {
          Member member = members.get(event.getReleased().getId());
          if (member != null) {
            end(member, event.getReleased().getWasHeld());
            member.failAcquire(new IllegalStateException("released before it was acquired"));
          }
        }
        case LEASE_LOST -> {
          Member member = members.get(event.getLeaseLost().getId());
          if (member != null) {
            String reason = event.getLeaseLost().getReason();
            if (member.token == null) { // A leadership lost the moment it was won.
              member.failAcquire(new IllegalStateException("lost on acquisition: " + reason));
            }
            loseMember(member, reason);
            end(member, false);
            rearm();
          }
        }
        case FAILED -> onFailed(event.getFailed());
        case CLOSED -> {
          int released = event.getClosed().getReleased();
          for (Member member : new ArrayList<>(members.values())) {
            end(member, member.token != null && !member.lostKnown);
            member.failAcquire(new IllegalStateException("the session was closed"));
          }
          state = State.ENDED;
          stream = null;
          validity.stop();
          cancelRetry();
          later(() -> ended.complete(released));
        }
        case LOST -> {
          stream = null; // It ends next.
          endSession(event.getLost().getReason(), null);
        }
        default -> {} // waiting: nothing to do.
      }
      maybeSendClose();
    }
    flush();
  }

  /** Holds this. */
  private void onAcquired(Stream from, SessionAcquired answer) {
    Member member = members.get(answer.getId());
    if (member == null) {
      return;
    }
    long until = ValidityClock.vouchedUntil(
        from.openedNanos, answer.getValidForMs(), answer.getValidToMs());
    // Held up on its way (a healed partition): the lease may be someone else's by now.
    boolean stale = ValidityClock.passed(until);
    switch (member.state) {
      case WAITING -> {
        member.token = answer.getToken();
        member.fencingToken = answer.getFencingToken();
        member.validUntilNanos = until;
        if (stale) {
          member.lostKnown = true; // Never reported: the caller hears it as a failure.
          sendRelease(member);
          member.failAcquire(new IllegalStateException(STALE));
        } else {
          member.state = MemberState.HELD;
          later(() -> member.acquired.complete(null));
        }
      }
      case RESUMING -> {
        if (member.lostKnown) {
          sendRelease(member); // Reported lost meanwhile: let it go.
        } else if (stale) {
          loseMember(member, "could not resume the lease: " + STALE);
          sendRelease(member);
        } else if (answer.getFencingToken() != member.fencingToken
            || !answer.getToken().equals(member.token)) {
          loseMember(member, "the lease was resumed as another acquisition (fencing token "
              + answer.getFencingToken() + ", not " + member.fencingToken + ")");
          sendRelease(member);
        } else {
          member.state = MemberState.HELD;
          member.validUntilNanos = until;
          member.resumes++;
          LOG.log(Level.DEBUG, "session lease {0}: resumed (fencing token {1})",
              member.name, member.fencingToken);
          if (member.campaign && member.proclaiming != null
              && member.proclaiming.equals(member.sentValue)) { // Published by the resume.
            member.value = member.proclaiming;
            member.proclaiming = null;
            CompletableFuture<Void> pending = member.proclaim;
            member.proclaim = null;
            if (pending != null) {
              later(() -> pending.complete(null));
            }
          } else if (member.campaign && member.proclaiming != null && !member.releaseRequested) {
            sendProclaim(member, member.proclaiming); // Asked for after the resume was sent.
          }
          if (member.releaseRequested) {
            sendRelease(member);
          }
        }
      }
      case RELEASING -> { // Its release (asked while waiting) is on its way after this.
        member.token = answer.getToken();
        member.fencingToken = answer.getFencingToken();
      }
      case HELD, ENDED -> {}
    }
    rearm();
  }

  /** Holds this. */
  private void onFailed(SessionFailed failed) {
    Member member = members.get(failed.getId());
    if (member == null) {
      return;
    }
    StatusRuntimeException error = failure(failed);
    switch (member.state) {
      case WAITING, RELEASING -> {
        end(member, false);
        member.failAcquire(error);
        if (member.token != null) {
          loseMember(member, "failed: " + Resumption.describe(error.getStatus()));
        }
      }
      case RESUMING -> {
        loseMember(member, "could not resume the lease: " + Resumption.describe(error.getStatus()));
        LOG.log(Level.WARNING, "session lease {0}: could not resume: {1}", member.name,
            Resumption.describe(error.getStatus()));
        end(member, false);
      }
      case HELD -> { // A proclaim refused; the leadership goes on.
        CompletableFuture<Void> pending = member.proclaim;
        member.proclaim = null;
        member.proclaiming = null;
        if (pending != null) {
          later(() -> pending.completeExceptionally(error));
        }
      }
      case ENDED -> {}
    }
    rearm();
  }

  /**
   * A {@code failed} answer as the exception a Lease stream's status would have been: the
   * serialized {@code google.rpc.Status} (with its ErrorInfo and RetryInfo) in the trailers,
   * where {@link ErrorDetails} reads them.
   */
  static StatusRuntimeException failure(SessionFailed failed) {
    com.google.rpc.Status.Builder status = com.google.rpc.Status.newBuilder();
    if (!failed.getStatus().isEmpty()) {
      try {
        status.mergeFrom(failed.getStatus());
      } catch (InvalidProtocolBufferException unreadable) {
        status.clear(); // Details we cannot read are details we do not have.
      }
    }
    status.setCode(failed.getCode()).setMessage(failed.getMessage());
    return StatusProto.toStatusRuntimeException(status.build());
  }

  /** {@code status} null: the stream ended without a status, after no last word. */
  private void onEnd(Stream from, Status status, Throwable error) {
    synchronized (this) {
      if (from != stream) {
        return;
      }
      stream = null;
      boolean breaks = autoResume && Resumption.breaks(status);
      String failure = status == null
          ? "the server ended the session stream"
          : "session stream failed: " + Resumption.describe(status);
      switch (state) {
        case OPEN, RESUMING -> {
          if (!breaks) {
            // A refusal (a bad open) is what later calls fail with; a break is a loss.
            endSession(failure, status == null || Resumption.breaks(status) ? null : error);
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
            endSession("could not resume the session within its resume grace: " + lastError, null);
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
            endSession(null, null); // Closed, or kept for its grace and expiring.
          }
        }
        case ENDED -> {}
      }
    }
    flush();
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
    for (Member member : new ArrayList<>(members.values())) {
      if (member.on != from) {
        continue;
      }
      member.on = null;
      switch (member.state) {
        case WAITING -> {} // Asked again, fresh (a waiter that moves loses its place in line).
        case HELD, RESUMING -> {
          if (member.lostKnown) {
            end(member, false); // Kept for its grace by the server, and expires.
          } else {
            member.state = MemberState.RESUMING;
          }
        }
        case RELEASING -> {
          if (member.token != null && !member.lostKnown) {
            member.state = MemberState.RESUMING; // Released once back.
            member.releaseRequested = true;
          } else {
            end(member, false);
            member.failAcquire(new IllegalStateException("released before it was acquired"));
          }
        }
        case ENDED -> {}
      }
    }
    rearm();
  }

  // ---- What the handles call. ----

  /** Lets {@code member} go: {@code true} if it was still held. */
  boolean release(Member member) {
    synchronized (this) {
      member.releaseRequested = true;
      switch (member.state) {
        case HELD -> sendRelease(member);
        case WAITING -> {
          if (member.on != null) {
            sendRelease(member);
          } else {
            end(member, false); // Not asked for yet on this stream: nothing to let go.
            member.failAcquire(new IllegalStateException("released before it was acquired"));
          }
        }
        case RESUMING -> {
          if (member.lostKnown && member.on == null) {
            end(member, false);
          } // Else released once back (or lost).
        }
        case RELEASING, ENDED -> {}
      }
    }
    flush();
    try {
      return member.released.get(ANSWER_WAIT.toMillis() + open.getTtlMs(), TimeUnit.MILLISECONDS)
          && !member.lost.isDone();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    } catch (ExecutionException | TimeoutException e) {
      return false;
    }
  }

  /** Publishes {@code value} for {@code member}, a leadership; waits for the server. */
  void proclaim(Member member, byte[] value) throws TimeoutException, InterruptedException {
    CompletableFuture<Void> pending = new CompletableFuture<>();
    synchronized (this) {
      if (member.proclaim != null) {
        throw new IllegalStateException("a proclaim is already under way");
      }
      ByteString bytes = ByteString.copyFrom(value);
      switch (member.state) {
        case HELD -> {
          member.proclaiming = bytes;
          member.proclaim = pending;
          sendProclaim(member, bytes);
        }
        case RESUMING -> {
          // Published by the resume, or (its resume sent already) once it is answered: a
          // proclaim for a lease not yet held would end the session.
          member.proclaiming = bytes;
          member.proclaim = pending;
        }
        default -> throw new IllegalStateException("not leading: cannot proclaim");
      }
    }
    try {
      pending.get(ANSWER_WAIT.toMillis() + open.getTtlMs(), TimeUnit.MILLISECONDS);
    } catch (ExecutionException e) {
      Throwable cause = e.getCause();
      throw cause instanceof RuntimeException runtime ? runtime : new IllegalStateException(cause);
    }
  }

  synchronized boolean attached(Member member) {
    return member.state == MemberState.HELD && member.on == stream && stream != null
        && !member.lostKnown;
  }

  /** One lease of the session, with its state; the handles ({@link SessionLease}, {@link
   * SessionCandidate}) read it. Guarded by the session. */
  final class Member {
    final long id;
    /** The lock's or the election's name. */
    final String name;
    final boolean campaign;
    /** A lock's request, without id and wait (set for each send). */
    final SessionAcquire.Builder acquire;
    final long waitMs;
    final long startedNanos = System.nanoTime();
    final CompletableFuture<Void> acquired = new CompletableFuture<>();
    final CompletableFuture<String> lost = new CompletableFuture<>();
    final CompletableFuture<Boolean> released = new CompletableFuture<>();

    MemberState state = MemberState.WAITING;
    /** The stream its last request went on; null while it waits for the next stream. */
    Stream on;
    String token;
    long fencingToken;
    long validUntilNanos;
    boolean lostKnown;
    boolean releaseRequested;
    int resumes;
    /** A leadership's value now, and the one being published. */
    ByteString value;
    ByteString proclaiming;
    /** The value its last campaign request carried. */
    ByteString sentValue;
    CompletableFuture<Void> proclaim;

    Member(long id, String name, boolean campaign, SessionAcquire.Builder acquire, long waitMs,
        ByteString value) {
      this.id = id;
      this.name = name;
      this.campaign = campaign;
      this.acquire = acquire;
      this.waitMs = waitMs;
      this.value = value;
    }

    Session session() {
      return Session.this;
    }

    /** Whether its validity is watched: held (or being resumed or released), not yet lost. */
    boolean vouched() {
      return token != null && !lostKnown && (state == MemberState.HELD
          || state == MemberState.RESUMING || state == MemberState.RELEASING);
    }

    /** Holds the session. */
    void failAcquire(Throwable error) {
      if (!acquired.isDone()) {
        later(() -> acquired.completeExceptionally(error));
      }
    }

    /** The caller gave up waiting (interrupted): stop waiting, let it go if just taken. */
    void abandon() {
      synchronized (Session.this) {
        releaseRequested = true;
        if (state == MemberState.WAITING && on != null) {
          sendRelease(this);
        } else if (state == MemberState.WAITING) {
          end(this, false);
        } else if (state == MemberState.HELD) {
          sendRelease(this);
        }
        failAcquire(new IllegalStateException("interrupted"));
      }
      flush();
    }
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
