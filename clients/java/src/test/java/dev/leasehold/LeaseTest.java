package dev.leasehold;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

class LeaseTest {
  @Test
  void aLeaseHoldsTheLockRefusesASecondHolderAndReleasesOnClose() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target)) {
      try (Lease lease = client.lease("job").ttl(Duration.ofSeconds(5)).holder("java-test")
          .acquire()) {
        assertTrue(lease.fencingToken() > 0);
        assertEquals(lease.token(), servers.redisCli("GET", "leasehold:{job}:lock"));
        NotAcquiredException refused =
            assertThrows(NotAcquiredException.class, () -> client.lease("job").acquire());
        assertTrue(refused.getMessage().contains("java-test"), refused.getMessage());
        assertFalse(lease.isLost());
      }
      assertEquals("0", servers.redisCli("EXISTS", "leasehold:{job}:lock"));
    }
  }

  @Test
  void lostCompletesWhenRedisDeletesTheKey() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target);
        Lease lease = client.lease("job").ttl(Duration.ofMillis(300)).acquire()) {
      servers.redisCli("DEL", "leasehold:{job}:lock");
      String reason = lease.lost().get(5, TimeUnit.SECONDS);
      assertTrue(reason.contains("deleted or taken"), reason);
      assertTrue(lease.isLost());
      assertFalse(lease.release());
    }
  }

  @Test
  void aWaiterGetsTheLockWhenTheHolderReleases() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target)) {
      Lease first = client.lease("job").acquire();
      var waiter = java.util.concurrent.CompletableFuture.supplyAsync(() -> {
        try {
          return client.lease("job").waitUpTo(Duration.ofSeconds(10)).acquire();
        } catch (NotAcquiredException e) {
          throw new IllegalStateException(e);
        }
      });
      // The waiter is in line before the holder lets go.
      while (!servers.redisCli("ZCARD", "leasehold:{job}:line").equals("1")) {
        Thread.sleep(10);
      }
      assertTrue(first.release());
      try (Lease second = waiter.get(10, TimeUnit.SECONDS)) {
        assertTrue(second.fencingToken() > first.fencingToken());
      }
    }
  }
}
