package dev.leasehold;

import io.grpc.Status;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import java.time.Duration;
import java.util.Iterator;
import java.util.NoSuchElementException;
import java.util.Optional;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import java.util.stream.StreamSupport;
import leasehold.v1.Lock.DescribeResponse;
import leasehold.v1.Lock.WatchRequest;
import leasehold.v1.Lock.WatchResponse;
import leasehold.v1.LockServiceGrpc.LockServiceStub;

/**
 * A lock's states as they change, from {@link LeaseholdClient#watch}: the state when the watch
 * began, then one for every change (taken, released, expired, revoked, a waiter joining or
 * leaving), never the same twice in a row. The server pushes them from the pub/sub its waiters
 * use; nothing polls. Each state is the server's {@code DescribeResponse} as it is (held, holder,
 * fencing token, every holder of a semaphore or shared lock, limit, mode, waiting), so no field it
 * adds is lost.
 *
 * <pre>{@code
 * try (LockWatch watch = client.watch("nightly-report")) {
 *   for (DescribeResponse state : watch) {
 *     show(state.getHeld(), state.getHolder(), state.getFencingToken(), state.getWaiting());
 *   }
 * }
 * }</pre>
 *
 * <p>Like {@link java.nio.file.DirectoryStream}, it is iterated once, by one thread; {@link
 * #close()} (from any thread) cancels the call, and iteration then ends. The iterator blocks in
 * {@code hasNext()} until the next change; {@link #poll(Duration)} waits a bounded time instead.
 * If the stream fails (the server refused the watch, e.g. PERMISSION_DENIED without the {@code
 * observe} role, or went away), {@code hasNext()} throws the call's {@link
 * io.grpc.StatusRuntimeException}; a watch is not moved to another server on its own: open a new
 * one, whose first state is the lock's state then. States are asked for one at a time, so a reader
 * that falls behind is sent the newest state by the server, not every one it missed.
 */
public final class LockWatch implements Iterable<DescribeResponse>, AutoCloseable {
  /** The watch's end in the queue: {@code status} null when it ended well or was closed. */
  private record End(Status status) {}

  private static final End CLOSED = new End(null);

  /** States (at most one asked for at a time) and, last, the {@link End}. */
  private final LinkedBlockingQueue<Object> queue = new LinkedBlockingQueue<>();
  private volatile ClientCallStreamObserver<WatchRequest> call;
  private volatile boolean closed;
  // The reader's own: the state taken by hasNext(), the end once seen, the iterator handed out.
  private DescribeResponse peeked;
  private End end;
  private boolean iterated;

  LockWatch(LockServiceStub stub, String name) {
    stub.watch(WatchRequest.newBuilder().setName(name).build(),
        new ClientResponseObserver<WatchRequest, WatchResponse>() {
          @Override
          public void beforeStart(ClientCallStreamObserver<WatchRequest> requests) {
            call = requests;
            requests.disableAutoRequestWithInitial(1); // One more once the reader takes it.
          }

          @Override
          public void onNext(WatchResponse answer) {
            queue.add(answer.getState());
          }

          @Override
          public void onError(Throwable error) {
            queue.add(closed ? CLOSED : new End(Status.fromThrowable(error)));
          }

          @Override
          public void onCompleted() {
            queue.add(CLOSED);
          }
        });
  }

  /**
   * The next state, waiting up to {@code timeout}; empty if none came by then. Throws {@link
   * NoSuchElementException} once the watch has ended (closed, or the server ended it), and the
   * call's {@link io.grpc.StatusRuntimeException} if it failed.
   */
  public Optional<DescribeResponse> poll(Duration timeout) throws InterruptedException {
    if (!await(timeout.toNanos())) {
      return Optional.empty();
    }
    if (peeked == null) {
      throw new NoSuchElementException("the watch has ended");
    }
    return Optional.of(take());
  }

  /** The states, as an iterator; it may be asked for once. */
  @Override
  public Iterator<DescribeResponse> iterator() {
    if (iterated) {
      throw new IllegalStateException("a LockWatch is iterated once");
    }
    iterated = true;
    return new Iterator<>() {
      @Override
      public boolean hasNext() {
        try {
          await(Long.MAX_VALUE);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          close();
          return false;
        }
        return peeked != null;
      }

      @Override
      public DescribeResponse next() {
        if (!hasNext()) {
          throw new NoSuchElementException("the watch has ended");
        }
        return take();
      }
    };
  }

  /** The states as a {@link Stream}; closing the stream closes the watch. */
  public Stream<DescribeResponse> stream() {
    return StreamSupport.stream(spliterator(), false).onClose(this::close);
  }

  /** Cancels the call; iteration ends (a reader blocked in {@code hasNext()} is woken). */
  @Override
  public void close() {
    closed = true;
    ClientCallStreamObserver<WatchRequest> started = call;
    if (started != null) {
      started.cancel("watch closed", null);
    }
    queue.add(CLOSED);
  }

  /**
   * Waits up to {@code timeoutNanos} until a state is peeked or the end is known; false if
   * neither came in time. Throws if the call failed.
   */
  private boolean await(long timeoutNanos) throws InterruptedException {
    if (peeked == null && end == null && !closed) {
      Object next = timeoutNanos == Long.MAX_VALUE
          ? queue.take()
          : queue.poll(timeoutNanos, TimeUnit.NANOSECONDS);
      if (next == null) {
        return false;
      } else if (next instanceof DescribeResponse state) {
        peeked = state;
      } else {
        end = (End) next;
      }
    }
    if (closed) {
      peeked = null; // Closed: what was on its way is not news to anyone.
      end = CLOSED;
    }
    if (end != null && end.status() != null) {
      throw end.status().asRuntimeException();
    }
    return true;
  }

  /** Hands out the peeked state and asks the server for the next. */
  private DescribeResponse take() {
    DescribeResponse state = peeked;
    peeked = null;
    try {
      call.request(1);
    } catch (RuntimeException e) {
      // The call is over; its end is in the queue.
    }
    return state;
  }
}
