package dev.leasehold;

import com.google.protobuf.ByteString;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.stub.ClientResponseObserver;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import leasehold.v1.Election.CampaignRequest;
import leasehold.v1.Election.CampaignResponse;
import leasehold.v1.Election.CampaignStart;
import leasehold.v1.Election.Elected;
import leasehold.v1.Election.Proclaim;
import leasehold.v1.Election.Proclaimed;
import leasehold.v1.Election.Resign;
import leasehold.v1.Election.Resigned;
import leasehold.v1.ElectionServiceGrpc;
import leasehold.v1.ElectionServiceGrpc.ElectionServiceStub;
import leasehold.v1.Lock.Extended;
import leasehold.v1.Lock.Lost;

/**
 * One candidacy in an election. {@link #close()} steps down (or leaves the line). {@link #lost()}
 * completes if the candidacy ends without the candidate stepping down: the leadership was lost,
 * or the stream failed.
 *
 * <p>By default ({@link LeaseholdClient.CandidateBuilder#autoResume(boolean)}) a leader outlives
 * its stream and its server: when the stream breaks it takes its leadership back on another server
 * with the same term (observers see no change), retrying until the validity its server last
 * confirmed runs out, and a candidate still waiting in line campaigns again (at the back of the
 * line). Nothing is reported unless resuming fails; then {@link #lost()} completes, no later than
 * the end of that validity.
 *
 * <p>What it shares with a {@link Lease} (the stream, the validity, resuming, the loss) lives in
 * {@link HeldStream}; here are the campaign, its events, proclaiming and stepping down.
 */
public final class Candidate extends HeldStream<CampaignRequest, CampaignResponse>
    implements AutoCloseable {
  private static final String STALE =
      "elected, but the news arrived after the leadership's validity had run out";
  private static final Duration ANSWER_WAIT = Duration.ofSeconds(10);

  private final ElectionServiceStub stub;
  private final String election;
  private final int ttlMs;
  private final int graceMs;
  /** Events the user waits for, in order; a failed or ended stream is its last element. */
  private final LinkedBlockingQueue<Object> events = new LinkedBlockingQueue<>();

  // Guarded by this.
  private ByteString value;
  private ByteString proclaiming;

  Candidate(ManagedChannel channel, ScheduledExecutorService clock, String election, byte[] value,
      Duration ttl, boolean autoResume) {
    super(channel, clock, autoResume, "leadership", "campaign", "election " + election);
    this.stub = ElectionServiceGrpc.newStub(channel);
    this.election = election;
    this.value = ByteString.copyFrom(value);
    this.ttlMs = (int) ttl.toMillis();
    this.graceMs = autoResume ? ttlMs : 0;
    synchronized (this) {
      open(campaign(null));
    }
  }

  private CampaignResponse next(Duration timeout) throws TimeoutException, InterruptedException {
    Object event = events.poll(timeout.toMillis(), TimeUnit.MILLISECONDS);
    if (event == null) {
      throw new TimeoutException("no campaign event within " + timeout);
    }
    if (event instanceof Throwable error) {
      events.add(error); // Stays the last element for later readers.
      throw error instanceof RuntimeException runtime ? runtime : new IllegalStateException(error);
    }
    return (CampaignResponse) event;
  }

  /** Waits in line until this candidate leads; returns its term. */
  public long awaitElected(Duration timeout) throws TimeoutException, InterruptedException {
    CampaignResponse event = next(timeout);
    if (!event.hasElected()) {
      throw new IllegalStateException("expected elected, got " + event);
    }
    return event.getElected().getTerm();
  }

  /** Publishes a new value while leading (also while resuming: the resumed leadership has it). */
  public void proclaim(byte[] value) throws TimeoutException, InterruptedException {
    ByteString bytes = ByteString.copyFrom(value);
    synchronized (this) {
      if (state == State.RESUMING) {
        proclaiming = bytes; // Published when the leadership is resumed.
      } else if (stream != null && state != State.ENDED) {
        proclaiming = bytes;
        stream.send(CampaignRequest.newBuilder()
            .setProclaim(Proclaim.newBuilder().setValue(bytes)).build());
      } else {
        throw new IllegalStateException("not leading: cannot proclaim");
      }
    }
    CampaignResponse event = next(answerWait());
    if (!event.hasProclaimed()) {
      throw new IllegalStateException("proclaim refused: " + event);
    }
  }

  /** Completes with the reason if the candidacy ends without stepping down (e.g. leadership lost). */
  public CompletableFuture<String> lost() {
    return lost;
  }

  /**
   * Why the candidacy was lost, once it is (set before {@link #lost()} completes): {@link
   * LostReason#REVOKED} if an operator revoked the leadership. Empty while it is not lost.
   */
  public synchronized Optional<LostReason> lostCode() {
    return Optional.ofNullable(lostCode);
  }

  /** The term once elected (the leadership lease's fencing token); 0 before. */
  public synchronized long term() {
    return fencingToken;
  }

  /**
   * Whether this candidate leads now, as far as it knows: elected, neither lost nor stepping down,
   * and (with a resume grace, the default, under which its server confirms each renewal) the
   * validity its server last confirmed not yet run out by this process's own clock. Also true
   * between two streams while it resumes within that validity. The clock is read here, not only
   * by the timer that ends the leadership: a process woken from a freeze that outlasted its
   * validity answers {@code false} at once, before that timer has run.
   */
  public synchronized boolean isLeader() {
    if ((state != State.HELD && state != State.RESUMING) || lostKnown || letGo) {
      return false;
    }
    return !clocked() || !ValidityClock.passed(validity.validUntilNanos());
  }

  /** How many times this leadership was resumed on a new stream. */
  synchronized int resumes() {
    return resumes;
  }

  /** Steps down now; {@code true} if this candidate was leading. */
  public boolean resign() {
    synchronized (this) {
      if (letGo) {
        return false;
      }
      letGo = true;
      switch (state) {
        case STARTING, HELD -> {
          if (stream == null) { // Between two campaigns: nothing to step down from.
            cancelRetry();
            state = State.ENDED;
            return false;
          }
          sendStop(stream);
        }
        case RESUMING -> {} // Resigns on the resumed stream, or fails.
        case STOPPING, ENDED -> {
          return false;
        }
      }
    }
    try {
      while (true) {
        CampaignResponse event = next(answerWait());
        if (event.hasResigned()) {
          return event.getResigned().getWasLeader();
        }
        if (event.hasLost()) {
          return false;
        }
      }
    } catch (TimeoutException | RuntimeException e) {
      return false;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    }
  }

  @Override
  public void close() {
    resign();
  }

  /** Long enough for a resume under way to succeed or fail. */
  private Duration answerWait() {
    return ANSWER_WAIT.plusMillis(ttlMs);
  }

  /** Holds this. A campaign's start (resuming {@code resumeToken} if not null). */
  private CampaignRequest campaign(String resumeToken) {
    CampaignStart.Builder start = CampaignStart.newBuilder()
        .setElection(election)
        .setValue(proclaiming != null ? proclaiming : value)
        .setTtlMs(ttlMs)
        .setResumeGraceMs(graceMs);
    if (resumeToken != null) {
      start.setResumeToken(resumeToken);
    }
    return CampaignRequest.newBuilder().setStart(start).build();
  }

  @Override
  void call(ClientResponseObserver<CampaignRequest, CampaignResponse> observer) {
    stub.campaign(observer);
  }

  @Override
  CampaignRequest resumeRequest() {
    return campaign(token);
  }

  @Override
  CampaignRequest stopRequest() {
    return CampaignRequest.newBuilder().setResign(Resign.getDefaultInstance()).build();
  }

  @Override
  String stale() {
    return STALE;
  }

  /** No {@code extended} without a grace: the server alone watches the leadership. */
  @Override
  boolean clocked() {
    return graceMs != 0;
  }

  @Override
  String closedReason() {
    return "the client was closed";
  }

  @Override
  String mismatch(String token, long term) {
    return term == fencingToken ? null
        : "the leadership was resumed with another term (" + term + ", not " + fencingToken + ")";
  }

  @Override
  void onMessage(Stream from, CampaignResponse event) {
    switch (event.getEventCase()) {
      case ELECTED -> {
        Elected elected = event.getElected();
        tell(held(from, event, elected.getToken(), elected.getTerm(), elected.getValidForMs(),
            elected.getValidToMs()));
      }
      case EXTENDED -> {
        Extended extended = event.getExtended();
        extended(from, extended.getValidForMs(), extended.getValidToMs());
      }
      case PROCLAIMED -> {
        value = event.getProclaimed().getValue();
        proclaiming = null;
        events.add(event);
      }
      case LOST -> {
        state = State.ENDED;
        stream = null;
        validity.stop();
        Lost news = event.getLost();
        tell(lossOf(news.getReason(), LostReason.of(news.getCode())));
        events.add(event);
      }
      case RESIGNED -> {
        state = State.ENDED;
        stream = null;
        validity.stop();
        events.add(event);
      }
      default -> {}
    }
  }

  @Override
  void onHeld(CampaignResponse event) {
    events.add(event);
  }

  @Override
  String onStaleStart() {
    events.add(CampaignResponse.newBuilder().setLost(Lost.newBuilder().setReason(STALE)).build());
    return lossOf(STALE, LostReason.UNREACHABLE);
  }

  @Override
  void onResumed(Stream on) {
    if (proclaiming != null) { // Published by the resume: that proclaim is answered.
      value = proclaiming;
      proclaiming = null;
      events.add(CampaignResponse.newBuilder()
          .setProclaimed(Proclaimed.newBuilder().setValue(value)).build());
    }
    debug("leadership resumed (term {1})", fencingToken);
    if (letGo) {
      sendStop(on);
    }
  }

  @Override
  void onEnded(String reason, Throwable failure) {
    events.add(failure != null ? failure : new IllegalStateException(reason));
  }

  @Override
  String startEnded(Status status, Throwable error) {
    if (broke(status) && letGo) { // Out of line anyway.
      state = State.ENDED;
      events.add(CampaignResponse.newBuilder()
          .setResigned(Resigned.newBuilder().setWasLeader(false)).build());
      return null;
    } else if (broke(status)) {
      // Campaign again (a moved candidate joins the back of the line).
      if (resumption == null) {
        resumption = Resumption.start();
      }
      return scheduleAttempt(resumption.nextDelayMs());
    }
    return failStream(status, error);
  }

  @Override
  void startAgain() {
    Resumption.wake(channel);
    open(campaign(null));
  }

  @Override
  void resumeAgain() {
    if (!ValidityClock.passed(validity.validUntilNanos())) {
      super.resumeAgain();
      return;
    }
    // Woken past the validity (a frozen process): whatever the server still keeps, this
    // leadership is over by this process's clock; the timer may not have run yet.
    String loss = fail(tooLate(), LostReason.UNREACHABLE, null);
    warn(loss);
    tell(loss);
  }
}
