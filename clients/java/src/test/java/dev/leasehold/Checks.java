package dev.leasehold;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import leasehold.v1.Lock.DescribeRequest;
import leasehold.v1.Lock.DescribeResponse;
import leasehold.v1.Lock.Holder;
import leasehold.v1.LockServiceGrpc;

/**
 * What the conformance scenarios and the other tests share: bounded waits, and the checks that
 * several scenarios make.
 */
final class Checks {
  /** The lock key of the name most scenarios use, "job". */
  static final String LOCK_KEY = lockKey("job");

  private Checks() {}

  static String lockKey(String name) {
    return "leasehold:{" + name + "}:lock";
  }

  /** Waits (on another thread, up to 10 s) for lock {@code name} through {@code client}. */
  static CompletableFuture<Lease> acquireLater(LeaseholdClient client, String name, String holder) {
    return CompletableFuture.supplyAsync(() -> {
      try {
        return client.lease(name).holder(holder).waitUpTo(Duration.ofSeconds(10)).acquire();
      } catch (NotAcquiredException e) {
        throw new IllegalStateException(e);
      }
    });
  }

  /**
   * A watch's states, read with a deadline each, checking that no state comes twice in a row
   * (the TTLs aside: they change with every reading).
   */
  static final class States {
    private final LockWatch watch;
    private DescribeResponse last;

    States(LockWatch watch) {
      this.watch = watch;
    }

    /** The next state, within {@code within}. */
    DescribeResponse next(Duration within) throws InterruptedException {
      DescribeResponse state = watch.poll(within).orElseThrow(
          () -> new AssertionError("no state within " + within + " after " + last));
      DescribeResponse seen = withoutTtls(state);
      assertNotEquals(last, seen, "the same state twice in a row");
      last = seen;
      return state;
    }

    private static DescribeResponse withoutTtls(DescribeResponse state) {
      DescribeResponse.Builder builder = state.toBuilder().setTtlRemainingMs(0);
      for (Holder.Builder holder : builder.getHoldersBuilderList()) {
        holder.setTtlRemainingMs(0);
      }
      return builder.build();
    }
  }

  /** A semaphore's permit is held: its token is among the name's holders. */
  static void assertPermitHeld(Servers servers, String name, String token)
      throws Exception {
    String score = servers.redisCli("ZSCORE", lockKey(name) + ":holders", token);
    assertFalse(score.isEmpty(), "no permit of " + name + " holds the lease's token");
  }

  /**
   * The lease is held as it was: not lost, its token in the lock key, its fencing token what the
   * servers {@code up} describe, and a thief (no wait, no auto-resume) through each of them is
   * refused.
   */
  static void assertHeldAsBefore(
      Servers servers, Lease lease, String token, long fencing, int... up) throws Exception {
    assertFalse(lease.isLost(), () -> "lost: " + lease.lost().getNow(""));
    assertEquals(token, lease.token());
    assertEquals(fencing, lease.fencingToken());
    assertEquals(token, servers.lockToken(LOCK_KEY));
    for (int i : up) {
      ManagedChannel channel =
          ManagedChannelBuilder.forTarget(servers.target(i)).usePlaintext().build();
      try {
        long described = LockServiceGrpc.newBlockingStub(channel)
            .withDeadlineAfter(10, TimeUnit.SECONDS)
            .describe(DescribeRequest.newBuilder().setName("job").build()).getFencingToken();
        assertEquals(fencing, described, "fencing token through server " + i);
      } finally {
        channel.shutdownNow().awaitTermination(10, TimeUnit.SECONDS);
      }
      try (LeaseholdClient thief = LeaseholdClient.connect(servers.target(i))) {
        assertThrows(NotAcquiredException.class,
            () -> thief.lease("job").ttl(Duration.ofSeconds(3)).autoResume(false).acquire(),
            "a thief through server " + i);
      }
    }
  }

  /**
   * Waits until a server renews the lease (or resumes it): its TTL in Redis rising between two
   * readings, less than a renewal period apart. After a server stopped or was killed, that proves
   * the lease is held on another.
   */
  static void awaitRenewed(Servers servers, String what) throws InterruptedException {
    long[] last = {pttl(servers)};
    awaitTrue(() -> {
      long now = pttl(servers);
      boolean rose = now > last[0];
      last[0] = now;
      return rose;
    }, what);
  }

  private static long pttl(Servers servers) {
    try {
      return Long.parseLong(servers.redisCli("PTTL", LOCK_KEY));
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }
  }

  /** Polls {@code condition} (bounded: 10 s). */
  static void awaitTrue(BooleanSupplier condition, String what) throws InterruptedException {
    Instant deadline = Instant.now().plus(Duration.ofSeconds(10));
    while (!condition.getAsBoolean()) {
      assertTrue(Instant.now().isBefore(deadline), "timed out waiting until " + what);
      Thread.sleep(10);
    }
  }
}
