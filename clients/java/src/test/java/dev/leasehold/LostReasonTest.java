package dev.leasehold;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.grpc.Status;
import org.junit.jupiter.api.Test;

/** {@link LostReason}: the server's code, and what a stream's end means, as the typed reason. */
class LostReasonTest {
  @Test
  void everyServerCodeHasItsReason() {
    assertEquals(LostReason.TAKEN, LostReason.of(leasehold.v1.Lock.LostReason.LOST_REASON_TAKEN));
    assertEquals(LostReason.UNREACHABLE,
        LostReason.of(leasehold.v1.Lock.LostReason.LOST_REASON_UNREACHABLE));
    assertEquals(LostReason.SHUTDOWN,
        LostReason.of(leasehold.v1.Lock.LostReason.LOST_REASON_SHUTDOWN));
    assertEquals(LostReason.REVOKED,
        LostReason.of(leasehold.v1.Lock.LostReason.LOST_REASON_REVOKED));
    assertEquals(LostReason.MAX_HOLD,
        LostReason.of(leasehold.v1.Lock.LostReason.LOST_REASON_MAX_HOLD));
  }

  @Test
  void anOlderServerOrANewerCodeIsUnknown() {
    assertEquals(LostReason.UNKNOWN,
        LostReason.of(leasehold.v1.Lock.LostReason.LOST_REASON_UNSPECIFIED));
    // A code added after this client was built arrives as UNRECOGNIZED.
    leasehold.v1.Lock.Lost later = leasehold.v1.Lock.Lost.newBuilder().setCodeValue(99).build();
    assertEquals(LostReason.UNKNOWN, LostReason.of(later.getCode()));
  }

  @Test
  void aStreamsEndSaysWhetherItWasTakenOrUnreachable() {
    assertEquals(LostReason.TAKEN, LostReason.ofStatus(Status.NOT_FOUND)); // Resume refused.
    assertEquals(LostReason.UNREACHABLE, LostReason.ofStatus(Status.UNAVAILABLE));
    assertEquals(LostReason.UNREACHABLE, LostReason.ofStatus(null)); // Ended without a word.
    assertEquals(LostReason.UNKNOWN, LostReason.ofStatus(Status.PERMISSION_DENIED));
  }
}
