package dev.leasehold;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.Optional;

/**
 * The leader of {@code conformance_frozen_leader_not_replaced}, in a JVM of its own so that the
 * test can freeze it (SIGSTOP) and wake it (SIGCONT) without freezing itself. Arguments: the
 * server's address and the election. It campaigns (TTL 4 s; the resume grace is the TTL) and
 * reports on stdout, one line each: {@code elected TERM}; then, once it has taken its leadership
 * back on a new stream after being woken, {@code resumed TERM} and {@code leading TERM} (it
 * believes it leads and the server names it, with that term) or {@code not-leading ...}; or
 * {@code lost REASON}. On {@code resign} from stdin it steps down: {@code resigned WAS_LEADER}.
 */
final class FrozenLeader {
  private FrozenLeader() {}

  public static void main(String[] args) throws Exception {
    String target = args[0];
    String election = args[1];
    try (LeaseholdClient client = LeaseholdClient.connect(target);
        Candidate leader = client.candidate(election, "frozen".getBytes())
            .ttl(Duration.ofSeconds(4)).campaign()) {
      long term = leader.awaitElected(Duration.ofSeconds(30));
      say("elected " + term);
      // A bounded poll that spans the freeze: the stream breaks while this process is stopped
      // (the server's keepalive cuts the connection) and the leadership resumes once it is woken.
      Instant deadline = Instant.now().plus(Duration.ofSeconds(60));
      while (leader.resumes() == 0 && !leader.lost().isDone()) {
        if (Instant.now().isAfter(deadline)) {
          say("timeout: never resumed");
          return;
        }
        Thread.sleep(10);
      }
      if (leader.lost().isDone()) {
        say("lost " + leader.lost().get());
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
