package dev.leasehold;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
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
}
