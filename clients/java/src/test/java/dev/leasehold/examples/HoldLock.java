package dev.leasehold.examples;

import dev.leasehold.Lease;
import dev.leasehold.LeaseholdClient;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/** Holds the lock "nightly-report" while it works, stopping if the lock is lost. */
public final class HoldLock {
  public static void main(String[] args) throws Exception {
    String server = args.length > 0 ? args[0] : "127.0.0.1:50051";
    try (LeaseholdClient client = LeaseholdClient.connect(server);
        Lease lease = client.lease("nightly-report").ttl(Duration.ofSeconds(10))
            .waitUpTo(Duration.ofSeconds(30)).holder("report@host-a").acquire()) {
      System.out.println("holding nightly-report, fencing token " + lease.fencingToken());
      try {
        System.out.println("lost the lock: " + lease.lost().get(500, TimeUnit.MILLISECONDS));
      } catch (TimeoutException stillHeld) {
        System.out.println("work done");
      }
    } // Released here; NotAcquiredException if it stayed taken for the whole wait.
    System.out.println("released");
  }
}
