package dev.leasehold;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Optional;
import java.util.List;
import java.util.concurrent.CompletableFuture;
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
        assertEquals(lease.token(), servers.lockToken("leasehold:{job}:lock"));
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

  @Test
  void aLeaseWhoseResumeIsRefusedIsLostAtOnceNotAtTheEndOfItsValidity() throws Exception {
    try (Servers servers = new Servers(2);
        LeaseholdClient client = LeaseholdClient.connect(servers.targets());
        Lease lease = client.lease("job").ttl(Duration.ofSeconds(10)).acquire()) {
      CompletableFuture<Long> lostAt = lease.lost().thenApply(reason -> System.nanoTime());
      servers.signalServer(0, "STOP"); // The lease's server can neither renew nor notice.
      servers.redisCli("DEL", "leasehold:{job}:lock");
      servers.kill(0); // The stream breaks; the resume on the other server finds no lease.
      String reason = lease.lost().get(10, TimeUnit.SECONDS);
      assertTrue(reason.contains("NOT_FOUND"), reason);
      assertEquals(Optional.of(LostReason.TAKEN), lease.lostCode());
      assertTrue(lostAt.get() < lease.validUntilNanos(), "lost only when its validity ran out");
      assertFalse(lease.release());
    }
  }

  @Test
  void aLeaseThatCannotBeResumedAnywhereIsLostByItsValidity() throws Exception {
    try (Servers servers = new Servers(2);
        LeaseholdClient client = LeaseholdClient.connect(servers.targets())) {
      Lease lease = client.lease("job").ttl(Duration.ofSeconds(2)).acquire();
      CompletableFuture<Long> lostAt = lease.lost().thenApply(reason -> System.nanoTime());
      servers.kill(0);
      servers.kill(1);
      String reason = lease.lost().get(10, TimeUnit.SECONDS);
      assertTrue(reason.startsWith("could not resume before the lease's validity ran out: "),
          reason);
      assertTrue(reason.contains("UNAVAILABLE"), reason);
      assertEquals(Optional.of(LostReason.UNREACHABLE), lease.lostCode());
      // Told when the validity the last server confirmed ran out: not before (the rule is the
      // client's clock) and not much after (allowing for a loaded machine's scheduler).
      long late = TimeUnit.NANOSECONDS.toMillis(lostAt.get() - lease.validUntilNanos());
      assertTrue(lostAt.get() - lease.validUntilNanos() >= 0, "told before the validity ran out");
      assertTrue(late < 1000, "told " + late + " ms after the validity ran out");
      assertFalse(lease.release());
    }
  }

  @Test
  void releaseBetweenStreamsReleasesByToken() throws Exception {
    try (Servers servers = new Servers(2);
        LeaseholdClient client = LeaseholdClient.connect(servers.targets())) {
      Lease lease = client.lease("job").ttl(Duration.ofSeconds(5)).acquire();
      servers.signalServer(1, "STOP"); // The only other server: a resume waits there, unanswered.
      servers.kill(0);
      Checks.awaitTrue(() -> lease.state().equals("RESUMING"), "the stream broke");
      CompletableFuture<Boolean> released = CompletableFuture.supplyAsync(lease::release);
      Checks.awaitTrue(() -> lease.state().equals("RELEASING"), "release between streams");
      servers.signalServer(1, "CONT");
      assertTrue(released.get(10, TimeUnit.SECONDS));
      assertEquals("0", servers.redisCli("EXISTS", "leasehold:{job}:lock"));
      assertFalse(lease.isLost());
    }
  }

  @Test
  void aListOfServersAndDnsNamesSkipsTheOnesThatAreDown() throws Exception {
    int closed;
    try (java.net.ServerSocket socket = new java.net.ServerSocket(0)) {
      closed = socket.getLocalPort(); // Nobody listens here once closed.
    }
    try (Servers servers = new Servers()) {
      String port = servers.target.substring(servers.target.lastIndexOf(':') + 1);
      for (String target : List.of("127.0.0.1:" + closed + "," + servers.target,
          "localhost:" + closed + ", localhost:" + port, "localhost:" + port)) {
        try (LeaseholdClient client = LeaseholdClient.connect(target);
            Lease lease = client.lease("job").ttl(Duration.ofSeconds(5)).acquire()) {
          assertEquals(lease.token(), servers.lockToken("leasehold:{job}:lock"), target);
        }
      }
    }
  }

  @Test
  void targetsAreReadAsOneServerAListOrAGrpcTarget() {
    assertEquals("127.0.0.1:1", LeaseholdClient.grpcTarget(" 127.0.0.1:1 "));
    assertEquals("dns:///example.com:1", LeaseholdClient.grpcTarget("dns:///example.com:1"));
    assertEquals("leasehold:///a:1,b.example:2",
        LeaseholdClient.grpcTarget("a:1, b.example:2"));
    assertEquals("leasehold:///%5B::1%5D:1,127.0.0.1:2",
        LeaseholdClient.grpcTarget("[::1]:1,127.0.0.1:2"));
    for (String bad : List.of("a,b:1", "a:1,b:x", "::1:2,a:1", "a:0,b:1", " , ")) {
      assertThrows(IllegalArgumentException.class, () -> LeaseholdClient.connect(bad), bad);
    }
  }

  @Test
  void aLeaseWithoutAutoResumeIsLostWhenItsStreamBreaks() throws Exception {
    try (Servers servers = new Servers(2);
        LeaseholdClient client = LeaseholdClient.connect(servers.targets());
        Lease lease = client.lease("job").ttl(Duration.ofSeconds(5)).autoResume(false)
            .acquire()) {
      servers.stop(0); // Without a grace the server releases it and says so.
      String reason = lease.lost().get(10, TimeUnit.SECONDS);
      assertTrue(reason.contains("shutting down"), reason);
      assertEquals(Optional.of(LostReason.SHUTDOWN), lease.lostCode());
      assertEquals("0", servers.redisCli("EXISTS", "leasehold:{job}:lock"));
      assertEquals(0, lease.resumes());
    }
  }

  @Test
  void aWaiterWhoseServerStopsWaitsOnAnother() throws Exception {
    try (Servers servers = new Servers(2);
        LeaseholdClient holderClient = LeaseholdClient.connect(servers.target(1));
        LeaseholdClient client = LeaseholdClient.connect(servers.targets())) {
      Lease first = holderClient.lease("job").ttl(Duration.ofSeconds(5)).acquire();
      CompletableFuture<Lease> waiter = CompletableFuture.supplyAsync(() -> {
        try {
          return client.lease("job").ttl(Duration.ofSeconds(5)).waitUpTo(Duration.ofSeconds(15))
              .acquire();
        } catch (NotAcquiredException e) {
          throw new IllegalStateException(e);
        }
      });
      servers.waitForLine("leasehold:{job}:line", 1);
      servers.stop(0); // The waiter's server: it ends the wait with UNAVAILABLE.
      servers.waitForLine("leasehold:{job}:line", 1); // In line again, through the other one.
      assertTrue(first.release());
      try (Lease second = waiter.get(10, TimeUnit.SECONDS)) {
        assertTrue(second.fencingToken() > first.fencingToken());
      }
    }
  }

  @Test
  void aWaitThatRunsOutSaysWaitExpiredWithTheHolderAndHowLongItWaited() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target);
        Lease held = client.lease("job").holder("holder-a").ttl(Duration.ofSeconds(30))
            .acquire()) {
      NotAcquiredException refused = assertThrows(NotAcquiredException.class,
          () -> client.lease("job").waitUpTo(Duration.ofMillis(200)).autoResume(false).acquire());
      assertEquals("WAIT_EXPIRED", refused.reason());
      assertEquals("holder-a", refused.holder());
      assertTrue(Long.parseLong(refused.metadata().get("waited_ms")) >= 200, refused.metadata()::toString);
      Duration retryAfter = refused.retryAfter().orElseThrow();
      assertTrue(!retryAfter.isNegative() && !retryAfter.isZero()
          && retryAfter.compareTo(Duration.ofSeconds(30)) <= 0, retryAfter::toString);
    }
  }

  @Test
  void listReturnsAtMostTheLimitAndSaysWhenMoreAreHeld() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target);
        Lease a = client.lease("a").acquire();
        Lease b = client.lease("b").holder("reader").shared().acquire();
        Lease c = client.lease("c").limit(3).acquire()) {
      var all = client.list(0);
      assertEquals(List.of("a", "b", "c"),
          all.getLocksList().stream().map(lock -> lock.getName()).sorted().toList());
      assertFalse(all.getTruncated());
      var shared = all.getLocksList().stream()
          .filter(lock -> lock.getName().equals("b")).findFirst().orElseThrow();
      assertEquals(leasehold.v1.Lock.LeaseMode.LEASE_MODE_SHARED, shared.getMode());
      assertEquals(b.fencingToken(), shared.getHolders(0).getFencingToken());
      var semaphore = all.getLocksList().stream()
          .filter(lock -> lock.getName().equals("c")).findFirst().orElseThrow();
      assertEquals(3, semaphore.getLimit());
      var two = client.list(2);
      assertEquals(2, two.getLocksCount());
      assertTrue(two.getTruncated());
      assertThrows(IllegalArgumentException.class, () -> client.list(-1));
    }
  }
}
