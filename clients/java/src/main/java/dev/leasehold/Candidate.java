package dev.leasehold;

import com.google.protobuf.ByteString;
import io.grpc.ConnectivityState;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import java.lang.System.Logger.Level;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
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
 */
public final class Candidate implements AutoCloseable {
  private static final System.Logger LOG = System.getLogger(Candidate.class.getName());
  private static final String SILENT =
      "no renewal confirmed before the leadership ran out (server silent)";
  private static final String STALE =
      "elected, but the news arrived after the leadership's validity had run out";
  private static final Duration ANSWER_WAIT = Duration.ofSeconds(10);

  private enum State {
    /** In line (a stream open, or a new campaign about to start after a break). */
    WAITING,
    /** Leading on the current stream. */
    LEADING,
    /** Leading, between streams: an attempt to resume is scheduled or under way. */
    RESUMING,
    /** Nothing more will happen. */
    ENDED
  }

  private final ManagedChannel channel;
  private final ElectionServiceStub stub;
  private final ScheduledExecutorService clock;
  private final String election;
  private final int ttlMs;
  private final int graceMs;
  private final boolean autoResume;
  /** Events the user waits for, in order; a failed or ended stream is its last element. */
  private final LinkedBlockingQueue<Object> events = new LinkedBlockingQueue<>();
  private final CompletableFuture<String> lost = new CompletableFuture<>();

  // Guarded by this.
  private State state = State.WAITING;
  private Stream stream;
  private ByteString value;
  private ByteString proclaiming;
  private long term;
  private String token;
  private boolean resigning;
  private boolean lostKnown;
  private final ValidityClock validity;
  private ScheduledFuture<?> retry;
  private Resumption resumption;
  private String lastError = "";
  private int resumes;

  Candidate(ManagedChannel channel, ScheduledExecutorService clock, String election, byte[] value,
      Duration ttl, boolean autoResume) {
    this.channel = channel;
    this.stub = ElectionServiceGrpc.newStub(channel);
    this.clock = clock;
    this.validity = new ValidityClock(clock, this::onDeadline);
    this.election = election;
    this.value = ByteString.copyFrom(value);
    this.ttlMs = (int) ttl.toMillis();
    this.autoResume = autoResume;
    this.graceMs = autoResume ? ttlMs : 0;
    synchronized (this) {
      open(null);
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

  /** The term once elected (the leadership lease's fencing token); 0 before. */
  public synchronized long term() {
    return term;
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
    if ((state != State.LEADING && state != State.RESUMING) || lostKnown || resigning) {
      return false;
    }
    return graceMs == 0 || !ValidityClock.passed(validity.validUntilNanos());
  }

  /** How many times this leadership was resumed on a new stream. */
  synchronized int resumes() {
    return resumes;
  }

  /** Steps down now; {@code true} if this candidate was leading. */
  public boolean resign() {
    synchronized (this) {
      if (resigning) {
        return false;
      }
      resigning = true;
      switch (state) {
        case WAITING, LEADING -> {
          if (stream == null) { // Between two campaigns: nothing to step down from.
            cancelRetry();
            state = State.ENDED;
            return false;
          }
          stream.resign();
        }
        case RESUMING -> {} // Resigns on the resumed stream, or fails.
        case ENDED -> {
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

  /** Holds this. Opens a campaign stream (resuming {@code resumeToken} if not null). */
  private void open(String resumeToken) {
    CampaignStart.Builder start = CampaignStart.newBuilder()
        .setElection(election)
        .setValue(proclaiming != null ? proclaiming : value)
        .setTtlMs(ttlMs)
        .setResumeGraceMs(graceMs);
    if (resumeToken != null) {
      start.setResumeToken(resumeToken);
    }
    Stream next = new Stream(System.nanoTime()); // Before the server can see it.
    stream = next;
    stub.campaign(next);
    next.send(CampaignRequest.newBuilder().setStart(start).build());
  }

  /** Holds this. */
  private void arm(long validUntilNanos) {
    if (graceMs == 0) {
      return; // No `extended` without a grace: the server alone watches the leadership.
    }
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

  /** Holds this. Notes the loss; the reason to report, or null if the user resigned first. */
  private String lossOf(String reason) {
    if (reason == null) {
      return null;
    }
    lostKnown = true;
    return resigning ? null : reason;
  }

  /** Holds this. Ends the candidacy: {@code failure} is the last event the user reads. */
  private String fail(String reason, Throwable failure) {
    state = State.ENDED;
    stopClock();
    cancelRetry();
    events.add(failure != null ? failure : new IllegalStateException(reason));
    return lossOf(reason);
  }

  /** Holds this. Schedules the next attempt (campaign or resume), or ends if the client closed. */
  private String scheduleAttempt(long delayMs) {
    retry = channel.isShutdown() ? null : Resumption.schedule(clock, this::attempt, delayMs);
    return retry == null ? fail("the client was closed", null) : null;
  }

  private void attempt() {
    String loss = null;
    synchronized (this) {
      retry = null;
      if (stream != null || (state != State.WAITING && state != State.RESUMING)) {
        return;
      }
      if (state == State.RESUMING && ValidityClock.passed(validity.validUntilNanos())) {
        // Woken past the validity (a frozen process): whatever the server still keeps, this
        // leadership is over by this process's clock; the timer may not have run yet.
        loss = fail("could not resume before the leadership's validity ran out: " + lastError,
            null);
        LOG.log(Level.WARNING, "election {0}: {1}", election, loss);
      } else {
        if (channel.getState(false) == ConnectivityState.TRANSIENT_FAILURE) {
          channel.resetConnectBackoff();
        }
        open(state == State.RESUMING ? token : null);
      }
    }
    if (loss != null) {
      lost.complete(loss);
    }
  }

  private void onDeadline() {
    String loss = null;
    synchronized (this) {
      if (!validity.ranOut()) {
        return; // Re-armed meanwhile.
      }
      if (state == State.LEADING) {
        loss = lossOf(SILENT);
      } else if (state == State.RESUMING) {
        if (stream != null) {
          stream.cancel("the leadership's validity ran out while resuming");
          stream = null;
        }
        loss = fail("could not resume before the leadership's validity ran out: " + lastError, null);
        LOG.log(Level.WARNING, "election {0}: {1}", election, loss);
      }
    }
    if (loss != null) {
      lost.complete(loss);
    }
  }

  private void onEvent(Stream from, CampaignResponse event) {
    String loss = null;
    synchronized (this) {
      if (from != stream) {
        return;
      }
      switch (event.getEventCase()) {
        case ELECTED -> {
          Elected elected = event.getElected();
          long until = ValidityClock.vouchedUntil(
              from.openedNanos, elected.getValidForMs(), elected.getValidToMs());
          // Held up on its way (a healed partition): another may lead by now, so it is no
          // leadership. Cancelling the stream steps down (or keeps it only for its grace).
          boolean stale = ValidityClock.passed(until);
          if (state == State.WAITING && stale) {
            state = State.ENDED;
            stream = null;
            stopClock();
            from.cancel(STALE);
            loss = lossOf(STALE);
            events.add(CampaignResponse.newBuilder()
                .setLost(Lost.newBuilder().setReason(STALE)).build());
          } else if (state == State.WAITING) {
            state = State.LEADING;
            term = elected.getTerm();
            token = elected.getToken();
            resumption = null;
            arm(until);
            events.add(event);
          } else if (state == State.RESUMING && stale) {
            stream = null;
            from.cancel(STALE);
            loss = fail("could not resume the leadership: " + STALE, null);
            LOG.log(Level.WARNING, "election {0}: {1}", election, loss);
          } else if (state == State.RESUMING) {
            if (elected.getTerm() != term) {
              stream = null;
              from.cancel("resumed as another term");
              loss = fail("the leadership was resumed with another term (" + elected.getTerm()
                  + ", not " + term + ")", null);
            } else {
              state = State.LEADING;
              resumes++;
              resumption = null;
              arm(until);
              if (proclaiming != null) { // Published by the resume: that proclaim is answered.
                value = proclaiming;
                proclaiming = null;
                events.add(CampaignResponse.newBuilder()
                    .setProclaimed(Proclaimed.newBuilder().setValue(value)).build());
              }
              LOG.log(Level.DEBUG, "election {0}: leadership resumed (term {1})", election, term);
              if (resigning) {
                from.resign();
              }
            }
          }
        }
        case EXTENDED -> {
          if (state == State.LEADING) {
            Extended extended = event.getExtended();
            arm(ValidityClock.vouchedUntil(
                from.openedNanos, extended.getValidForMs(), extended.getValidToMs()));
          }
        }
        case PROCLAIMED -> {
          value = event.getProclaimed().getValue();
          proclaiming = null;
          events.add(event);
        }
        case LOST -> {
          state = State.ENDED;
          stream = null;
          stopClock();
          loss = lossOf(event.getLost().getReason());
          events.add(event);
        }
        case RESIGNED -> {
          state = State.ENDED;
          stream = null;
          stopClock();
          events.add(event);
        }
        default -> {}
      }
    }
    if (loss != null) {
      lost.complete(loss);
    }
  }

  /** {@code status} null: the stream ended without a status, before any last word. */
  private void onEnd(Stream from, Status status, Throwable error) {
    String loss = null;
    synchronized (this) {
      if (from != stream) {
        return;
      }
      stream = null;
      boolean broke = autoResume && !lostKnown && Resumption.breaks(status);
      String failure = status == null
          ? "the server ended the campaign stream"
          : "campaign stream failed: " + status;
      Throwable last = error != null ? error : new IllegalStateException("the campaign stream ended");
      switch (state) {
        case WAITING -> {
          if (broke && resigning) { // Out of line anyway.
            state = State.ENDED;
            events.add(CampaignResponse.newBuilder()
                .setResigned(Resigned.newBuilder().setWasLeader(false)).build());
          } else if (broke) {
            // Campaign again (a moved candidate joins the back of the line).
            if (resumption == null) {
              resumption = Resumption.start();
            }
            loss = scheduleAttempt(resumption.nextDelayMs());
          } else {
            loss = fail(failure, last);
          }
        }
        case LEADING -> {
          if (broke) {
            state = State.RESUMING;
            resumption = Resumption.start();
            lastError = Resumption.describe(status);
            LOG.log(Level.DEBUG, "election {0}: stream broke ({1}); resuming", election, lastError);
            loss = scheduleAttempt(0);
          } else {
            loss = fail(failure, last);
          }
        }
        case RESUMING -> {
          if (broke) {
            lastError = Resumption.describe(status);
            loss = scheduleAttempt(resumption.nextDelayMs());
          } else {
            loss = fail("could not resume the leadership: " + Resumption.describe(status), last);
            LOG.log(Level.WARNING, "election {0}: {1}", election, loss);
          }
        }
        case ENDED -> {}
      }
    }
    if (loss != null) {
      lost.complete(loss);
    }
  }

  /** One {@code Campaign} stream. */
  private final class Stream extends StreamBase<CampaignRequest, CampaignResponse> {
    Stream(long openedNanos) {
      super(openedNanos);
    }

    void resign() {
      send(CampaignRequest.newBuilder().setResign(Resign.getDefaultInstance()).build());
      halfClose();
    }

    @Override
    public void onNext(CampaignResponse event) {
      onEvent(this, event);
    }

    @Override
    void ended(Status status, Throwable error) {
      onEnd(this, status, error);
    }
  }
}
