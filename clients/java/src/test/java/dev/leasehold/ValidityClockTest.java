package dev.leasehold;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** {@link ValidityClock#vouchedUntil}: how long a server's message vouches, by this clock. */
class ValidityClockTest {
  private static final long MS = TimeUnit.MILLISECONDS.toNanos(1);
  /** Any instant: nanoTime values may be negative, and compare only by difference. */
  private static final long OPENED = -1_234_567_890_123L;

  @Test
  void withoutValidToItCountsFromReceipt() {
    long received = OPENED + 5_000 * MS; // However late: an older server cannot say.
    assertEquals(received + 2_000 * MS, ValidityClock.vouchedUntil(OPENED, received, 2_000, 0));
  }

  @Test
  void aMessageHeldUpPastItsValidToIsAlreadyPast() {
    // Sent 3 s into the stream, vouching 10 s from the server's receipt of the stream... but
    // delivered 15 s after the client opened it (a partition healed): nothing is left.
    long received = OPENED + 15_000 * MS;
    long until = ValidityClock.vouchedUntil(OPENED, received, 7_000, 10_000);
    assertEquals(OPENED + 10_000 * MS, until);
    assertTrue(until - received < 0, "already past on receipt");
  }

  @Test
  void aTimelyMessageVouchesUntilTheEarlierOfTheTwo() {
    long received = OPENED + 100 * MS;
    // The opening's bound comes first: the message spent some time on its way.
    assertEquals(OPENED + 3_000 * MS, ValidityClock.vouchedUntil(OPENED, received, 3_000, 3_000));
    // Receipt's comes first: the server's valid_to_ms reaches further.
    assertEquals(received + 2_000 * MS,
        ValidityClock.vouchedUntil(OPENED, received, 2_000, 60_000));
  }

  @Test
  void unsignedFieldsAreReadAsUnsigned() {
    long received = OPENED + 100 * MS;
    // valid_for_ms is a uint32: 0xFFFFFFFF ms, not -1.
    assertEquals(received + TimeUnit.MILLISECONDS.toNanos(0xFFFFFFFFL),
        ValidityClock.vouchedUntil(OPENED, received, -1, 0));
    // valid_to_ms past Long.MAX_VALUE (a uint64) bounds nothing.
    assertEquals(received + 2_000 * MS, ValidityClock.vouchedUntil(OPENED, received, 2_000, -1));
    assertEquals(received + 2_000 * MS,
        ValidityClock.vouchedUntil(OPENED, received, 2_000, Long.MAX_VALUE));
  }
}
