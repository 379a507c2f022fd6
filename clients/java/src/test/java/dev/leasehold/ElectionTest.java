package dev.leasehold;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

class ElectionTest {
  @Test
  void leadershipHandsOverBetweenTwoThreadsAndObserversSeeItInOrder() throws Exception {
    try (Servers servers = new Servers();
        LeaseholdClient client = LeaseholdClient.connect(servers.target)) {
      List<String> seen = new CopyOnWriteArrayList<>();
      CompletableFuture<Void> first = new CompletableFuture<>();
      CompletableFuture<Void> sawB = new CompletableFuture<>();
      try (AutoCloseable observing = client.observe("scheduler", leader -> {
        String value = leader.map(l -> new String(l.value())).orElse("none");
        seen.add(value);
        first.complete(null);
        if (value.equals("b")) {
          sawB.complete(null);
        }
      })) {
        first.get(10, TimeUnit.SECONDS); // Observing before anyone runs.
        Candidate a = client.campaign("scheduler", "a".getBytes(), Duration.ofSeconds(2));
        long termA = a.awaitElected(Duration.ofSeconds(10));
        assertEquals(Optional.of(new Leader(termA, "a".getBytes())), client.leader("scheduler"));
        // Candidate b waits in line on another thread until a steps down.
        CompletableFuture<Long> termB = CompletableFuture.supplyAsync(() -> {
          try (Candidate b = client.campaign("scheduler", "b".getBytes(), Duration.ofSeconds(2))) {
            long term = b.awaitElected(Duration.ofSeconds(10));
            sawB.get(10, TimeUnit.SECONDS);
            return term;
          } catch (Exception e) {
            throw new IllegalStateException(e);
          }
        });
        while (!servers.redisCli("ZCARD", "leasehold:election:{scheduler}:line").equals("1")) {
          Thread.sleep(10);
        }
        assertTrue(a.resign());
        assertTrue(termB.get(15, TimeUnit.SECONDS) > termA);
      }
      // none first (a new election), then a, then (perhaps none between) b.
      assertEquals("none", seen.get(0));
      assertEquals("a", seen.get(1));
      assertEquals("b", seen.stream().filter(v -> !v.equals("none")).skip(1).findFirst().orElse(""));
    }
  }
}
