package dev.leasehold;

import com.google.protobuf.ByteString;
import io.grpc.ManagedChannel;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import leasehold.v1.Lock.LeaseMode;
import leasehold.v1.Session.SessionAcquire;

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
 *
 * <p>The session's stream and its resumption live in {@link SessionLink}; each lease's life on it
 * in {@link SessionMember}.
 */
public final class Session implements AutoCloseable {
  private final SessionLink link;

  Session(ManagedChannel channel, ScheduledExecutorService clock, SessionOptions options) {
    this.link = new SessionLink(channel, clock, options);
  }

  /** Options of one lock on a session; the session gives the TTL, grace and default holder. */
  public static final class AcquireOptions {
    private Duration wait = Duration.ZERO;
    private String holder = "";
    private Boolean fair;
    private int limit;
    private boolean shared;
    private List<String> more = List.of();
    private Duration lockDelay = Duration.ZERO;
    private Duration maxHold = Duration.ZERO;

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

    /**
     * Holds these names too, with the acquired name first, all or none (one fencing token per
     * name, {@link SessionLease#fences()}), as {@link LeaseholdClient.LeaseBuilder#names}.
     */
    public AcquireOptions names(String... more) {
      this.more = List.of(more);
      return this;
    }

    /**
     * When this lease is lost (not released), its names cannot be taken for this long more, as
     * {@link LeaseholdClient.LeaseBuilder#lockDelay}. Default: none.
     */
    public AcquireOptions lockDelay(Duration delay) {
      this.lockDelay = Lease.positive(delay, "lock delay");
      return this;
    }

    /**
     * A ceiling on the hold: this lease alone is lost with {@link LostReason#MAX_HOLD} then, at
     * the latest when its acquire was sent plus {@code maxHold}, as {@link
     * LeaseholdClient.LeaseBuilder#maxHold}. Default: none.
     */
    public AcquireOptions maxHold(Duration maxHold) {
      this.maxHold = Lease.positive(maxHold, "max hold");
      return this;
    }

    SessionAcquire.Builder request(String name) {
      SessionAcquire.Builder request = SessionAcquire.newBuilder()
          .setName(name)
          .addAllMoreNames(more)
          .setHolder(holder)
          .setLimit(limit)
          .setLockDelayMs(Lease.millis(lockDelay, "lock delay"))
          .setMaxHoldMs(Lease.millis(maxHold, "max hold"));
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
    SessionMember member = link.join(name, options.request(name), options.wait.toMillis(), null);
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
    return new SessionCandidate(link.join(election, null, 0, ByteString.copyFrom(value)));
  }

  /**
   * Completes with the reason once the whole session is lost: every lease on it is then lost too
   * (each one's own signal says so). Never completes if the session was closed first.
   */
  public CompletableFuture<String> lost() {
    return link.lost;
  }

  /**
   * Why the whole session was lost, once it is (set before {@link #lost()} completes); each lease
   * lost with it reports the same code. Empty while it is not lost.
   */
  public Optional<LostReason> lostCode() {
    return Optional.ofNullable(link.lostCode());
  }

  /** Whether the whole session is known to be lost. */
  public boolean isLost() {
    return link.lost.isDone();
  }

  /**
   * Releases every lease of the session and ends it, waiting for the server (bounded); between
   * streams it first takes them back, then releases them. Leases still waiting stop waiting.
   */
  @Override
  public void close() {
    link.close();
  }

  /** How many times the server confirmed the session (its {@code kept_alive} messages heard). */
  int keptAlives() {
    return link.keptAlives();
  }

  /** How many times the session was opened again on a new stream after a break. */
  int resumes() {
    return link.resumes();
  }

  /** The session's state, for tests: OPEN, RESUMING, CLOSING or ENDED. */
  String state() {
    return link.state();
  }

  /** The number of leases open on the session (waiting or held). */
  int size() {
    return link.size();
  }
}
