package dev.leasehold;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** {@link MaxHold}: the validity a server vouches for never reaches past send + max hold. */
class MaxHoldTest {
  private static final long MS = TimeUnit.MILLISECONDS.toNanos(1);
  /** Any instant: nanoTime values may be negative, and compare only by difference. */
  private static final long SENT = -1_234_567_890_123L;

  @Test
  void aValidityPastTheCeilingIsCappedAtIt() {
    MaxHold hold = MaxHold.of(SENT, 1_000);
    assertEquals(SENT + 1_000 * MS, hold.ceilingNanos());
    // The server vouches 3 s (its TTL) from 100 ms in: the client believes 1 s from the send.
    assertEquals(SENT + 1_000 * MS, hold.cap(SENT + 3_100 * MS));
    assertTrue(hold.reachedBy(hold.cap(SENT + 3_100 * MS)), "ends at the ceiling: MAX_HOLD");
  }

  @Test
  void aValidityShortOfTheCeilingIsLeftAlone() {
    MaxHold hold = MaxHold.of(SENT, 10_000);
    assertEquals(SENT + 3_000 * MS, hold.cap(SENT + 3_000 * MS));
    assertFalse(hold.reachedBy(SENT + 3_000 * MS), "a silent server is not a max hold");
  }

  @Test
  void noMaxHoldCapsNothing() {
    assertEquals(MaxHold.NONE, MaxHold.of(SENT, 0));
    assertEquals(SENT + 3_600_000 * MS, MaxHold.NONE.cap(SENT + 3_600_000 * MS));
    assertFalse(MaxHold.NONE.reachedBy(SENT + 3_600_000 * MS));
  }

  @Test
  void theMaxHoldIsReadAsUnsigned() {
    // max_hold_ms is a uint32: 0xFFFFFFFF ms, not -1.
    assertEquals(SENT + TimeUnit.MILLISECONDS.toNanos(0xFFFFFFFFL),
        MaxHold.of(SENT, -1).ceilingNanos());
  }
}
