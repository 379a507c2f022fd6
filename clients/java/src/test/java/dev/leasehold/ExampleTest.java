package dev.leasehold;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.leasehold.examples.HoldLock;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import org.junit.jupiter.api.Test;

/** The README's Java example runs unchanged against a real server. */
class ExampleTest {
  @Test
  void theReadmeExampleHoldsTheLockAndReleasesIt() throws Exception {
    try (Servers servers = new Servers()) {
      PrintStream stdout = System.out;
      ByteArrayOutputStream printed = new ByteArrayOutputStream();
      System.setOut(new PrintStream(printed, true));
      try {
        HoldLock.main(new String[] {servers.target});
      } finally {
        System.setOut(stdout);
      }
      String[] lines = printed.toString().split("\n");
      assertEquals(3, lines.length, printed.toString());
      assertTrue(lines[0].startsWith("holding nightly-report, fencing token "), lines[0]);
      assertEquals("work done", lines[1]);
      assertEquals("released", lines[2]);
    }
  }
}
