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
 */
final class ChildJvm implements AutoCloseable {
  /** What a reader thread puts once stdout ends: no line is ever this object. */
  private static final String END = new String("end of stdout");

  private final Process process;
  private final Writer stdin;
  private final LinkedBlockingQueue<String> lines = new LinkedBlockingQueue<>();
  private final List<String> seen = new ArrayList<>();

  ChildJvm(Class<?> main, String... args) throws IOException {
    List<String> command = new ArrayList<>(List.of(
        Path.of(System.getProperty("java.home"), "bin", "java").toString(),
        "-cp", System.getProperty("java.class.path"), main.getName()));
    command.addAll(List.of(args));
    process = new ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.INHERIT).start();
    stdin = new OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8);
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

  /** Sends {@code signal} (STOP, CONT) to it, as {@code kill -SIGNAL}. */
  void signal(String signal) throws IOException, InterruptedException {
    new ProcessBuilder("kill", "-" + signal, "" + process.pid()).start().waitFor();
  }

  @Override
  public void close() throws IOException, InterruptedException {
    if (process.isAlive()) {
      signal("CONT");
      process.destroyForcibly();
      process.waitFor(10, TimeUnit.SECONDS);
    }
  }
}
