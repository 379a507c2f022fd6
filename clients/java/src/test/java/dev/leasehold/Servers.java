package dev.leasehold;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * A redis-server and one or more leasehold servers sharing it (replicas), the test's own, on free
 * loopback ports. A replica can be stopped (SIGTERM), killed (SIGKILL) and started again on its
 * port.
 */
final class Servers implements AutoCloseable {
  final int redisPort;
  /** The first server's address. */
  final String target;
  private final Process redis;
  private final Path redisDir;
  private final Path binary;
  private final String[] extra;
  private final String[] targets;
  private final Process[] servers;

  Servers() throws IOException, InterruptedException {
    this(1);
  }

  /** One server with {@code extra} arguments for {@code leasehold serve}. */
  Servers(String... extra) throws IOException, InterruptedException {
    this(1, extra);
  }

  /** {@code count} servers on one Redis, with {@code extra} arguments for each. */
  Servers(int count, String... extra) throws IOException, InterruptedException {
    this.extra = extra;
    this.binary = binary();
    targets = new String[count];
    servers = new Process[count];
    try (ServerSocket socket = new ServerSocket(0)) {
      redisPort = socket.getLocalPort();
    }
    redisDir = Files.createTempDirectory("leasehold-java");
    try {
      redis = new ProcessBuilder("redis-server", "--port", "" + redisPort,
          "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", redisDir.toString())
          .redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
    } catch (IOException | RuntimeException e) {
      Files.deleteIfExists(redisDir); // redis-server could not be run: nothing else was started.
      throw e;
    }
    // Whatever fails from here (Redis not answering, a server not starting, an interrupt) stops
    // all that was started: the caller never gets the object to close.
    boolean ready = false;
    try {
      Instant deadline = Instant.now().plus(Duration.ofSeconds(5));
      while (!"PONG".equals(redisCli("ping"))) {
        if (!redis.isAlive() || Instant.now().isAfter(deadline)) {
          throw new IllegalStateException("redis-server did not start on port " + redisPort);
        }
        Thread.sleep(20);
      }
      for (int i = 0; i < count; i++) {
        start(i, "127.0.0.1:0");
      }
      ready = true;
    } finally {
      if (!ready) {
        close();
      }
    }
    target = targets[0];
  }

  /**
   * The server binary: {@code LEASEHOLD_BIN} when set; else the project's own build,
   * target/debug/leasehold or target/release/leasehold (scripts/serve.sh builds the latter),
   * whichever exists, the newer if both do.
   */
  static Path binary() {
    Path debug = Path.of("../../target/debug/leasehold").toAbsolutePath().normalize();
    Path release = Path.of("../../target/release/leasehold").toAbsolutePath().normalize();
    String configured = System.getenv("LEASEHOLD_BIN");
    if (configured != null && !configured.isEmpty()) {
      Path path = Path.of(configured);
      if (runnable(path)) {
        return path;
      }
      throw new IllegalStateException("LEASEHOLD_BIN=" + configured + " is not an executable "
          + "file. Point it at a leasehold binary, or unset it to use the newer of " + debug
          + " and " + release + ".");
    }
    boolean hasDebug = runnable(debug);
    boolean hasRelease = runnable(release);
    if (hasDebug && hasRelease) {
      try {
        return Files.getLastModifiedTime(release).compareTo(Files.getLastModifiedTime(debug)) > 0
            ? release
            : debug;
      } catch (IOException e) {
        return debug;
      }
    }
    if (hasDebug || hasRelease) {
      return hasDebug ? debug : release;
    }
    throw new IllegalStateException("No leasehold server binary to test with: LEASEHOLD_BIN is "
        + "not set, and neither " + debug + " nor " + release + " exists. Set LEASEHOLD_BIN to a "
        + "leasehold binary, or build one at the repository's root: cargo build (debug) or "
        + "cargo build --release (as scripts/serve.sh does).");
  }

  private static boolean runnable(Path path) {
    return Files.isRegularFile(path) && Files.isExecutable(path);
  }

  /** Server {@code i}'s address. */
  String target(int i) {
    return targets[i];
  }

  /** Every server's address, comma-separated. */
  String targets() {
    return String.join(",", targets);
  }

  private void start(int i, String listen) throws IOException {
    List<String> command = new ArrayList<>(List.of(binary.toString(), "serve",
        "--listen", listen, "--redis", "redis://127.0.0.1:" + redisPort));
    command.addAll(List.of(extra));
    Process server = new ProcessBuilder(command)
        .redirectError(ProcessBuilder.Redirect.DISCARD).start();
    BufferedReader out = new BufferedReader(new InputStreamReader(server.getInputStream()));
    String line = null;
    try {
      line = out.readLine();
    } finally {
      if (line == null || !line.startsWith("leasehold: listening on ")) {
        stopNow(server);
      }
    }
    if (line == null || !line.startsWith("leasehold: listening on ")) {
      throw new IllegalStateException("server " + binary + " did not start on " + listen + ": "
          + (line == null ? "it exited" : line));
    }
    Thread drain = new Thread(() -> { // Whatever else it prints never fills the pipe.
      try {
        while (out.readLine() != null) {
          // Discarded.
        }
      } catch (IOException e) {
        // Gone.
      }
    }, "leasehold-server-stdout");
    drain.setDaemon(true);
    drain.start();
    servers[i] = server;
    targets[i] = line.substring("leasehold: listening on ".length()).trim();
  }

  /**
   * Starts server {@code i} again on its port (after {@link #stop} or {@link #kill}); returns once
   * it listens.
   */
  void start(int i) throws IOException, InterruptedException {
    if (servers[i].isAlive()) {
      throw new IllegalStateException("server " + i + " is running");
    }
    Instant deadline = Instant.now().plus(Duration.ofSeconds(10));
    while (true) {
      try {
        start(i, targets[i]);
        return;
      } catch (IllegalStateException e) { // The port may take a moment to be free again.
        if (Instant.now().isAfter(deadline)) {
          throw e;
        }
        Thread.sleep(50);
      }
    }
  }

  /** Stops server {@code i} as a deploy does (SIGTERM) and waits for it to exit. */
  void stop(int i) throws InterruptedException {
    servers[i].destroy();
    if (!servers[i].waitFor(15, TimeUnit.SECONDS)) {
      throw new IllegalStateException("server " + i + " did not exit within 15 s of SIGTERM");
    }
  }

  /** Kills server {@code i} (SIGKILL: no goodbye to anyone) and waits for it to be gone. */
  void kill(int i) throws InterruptedException {
    servers[i].destroyForcibly();
    servers[i].waitFor();
  }

  /** Runs redis-cli against the test's Redis and returns its trimmed output. */
  String redisCli(String... args) throws IOException, InterruptedException {
    String[] command = new String[args.length + 3];
    command[0] = "redis-cli";
    command[1] = "-p";
    command[2] = "" + redisPort;
    System.arraycopy(args, 0, command, 3, args.length);
    Process cli = new ProcessBuilder(command).redirectErrorStream(true).start();
    String out = new String(cli.getInputStream().readAllBytes()).trim();
    cli.waitFor();
    return out;
  }

  /**
   * A key's PTTL, asked over a socket of its own (a redis-cli process takes far longer to start
   * on a busy machine: too long to catch the moment a lease is renewed).
   */
  long pttl(String key) throws IOException {
    try (Socket socket = new Socket("127.0.0.1", redisPort)) {
      socket.getOutputStream().write(("PTTL " + key + "\r\n").getBytes(StandardCharsets.UTF_8));
      String answer = new BufferedReader(new InputStreamReader(socket.getInputStream(),
          StandardCharsets.UTF_8)).readLine();
      if (answer == null || !answer.startsWith(":")) {
        throw new IOException("PTTL " + key + ": " + answer);
      }
      return Long.parseLong(answer.substring(1));
    }
  }

  /** The token in a lock key's value ({@code <token>:<fencing token>:<attachment>:<holder>}). */
  String lockToken(String key) throws IOException, InterruptedException {
    return redisCli("GET", key).split(":", 2)[0];
  }

  /** Sends {@code signal} (STOP, CONT) to the first server, as {@code kill -SIGNAL}. */
  void signalServer(String signal) throws IOException, InterruptedException {
    signalServer(0, signal);
  }

  /** Sends {@code signal} (STOP, CONT) to server {@code i}, as {@code kill -SIGNAL}. */
  void signalServer(int i, String signal) throws IOException, InterruptedException {
    new ProcessBuilder("kill", "-" + signal, "" + servers[i].pid()).start().waitFor();
  }

  /** Waits (bounded) until the sorted set {@code line} holds {@code length} waiters. */
  void waitForLine(String line, int length) throws IOException, InterruptedException {
    Instant deadline = Instant.now().plus(Duration.ofSeconds(10));
    while (!redisCli("ZCARD", line).equals("" + length)) {
      if (Instant.now().isAfter(deadline)) {
        throw new IllegalStateException(line + " never had " + length + " waiters");
      }
      Thread.sleep(5);
    }
  }

  /** Stops everything started (each server, then Redis) and waits until each is gone. */
  @Override
  public void close() {
    for (int i = 0; i < servers.length; i++) {
      if (servers[i] != null && servers[i].isAlive()) {
        try {
          signalServer(i, "CONT");
        } catch (IOException | InterruptedException e) {
          // Killed below either way.
        }
        stopNow(servers[i]);
      }
    }
    stopNow(redis);
    try {
      Files.deleteIfExists(redisDir); // Empty: Redis saves nothing.
    } catch (IOException e) {
      // A stray temporary directory.
    }
  }

  /** Kills {@code process} (SIGKILL) and waits, bounded, for it to be gone. */
  private static void stopNow(Process process) {
    process.destroyForcibly();
    try {
      process.waitFor(10, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
