package dev.leasehold;

import io.grpc.Status;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;

/**
 * One bidirectional stream of a lease, a candidate or a session: when it was opened, its request
 * side (sends that the end of the call makes void, a half-close, a cancel), and its end, reported
 * once as {@link #ended}. {@link HeldStream} (under a lease and a candidate) and {@link Session}
 * extend it with where the responses go.
 */
abstract class StreamBase<Req, Resp> implements ClientResponseObserver<Req, Resp> {
  /** When ({@link System#nanoTime()}) it was opened: what {@code valid_to_ms} counts from. */
  final long openedNanos;
  /** Set by {@link #beforeStart}, as the call starts. */
  ClientCallStreamObserver<Req> requests;

  StreamBase(long openedNanos) {
    this.openedNanos = openedNanos;
  }

  @Override
  public final void beforeStart(ClientCallStreamObserver<Req> requests) {
    this.requests = requests;
  }

  /** Sends {@code request}, unless the call is over. */
  final void send(Req request) {
    try {
      requests.onNext(request);
    } catch (RuntimeException e) {
      // The call is over already; its end reports what happened.
    }
  }

  /** Half-closes the request side, unless the call is over. */
  final void halfClose() {
    try {
      requests.onCompleted();
    } catch (RuntimeException e) {
      // Over already.
    }
  }

  void cancel(String why) {
    requests.cancel(why, null);
  }

  /**
   * The call ended: {@code status} and {@code error} say how, or are both null when the server
   * completed it.
   */
  abstract void ended(Status status, Throwable error);

  @Override
  public final void onError(Throwable error) {
    ended(Status.fromThrowable(error), error);
  }

  @Override
  public final void onCompleted() {
    ended(null, null);
  }
}
