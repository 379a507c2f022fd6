package dev.leasehold;

import static dev.leasehold.Checks.LOCK_KEY;
import static dev.leasehold.Checks.acquireLater;
import static dev.leasehold.Checks.assertHeldAsBefore;
import static dev.leasehold.Checks.assertPermitHeld;
import static dev.leasehold.Checks.awaitRenewed;
import static dev.leasehold.Checks.awaitTrue;
import static dev.leasehold.Checks.lockKey;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import leasehold.v1.Lock.DescribeResponse;
import leasehold.v1.Lock.HeldLock;
import leasehold.v1.Lock.Holder;
import leasehold.v1.Lock.ListResponse;
import org.junit.jupiter.api.Test;

/**
 * The conformance scenarios ({@code clients/conformance/scenarios.txt}) for the Java client,
 * against the real binary and a real redis-server: the Rust, Go and Python clients run the same
 * list.
 */
class ConformanceTest {
  @Test
  void conformance_acquire_release() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target)) {
      Lease lease = client.lease("job").acquire();
      assertEquals(lease.token(), servers.lockToken(LOCK_KEY));
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
      assertEquals(Optional.of(LostReason.TAKEN), lease.lostCode());
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
        assertEquals(Optional.of(LostReason.UNREACHABLE), lease.lostCode());
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
      // Resumed by hand here: the lease itself must not (it would resume through the proxy).
      Lease held = breakable.lease("job").ttl(Duration.ofSeconds(3))
          .resumeGrace(Duration.ofSeconds(2)).autoResume(false).acquire();
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
          () -> client.lease("job").ttl(Duration.ofSeconds(3)).autoResume(false)
              .resume("0".repeat(32)).acquire());
      assertEquals(Status.Code.NOT_FOUND, wrong.getStatus().getCode());
      try (Lease resumed = client.lease("job").ttl(Duration.ofSeconds(3)).autoResume(false)
          .resume(held.token()).acquire()) {
        assertEquals(held.fencingToken(), resumed.fencingToken());
        assertEquals(held.token(), servers.lockToken(LOCK_KEY));
      }
    }
  }

  @Test
  void conformance_survives_rolling_restart() throws Exception {
    try (Servers servers = new Servers(3);
        LeaseholdClient client = LeaseholdClient.connect(servers.targets())) {
      List<String> lost = new CopyOnWriteArrayList<>();
      Lease lease = client.lease("job").ttl(Duration.ofSeconds(3)).acquire();
      lease.lost().thenAccept(lost::add);
      String token = lease.token();
      long fencing = lease.fencingToken();
      assertHeldAsBefore(servers, lease, token, fencing, 0, 1, 2);
      for (int i = 0; i < 3; i++) {
        servers.stop(i); // SIGTERM: the server ends the lease's stream, keeping the lease.
        // Held on a live server before this one is back: else a lease slow to see its stream
        // break could resume on the server it just lost, and never move.
        awaitRenewed(servers, "a live server renews the lease");
        servers.start(i);
        awaitTrue(lease::attached, "the lease is held on a stream again");
        assertEquals(List.of(), lost);
        assertHeldAsBefore(servers, lease, token, fencing, 0, 1, 2);
      }
      // On the first server first (the list's order), and moved off each server it was on when
      // that one stopped: it cannot sit on the same server for two stops of three.
      assertTrue(lease.resumes() >= 2, "resumed " + lease.resumes() + " times");
      assertTrue(lease.release());
      assertEquals("0", servers.redisCli("EXISTS", LOCK_KEY));
      assertEquals(List.of(), lost);
    }
  }

  @Test
  void conformance_survives_server_crash() throws Exception {
    try (Servers servers = new Servers(3);
        LeaseholdClient client = LeaseholdClient.connect(servers.targets())) {
      List<String> lost = new CopyOnWriteArrayList<>();
      Lease lease = client.lease("job").ttl(Duration.ofSeconds(3)).acquire();
      lease.lost().thenAccept(lost::add);
      String token = lease.token();
      long fencing = lease.fencingToken();
      servers.kill(0); // The lease's server (the list's first): no goodbye.
      servers.kill(1);
      // Only the survivor can renew the lease now.
      awaitRenewed(servers, "the survivor renews the lease");
      awaitTrue(lease::attached, "the lease is held on a stream again");
      assertTrue(lease.resumes() >= 1, "never resumed");
      assertEquals(List.of(), lost);
      assertHeldAsBefore(servers, lease, token, fencing, 2);
      assertTrue(lease.release());
      assertEquals("0", servers.redisCli("EXISTS", LOCK_KEY));
      assertEquals(List.of(), lost);
    }
  }

  @Test
  void conformance_refusal_details() throws Exception {
    Duration ttl = Duration.ofSeconds(30);
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target);
        Lease held = client.lease("job").holder("holder-a").ttl(ttl).acquire()) {
      NotAcquiredException refused = assertThrows(NotAcquiredException.class,
          () -> client.lease("job").acquire());
      assertEquals("LOCK_HELD", refused.reason());
      assertEquals("holder-a", refused.holder());
      Duration retryAfter = refused.retryAfter().orElseThrow(
          () -> new AssertionError("no retry delay: " + refused.metadata()));
      assertTrue(retryAfter.compareTo(Duration.ZERO) > 0, retryAfter::toString);
      assertTrue(retryAfter.compareTo(ttl) <= 0, retryAfter::toString);
      assertEquals("job", refused.metadata().get("lock"));
      assertEquals("holder-a", refused.metadata().get("holder"));
    }
  }

  @Test
  void conformance_lists_held_locks() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target)) {
      Lease lease = client.lease("job").holder("holder-a").acquire();
      ListResponse listed = client.list(0);
      List<HeldLock> jobs = listed.getLocksList().stream()
          .filter(lock -> lock.getName().equals("job")).toList();
      assertEquals(1, jobs.size(), listed::toString);
      assertEquals("holder-a", jobs.get(0).getHolder());
      assertEquals(lease.fencingToken(), jobs.get(0).getFencingToken());
      assertFalse(listed.getTruncated());
      assertTrue(lease.release());
      assertTrue(client.list(0).getLocksList().stream()
          .noneMatch(lock -> lock.getName().equals("job")), () -> client.list(0).toString());
    }
  }

  @Test
  void conformance_session_holds_many() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target);
        LeaseholdClient other = LeaseholdClient.connect(servers.target);
        Session session = client.session(new SessionOptions().ttl(Duration.ofSeconds(5)))) {
      SessionLease a = session.acquire("a");
      SessionLease b = session.acquire("b");
      SessionLease permit = session.acquire("pool", new Session.AcquireOptions().limit(2));
      List<String> lost = new CopyOnWriteArrayList<>();
      for (SessionLease lease : List.of(a, b, permit)) {
        lease.lost().thenAccept(reason -> lost.add(lease.name() + ": " + reason));
      }
      assertEquals(a.token(), servers.lockToken(lockKey("a")));
      assertEquals(b.token(), servers.lockToken(lockKey("b")));
      assertPermitHeld(servers, "pool", permit.token());
      for (String name : List.of("a", "b")) {
        assertThrows(NotAcquiredException.class,
            () -> other.lease(name).autoResume(false).acquire(), "another client's " + name);
      }

      assertTrue(a.release());
      try (Lease next = other.lease("a").autoResume(false).acquire()) {
        assertTrue(next.fencingToken() > a.fencingToken(),
            next.fencingToken() + " after " + a.fencingToken());
      }
      assertEquals(b.token(), servers.lockToken(lockKey("b")));
      assertPermitHeld(servers, "pool", permit.token());
      assertThrows(NotAcquiredException.class,
          () -> other.lease("b").autoResume(false).acquire(), "another client's b");
      assertEquals(List.of(), lost);

      session.close();
      assertEquals("0", servers.redisCli("EXISTS", lockKey("b")));
      assertEquals("", servers.redisCli("ZSCORE", lockKey("pool") + ":holders", permit.token()));
      try (Lease next = other.lease("b").autoResume(false).acquire()) {
        assertTrue(next.fencingToken() > b.fencingToken());
      }
      assertEquals(List.of(), lost);
      assertFalse(session.isLost());
    }
  }

  @Test
  void conformance_session_lease_lost_alone() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target);
        Session session = client.session(new SessionOptions().ttl(Duration.ofMillis(1500)))) {
      SessionLease a = session.acquire("a");
      SessionLease b = session.acquire("b");
      List<String> bLost = new CopyOnWriteArrayList<>();
      b.lost().thenAccept(bLost::add);
      servers.redisCli("DEL", lockKey("a"));
      String reason = a.lost().get(10, TimeUnit.SECONDS);
      assertTrue(reason.contains("deleted or taken"), reason);
      assertEquals(Optional.of(reason), a.lostReason());
      assertEquals(Optional.of(LostReason.TAKEN), a.lostCode());
      int confirmed = session.keptAlives();
      awaitTrue(() -> session.keptAlives() > confirmed, "the server confirms the session again");
      assertEquals(b.token(), servers.lockToken(lockKey("b")));
      assertFalse(b.isLost(), () -> "b lost: " + b.lostReason());
      assertFalse(session.isLost());
      assertEquals(List.of(), bLost);
      assertTrue(b.release());
      assertEquals(List.of(), bLost);
    }
  }

  @Test
  void conformance_session_campaign() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target);
        Session first = client.session(new SessionOptions().ttl(Duration.ofSeconds(2)));
        Session second = client.session(new SessionOptions().ttl(Duration.ofSeconds(2)))) {
      SessionCandidate a = first.campaign("vote", "a".getBytes());
      long termA = a.awaitElected(Duration.ofSeconds(10));
      assertTrue(termA > 0, "term " + termA);
      assertEquals(Optional.of(new Leader(termA, "a".getBytes())), client.leader("vote"));
      SessionCandidate b = second.campaign("vote", "b".getBytes());
      servers.waitForLine("leasehold:election:{vote}:line", 1);
      assertFalse(b.elected().isDone(), "the second candidate leads beside the first");
      first.close();
      long termB = b.awaitElected(Duration.ofSeconds(10));
      assertTrue(termB > termA, termB + " after " + termA);
      assertEquals(Optional.of(new Leader(termB, "b".getBytes())), client.leader("vote"));
      assertFalse(a.isLost(), () -> "a lost: " + a.lostReason());
      assertFalse(b.isLost(), () -> "b lost: " + b.lostReason());
    }
  }

  @Test
  void conformance_session_survives_server_crash() throws Exception {
    try (Servers servers = new Servers(3);
        LeaseholdClient client = LeaseholdClient.connect(servers.targets());
        Session session = client.session(new SessionOptions().ttl(Duration.ofSeconds(3)))) {
      SessionLease a = session.acquire("a");
      SessionLease b = session.acquire("b");
      List<String> lost = new CopyOnWriteArrayList<>();
      session.lost().thenAccept(reason -> lost.add("session: " + reason));
      for (SessionLease lease : List.of(a, b)) {
        lease.lost().thenAccept(reason -> lost.add(lease.name() + ": " + reason));
      }
      String tokenA = a.token();
      String tokenB = b.token();
      long fencingA = a.fencingToken();
      long fencingB = b.fencingToken();
      servers.kill(0); // The session's server (the list's first): no goodbye.
      awaitTrue(() -> a.resumes() >= 1 && b.resumes() >= 1 && a.attached() && b.attached(),
          "both leases are resumed on another server");
      assertEquals(List.of(), lost);
      assertEquals(tokenA, a.token());
      assertEquals(tokenB, b.token());
      assertEquals(fencingA, a.fencingToken());
      assertEquals(fencingB, b.fencingToken());
      assertEquals(tokenA, servers.lockToken(lockKey("a")));
      assertEquals(tokenB, servers.lockToken(lockKey("b")));
      for (int i : new int[] {1, 2}) {
        try (LeaseholdClient thief = LeaseholdClient.connect(servers.target(i))) {
          for (String name : List.of("a", "b")) {
            assertThrows(NotAcquiredException.class,
                () -> thief.lease(name).autoResume(false).acquire(),
                "a thief of " + name + " through server " + i);
          }
        }
      }
      SessionLease c = session.acquire("c");
      assertEquals(c.token(), servers.lockToken(lockKey("c")));
      session.close();
      for (String name : List.of("a", "b", "c")) {
        assertEquals("0", servers.redisCli("EXISTS", lockKey(name)), name + " still held");
      }
      assertEquals(List.of(), lost);
    }
  }

  @Test
  void conformance_frozen_leader_not_replaced() throws Exception {
    // The server's keepalive (200 ms + 300 ms) cuts the frozen leader's connection long before it
    // is woken: what the server then does with its leadership is what this checks.
    try (Servers servers = new Servers("--keepalive-interval", "200ms",
            "--keepalive-timeout", "300ms");
        LeaseholdClient client = LeaseholdClient.connect(servers.target);
        ChildJvm leader = new ChildJvm(FrozenLeader.class, servers.target, "frozen", "4000")) {
      String elected = leader.next(Duration.ofSeconds(30)); // A JVM's start on a busy machine.
      assertTrue(elected.startsWith("elected "), elected);
      long term = Long.parseLong(elected.substring("elected ".length()));
      try (Candidate second = client.candidate("frozen", "second".getBytes())
          .ttl(Duration.ofSeconds(4)).campaign()) {
        CompletableFuture<Long> secondTerm = CompletableFuture.supplyAsync(() -> {
          try {
            return second.awaitElected(Duration.ofSeconds(60));
          } catch (Exception e) {
            throw new IllegalStateException(e);
          }
        });
        servers.waitForLine("leasehold:election:{frozen}:line", 1);
        // Frozen just after a renewal, so that the 2 s stay well inside the 4 s validity the
        // leader was last confirmed (renewals come every third of the TTL).
        String key = "leasehold:election:{frozen}:lock";
        long last = servers.pttl(key);
        Instant deadline = Instant.now().plus(Duration.ofSeconds(10));
        for (long now = servers.pttl(key); now <= last; now = servers.pttl(key)) {
          assertTrue(Instant.now().isBefore(deadline), "the leadership was not renewed");
          last = now;
          Thread.sleep(2);
        }
        long renewed = System.nanoTime();
        leader.signal("STOP");
        try {
          Thread.sleep(2000); // The freeze itself: nothing to wait for but time.
          assertFalse(secondTerm.isDone(), "the second candidate was elected while the leader "
              + "was frozen and still believed: " + secondTerm.getNow(-1L));
        } finally {
          leader.signal("CONT");
        }
        long wokenMs = (System.nanoTime() - renewed) / 1_000_000;
        assertEquals("woken leading=true", leader.next(Duration.ofSeconds(10)),
            "woken " + wokenMs + " ms after the renewal");
        assertEquals("resumed " + term, leader.next(Duration.ofSeconds(10)));
        assertEquals("leading " + term, leader.next(Duration.ofSeconds(10)));
        assertEquals(Optional.of(new Leader(term, "frozen".getBytes())), client.leader("frozen"));
        assertFalse(secondTerm.isDone(), () -> "elected: " + secondTerm.getNow(-1L));
        leader.send("resign");
        assertEquals("resigned true", leader.next(Duration.ofSeconds(10)));
        long next = secondTerm.get(10, TimeUnit.SECONDS);
        assertTrue(next > term, next + " after " + term);
        assertTrue(second.isLeader());
      }
    }
  }

  @Test
  void conformance_revoke_ends_holding() throws Exception {
    try (Servers servers = new Servers(2);
        LeaseholdClient first = LeaseholdClient.connect(servers.target(0));
        LeaseholdClient second = LeaseholdClient.connect(servers.target(1))) {
      Lease held = first.lease("job").holder("holder-a").acquire();
      CompletableFuture<Lease> waiter = acquireLater(second, "job", "holder-b");
      servers.waitForLine("leasehold:{job}:line", 1);
      List<Holder> revoked = second.revoke("job");
      assertEquals(1, revoked.size(), revoked::toString);
      assertEquals("holder-a", revoked.get(0).getHolder());
      assertEquals(held.fencingToken(), revoked.get(0).getFencingToken());
      String reason = held.lost().get(2, TimeUnit.SECONDS);
      assertEquals(Optional.of(LostReason.REVOKED), held.lostCode(), reason);
      Lease next = waiter.get(2, TimeUnit.SECONDS);
      assertTrue(next.fencingToken() > held.fencingToken(),
          next.fencingToken() + " after " + held.fencingToken());
      assertEquals(0, held.resumes(), "a revoked lease was resumed");
      assertFalse(held.release(), "a revoked lease was still held");
      assertTrue(next.release());
      assertEquals(List.of(), second.revoke("job"));
    }
  }

  @Test
  void conformance_watch_reports_changes() throws Exception {
    Duration within = Duration.ofSeconds(2);
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target);
        LockWatch watch = client.watch("job")) {
      Checks.States states = new Checks.States(watch);
      assertFalse(states.next(within).getHeld(), "a free name reported held");
      Lease first = client.lease("job").holder("holder-a").acquire();
      DescribeResponse held = states.next(within);
      assertEquals(List.of(true, "holder-a", first.fencingToken(), 0),
          List.of(held.getHeld(), held.getHolder(), held.getFencingToken(), held.getWaiting()));
      CompletableFuture<Lease> waiter = acquireLater(client, "job", "holder-b");
      DescribeResponse waiting = states.next(within);
      assertEquals(List.of(true, "holder-a", first.fencingToken(), 1), List.of(waiting.getHeld(),
          waiting.getHolder(), waiting.getFencingToken(), waiting.getWaiting()));
      assertTrue(first.release());
      DescribeResponse handedOver = states.next(within);
      if (!handedOver.getHeld()) { // A free state between the two holders may be seen.
        handedOver = states.next(within);
      }
      Lease second = waiter.get(within.toMillis(), TimeUnit.MILLISECONDS);
      assertEquals(List.of(true, "holder-b", second.fencingToken()), List.of(
          handedOver.getHeld(), handedOver.getHolder(), handedOver.getFencingToken()));
      assertTrue(second.fencingToken() > first.fencingToken());
      assertTrue(second.release());
      assertFalse(states.next(within).getHeld(), "the waiter's release not reported free");
    }
  }

  // Issue 41's scenarios run from here by name; their bodies are in HoldingScenarios.

  @Test
  void conformance_all_or_none() throws Exception {
    HoldingScenarios.allOrNone();
  }

  @Test
  void conformance_lock_delay_after_loss() throws Exception {
    HoldingScenarios.lockDelayAfterLoss();
  }

  @Test
  void conformance_max_hold_ends_lease() throws Exception {
    HoldingScenarios.maxHoldEndsLease();
  }

  @Test
  void conformance_token_check() throws Exception {
    HoldingScenarios.tokenCheck();
  }
}
