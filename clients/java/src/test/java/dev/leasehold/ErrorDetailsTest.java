package dev.leasehold;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Any;
import com.google.rpc.Code;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.util.Map;
import java.util.Optional;
import org.junit.jupiter.api.Test;

/** Reading the server's rich error details, without a server: statuses built as it sends them. */
class ErrorDetailsTest {
  private static StatusRuntimeException status(Code code, String message, Any... details) {
    com.google.rpc.Status.Builder status =
        com.google.rpc.Status.newBuilder().setCode(code.getNumber()).setMessage(message);
    for (Any detail : details) {
      status.addDetails(detail);
    }
    return StatusProto.toStatusRuntimeException(status.build());
  }

  private static Any info(String domain, String reason, Map<String, String> metadata) {
    return Any.pack(ErrorInfo.newBuilder()
        .setDomain(domain).setReason(reason).putAllMetadata(metadata).build());
  }

  private static Any retry(long millis) {
    return Any.pack(RetryInfo.newBuilder().setRetryDelay(com.google.protobuf.Duration.newBuilder()
        .setSeconds(millis / 1000).setNanos((int) (millis % 1000) * 1_000_000)).build());
  }

  @Test
  void aTakenLockBecomesNotAcquiredWithItsReasonHolderRetryAndMetadata() {
    StatusRuntimeException error = status(Code.ABORTED, "lock \"job\" is held by \"a\"",
        info("leasehold", "WAIT_EXPIRED",
            Map.of("lock", "job", "holder", "a", "waited_ms", "250")),
        retry(1500));
    NotAcquiredException refused =
        assertThrows(NotAcquiredException.class, () -> ErrorDetails.failure(error));
    assertEquals("lock \"job\" is held by \"a\"", refused.getMessage());
    assertEquals("WAIT_EXPIRED", refused.reason());
    assertEquals("a", refused.holder());
    assertEquals(Optional.of(Duration.ofMillis(1500)), refused.retryAfter());
    assertEquals(Map.of("lock", "job", "holder", "a", "waited_ms", "250"), refused.metadata());
    assertThrows(UnsupportedOperationException.class, () -> refused.metadata().put("x", "y"));
  }

  @Test
  void noRetryInfoMeansNoRetryDelay() {
    NotAcquiredException refused = assertThrows(NotAcquiredException.class,
        () -> ErrorDetails.failure(status(Code.ABORTED, "held",
            info("leasehold", "LOCK_HELD", Map.of("lock", "job", "holder", "")))));
    assertEquals("LOCK_HELD", refused.reason());
    assertEquals("", refused.holder());
    assertEquals(Optional.empty(), refused.retryAfter());
  }

  @Test
  void aStatusWithoutOurDetailsStillBecomesNotAcquiredWithEmptyFields() {
    for (StatusRuntimeException error : new StatusRuntimeException[] {
        Status.ABORTED.withDescription("held").asRuntimeException(),
        status(Code.ABORTED, "held", info("elsewhere", "LOCK_HELD", Map.of("holder", "a")),
            retry(100))}) {
      NotAcquiredException refused =
          assertThrows(NotAcquiredException.class, () -> ErrorDetails.failure(error));
      assertEquals("held", refused.getMessage());
      assertEquals("", refused.reason());
      assertEquals("", refused.holder());
      assertEquals(Optional.empty(), refused.retryAfter());
      assertEquals(Map.of(), refused.metadata());
    }
  }

  @Test
  void otherFailuresAreReturnedAsTheyAreOrWrapped() throws Exception {
    StatusRuntimeException limit = status(Code.FAILED_PRECONDITION, "limits differ",
        info("leasehold", "LIMIT_MISMATCH", Map.of("held_limit", "2", "asked_limit", "3")));
    assertSame(limit, ErrorDetails.failure(limit));
    assertEquals("LIMIT_MISMATCH", ErrorDetails.of(limit).reason());
    assertEquals("3", ErrorDetails.of(limit).metadata().get("asked_limit"));
    Exception checked = new Exception("checked");
    assertSame(checked, ErrorDetails.failure(checked).getCause());
    assertEquals(ErrorDetails.NONE, ErrorDetails.of(checked));
  }

  @Test
  void theMessageOnlyConstructorStillWorks() {
    NotAcquiredException refused = new NotAcquiredException("taken");
    assertEquals("taken", refused.getMessage());
    assertEquals("", refused.reason());
    assertTrue(refused.retryAfter().isEmpty());
    assertTrue(refused.metadata().isEmpty());
  }
}
