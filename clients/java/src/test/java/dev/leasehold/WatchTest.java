package dev.leasehold;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.Iterator;
import java.util.List;
import java.util.NoSuchElementException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import leasehold.v1.Lock.DescribeResponse;
import leasehold.v1.Lock.Holder;
import leasehold.v1.Lock.LeaseMode;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * {@link LockWatch} against the real server, beyond the conformance scenario: how it ends, how it
 * fails, and what it reports of a semaphore. One server for all (each test its own names).
 */
class WatchTest {
  private static final Duration WITHIN = Duration.ofSeconds(2);
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
  void closingEndsTheIterationAndWakesItsReader() throws Exception {
    LockWatch watch = client.watch("closing");
    Iterator<DescribeResponse> states = watch.iterator();
    assertTrue(states.hasNext());
    assertFalse(states.next().getHeld());
    CompletableFuture<Boolean> more = new CompletableFuture<>();
    Thread reader = new Thread(() -> more.complete(states.hasNext()), "watch-reader");
    reader.start();
    Checks.awaitTrue(() -> reader.getState() == Thread.State.WAITING, "the reader waits");
    watch.close();
    assertFalse(more.get(WITHIN.toMillis(), TimeUnit.MILLISECONDS), "a state after close");
    assertThrows(NoSuchElementException.class, () -> watch.poll(WITHIN));
    assertThrows(IllegalStateException.class, watch::iterator, "iterated twice");
  }

  @Test
  void aStreamOfStatesClosesTheWatchWithIt() throws Exception {
    try (Lease lease = client.lease("streamed").holder("holder-s").acquire()) {
      try (var states = client.watch("streamed").stream()) {
        DescribeResponse first = states.findFirst().orElseThrow();
        assertEquals("holder-s", first.getHolder());
        assertEquals(lease.fencingToken(), first.getFencingToken());
      }
    }
  }

  @Test
  void aRefusedWatchThrowsItsStatus() throws Exception {
    try (LockWatch watch = client.watch("")) {
      StatusRuntimeException refused =
          assertThrows(StatusRuntimeException.class, () -> watch.poll(WITHIN));
      assertEquals(Status.Code.INVALID_ARGUMENT, refused.getStatus().getCode());
      assertThrows(StatusRuntimeException.class, () -> watch.poll(WITHIN), "and again");
    }
  }

  @Test
  void everyHolderOfASemaphoreIsReported() throws Exception {
    try (LockWatch watch = client.watch("pool");
        Lease first = client.lease("pool").holder("one").limit(2).acquire()) {
      Checks.States states = new Checks.States(watch);
      DescribeResponse state = states.next(WITHIN);
      if (!state.getHeld()) { // The watch began before the first permit was taken.
        state = states.next(WITHIN);
      }
      try (Lease second = client.lease("pool").holder("two").limit(2).acquire()) {
        state = states.next(WITHIN);
        assertEquals(List.of("one", "two"),
            state.getHoldersList().stream().map(Holder::getHolder).toList());
        assertEquals(List.of(first.fencingToken(), second.fencingToken()),
            state.getHoldersList().stream().map(Holder::getFencingToken).toList());
        assertEquals(2, state.getLimit());
        assertEquals(LeaseMode.LEASE_MODE_EXCLUSIVE, state.getMode());
      }
    }
  }
}
