package dev.leasehold;

import io.grpc.ChannelCredentials;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.TlsChannelCredentials;
import io.grpc.stub.MetadataUtils;
import io.grpc.stub.StreamObserver;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import leasehold.v1.Election.LeaderRequest;
import leasehold.v1.Election.LeaderResponse;
import leasehold.v1.Election.ObserveRequest;
import leasehold.v1.Election.ObserveResponse;
import leasehold.v1.ElectionServiceGrpc;
import leasehold.v1.Lock.LeaseAcquire;
import leasehold.v1.Lock.LeaseMode;
import leasehold.v1.LockServiceGrpc;

/**
 * A connection to a Leasehold server.
 *
 * <pre>{@code
 * try (LeaseholdClient client = LeaseholdClient.connect("127.0.0.1:50051");
 *      Lease lease = client.lease("nightly-report").ttl(Duration.ofSeconds(10))
 *          .waitUpTo(Duration.ofSeconds(30)).acquire()) {
 *   lease.lost().thenAccept(reason -> stopWork(reason));
 *   doWork(lease.fencingToken());
 * } // released here
 * }</pre>
 */
public final class LeaseholdClient implements AutoCloseable {
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

  /** Connects in plaintext to {@code target}, e.g. {@code 127.0.0.1:50051}. */
  public static LeaseholdClient connect(String target) {
    return new LeaseholdClient(ManagedChannelBuilder.forTarget(target).usePlaintext().build());
  }

  /**
   * Connects to {@code target} with TLS and a bearer token as {@code options} say: TLS when it
   * names a CA or a client certificate, or asks for TLS; the token with every call.
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
    ManagedChannelBuilder<?> builder = Grpc.newChannelBuilder(target, credentials);
    if (options.token != null) {
      Metadata headers = new Metadata();
      headers.put(
          Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER),
          "Bearer " + options.token);
      builder.intercept(MetadataUtils.newAttachHeadersInterceptor(headers));
    }
    return new LeaseholdClient(builder.build());
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

  /** Starts building a lease on lock {@code name}. */
  public LeaseBuilder lease(String name) {
    return new LeaseBuilder(name);
  }

  /** Joins {@code election} as a candidate publishing {@code value}; returns at once. */
  public Candidate campaign(String election, byte[] value, Duration ttl) {
    return new Candidate(ElectionServiceGrpc.newStub(channel), election, value, ttl);
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

  @Override
  public void close() throws InterruptedException {
    clock.shutdownNow();
    channel.shutdown().awaitTermination(10, TimeUnit.SECONDS);
  }

  /** Options of one lease; finish with {@link #acquire()}. */
  public final class LeaseBuilder {
    private final LeaseAcquire.Builder request;

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
     * Keeps the lease this long (at most the TTL) after its stream breaks, so that {@link
     * #resume} with {@link Lease#token()} can take it back with its fencing token.
     */
    public LeaseBuilder resumeGrace(Duration grace) {
      request.setResumeGraceMs((int) Lease.positive(grace, "resume grace").toMillis());
      return this;
    }

    /** Reattaches to the lease {@code token} holds instead of taking a new one (NOT_FOUND once gone). */
    public LeaseBuilder resume(String token) {
      request.setResumeToken(token);
      return this;
    }

    /** Takes the lock, waiting as configured. */
    public Lease acquire() throws NotAcquiredException {
      return new Lease(LockServiceGrpc.newStub(channel), clock, request.build());
    }
  }
}
