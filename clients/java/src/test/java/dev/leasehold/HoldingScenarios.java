package dev.leasehold;

import static dev.leasehold.Checks.LOCK_KEY;
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
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The conformance scenarios of what one holding takes and for how long (several names, lock-delay,
 * max-hold, the token check), each run from its {@code conformance_*} test in {@link
 * ConformanceTest} (kept there by name, so that scripts/conformance.sh finds it; here for that
 * file's size).
 */
final class HoldingScenarios {
  private static final Duration WITHIN = Duration.ofSeconds(5);
  private static final long MS = TimeUnit.MILLISECONDS.toNanos(1);

  private HoldingScenarios() {}

  static void allOrNone() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target);
        LeaseholdClient other = LeaseholdClient.connect(servers.target)) {
      Lease b = other.lease("b").holder("other").acquire();
      assertThrows(NotAcquiredException.class, () -> client.lease("a").names("b").acquire());
      try (Lease a = client.lease("a").acquire()) { // Left free by the refusal.
        assertEquals(a.token(), servers.lockToken(lockKey("a")));
      }
      CompletableFuture<Lease> ab = later(client, "a", "b");
      CompletableFuture<Lease> ba = later(client, "b", "a");
      awaitWaiters(servers, 2); // Both started while b is held.
      assertTrue(b.release());
      Lease first = CompletableFuture.anyOf(ab, ba)
          .thenApply(Lease.class::cast).get(WITHIN.toMillis(), TimeUnit.MILLISECONDS);
      CompletableFuture<Lease> next = first == ab.getNow(null) ? ba : ab;
      assertHoldsBoth(servers, client, first, next);
      assertTrue(first.release());
      Lease second = next.get(WITHIN.toMillis(), TimeUnit.MILLISECONDS);
      assertHoldsBoth(servers, client, second, null);
      for (String name : List.of("a", "b")) {
        assertTrue(second.fences().get(name) > first.fences().get(name), name);
      }
      assertTrue(second.release());
      assertEquals("0", servers.redisCli("EXISTS", lockKey("a")), "its release left a held");
      assertEquals("0", servers.redisCli("EXISTS", lockKey("b")), "its release left b held");
    }
  }

  /** A lease on {@code name} and {@code more}, waiting for them on another thread. */
  private static CompletableFuture<Lease> later(LeaseholdClient client, String name, String more) {
    return CompletableFuture.supplyAsync(() -> {
      try {
        return client.lease(name).names(more).holder(name + more)
            .waitUpTo(Duration.ofSeconds(10)).acquire();
      } catch (NotAcquiredException e) {
        throw new IllegalStateException(e);
      }
    });
  }

  /** Waits (bounded) until {@code count} wait in the lines of a and b together. */
  private static void awaitWaiters(Servers servers, int count) throws InterruptedException {
    awaitTrue(() -> {
      try {
        return Integer.parseInt(servers.redisCli("ZCARD", "leasehold:{a}:line"))
            + Integer.parseInt(servers.redisCli("ZCARD", "leasehold:{b}:line")) == count;
      } catch (Exception e) {
        throw new IllegalStateException(e);
      }
    }, count + " waiting for a and b");
  }

  /**
   * {@code lease} holds a and b: one fencing token per name in the order asked, both keys hold
   * its token, no wait-0 acquire of either gets in, and {@code waiting} (if any) still waits.
   */
  private static void assertHoldsBoth(
      Servers servers, LeaseholdClient client, Lease lease, CompletableFuture<Lease> waiting)
      throws Exception {
    Map<String, Long> fences = lease.fences();
    String first = fences.keySet().iterator().next();
    assertEquals(2, fences.size(), fences::toString);
    assertEquals(fences.get(first), lease.fencingToken());
    assertEquals(first.equals("a") ? List.of("a", "b") : List.of("b", "a"),
        List.copyOf(fences.keySet()));
    for (String name : List.of("a", "b")) {
      assertEquals(lease.token(), servers.lockToken(lockKey(name)), name + "'s key");
      assertThrows(NotAcquiredException.class, () -> client.lease(name).acquire(), name);
    }
    if (waiting != null) {
      assertFalse(waiting.isDone(), "both leases hold a and b at once");
    }
  }

  static void lockDelayAfterLoss() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target)) {
      Lease lost = client.lease("job").lockDelay(Duration.ofSeconds(1)).acquire();
      long revoked = System.nanoTime();
      assertEquals(1, client.revoke("job").size());
      String reason = lost.lost().get(WITHIN.toMillis(), TimeUnit.MILLISECONDS);
      assertEquals(Optional.of(LostReason.REVOKED), lost.lostCode(), reason);
      assertThrows(NotAcquiredException.class, () -> client.lease("job").acquire(),
          "taken inside the lock-delay");
      try (Lease next = client.lease("job").waitUpTo(WITHIN).acquire()) {
        long afterMs = (System.nanoTime() - revoked) / MS;
        assertTrue(afterMs >= 1000, "granted " + afterMs + " ms after the revoke");
        assertTrue(afterMs < WITHIN.toMillis(), "granted " + afterMs + " ms after the revoke");
      }
      Lease released = client.lease("job").lockDelay(Duration.ofSeconds(1)).acquire();
      assertTrue(released.release());
      try (Lease free = client.lease("job").acquire()) { // No delay after a clean release.
        assertEquals(free.token(), servers.lockToken(LOCK_KEY));
      }
    }
  }

  static void maxHoldEndsLease() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target)) {
      long sent = System.nanoTime();
      Lease lease = client.lease("job").ttl(Duration.ofSeconds(1))
          .maxHold(Duration.ofSeconds(1)).acquire();
      // Sent between the two readings: its ceiling is no later than the second plus 1 s.
      long ceiling = System.nanoTime() + 1000 * MS;
      // Read while held (each renewal re-arms it) until the loss: never past the ceiling.
      while (true) {
        assertTrue(lease.validUntilNanos() - ceiling <= 0,
            (lease.validUntilNanos() - sent) / MS + " ms of validity past the acquire");
        if (lease.isLost()) {
          break;
        }
        assertTrue(System.nanoTime() - sent < 3000 * MS, "not lost within 3 s of the acquire");
        try {
          lease.lost().get(5, TimeUnit.MILLISECONDS);
        } catch (TimeoutException stillHeld) {
          // Read again.
        }
      }
      long lostMs = (System.nanoTime() - sent) / MS;
      assertEquals(Optional.of(LostReason.MAX_HOLD), lease.lostCode(), lease.lost().getNow(""));
      assertTrue(lostMs >= 1000, "lost " + lostMs + " ms after the acquire");
      assertEquals(lease.token(), servers.lockToken(LOCK_KEY), "the key no longer holds");
      assertThrows(NotAcquiredException.class, () -> client.lease("job").acquire(),
          "taken just after the loss");
      awaitTrue(() -> lease.state().equals("ENDED"), "the stream ends");
      assertEquals(0, lease.resumes(), "a lease past its max hold was resumed");
      assertFalse(lease.release(), "a lease past its max hold was still held");
    }
  }

  static void tokenCheck() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target)) {
      assertEquals(new TokenCheck(TokenState.FREE, 0), client.check("job", 1));
      long token;
      try (Lease lease = client.lease("job").acquire()) {
        token = lease.fencingToken();
        assertEquals(new TokenCheck(TokenState.CURRENT, token), client.check("job", token));
        assertTrue(client.check("job", token).isCurrent());
        assertEquals(new TokenCheck(TokenState.SUPERSEDED, token),
            client.check("job", token - 1));
      }
      assertEquals(new TokenCheck(TokenState.FREE, 0), client.check("job", token));
    }
  }
}
