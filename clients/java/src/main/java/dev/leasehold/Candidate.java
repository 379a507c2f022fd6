package dev.leasehold;

import com.google.protobuf.ByteString;
import io.grpc.Status;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import leasehold.v1.Election.CampaignRequest;
import leasehold.v1.Election.CampaignResponse;
import leasehold.v1.Election.CampaignStart;
import leasehold.v1.Election.Proclaim;
import leasehold.v1.Election.Resign;
import leasehold.v1.ElectionServiceGrpc.ElectionServiceStub;

/**
 * One candidacy in an election, held by one {@code Campaign} stream. {@link #close()} steps down
 * (or leaves the line). {@link #lost()} completes if the leadership is lost while leading.
 */
public final class Candidate implements AutoCloseable {
  /** Events after the first, in order; a failed or ended stream is its last element. */
  private final LinkedBlockingQueue<Object> events = new LinkedBlockingQueue<>();
  private final CompletableFuture<String> lost = new CompletableFuture<>();
  private final StreamObserver<CampaignRequest> requests;
  private boolean closed;

  Candidate(ElectionServiceStub stub, String election, byte[] value, Duration ttl) {
    requests = stub.campaign(new StreamObserver<>() {
      @Override
      public void onNext(CampaignResponse event) {
        if (event.hasLost()) {
          lost.complete(event.getLost().getReason());
        }
        events.add(event);
      }

      @Override
      public void onError(Throwable error) {
        lost.complete("campaign stream failed: " + Status.fromThrowable(error));
        events.add(error);
      }

      @Override
      public void onCompleted() {
        lost.complete("the server ended the campaign stream");
        events.add(new IllegalStateException("the campaign stream ended"));
      }
    });
    requests.onNext(CampaignRequest.newBuilder().setStart(CampaignStart.newBuilder()
        .setElection(election).setValue(ByteString.copyFrom(value))
        .setTtlMs((int) ttl.toMillis())).build());
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

  /** Publishes a new value while leading. */
  public void proclaim(byte[] value) throws TimeoutException, InterruptedException {
    requests.onNext(CampaignRequest.newBuilder()
        .setProclaim(Proclaim.newBuilder().setValue(ByteString.copyFrom(value))).build());
    CampaignResponse event = next(Duration.ofSeconds(10));
    if (!event.hasProclaimed()) {
      throw new IllegalStateException("proclaim refused: " + event);
    }
  }

  /** Completes with the reason if the leadership is lost while leading. */
  public CompletableFuture<String> lost() {
    return lost;
  }

  /** Steps down now; {@code true} if this candidate was leading. */
  public synchronized boolean resign() {
    if (closed) {
      return false;
    }
    closed = true;
    requests.onNext(CampaignRequest.newBuilder().setResign(Resign.getDefaultInstance()).build());
    requests.onCompleted();
    try {
      while (true) {
        CampaignResponse event = next(Duration.ofSeconds(10));
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
}
