package dev.leasehold;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.Optional;
import java.util.concurrent.TimeUnit;

/**
 * The leader of {@code conformance_frozen_leader_not_replaced}, in a JVM of its own so that the
 * test can freeze it (SIGSTOP) and wake it (SIGCONT) without freezing itself. Arguments: the
 * server's address, the election, and the TTL in milliseconds (the resume grace is the TTL). It
 * campaigns and reports on stdout, one line each: {@code elected TERM}; {@code woken leading=B},
 * the first thing it does once woken from a freeze (a poll that finds more than 1.5 s gone),
 * with whether it then believes it leads; then, once it has taken its leadership back on a new
 * stream, {@code resumed TERM} and {@code leading TERM} (it believes it leads and the server names
 * it, with that term) or {@code not-leading ...}; or {@code lost REASON}. On {@code resign} from
 * stdin it steps down: {@code resigned WAS_LEADER}.
 */
final class FrozenLeader {
  private FrozenLeader() {}

  public static void main(String[] args) throws Exception {
    String target = args[0];
    String election = args[1];
    Duration ttl = Duration.ofMillis(Long.parseLong(args[2]));
    try (LeaseholdClient client = LeaseholdClient.connect(target)) {
      // Connected, and the classes of a call loaded, before the campaign: a fresh JVM on a busy
      // machine can otherwise take longer than a short TTL to read its first `elected`.
      client.leader(election);
      lead(client, election, ttl);
    }
  }

  private static void lead(LeaseholdClient client, String election, Duration ttl)
      throws Exception {
    try (Candidate leader = client.candidate(election, "frozen".getBytes()).ttl(ttl).campaign()) {
      long term = leader.awaitElected(Duration.ofSeconds(30));
      say("elected " + term);
      // A bounded poll that spans the freeze: the stream breaks while this process is stopped
      // (the server's keepalive cuts the connection) and the leadership resumes once it is woken.
      Instant deadline = Instant.now().plus(Duration.ofSeconds(60));
      long last = System.nanoTime();
      while (true) {
        long now = System.nanoTime();
        if (now - last > 1_500_000_000L) {
          say("woken leading=" + leader.isLeader());
        }
        last = now;
        if (leader.resumes() > 0 || !leader.isLeader()) {
          break;
        }
        if (Instant.now().isAfter(deadline)) {
          say("timeout: never resumed");
          return;
        }
        Thread.sleep(10);
      }
      if (leader.resumes() == 0) {
        say("lost " + leader.lost().get(10, TimeUnit.SECONDS));
        return;
      }
      say("resumed " + leader.term());
      Optional<Leader> named = client.leader(election);
      boolean leading = leader.isLeader() && named.isPresent() && named.get().term() == term;
      say(leading ? "leading " + term : "not-leading: believes " + leader.isLeader()
          + ", the server names " + named);
      BufferedReader commands =
          new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
      if ("resign".equals(commands.readLine())) {
        say("resigned " + leader.resign());
      }
    }
  }

  private static void say(String line) {
    System.out.println(line);
    System.out.flush();
  }
}
