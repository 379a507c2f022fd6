package dev.leasehold;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.util.Map;
import java.util.Optional;
import leasehold.v1.Session.SessionFailed;

/**
 * What the server says about a refused call for programs, read from gRPC's standard rich details
 * (the {@code grpc-status-details-bin} trailer: a {@code google.rpc.Status} with an {@code
 * ErrorInfo} of domain {@code leasehold} and, where a retry makes sense, a {@code RetryInfo}), as
 * docs/errors.md lists them. Never from the message, which may be reworded.
 *
 * <p>{@link #failure(Throwable)} is the one place a server's status becomes this client's
 * exception; {@link #failure(SessionFailed)} makes a session's {@code failed} answer such a status.
 *
 * @param reason the stable reason ({@code LOCK_HELD}, {@code WAIT_EXPIRED}, ...); empty when the
 *     status carried no details of ours (a transport error, or a server older than the details)
 * @param metadata the named values ({@code lock}, {@code holder}, {@code limit}, ...)
 * @param retryAfter the delay after which a retry is worth it, when the server gave one
 */
record ErrorDetails(String reason, Map<String, String> metadata, Optional<Duration> retryAfter) {
  /** The {@code ErrorInfo} domain of every error the server sends. */
  static final String DOMAIN = "leasehold";

  static final ErrorDetails NONE = new ErrorDetails("", Map.of(), Optional.empty());

  /** The details {@code error} (a gRPC status exception) carries; {@link #NONE} if none. */
  static ErrorDetails of(Throwable error) {
    com.google.rpc.Status status = StatusProto.fromThrowable(error);
    if (status == null) {
      return NONE;
    }
    ErrorInfo info = null;
    Optional<Duration> retryAfter = Optional.empty();
    for (Any detail : status.getDetailsList()) {
      try {
        if (info == null && detail.is(ErrorInfo.class)) {
          info = detail.unpack(ErrorInfo.class);
        } else if (retryAfter.isEmpty() && detail.is(RetryInfo.class)) {
          com.google.protobuf.Duration delay = detail.unpack(RetryInfo.class).getRetryDelay();
          retryAfter = Optional.of(Duration.ofSeconds(delay.getSeconds(), delay.getNanos()));
        }
      } catch (InvalidProtocolBufferException unreadable) {
        // A detail we cannot read is one we do not have.
      }
    }
    if (info == null || !DOMAIN.equals(info.getDomain())) {
      return NONE;
    }
    return new ErrorDetails(info.getReason(), Map.copyOf(info.getMetadataMap()), retryAfter);
  }

  /**
   * Turns {@code error}, an acquisition's failure, into this client's exception: throws {@link
   * NotAcquiredException}, with the server's details, when the lock stayed taken (ABORTED);
   * otherwise returns the exception to throw: {@code error} itself when unchecked (a {@link
   * io.grpc.StatusRuntimeException} keeps its status and trailers), else wrapped in an {@link
   * IllegalStateException}. Use as {@code throw ErrorDetails.failure(error);}.
   */
  static RuntimeException failure(Throwable error) throws NotAcquiredException {
    Status status = Status.fromThrowable(error);
    if (status.getCode() == Status.Code.ABORTED) {
      ErrorDetails details = of(error);
      throw new NotAcquiredException(
          status.getDescription(),
          details.reason(),
          details.metadata().getOrDefault("holder", ""),
          details.retryAfter().orElse(null),
          details.metadata());
    }
    return error instanceof RuntimeException runtime ? runtime : new IllegalStateException(error);
  }

  /**
   * A session's {@code failed} answer as the exception a Lease stream's status would have been:
   * the serialized {@code google.rpc.Status} (with its ErrorInfo and RetryInfo) in the trailers,
   * where {@link #of} reads them.
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
}
