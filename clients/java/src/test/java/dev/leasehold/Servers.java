package dev.leasehold;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.time.Duration;
import java.time.Instant;

/** A redis-server and a leasehold server of the test's own, on free loopback ports. */
final class Servers implements AutoCloseable {
  final int redisPort;
  final String target;
  private final Process redis;
  private final Process server;

  Servers() throws IOException, InterruptedException {
    this(new String[0]);
  }

  /** With {@code extra} arguments for {@code leasehold serve}. */
  Servers(String... extra) throws IOException, InterruptedException {
    try (ServerSocket socket = new ServerSocket(0)) {
      redisPort = socket.getLocalPort();
    }
    redis = new ProcessBuilder("redis-server", "--port", "" + redisPort, "--bind", "127.0.0.1",
        "--save", "", "--appendonly", "no",
        "--dir", Files.createTempDirectory("leasehold-java").toString())
        .redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
    Instant deadline = Instant.now().plus(Duration.ofSeconds(5));
    while (!"PONG".equals(redisCli("ping"))) {
      if (Instant.now().isAfter(deadline)) {
        throw new IllegalStateException("redis-server did not start");
      }
      Thread.sleep(20);
    }
    String binary = System.getenv().getOrDefault("LEASEHOLD_BIN", "../../target/debug/leasehold");
    java.util.List<String> command = new java.util.ArrayList<>(java.util.List.of(
        binary, "serve", "--listen", "127.0.0.1:0", "--redis", "redis://127.0.0.1:" + redisPort));
    command.addAll(java.util.List.of(extra));
    server = new ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.DISCARD).start();
    String line = new BufferedReader(new InputStreamReader(server.getInputStream())).readLine();
    if (line == null || !line.startsWith("leasehold: listening on ")) {
      throw new IllegalStateException("server did not start: " + line);
    }
    target = line.substring("leasehold: listening on ".length()).trim();
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

  /** Sends {@code signal} (STOP, CONT) to the leasehold server, as {@code kill -SIGNAL}. */
  void signalServer(String signal) throws IOException, InterruptedException {
    new ProcessBuilder("kill", "-" + signal, "" + server.pid()).start().waitFor();
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

  @Override
  public void close() {
    try {
      signalServer("CONT");
    } catch (IOException | InterruptedException e) {
      // Killed below either way.
    }
    server.destroyForcibly();
    redis.destroyForcibly();
  }
}
