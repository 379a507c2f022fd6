package dev.leasehold;

import static dev.leasehold.Checks.awaitTrue;
import static dev.leasehold.Checks.lockKey;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * Several names, lock-delay and max-hold beyond the conformance scenarios: a lease on two names
 * resumed on another server (it asks for both again), and each option on a session.
 */
class HoldingOptionsTest {
  @Test
  void aLeaseOnTwoNamesResumesOnAnotherServerWithBoth() throws Exception {
    try (Servers servers = new Servers(2);
        LeaseholdClient client = LeaseholdClient.connect(servers.targets())) {
      Lease lease = client.lease("a").names("b").ttl(Duration.ofSeconds(3)).acquire();
      Map<String, Long> fences = lease.fences();
      assertEquals(List.of("a", "b"), List.copyOf(fences.keySet()));
      servers.stop(0); // Its server (the list's first) ends the stream, keeping the lease.
      awaitTrue(() -> lease.resumes() == 1 && lease.attached(), "resumed on the other server");
      assertFalse(lease.isLost(), () -> "lost: " + lease.lost().getNow(""));
      assertEquals(fences, lease.fences());
      for (String name : List.of("a", "b")) {
        assertEquals(lease.token(), servers.lockToken(lockKey(name)), name + "'s key");
      }
      assertTrue(lease.release());
      assertEquals("0", servers.redisCli("EXISTS", lockKey("a")));
      assertEquals("0", servers.redisCli("EXISTS", lockKey("b")));
    }
  }

  @Test
  void aSessionLeaseHoldsTwoNamesAndItsLockDelayFollowsItsLossAlone() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target);
        Session session = client.session()) {
      Session.AcquireOptions delayed =
          new Session.AcquireOptions().names("b").lockDelay(Duration.ofSeconds(30));
      SessionLease both = session.acquire("a", delayed);
      assertEquals(List.of("a", "b"), List.copyOf(both.fences().keySet()));
      assertEquals(both.fencingToken(), both.fences().get("a"));
      for (String name : List.of("a", "b")) {
        assertEquals(both.token(), servers.lockToken(lockKey(name)), name + "'s key");
      }
      try (SessionLease other = session.acquire("c")) {
        assertEquals(1, client.revoke("a").size());
        String reason = both.lost().get(2, TimeUnit.SECONDS);
        assertEquals(Optional.of(LostReason.REVOKED), both.lostCode(), reason);
        for (String name : List.of("a", "b")) { // Lost as a whole, each name delayed.
          assertThrows(NotAcquiredException.class, () -> client.lease(name).acquire(), name);
        }
        assertFalse(session.isLost(), () -> "session lost: " + session.lost().getNow(""));
        assertFalse(other.isLost(), () -> "other lost: " + other.lost().getNow(""));
      }
      assertTrue(session.acquire("d", new Session.AcquireOptions().lockDelay(
          Duration.ofSeconds(30))).release());
      try (Lease free = client.lease("d").acquire()) { // No delay after a clean release.
        assertEquals(free.token(), servers.lockToken(lockKey("d")));
      }
    }
  }

  @Test
  void aSessionLeaseEndsAloneAtItsMaxHold() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target);
        Session session = client.session(new SessionOptions().ttl(Duration.ofSeconds(1)))) {
      long sent = System.nanoTime();
      SessionLease capped = session.acquire("job",
          new Session.AcquireOptions().maxHold(Duration.ofSeconds(1)));
      try (SessionLease other = session.acquire("other")) {
        String reason = capped.lost().get(3, TimeUnit.SECONDS);
        long lostMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - sent);
        assertEquals(Optional.of(LostReason.MAX_HOLD), capped.lostCode(), reason);
        assertTrue(lostMs >= 1000, "lost " + lostMs + " ms after the acquire");
        assertEquals(0, capped.resumes());
        assertFalse(session.isLost(), () -> "session lost: " + session.lost().getNow(""));
        assertFalse(other.isLost(), () -> "other lost: " + other.lost().getNow(""));
        assertTrue(other.release());
      }
    }
  }
}
