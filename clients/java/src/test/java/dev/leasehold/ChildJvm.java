package dev.leasehold;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * A main class of the test sources run in a JVM of its own (this JVM's java, the test classpath),
 * so that a test can freeze it (SIGSTOP) and wake it (SIGCONT): it reports lines on its stdout,
 * read here with a deadline each, and takes lines on its stdin. Its stderr is this JVM's.
 * {@link #close()} kills it (after waking it, if frozen).
 *
 * <p>Signals go through a shell started beside it, whose {@code kill} is a builtin: starting a
 * {@code kill} process from a JVM can take most of a second on a busy machine, which a freeze
 * timed against a lease's validity cannot spare.
 */
final class ChildJvm implements AutoCloseable {
  /** What a reader thread puts once stdout ends: no line is ever this object. */
  private static final String END = new String("end of stdout");

  private final Process process;
  private final Writer stdin;
  private final Process signaller;
  private final Writer signals;
  private final BufferedReader sent;
  private final LinkedBlockingQueue<String> lines = new LinkedBlockingQueue<>();
  private final List<String> seen = new ArrayList<>();

  ChildJvm(Class<?> main, String... args) throws IOException {
    List<String> command = new ArrayList<>(List.of(
        Path.of(System.getProperty("java.home"), "bin", "java").toString(),
        // Fewer threads to wake after a freeze (one GC thread, no optimising compiler).
        "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        "-cp", System.getProperty("java.class.path"), main.getName()));
    command.addAll(List.of(args));
    process = new ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.INHERIT).start();
    stdin = new OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8);
    signaller = new ProcessBuilder("sh", "-c",
        "while read signal; do kill -$signal " + process.pid() + " && echo sent; done")
        .redirectError(ProcessBuilder.Redirect.INHERIT).start();
    signals = new OutputStreamWriter(signaller.getOutputStream(), StandardCharsets.UTF_8);
    sent = new BufferedReader(
        new InputStreamReader(signaller.getInputStream(), StandardCharsets.UTF_8));
    Thread reader = new Thread(() -> {
      try (BufferedReader out = new BufferedReader(
          new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
        String line;
        while ((line = out.readLine()) != null) {
          lines.add(line);
        }
      } catch (IOException e) {
        // Killed: the end below says so.
      }
      lines.add(END);
    }, "child-jvm-stdout");
    reader.setDaemon(true);
    reader.start();
  }

  /** The next line it reports, within {@code timeout}; fails if none comes or it exits first. */
  String next(Duration timeout) throws InterruptedException {
    String line = lines.poll(timeout.toMillis(), TimeUnit.MILLISECONDS);
    if (line == null) {
      throw new AssertionError("the child reported nothing within " + timeout + " after " + seen);
    }
    if (line == END) {
      lines.add(END);
      throw new AssertionError("the child exited after reporting " + seen);
    }
    seen.add(line);
    return line;
  }

  /** Writes {@code line} to its stdin. */
  void send(String line) throws IOException {
    stdin.write(line + "\n");
    stdin.flush();
  }

  /** Sends {@code signal} (STOP, CONT) to it, as {@code kill -SIGNAL}; returns once sent. */
  void signal(String signal) throws IOException {
    signals.write(signal + "\n");
    signals.flush();
    String answer = sent.readLine();
    if (!"sent".equals(answer)) {
      throw new IOException("kill -" + signal + " " + process.pid() + " failed: " + answer);
    }
  }

  @Override
  public void close() throws IOException, InterruptedException {
    if (process.isAlive()) {
      try {
        signal("CONT");
      } catch (IOException e) {
        // Killed below either way.
      }
      process.destroyForcibly();
      process.waitFor(10, TimeUnit.SECONDS);
    }
    signaller.destroyForcibly();
    signaller.waitFor(10, TimeUnit.SECONDS);
  }
}
