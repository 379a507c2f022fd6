package dev.leasehold;

import static dev.leasehold.Checks.awaitTrue;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** Sessions beyond the conformance scenarios, against the real binary and redis-server. */
class SessionTest {
  private static String lockKey(String name) {
    return "leasehold:{" + name + "}:lock";
  }

  @Test
  void aRefusalCarriesItsDetailsAndBadInputItsStatusWhileTheSessionGoesOn() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target);
        Lease held = client.lease("job").holder("holder-a").ttl(Duration.ofSeconds(30)).acquire();
        Session session = client.session()) {
      NotAcquiredException refused =
          assertThrows(NotAcquiredException.class, () -> session.acquire("job"));
      assertEquals("LOCK_HELD", refused.reason());
      assertEquals("holder-a", refused.holder());
      assertEquals("job", refused.metadata().get("lock"));
      Duration retryAfter = refused.retryAfter().orElseThrow();
      assertTrue(retryAfter.compareTo(Duration.ZERO) > 0, retryAfter::toString);

      StatusRuntimeException bad =
          assertThrows(StatusRuntimeException.class, () -> session.acquire(""));
      assertEquals(Status.Code.INVALID_ARGUMENT, bad.getStatus().getCode());
      assertTrue(bad.getStatus().getDescription().contains("lock name is empty"),
          bad.getStatus().getDescription());

      StatusRuntimeException otherLimit = assertThrows(StatusRuntimeException.class,
          () -> session.acquire("job", new Session.AcquireOptions().limit(3)));
      assertEquals(Status.Code.FAILED_PRECONDITION, otherLimit.getStatus().getCode());

      try (SessionLease other = session.acquire("other")) {
        assertEquals(other.token(), servers.lockToken(lockKey("other")));
      }
      assertFalse(session.isLost());
      assertEquals(0, session.size());
    }
  }

  @Test
  void aWaitingLeaseGetsTheLockWhenItsHolderReleases() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target);
        Session session = client.session()) {
      Lease first = client.lease("job").acquire();
      CompletableFuture<SessionLease> waiter = CompletableFuture.supplyAsync(() -> {
        try {
          return session.acquire("job",
              new Session.AcquireOptions().waitUpTo(Duration.ofSeconds(10)));
        } catch (NotAcquiredException e) {
          throw new IllegalStateException(e);
        }
      });
      servers.waitForLine("leasehold:{job}:line", 1);
      assertFalse(waiter.isDone());
      assertTrue(first.release());
      SessionLease second = waiter.get(10, TimeUnit.SECONDS);
      assertTrue(second.fencingToken() > first.fencingToken());
      assertTrue(second.release());
      assertEquals("0", servers.redisCli("EXISTS", lockKey("job")));
    }
  }

  @Test
  void sharedLeasesOnOneSessionHoldOneNameTogether() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target);
        Session session = client.session()) {
      SessionLease one = session.acquire("catalog", new Session.AcquireOptions().shared());
      SessionLease two = session.acquire("catalog", new Session.AcquireOptions().shared());
      assertTrue(one.fencingToken() != two.fencingToken());
      assertThrows(NotAcquiredException.class, () -> client.lease("catalog").acquire());
      assertTrue(one.release());
      assertTrue(two.release());
      client.lease("catalog").acquire().release();
    }
  }

  @Test
  void leasesAndALeadershipSurviveARollingRestart() throws Exception {
    try (Servers servers = new Servers(3);
        LeaseholdClient client = LeaseholdClient.connect(servers.targets());
        Session session = client.session(new SessionOptions().ttl(Duration.ofSeconds(3)))) {
      List<String> lost = new CopyOnWriteArrayList<>();
      session.lost().thenAccept(reason -> lost.add("session: " + reason));
      SessionLease lease = session.acquire("job");
      lease.lost().thenAccept(reason -> lost.add("job: " + reason));
      SessionCandidate leader = session.campaign("vote", "v1".getBytes());
      long term = leader.awaitElected(Duration.ofSeconds(10));
      leader.lost().thenAccept(reason -> lost.add("vote: " + reason));
      String token = lease.token();
      long fencing = lease.fencingToken();
      for (int i = 0; i < 3; i++) {
        servers.stop(i); // SIGTERM: a session on it is handed over (UNAVAILABLE), kept for its grace.
        // Held on a live server before this one is back ("job" is the conformance tests' key).
        Checks.awaitRenewed(servers, "a live server renews the session's leases");
        servers.start(i);
        awaitTrue(() -> lease.attached(), "the lease is held on a stream again");
        assertEquals(List.of(), lost);
        assertEquals(token, lease.token());
        assertEquals(fencing, lease.fencingToken());
        assertEquals(token, servers.lockToken(lockKey("job")));
        assertEquals(term, leader.term());
        assertEquals(Optional.of(new Leader(term, "v1".getBytes())), client.leader("vote"));
      }
      assertTrue(lease.resumes() >= 2, "resumed " + lease.resumes() + " times");
      assertTrue(leader.resumes() >= 2, "resumed " + leader.resumes() + " times");
      leader.proclaim("v2".getBytes());
      assertEquals(Optional.of(new Leader(term, "v2".getBytes())), client.leader("vote"));
      assertTrue(leader.resign());
      assertEquals(Optional.empty(), client.leader("vote"));
      assertTrue(lease.release());
      assertEquals(List.of(), lost);
    }
  }

  @Test
  void aFrozenServerLosesEveryLeaseByTheClientsClock() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target);
        Session session = client.session(new SessionOptions().ttl(Duration.ofMillis(600)))) {
      SessionLease a = session.acquire("a");
      SessionLease b = session.acquire("b");
      int confirmed = session.keptAlives();
      awaitTrue(() -> session.keptAlives() > confirmed, "the server confirms the session");
      servers.signalServer("STOP");
      long stopped = System.nanoTime();
      try {
        String reasonA = a.lost().get(10, TimeUnit.SECONDS);
        String reasonB = b.lost().get(10, TimeUnit.SECONDS);
        // Lost no later than the validity a TTL gives (with room for a slow machine).
        assertTrue(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - stopped) < 2_000);
        assertTrue(reasonA.contains("server silent"), reasonA);
        assertTrue(reasonB.contains("server silent"), reasonB);
        assertEquals(Optional.of(LostReason.UNREACHABLE), a.lostCode());
      } finally {
        servers.signalServer("CONT");
      }
    }
  }

  @Test
  void withoutResumeAKilledServerLosesTheWholeSession() throws Exception {
    try (Servers servers = new Servers(2);
        LeaseholdClient client = LeaseholdClient.connect(servers.targets());
        Session session = client.session(
            new SessionOptions().ttl(Duration.ofSeconds(3)).noResume())) {
      SessionLease a = session.acquire("a");
      servers.kill(0);
      String reason = session.lost().get(10, TimeUnit.SECONDS);
      assertTrue(reason.contains("UNAVAILABLE"), reason);
      String lostA = a.lost().get(10, TimeUnit.SECONDS);
      assertTrue(lostA.contains("session was lost"), lostA);
      assertEquals(Optional.of(LostReason.UNREACHABLE), session.lostCode());
      assertEquals(Optional.of(LostReason.UNREACHABLE), a.lostCode());
      IllegalStateException over =
          assertThrows(IllegalStateException.class, () -> session.acquire("b"));
      assertTrue(over.getMessage().contains("lost"), over.getMessage());
      assertFalse(a.release());
    }
  }

  @Test
  void aRefusedOpenFailsTheSessionsCallsWithItsStatus() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target);
        Session session = client.session(new SessionOptions().ttl(Duration.ofMillis(1)))) {
      String reason = session.lost().get(10, TimeUnit.SECONDS);
      assertTrue(reason.contains("INVALID_ARGUMENT"), reason);
      assertEquals(Optional.of(LostReason.UNKNOWN), session.lostCode());
      StatusRuntimeException refused =
          assertThrows(StatusRuntimeException.class, () -> session.acquire("a"));
      assertEquals(Status.Code.INVALID_ARGUMENT, refused.getStatus().getCode());
    }
  }

  @Test
  void closingASessionEndsAWaitingCampaignAndReleasesALeadership() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target)) {
      Session first = client.session();
      SessionCandidate a = first.campaign("vote", "a".getBytes());
      long term = a.awaitElected(Duration.ofSeconds(10));
      Session second = client.session();
      SessionCandidate b = second.campaign("vote", "b".getBytes());
      servers.waitForLine("leasehold:election:{vote}:line", 1);
      second.close();
      assertThrows(IllegalStateException.class, () -> b.awaitElected(Duration.ofSeconds(10)));
      assertTrue(a.isLeader());
      assertEquals(Optional.of(new Leader(term, "a".getBytes())), client.leader("vote"));
      first.close();
      assertFalse(a.isLost());
      assertEquals(Optional.empty(), client.leader("vote"));
    }
  }
}
