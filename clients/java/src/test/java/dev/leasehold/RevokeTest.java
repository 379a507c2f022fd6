package dev.leasehold;

import static dev.leasehold.Checks.lockKey;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import leasehold.v1.Lock.Holder;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Revoking, beyond the conformance scenario: one permit by its fencing token, a leadership, and
 * leases on a session, each reported lost as {@link LostReason#REVOKED} while what was not revoked
 * stays held. One server for all (each test its own names).
 */
class RevokeTest {
  private static final long WITHIN_MS = 2_000;
  private static Servers servers;
  private static LeaseholdClient client;

  @BeforeAll
  static void start() throws Exception {
    servers = new Servers();
    client = LeaseholdClient.connect(servers.target);
  }

  @AfterAll
  static void stop() throws Exception {
    try {
      if (client != null) {
        client.close();
      }
    } finally {
      if (servers != null) {
        servers.close();
      }
    }
  }

  @Test
  void aFencingTokenRevokesOnePermitOnly() throws Exception {
    try (Lease first = client.lease("pool").holder("one").limit(2).acquire();
        Lease second = client.lease("pool").holder("two").limit(2).acquire()) {
      List<Holder> revoked = client.revoke("pool", second.fencingToken());
      assertEquals(List.of("two"), revoked.stream().map(Holder::getHolder).toList());
      second.lost().get(WITHIN_MS, TimeUnit.MILLISECONDS);
      assertEquals(Optional.of(LostReason.REVOKED), second.lostCode());
      assertEquals(List.of(), client.revoke("pool", second.fencingToken()));
      assertFalse(first.isLost(), () -> "the other permit lost: " + first.lost().getNow(""));
      assertEquals(Optional.empty(), first.lostCode());
      assertFalse(servers.redisCli("ZSCORE", lockKey("pool") + ":holders", first.token())
          .isEmpty(), "the other permit is not held");
      assertThrows(IllegalArgumentException.class, () -> client.revoke("pool", 0));
    }
  }

  @Test
  void aRevokedLeaderIsLostAndTheNextElected() throws Exception {
    try (Candidate a = client.campaign("vote", "a".getBytes(), Duration.ofSeconds(5))) {
      long termA = a.awaitElected(Duration.ofSeconds(10));
      Candidate b = client.campaign("vote", "b".getBytes(), Duration.ofSeconds(5));
      servers.waitForLine("leasehold:election:{vote}:line", 1);
      assertEquals(Optional.empty(), client.revokeLeader("vote", termA + 1), "another term");
      assertEquals(Optional.of(new Leader(termA, "a".getBytes())), client.revokeLeader("vote"));
      a.lost().get(WITHIN_MS, TimeUnit.MILLISECONDS);
      assertEquals(Optional.of(LostReason.REVOKED), a.lostCode());
      assertFalse(a.isLeader());
      long termB = b.awaitElected(Duration.ofSeconds(10));
      assertTrue(termB > termA, termB + " after " + termA);
      assertEquals(Optional.empty(), client.revokeLeader("vote", termA), "a stale term");
      assertTrue(b.isLeader());
      assertTrue(b.resign());
    }
  }

  @Test
  void aRevokedSessionLeaseIsLostAlone() throws Exception {
    try (Session session = client.session(new SessionOptions().ttl(Duration.ofSeconds(5)))) {
      SessionLease revoked = session.acquire("s-revoked");
      SessionLease kept = session.acquire("s-kept");
      SessionCandidate leader = session.campaign("s-vote", "s".getBytes());
      leader.awaitElected(Duration.ofSeconds(10));
      assertEquals(1, client.revoke("s-revoked").size());
      revoked.lost().get(WITHIN_MS, TimeUnit.MILLISECONDS);
      assertEquals(Optional.of(LostReason.REVOKED), revoked.lostCode());
      assertTrue(client.revokeLeader("s-vote").isPresent());
      leader.lost().get(WITHIN_MS, TimeUnit.MILLISECONDS);
      assertEquals(Optional.of(LostReason.REVOKED), leader.lostCode());
      assertFalse(kept.isLost(), () -> "kept lost: " + kept.lostReason());
      assertEquals(kept.token(), servers.lockToken(lockKey("s-kept")));
      assertFalse(session.isLost(), () -> "session lost: " + session.lost().getNow(""));
      assertEquals(Optional.empty(), session.lostCode());
    }
  }
}
