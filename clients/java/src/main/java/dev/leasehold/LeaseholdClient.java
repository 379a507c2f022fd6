package dev.leasehold;

import io.grpc.ChannelCredentials;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.NameResolverRegistry;
import io.grpc.Status;
import io.grpc.TlsChannelCredentials;
import io.grpc.stub.MetadataUtils;
import io.grpc.stub.StreamObserver;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import java.util.function.Consumer;
import leasehold.v1.Election.ElectionServiceRevokeRequest;
import leasehold.v1.Election.ElectionServiceRevokeResponse;
import leasehold.v1.Election.LeaderRequest;
import leasehold.v1.Election.LeaderResponse;
import leasehold.v1.Election.ObserveRequest;
import leasehold.v1.Election.ObserveResponse;
import leasehold.v1.ElectionServiceGrpc;
import leasehold.v1.Lock.CheckRequest;
import leasehold.v1.Lock.Holder;
import leasehold.v1.Lock.LeaseAcquire;
import leasehold.v1.Lock.LeaseMode;
import leasehold.v1.Lock.ListRequest;
import leasehold.v1.Lock.ListResponse;
import leasehold.v1.Lock.RevokeRequest;
import leasehold.v1.LockServiceGrpc;

/**
 * A connection to Leasehold: one server, or several replicas sharing one Redis.
 *
 * <pre>{@code
 * try (LeaseholdClient client = LeaseholdClient.connect("10.0.0.1:50051,10.0.0.2:50051");
 *      Lease lease = client.lease("nightly-report").ttl(Duration.ofSeconds(10))
 *          .waitUpTo(Duration.ofSeconds(30)).acquire()) {
 *   lease.lost().thenAccept(reason -> stopWork(reason));
 *   doWork(lease.fencingToken());
 * } // released here
 * }</pre>
 *
 * <p>Calls and streams go to one reachable server (grpc-java's {@code pick_first} policy over
 * every address the target names); when it fails, the channel moves on to the next, and leases
 * and leaderships resume there on their own (see {@link Lease}).
 */
public final class LeaseholdClient implements AutoCloseable {
  static {
    NameResolverRegistry.getDefaultRegistry().register(new AddressListNameResolverProvider());
  }

  private static final Pattern SCHEME = Pattern.compile("^[a-zA-Z][a-zA-Z0-9+.-]*:/.*");

  /**
   * pick_first over all addresses; the unary calls the client makes are retried on another server
   * when one is unavailable (grpc-java's retry policy; streams are resumed by the client itself).
   */
  private static final Map<String, ?> SERVICE_CONFIG = Map.of(
      "loadBalancingConfig", List.of(Map.of("pick_first", Map.of())),
      "methodConfig", List.of(Map.of(
          "name", List.of(
              Map.of("service", "leasehold.v1.LockService", "method", "Release"),
              Map.of("service", "leasehold.v1.LockService", "method", "Describe"),
              Map.of("service", "leasehold.v1.LockService", "method", "List"),
              Map.of("service", "leasehold.v1.LockService", "method", "Check"),
              Map.of("service", "leasehold.v1.ElectionService", "method", "Leader")),
          "retryPolicy", Map.of(
              "maxAttempts", 5.0,
              "initialBackoff", "0.02s",
              "maxBackoff", "0.5s",
              "backoffMultiplier", 2.0,
              "retryableStatusCodes", List.of("UNAVAILABLE")))));

  private final ManagedChannel channel;
  private final ScheduledExecutorService clock;

  private LeaseholdClient(ManagedChannel channel) {
    this.channel = channel;
    this.clock = Executors.newSingleThreadScheduledExecutor(task -> {
      Thread thread = new Thread(task, "leasehold-lease-clock");
      thread.setDaemon(true);
      return thread;
    });
  }

  /**
   * Connects in plaintext to {@code target}: one server ({@code 127.0.0.1:50051}), a DNS name
   * that resolves to several ({@code leasehold.internal:50051}), or a comma-separated list of
   * either ({@code 10.0.0.1:50051,10.0.0.2:50051}). Any other grpc-java target
   * ({@code dns:///...}, {@code unix:...}) is used as it is.
   */
  public static LeaseholdClient connect(String target) {
    return new LeaseholdClient(Grpc.newChannelBuilder(
            grpcTarget(target), InsecureChannelCredentials.create())
        .defaultServiceConfig(SERVICE_CONFIG)
        .build());
  }

  /**
   * Connects to {@code target} (as {@link #connect(String)} reads it) with TLS and a bearer token
   * as {@code options} say: TLS when it names a CA or a client certificate, or asks for TLS; the
   * token with every call. With several servers, each certificate is checked against the name
   * its server was given by.
   */
  public static LeaseholdClient connect(String target, Options options) throws IOException {
    ChannelCredentials credentials = InsecureChannelCredentials.create();
    if (options.tls || options.caPem != null || options.certPem != null) {
      TlsChannelCredentials.Builder tls = TlsChannelCredentials.newBuilder();
      if (options.caPem != null) {
        tls.trustManager(new ByteArrayInputStream(options.caPem));
      }
      if (options.certPem != null) {
        tls.keyManager(
            new ByteArrayInputStream(options.certPem), new ByteArrayInputStream(options.keyPem));
      }
      credentials = tls.build();
    }
    ManagedChannelBuilder<?> builder = Grpc.newChannelBuilder(grpcTarget(target), credentials)
        .defaultServiceConfig(SERVICE_CONFIG);
    if (options.token != null) {
      Metadata headers = new Metadata();
      headers.put(
          Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER),
          "Bearer " + options.token);
      builder.intercept(MetadataUtils.newAttachHeadersInterceptor(headers));
    }
    return new LeaseholdClient(builder.build());
  }

  /**
   * The grpc-java target for what the user wrote: a comma-separated list goes to the client's own
   * name resolver ({@code leasehold:///a:1,b:2}, every address of every entry); one
   * {@code host:port} to grpc-java's DNS resolver (every address of the name); a target with a
   * scheme is left alone.
   */
  static String grpcTarget(String target) {
    String trimmed = target.trim();
    if (SCHEME.matcher(trimmed).matches() || !trimmed.contains(",")) {
      return trimmed;
    }
    return AddressListNameResolverProvider.target(
        AddressListNameResolverProvider.HostPort.parseList(trimmed));
  }

  /** How to reach a server: TLS, and a bearer token (the server's --auth-file grants it). */
  public static final class Options {
    private String token;
    private boolean tls;
    private byte[] caPem;
    private byte[] certPem;
    private byte[] keyPem;

    /** Sends {@code token} with every call as {@code authorization: Bearer <token>}. */
    public Options token(String token) {
      this.token = token;
      return this;
    }

    /** TLS, trusting the system's roots unless {@link #caPem} names a CA. */
    public Options tls() {
      this.tls = true;
      return this;
    }

    /** TLS, trusting only this CA (PEM) for the server's certificate. */
    public Options caPem(byte[] pem) {
      this.caPem = pem;
      return this;
    }

    /** Presents this certificate and key (PEM; the key in PKCS#8) to the server: mutual TLS. */
    public Options identityPem(byte[] certPem, byte[] keyPem) {
      this.certPem = certPem;
      this.keyPem = keyPem;
      return this;
    }
  }

  /**
   * Opens a session with the default options ({@link SessionOptions}): many leases on one stream,
   * renewed and confirmed together. Returns at once; close it to release every lease on it.
   */
  public Session session() {
    return session(new SessionOptions());
  }

  /**
   * Opens a session as {@code options} say: many leases on one stream, sharing its TTL and resume
   * grace, renewed and confirmed together. Returns at once (a refused {@code open} fails the
   * session's first calls, and {@link Session#lost()} says why); close it to release every lease
   * on it.
   */
  public Session session(SessionOptions options) {
    return new Session(channel, clock, options);
  }

  /** Starts building a lease on lock {@code name}. */
  public LeaseBuilder lease(String name) {
    return new LeaseBuilder(name);
  }

  /**
   * Joins {@code election} as a candidate publishing {@code value}, its leadership lease living
   * {@code ttl} without renewal; returns at once. The same as {@code candidate(election,
   * value).ttl(ttl).campaign()}.
   */
  public Candidate campaign(String election, byte[] value, Duration ttl) {
    return candidate(election, value).ttl(ttl).campaign();
  }

  /** Starts building a candidacy in {@code election} publishing {@code value}. */
  public CandidateBuilder candidate(String election, byte[] value) {
    return new CandidateBuilder(election, value);
  }

  /** The leader of {@code election} now, if any. */
  public Optional<Leader> leader(String election) {
    LeaderResponse answer = ElectionServiceGrpc.newBlockingStub(channel)
        .leader(LeaderRequest.newBuilder().setElection(election).build());
    return answer.getHasLeader()
        ? Optional.of(new Leader(answer.getTerm(), answer.getValue().toByteArray()))
        : Optional.empty();
  }

  /**
   * The locks held now, at most {@code limit} of them ({@code 0}: the server's maximum, 1,000), as
   * the Rust client's {@code Client::list} gives them: for operators and dashboards that need to
   * see what is held, by whom and under which fencing token, without knowing the names. Each
   * {@code HeldLock} has the name, holder, fencing token and remaining TTL of its first holder,
   * every holder ({@code getHoldersList()}, for semaphores and readers), the limit and the mode;
   * {@code getTruncated()} says whether more locks are held than were returned.
   *
   * <p>The server's answer is returned as it is so that no field it adds is lost. It is a bounded
   * scan, not a snapshot: a lock taken or released during the call may or may not appear. With
   * authentication, only an admin token may list (else PERMISSION_DENIED), and it sees the names
   * under its prefixes. Being a read, the call is retried on another server when one is
   * unavailable.
   */
  public ListResponse list(int limit) {
    if (limit < 0) {
      throw new IllegalArgumentException("limit must not be negative, got " + limit);
    }
    return LockServiceGrpc.newBlockingStub(channel)
        .list(ListRequest.newBuilder().setLimit(limit).build());
  }

  /**
   * Ends every holding of lock {@code name} by force, for an operator: each holder is told at once
   * that it is lost ({@link LostReason#REVOKED}, on whichever server carries its stream), it
   * cannot be resumed, and the next waiter gets the lock at once with a larger fencing token.
   * Returns the holdings ended, as they were just before; empty if nothing was held. The server
   * logs who revoked what (at WARN) and counts it.
   *
   * <p>A revoked holder may act on its lock until it hears: only the fencing token protects the
   * resource in between. Needs the {@code admin} role on the name when the server checks tokens
   * (else PERMISSION_DENIED); with authentication off anyone may revoke, as anyone may acquire.
   * Not retried on another server (by name, a retry could end the next holder too).
   */
  public List<Holder> revoke(String name) {
    return revokeHolders(name, 0);
  }

  /**
   * Ends the one holding of lock {@code name} with {@code fencingToken} (a semaphore's permit, a
   * reader of a shared lock, or the holder of a plain lock that has not changed hands since), as
   * {@link #revoke(String)} does. Returns it, or an empty list if nothing holds that fencing token.
   */
  public List<Holder> revoke(String name, long fencingToken) {
    return revokeHolders(name, positive(fencingToken, "fencing token"));
  }

  private List<Holder> revokeHolders(String name, long fencingToken) {
    return LockServiceGrpc.newBlockingStub(channel).revoke(RevokeRequest.newBuilder()
        .setName(name).setFencingToken(fencingToken).build()).getRevokedList();
  }

  /**
   * Ends the leadership of {@code election} by force, as {@link #revoke(String)} ends a lock's
   * holding: the leader is told at once that it is lost ({@link LostReason#REVOKED}), cannot
   * resume, and the next candidate in line is elected with a larger term. Returns the leader
   * revoked (its term and value), or empty if there was none. Needs the {@code admin} role on the
   * election.
   */
  public Optional<Leader> revokeLeader(String election) {
    return revokeLeadership(election, 0);
  }

  /**
   * Ends the leadership of {@code election} only if {@code term} leads it (an operator's view
   * that may be stale ends nobody else); as {@link #revokeLeader(String)}. Empty if another term
   * leads, or none.
   */
  public Optional<Leader> revokeLeader(String election, long term) {
    return revokeLeadership(election, positive(term, "term"));
  }

  private Optional<Leader> revokeLeadership(String election, long term) {
    ElectionServiceRevokeResponse answer = ElectionServiceGrpc.newBlockingStub(channel)
        .revoke(ElectionServiceRevokeRequest.newBuilder()
            .setElection(election).setTerm(term).build());
    return answer.getRevoked()
        ? Optional.of(new Leader(answer.getTerm(), answer.getValue().toByteArray()))
        : Optional.empty();
  }

  /** 0 would mean "whichever": the forms that name one holding refuse it. */
  private static long positive(long value, String what) {
    if (value <= 0) {
      throw new IllegalArgumentException(what + " must be positive, got " + value);
    }
    return value;
  }

  /**
   * Whether {@code fencingToken} is the current holding of lock {@code name}, for the resource the
   * lock protects to ask before each write (Chubby's CheckSequencer; one Redis read): {@link
   * TokenState#CURRENT}, {@link TokenState#SUPERSEDED} (the name is held under other fencing
   * tokens) or {@link TokenState#FREE}, with the current holding's fencing token (0 when free).
   *
   * <p>A check is not a conditional write: the holding can end between the answer and the write,
   * so a resource that must never take a stale write fences itself (see docs/contract.md). Needs
   * the {@code observe} role on the name when the server checks tokens. Being a read, the call is
   * retried on another server when one is unavailable.
   */
  public TokenCheck check(String name, long fencingToken) {
    return TokenCheck.of(LockServiceGrpc.newBlockingStub(channel).check(CheckRequest.newBuilder()
        .setName(name).setFencingToken(fencingToken).build()));
  }

  /**
   * Follows lock {@code name}: its state now, then one on every change (taken, released,
   * expired, revoked, a waiter joining or leaving), until the returned watch is closed. See {@link
   * LockWatch}. Needs the {@code observe} role on the name when the server checks tokens.
   */
  public LockWatch watch(String name) {
    return new LockWatch(LockServiceGrpc.newStub(channel), name);
  }

  /**
   * Follows {@code election}: {@code listener} hears the leader now (empty for none), then every
   * change in the order they happened, until the returned handle is closed. If the stream fails,
   * {@code onFailure} hears why and nothing more is heard.
   */
  public AutoCloseable observe(String election, Consumer<Optional<Leader>> listener) {
    return observe(election, listener, failure -> {});
  }

  /** As {@link #observe(String, Consumer)}, hearing a failed stream too. */
  public AutoCloseable observe(
      String election, Consumer<Optional<Leader>> listener, Consumer<Status> onFailure) {
    var context = io.grpc.Context.current().withCancellation();
    context.run(() -> ElectionServiceGrpc.newStub(channel).observe(
        ObserveRequest.newBuilder().setElection(election).build(),
        new StreamObserver<ObserveResponse>() {
          @Override
          public void onNext(ObserveResponse state) {
            listener.accept(state.getHasLeader()
                ? Optional.of(new Leader(state.getTerm(), state.getValue().toByteArray()))
                : Optional.empty());
          }

          @Override
          public void onError(Throwable error) {
            Status status = Status.fromThrowable(error);
            if (status.getCode() != Status.Code.CANCELLED) {
              onFailure.accept(status);
            }
          }

          @Override
          public void onCompleted() {}
        }));
    return () -> context.cancel(null);
  }

  /**
   * Closes the connection, waiting (up to 10 s) for calls still open: release leases and resign
   * candidacies first. The lease clock runs until then, so leases still held keep their rules.
   */
  @Override
  public void close() throws InterruptedException {
    try {
      if (!channel.shutdown().awaitTermination(10, TimeUnit.SECONDS)) {
        channel.shutdownNow();
      }
    } finally {
      clock.shutdownNow();
    }
  }

  /** Options of one lease; finish with {@link #acquire()}. */
  public final class LeaseBuilder {
    private final LeaseAcquire.Builder request;
    private boolean autoResume = true;

    private LeaseBuilder(String name) {
      request = LeaseAcquire.newBuilder().setName(name).setTtlMs(30_000);
    }

    /** How long the lock outlives this process if it dies with its server (default 30 s). */
    public LeaseBuilder ttl(Duration ttl) {
      request.setTtlMs((int) Lease.positive(ttl, "ttl").toMillis());
      return this;
    }

    /** How long to wait for a taken lock (default: fail at once). */
    public LeaseBuilder waitUpTo(Duration wait) {
      request.setWaitMs((int) Lease.positive(wait, "wait").toMillis());
      return this;
    }

    /** How others see this holder. */
    public LeaseBuilder holder(String holder) {
      request.setHolder(holder);
      return this;
    }

    /** Wait in line (the default) or race for the lock whenever it frees. */
    public LeaseBuilder fair(boolean fair) {
      request.setFair(fair);
      return this;
    }

    /**
     * Lets up to {@code limit} leases hold the name at once (a semaphore; default 1, a plain
     * lock). Every holder of one name must give the same limit (else FAILED_PRECONDITION).
     */
    public LeaseBuilder limit(int limit) {
      if (limit < 1) {
        throw new IllegalArgumentException("limit must be at least 1, got " + limit);
      }
      request.setLimit(limit);
      return this;
    }

    /**
     * Holds the name with other shared leases (readers); an exclusive one (a writer) waits for
     * them all, and readers that come after a waiting writer wait behind it.
     */
    public LeaseBuilder shared() {
      request.setMode(LeaseMode.LEASE_MODE_SHARED);
      return this;
    }

    /**
     * Keeps the lease this long (at most the TTL) after its stream breaks or its server shuts
     * down, so that it can be taken back with its fencing token: by the lease itself (see {@link
     * #autoResume}), or by {@link #resume} with {@link Lease#token()}. Default: the TTL with
     * auto-resume, none without.
     */
    public LeaseBuilder resumeGrace(Duration grace) {
      request.setResumeGraceMs((int) Lease.positive(grace, "resume grace").toMillis());
      return this;
    }

    /**
     * Holds these names too, with the builder's name first, all or none: the lease is acquired
     * only when every name is taken (one fencing token per name, {@link Lease#fences()}), renewed
     * together, and lost as a whole. Callers asking for overlapping sets in any order cannot
     * deadlock (the server takes names in one canonical order and holds none while it waits).
     * Only for plain exclusive locks; at most 32 names in all, no name twice.
     */
    public LeaseBuilder names(String... more) {
      request.clearMoreNames().addAllMoreNames(List.of(more));
      return this;
    }

    /**
     * Lock-delay (Chubby's; Consul's sessions): when this lease is lost (it expired, was revoked,
     * or its stream broke and its grace ran out), none of its names can be taken for this long
     * more, so that an unfenced resource is not written by the next holder while this one may
     * still be writing. A clean release frees them at once. Default: none.
     */
    public LeaseBuilder lockDelay(Duration delay) {
      request.setLockDelayMs(Lease.millis(delay, "lock delay"));
      return this;
    }

    /**
     * A ceiling on the hold, from the acquisition: the server stops renewing the lease then and
     * {@link Lease#lost()} completes with {@link LostReason#MAX_HOLD} (final, never resumed), at
     * the latest when the acquire was sent plus {@code maxHold} by this process's clock. At least
     * the TTL, at most 7 days. Default: none.
     */
    public LeaseBuilder maxHold(Duration maxHold) {
      request.setMaxHoldMs(Lease.millis(maxHold, "max hold"));
      return this;
    }

    /** Reattaches to the lease {@code token} holds instead of taking a new one (NOT_FOUND once gone). */
    public LeaseBuilder resume(String token) {
      request.setResumeToken(token);
      return this;
    }

    /**
     * Whether the lease resumes on its own when its stream breaks (default {@code true}): it asks
     * the server to keep it for a grace (the TTL unless {@link #resumeGrace} says otherwise) and,
     * when the stream breaks or its server shuts down, takes it back on another server (same
     * token, same fencing token) without telling anyone, retrying until the validity last
     * confirmed runs out; only if that fails does {@link Lease#lost()} complete. {@code false}:
     * the lease is lost when its stream breaks (released at once by the server unless a {@link
     * #resumeGrace} keeps it).
     */
    public LeaseBuilder autoResume(boolean autoResume) {
      this.autoResume = autoResume;
      return this;
    }

    /** Takes the lock, waiting as configured. */
    public Lease acquire() throws NotAcquiredException {
      LeaseAcquire acquire = request.build();
      if (autoResume && acquire.getResumeGraceMs() == 0) {
        acquire = acquire.toBuilder().setResumeGraceMs(acquire.getTtlMs()).build();
      }
      return new Lease(channel, clock, acquire, autoResume);
    }
  }

  /** Options of one candidacy; finish with {@link #campaign()}. */
  public final class CandidateBuilder {
    private final String election;
    private final byte[] value;
    private Duration ttl = Duration.ofSeconds(30);
    private boolean autoResume = true;

    private CandidateBuilder(String election, byte[] value) {
      this.election = election;
      this.value = value.clone();
    }

    /**
     * How long the election stays without a leader if this leader dies with its server: the
     * leadership lease's TTL, renewed every third of it (default 30 s).
     */
    public CandidateBuilder ttl(Duration ttl) {
      this.ttl = Lease.positive(ttl, "ttl");
      return this;
    }

    /**
     * Whether a leader resumes its leadership on its own (same term) when its stream breaks or
     * its server shuts down, and a waiting candidate campaigns again (default {@code true}); it
     * then asks for a resume grace of the TTL. {@code false}: the candidacy ends when its stream
     * does, as {@link Candidate#lost()} reports.
     */
    public CandidateBuilder autoResume(boolean autoResume) {
      this.autoResume = autoResume;
      return this;
    }

    /** Joins the election; returns at once ({@link Candidate#awaitElected} waits). */
    public Candidate campaign() {
      return new Candidate(channel, clock, election, value, ttl, autoResume);
    }
  }
}
