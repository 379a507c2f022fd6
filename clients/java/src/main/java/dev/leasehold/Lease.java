package dev.leasehold;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import leasehold.v1.Lock.LeaseAcquire;
import leasehold.v1.Lock.LeaseRelease;
import leasehold.v1.Lock.LeaseRequest;
import leasehold.v1.Lock.LeaseResponse;
import leasehold.v1.LockServiceGrpc.LockServiceStub;

/**
 * A held lock, held by one {@code Lease} stream: released on {@link #close()}, like Curator's
 * {@code InterProcessMutex} or Redisson's {@code RLock}, but never silently lost. {@link #lost()}
 * completes when the server says the lease is lost, when the stream breaks, or when the validity
 * the server last confirmed runs out by this process's clock (a frozen server cannot keep you
 * believing you hold it).
 */
public final class Lease implements AutoCloseable {
  private static final String SILENT =
      "no renewal confirmed before the lease ran out (server silent)";

  private final ScheduledExecutorService clock;
  private final CompletableFuture<LeaseResponse> acquired = new CompletableFuture<>();
  private final CompletableFuture<String> lost = new CompletableFuture<>();
  private final CompletableFuture<Boolean> released = new CompletableFuture<>();
  private final StreamObserver<LeaseRequest> requests;
  private ScheduledFuture<?> deadline;
  private long fencingToken;
  private String token;

  Lease(LockServiceStub stub, ScheduledExecutorService clock, LeaseAcquire request)
      throws NotAcquiredException {
    this.clock = clock;
    this.requests = stub.lease(new Events());
    requests.onNext(LeaseRequest.newBuilder().setAcquire(request).build());
    LeaseResponse first;
    try {
      first = acquired.get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      requests.onCompleted();
      throw new IllegalStateException("interrupted while acquiring " + request.getName(), e);
    } catch (ExecutionException e) {
      if (e.getCause() instanceof StatusRuntimeException status
          && status.getStatus().getCode() == Status.Code.ABORTED) {
        throw new NotAcquiredException(status.getStatus().getDescription());
      }
      throw e.getCause() instanceof RuntimeException runtime
          ? runtime
          : new IllegalStateException(e.getCause());
    }
    fencingToken = first.getAcquired().getFencingToken();
    token = first.getAcquired().getToken();
  }

  /** The fencing token of this acquisition: pass it to the resource the lock protects. */
  public long fencingToken() {
    return fencingToken;
  }

  /** The acquisition's secret, for the unary Extend and Release calls. Never log it. */
  public String token() {
    return token;
  }

  /** Whether the lock is known to be lost already. */
  public boolean isLost() {
    return lost.isDone();
  }

  /** Completes with the reason once the lock is lost; never completes if released first. */
  public CompletableFuture<String> lost() {
    return lost;
  }

  /** Releases the lock and waits for the server; {@code true} if it was still held. */
  public boolean release() {
    if (!released.isDone()) {
      requests.onNext(LeaseRequest.newBuilder().setRelease(LeaseRelease.getDefaultInstance()).build());
      requests.onCompleted();
    }
    try {
      return released.get(10, TimeUnit.SECONDS) && !lost.isDone();
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

  private synchronized void arm(long validForMs) {
    if (deadline != null) {
      deadline.cancel(false);
    }
    deadline = clock.schedule(() -> lose(SILENT), validForMs, TimeUnit.MILLISECONDS);
  }

  private void lose(String reason) {
    if (!released.isDone()) {
      lost.complete(reason);
    }
  }

  private synchronized void stopClock() {
    if (deadline != null) {
      deadline.cancel(false);
    }
  }

  /** The server's side of the stream. */
  private final class Events implements StreamObserver<LeaseResponse> {
    @Override
    public void onNext(LeaseResponse event) {
      switch (event.getEventCase()) {
        case ACQUIRED -> {
          arm(event.getAcquired().getValidForMs());
          acquired.complete(event);
        }
        case EXTENDED -> arm(event.getExtended().getValidForMs());
        case LOST -> lose(event.getLost().getReason());
        case RELEASED -> {
          stopClock();
          released.complete(event.getReleased().getWasHeld());
        }
        default -> {}
      }
    }

    @Override
    public void onError(Throwable error) {
      stopClock();
      if (!acquired.completeExceptionally(error)) {
        lose("lease stream failed: " + Status.fromThrowable(error));
      }
      released.complete(false);
    }

    @Override
    public void onCompleted() {
      stopClock();
      if (!acquired.completeExceptionally(
          new IllegalStateException("the server ended the lease stream before acquired"))) {
        lose("the server ended the lease stream");
      }
      released.complete(false);
    }
  }

  static Duration positive(Duration duration, String what) {
    if (duration.isNegative()) {
      throw new IllegalArgumentException(what + " is negative: " + duration);
    }
    return duration;
  }
}
