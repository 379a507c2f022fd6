package dev.leasehold;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashSet;
import java.util.Set;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;

/** The test harness itself: what it starts, it stops, also when starting fails. */
class ServersTest {
  private static Set<Long> liveChildren() {
    return ProcessHandle.current().children().filter(ProcessHandle::isAlive)
        .map(ProcessHandle::pid).collect(Collectors.toCollection(HashSet::new));
  }

  /** This JVM's children alive now that were not in {@code before}. */
  private static Set<Long> startedSince(Set<Long> before) {
    Set<Long> now = liveChildren();
    now.removeAll(before);
    return now;
  }

  @Test
  void aServerThatCannotStartLeavesNoRedisOrServerRunning() {
    Set<Long> before = liveChildren();
    IllegalStateException failed = assertThrows(IllegalStateException.class,
        () -> new Servers(2, "--no-such-option"));
    assertTrue(failed.getMessage().contains("did not start"), failed.getMessage());
    assertEquals(Set.of(), startedSince(before));
  }

  @Test
  void closeStopsRedisAndEveryServer() throws Exception {
    Set<Long> before = liveChildren();
    try (Servers servers = new Servers(2)) {
      assertEquals(3, startedSince(before).size()); // Redis and two servers.
    }
    assertEquals(Set.of(), startedSince(before));
  }
}
