package dev.leasehold;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.time.Instant;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * The conformance scenarios ({@code clients/conformance/scenarios.txt}) for the Java client,
 * against the real binary and a real redis-server: the Rust, Go and Python clients run the same
 * list.
 */
class ConformanceTest {
  private static final String LOCK_KEY = "leasehold:{job}:lock";

  @Test
  void conformance_acquire_release() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target)) {
      Lease lease = client.lease("job").acquire();
      assertEquals(lease.token(), servers.redisCli("GET", LOCK_KEY));
      assertTrue(lease.release());
      assertEquals("0", servers.redisCli("EXISTS", LOCK_KEY));
    }
  }

  @Test
  void conformance_fail_fast_names_holder() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target);
        Lease held = client.lease("job").holder("holder-a").acquire()) {
      NotAcquiredException refused =
          assertThrows(NotAcquiredException.class, () -> client.lease("job").acquire());
      assertTrue(refused.getMessage().contains("holder-a"), refused.getMessage());
    }
  }

  @Test
  void conformance_wait_then_handoff() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target)) {
      Lease first = client.lease("job").acquire();
      CompletableFuture<Lease> waiter = CompletableFuture.supplyAsync(() -> {
        try {
          return client.lease("job").waitUpTo(Duration.ofSeconds(10)).acquire();
        } catch (NotAcquiredException e) {
          throw new IllegalStateException(e);
        }
      });
      servers.waitForLine("leasehold:{job}:line", 1);
      assertTrue(first.release());
      try (Lease second = waiter.get(10, TimeUnit.SECONDS)) {
        assertTrue(second.fencingToken() > first.fencingToken());
      }
    }
  }

  @Test
  void conformance_fencing_tokens_grow() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target)) {
      long last = 0;
      for (int i = 0; i < 5; i++) {
        try (Lease lease = client.lease("job").acquire()) {
          assertTrue(lease.fencingToken() > last);
          last = lease.fencingToken();
        }
      }
    }
  }

  @Test
  void conformance_lost_when_key_deleted() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target);
        Lease lease = client.lease("job").ttl(Duration.ofMillis(300)).acquire()) {
      servers.redisCli("DEL", LOCK_KEY);
      String reason = lease.lost().get(10, TimeUnit.SECONDS);
      assertTrue(reason.contains("deleted or taken"), reason);
    }
  }

  @Test
  void conformance_lost_by_client_clock() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target)) {
      Lease lease = client.lease("job").ttl(Duration.ofMillis(500)).acquire();
      servers.signalServer("STOP");
      try {
        String reason = lease.lost().get(10, TimeUnit.SECONDS);
        assertTrue(reason.contains("server silent"), reason);
      } finally {
        servers.signalServer("CONT");
      }
    }
  }

  @Test
  void conformance_bad_input_refused() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target)) {
      StatusRuntimeException refused =
          assertThrows(StatusRuntimeException.class, () -> client.lease("").acquire());
      assertEquals(Status.Code.INVALID_ARGUMENT, refused.getStatus().getCode());
      assertTrue(refused.getStatus().getDescription().contains("lock name is empty"));
    }
  }

  @Test
  void conformance_election_handover() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target);
        Candidate a = client.campaign("vote", "a".getBytes(), Duration.ofSeconds(2))) {
      long termA = a.awaitElected(Duration.ofSeconds(10));
      try (Candidate b = client.campaign("vote", "b".getBytes(), Duration.ofSeconds(2))) {
        servers.waitForLine("leasehold:election:{vote}:line", 1);
        assertTrue(a.resign());
        long termB = b.awaitElected(Duration.ofSeconds(10));
        assertTrue(termB > termA);
        assertEquals(Optional.of(new Leader(termB, "b".getBytes())), client.leader("vote"));
      }
    }
  }

  @Test
  void conformance_semaphore_limit() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target);
        Lease first = client.lease("pool").limit(2).acquire();
        Lease second = client.lease("pool").limit(2).acquire()) {
      assertTrue(first.fencingToken() != second.fencingToken());
      assertThrows(NotAcquiredException.class, () -> client.lease("pool").limit(2).acquire());
      StatusRuntimeException other =
          assertThrows(StatusRuntimeException.class, () -> client.lease("pool").limit(3).acquire());
      assertEquals(Status.Code.FAILED_PRECONDITION, other.getStatus().getCode());
      String message = other.getStatus().getDescription();
      assertTrue(message.contains("limit 2") && message.contains("limit 3"), message);
    }
  }

  @Test
  void conformance_shared_readers() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target)) {
      Lease first = client.lease("catalog").shared().acquire();
      Lease second = client.lease("catalog").shared().acquire();
      long readers = Math.max(first.fencingToken(), second.fencingToken());
      CompletableFuture<Lease> writer = CompletableFuture.supplyAsync(() -> {
        try {
          return client.lease("catalog").waitUpTo(Duration.ofSeconds(10)).acquire();
        } catch (NotAcquiredException e) {
          throw new IllegalStateException(e);
        }
      });
      servers.waitForLine("leasehold:{catalog}:line", 1);
      assertTrue(!writer.isDone(), "the writer got in beside the readers");
      assertTrue(first.release());
      assertTrue(second.release());
      try (Lease held = writer.get(10, TimeUnit.SECONDS)) {
        assertTrue(held.fencingToken() > readers);
      }
    }
  }

  @Test
  void conformance_resume_after_break() throws Exception {
    try (Servers servers = new Servers();
        CuttableProxy proxy = new CuttableProxy(servers.target);
        LeaseholdClient breakable = LeaseholdClient.connect(proxy.target);
        LeaseholdClient client = LeaseholdClient.connect(servers.target)) {
      Lease held = breakable.lease("job").ttl(Duration.ofSeconds(3))
          .resumeGrace(Duration.ofSeconds(2)).acquire();
      proxy.cut(); // The connection breaks; the lease is kept for its grace.
      Instant deadline = Instant.now().plus(Duration.ofSeconds(10));
      while (true) {
        long pttl = Long.parseLong(servers.redisCli("PTTL", LOCK_KEY));
        if (pttl >= 0 && pttl <= 2000) {
          break;
        }
        assertTrue(Instant.now().isBefore(deadline), "the lease was not shortened to its grace");
        Thread.sleep(10);
      }
      StatusRuntimeException wrong = assertThrows(StatusRuntimeException.class,
          () -> client.lease("job").ttl(Duration.ofSeconds(3)).resume("0".repeat(32)).acquire());
      assertEquals(Status.Code.NOT_FOUND, wrong.getStatus().getCode());
      try (Lease resumed =
          client.lease("job").ttl(Duration.ofSeconds(3)).resume(held.token()).acquire()) {
        assertEquals(held.fencingToken(), resumed.fencingToken());
        assertEquals(held.token(), servers.redisCli("GET", LOCK_KEY));
      }
    }
  }
}
