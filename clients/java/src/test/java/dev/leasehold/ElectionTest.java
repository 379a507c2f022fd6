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

  @Test
  void aLeaderFrozenPastItsValidityStopsBelievingTheMomentItWakes() throws Exception {
    try (Servers servers = new Servers("--keepalive-interval", "200ms",
            "--keepalive-timeout", "300ms");
        LeaseholdClient client = LeaseholdClient.connect(servers.target);
        ChildJvm leader = new ChildJvm(FrozenLeader.class, servers.target, "frozen", "1500")) {
      String elected = leader.next(Duration.ofSeconds(30));
      assertTrue(elected.startsWith("elected "), elected);
      long term = Long.parseLong(elected.substring("elected ".length()));
      try (Candidate second = client.candidate("frozen", "second".getBytes())
          .ttl(Duration.ofSeconds(4)).campaign()) {
        servers.waitForLine("leasehold:election:{frozen}:line", 1);
        leader.signal("STOP");
        try {
          // Its validity (1.5 s) runs out while it is frozen; its connection cut by the
          // keepalive, the server keeps the leadership for its grace (1.5 s), then elects the
          // second.
          long next = second.awaitElected(Duration.ofSeconds(10));
          assertTrue(next > term, next + " after " + term);
          Thread.sleep(1000); // The rest of the freeze (3 s in all): only time.
        } finally {
          leader.signal("CONT");
        }
        // By its own clock, before any word from the server or its own timer.
        assertEquals("woken leading=false", leader.next(Duration.ofSeconds(10)));
        String lost = leader.next(Duration.ofSeconds(10));
        assertTrue(lost.startsWith("lost ") && (lost.contains("validity ran out")
            || lost.contains("server silent")), lost);
        assertTrue(second.isLeader());
      }
    }
  }

  @Test
  void aLeaderKeepsItsTermAcrossARestartOfItsServer() throws Exception {
    try (Servers servers = new Servers(2);
        LeaseholdClient client = LeaseholdClient.connect(servers.targets());
        LeaseholdClient other = LeaseholdClient.connect(servers.target(1))) {
      List<Optional<Leader>> seen = new CopyOnWriteArrayList<>();
      CompletableFuture<Void> sawA2 = new CompletableFuture<>();
      CompletableFuture<Void> observed = new CompletableFuture<>();
      try (AutoCloseable observing = other.observe("scheduler", leader -> {
        seen.add(leader);
        observed.complete(null);
        if (leader.isPresent() && new String(leader.get().value()).equals("a2")) {
          sawA2.complete(null);
        }
      })) {
        observed.get(10, TimeUnit.SECONDS); // Observing before anyone runs.
        Candidate a = client.candidate("scheduler", "a".getBytes())
            .ttl(Duration.ofSeconds(2)).campaign();
        long term = a.awaitElected(Duration.ofSeconds(10));
        servers.stop(0); // SIGTERM on the leader's server: it keeps the leadership.
        servers.start(0);
        Checks.awaitTrue(() -> a.resumes() >= 1, "the leadership resumed");
        assertEquals(Optional.of(new Leader(term, "a".getBytes())), client.leader("scheduler"));
        a.proclaim("a2".getBytes()); // Through the resumed stream.
        sawA2.get(10, TimeUnit.SECONDS);
        assertEquals(Optional.of(new Leader(term, "a2".getBytes())), client.leader("scheduler"));
        assertTrue(!a.lost().isDone(), () -> "lost: " + a.lost().getNow(""));
        // Observers saw no change of leader: nobody, then a (its one term), then a2.
        List<String> values = seen.stream()
            .map(l -> l.map(x -> x.term() + ":" + new String(x.value())).orElse("none"))
            .toList();
        assertEquals(List.of("none", term + ":a", term + ":a2"), values);
        assertTrue(a.resign());
      }
    }
  }
}
