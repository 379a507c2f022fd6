import io.lettuce.core.RedisClient;
import io.lettuce.core.ScriptOutputType;
import io.lettuce.core.SetArgs;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.api.sync.RedisCommands;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import dev.leasehold.LeaseholdClient;
import org.redisson.Redisson;
import org.redisson.api.RBucket;
import org.redisson.api.RLock;
import org.redisson.api.RScript;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.Config;

/**
 * Redisson's RLock beside direct Redis from Java, on the Redis given (scripts/bench-peers.sh runs
 * it). Two baselines, because a Java client's own overhead is a large part of what a lock costs:
 *
 * <ul>
 *   <li>Lettuce (Netty, as Redisson is): SET NX PX + the compare-and-delete script (EVALSHA), the
 *       lock anyone could write by hand on the most used Java client;
 *   <li>the same two commands through Redisson itself (RBucket.setIfAbsent + RScript), so RLock's
 *       ratio to it is what the lock adds over Redisson's own client;
 *   <li>RLock.lock() + unlock(), the default a Redisson user writes (its watchdog renews the lock
 *       while held, as Leasehold does), and lock(30 s) + unlock() (a fixed lease, no watchdog);
 *   <li>Leasehold through its Java client (clients/java), when a server address is given: a
 *       Lease stream's acquire + release.
 * </ul>
 *
 * One client, one lock, acquire + release back to back; the paths take turns in rounds. Then,
 * contended, the hand-off: the main thread holds an RLock while another thread waits in lock()
 * (Redisson's waiter subscribes to the lock's channel and is woken by the unlock's publish); from
 * the holder's unlock() to the waiter holding. Each path prints
 * "ROW\tpath\tops\tp50_us\tp99_us\tops_per_s".
 */
public final class Peers {
  private static final String RELEASE =
      "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
  private static final int ROUNDS = 5;

  interface Once {
    void run() throws Exception;
  }

  static final class Path {
    final String name;
    final Once once;
    final List<Long> samples = new ArrayList<>();
    long totalNanos;

    Path(String name, Once once) {
      this.name = name;
      this.once = once;
    }
  }

  public static void main(String[] args) throws Exception {
    String host = args.length > 0 ? args[0] : "127.0.0.1";
    int port = args.length > 1 ? Integer.parseInt(args[1]) : 6379;
    int ops = args.length > 2 ? Integer.parseInt(args[2]) : 5000;
    int handoffs = args.length > 3 ? Integer.parseInt(args[3]) : 20;
    String leaseholdAddress = args.length > 4 ? args[4] : null;

    RedisClient lettuce = RedisClient.create("redis://" + host + ":" + port);
    StatefulRedisConnection<String, String> connection = lettuce.connect();
    RedisCommands<String, String> commands = connection.sync();
    String sha = commands.scriptLoad(RELEASE);

    Config config = new Config();
    config.useSingleServer().setAddress("redis://" + host + ":" + port);
    RedissonClient redisson = Redisson.create(config);
    RBucket<String> bucket = redisson.getBucket("bench-redisson-direct", StringCodec.INSTANCE);
    RScript script = redisson.getScript(StringCodec.INSTANCE);
    String redissonSha = script.scriptLoad(RELEASE);
    RLock lock = redisson.getLock("bench-redisson-rlock");

    LeaseholdClient leasehold =
        leaseholdAddress == null ? null : LeaseholdClient.connect(leaseholdAddress);
    List<Path> paths =
        new ArrayList<>(List.of(
            new Path(
                "Lettuce SET NX PX + compare-and-delete",
                () -> {
                  String token = UUID.randomUUID().toString();
                  String ok = commands.set("bench-lettuce-direct", token, SetArgs.Builder.nx().px(30_000));
                  Long deleted =
                      commands.evalsha(sha, ScriptOutputType.INTEGER, new String[] {"bench-lettuce-direct"}, token);
                  if (!"OK".equals(ok) || deleted == null || deleted != 1L) {
                    throw new IllegalStateException("lettuce: " + ok + " " + deleted);
                  }
                }),
            new Path(
                "Redisson bucket setIfAbsent + compare-and-delete",
                () -> {
                  String token = UUID.randomUUID().toString();
                  boolean ok = bucket.setIfAbsent(token, Duration.ofSeconds(30));
                  Long deleted =
                      script.evalSha(
                          RScript.Mode.READ_WRITE,
                          redissonSha,
                          RScript.ReturnType.LONG,
                          Collections.singletonList("bench-redisson-direct"),
                          token);
                  if (!ok || deleted == null || deleted != 1L) {
                    throw new IllegalStateException("redisson bucket: " + ok + " " + deleted);
                  }
                }),
            new Path(
                "Redisson RLock lock() + unlock() (watchdog)",
                () -> {
                  lock.lock();
                  lock.unlock();
                }),
            new Path(
                "Redisson RLock lock(30 s) + unlock()",
                () -> {
                  lock.lock(30, TimeUnit.SECONDS);
                  lock.unlock();
                })));
    if (leasehold != null) {
      paths.add(
          new Path(
              "Leasehold Lease stream (Java client)",
              () -> {
                try (dev.leasehold.Lease lease =
                    leasehold.lease("bench-java-leasehold").ttl(Duration.ofSeconds(30)).acquire()) {
                  if (!lease.release()) {
                    throw new IllegalStateException("leasehold: released nothing");
                  }
                }
              }));
    }

    // Warm up: the JIT, connections, scripts loaded.
    for (Path path : paths) {
      for (int i = 0; i < 2000; i++) {
        path.once.run();
      }
    }
    int perRound = (ops + ROUNDS - 1) / ROUNDS;
    for (int round = 0; round < ROUNDS; round++) {
      for (Path path : paths) {
        long started = System.nanoTime();
        for (int i = 0; i < perRound; i++) {
          long t = System.nanoTime();
          path.once.run();
          path.samples.add(System.nanoTime() - t);
        }
        path.totalNanos += System.nanoTime() - started;
      }
    }
    for (Path path : paths) {
      System.out.printf(
          "ROW\t%s\t%d\t%.1f\t%.1f\t%.0f%n",
          path.name,
          path.samples.size(),
          quantile(path.samples, 0.5),
          quantile(path.samples, 0.99),
          path.samples.size() / (path.totalNanos / 1e9));
    }
    List<Long> handedOver = handoff(redisson, handoffs);
    System.out.printf(
        "ROW\thand-off: Redisson RLock (pub/sub wake-up)\t%d\t%.1f\t%.1f\t-%n",
        handedOver.size(), quantile(handedOver, 0.5), quantile(handedOver, 0.99));
    redisson.shutdown();
    if (leasehold != null) {
      leasehold.close();
    }
    connection.close();
    lettuce.shutdown();
  }

  /**
   * Hand-offs between this thread and a waiting one; the unlock lands at a random point of the
   * waiter's wait (50-450 ms in).
   */
  static List<Long> handoff(RedissonClient redisson, int n) throws Exception {
    List<Long> samples = new ArrayList<>();
    RLock lock = redisson.getLock("bench-redisson-handoff");
    for (int i = 0; i < n; i++) {
      lock.lock();
      long[] heldAt = new long[1];
      Thread waiter =
          new Thread(
              () -> {
                RLock mine = redisson.getLock("bench-redisson-handoff");
                mine.lock();
                heldAt[0] = System.nanoTime();
                mine.unlock();
              });
      waiter.start();
      Thread.sleep(50 + (long) (Math.random() * 400));
      long released = System.nanoTime();
      lock.unlock();
      waiter.join(30_000);
      if (waiter.isAlive() || heldAt[0] == 0) {
        throw new IllegalStateException("hand-off: the waiter never got the lock");
      }
      samples.add(heldAt[0] - released);
    }
    return samples;
  }

  static double quantile(List<Long> samples, double f) {
    List<Long> s = new ArrayList<>(samples);
    Collections.sort(s);
    return s.get(Math.min(s.size() - 1, (int) (f * s.size()))) / 1e3;
  }
}
