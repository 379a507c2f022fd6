package dev.leasehold;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.HexFormat;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import leasehold.v1.Lock.Holder;
import org.junit.jupiter.api.Test;

class AuthTest {
  private static Status.Code refusal(Throwable error) {
    Throwable cause = error;
    while (cause != null && !(cause instanceof StatusRuntimeException)) {
      cause = cause.getCause();
    }
    if (cause == null) {
      throw new AssertionError("not a gRPC status", error);
    }
    return ((StatusRuntimeException) cause).getStatus().getCode();
  }

  @Test
  void aTokenOpensItsPrefixesAndNothingElse() throws Exception {
    byte[] digest = MessageDigest.getInstance("SHA-256")
        .digest("java-secret".getBytes(StandardCharsets.UTF_8));
    Path grants = Files.createTempFile("leasehold-auth", ".toml");
    Files.writeString(grants, "[[grant]]\nname = \"java\"\ntoken_sha256 = \""
        + HexFormat.of().formatHex(digest) + "\"\nrole = \"hold\"\nlocks = [\"java/\"]\n");
    try (Servers servers = new Servers("--auth-file", grants.toString());
        LeaseholdClient client = LeaseholdClient.connect(
            servers.target, new LeaseholdClient.Options().token("java-secret"));
        LeaseholdClient anonymous = LeaseholdClient.connect(servers.target)) {
      try (Lease lease = client.lease("java/job").ttl(Duration.ofSeconds(5)).acquire()) {
        assertTrue(lease.fencingToken() > 0);
      }
      Throwable outside = assertThrows(Throwable.class,
          () -> client.lease("other/job").ttl(Duration.ofSeconds(5)).acquire());
      assertEquals(Status.Code.PERMISSION_DENIED, refusal(outside));
      Throwable unknown = assertThrows(Throwable.class,
          () -> anonymous.lease("java/job").ttl(Duration.ofSeconds(5)).acquire());
      assertEquals(Status.Code.UNAUTHENTICATED, refusal(unknown));
    } finally {
      Files.deleteIfExists(grants);
    }
  }

  @Test
  void revokingNeedsTheAdminRole() throws Exception {
    Path grants = Files.createTempFile("leasehold-auth", ".toml");
    Files.writeString(grants, grant("holder", "hold") + grant("operator", "admin"));
    try (Servers servers = new Servers("--auth-file", grants.toString());
        LeaseholdClient holder = LeaseholdClient.connect(
            servers.target, new LeaseholdClient.Options().token("holder"));
        LeaseholdClient operator = LeaseholdClient.connect(
            servers.target, new LeaseholdClient.Options().token("operator"));
        Lease lease = holder.lease("java/job").ttl(Duration.ofSeconds(5)).acquire()) {
      assertEquals(Status.Code.PERMISSION_DENIED,
          refusal(assertThrows(Throwable.class, () -> holder.revoke("java/job"))));
      assertEquals(Status.Code.PERMISSION_DENIED,
          refusal(assertThrows(Throwable.class, () -> holder.revokeLeader("java/vote"))));
      assertEquals(List.of(lease.fencingToken()), operator.revoke("java/job").stream()
          .map(Holder::getFencingToken).toList());
      lease.lost().get(2, TimeUnit.SECONDS);
      assertEquals(Optional.of(LostReason.REVOKED), lease.lostCode());
    } finally {
      Files.deleteIfExists(grants);
    }
  }

  /** A grant of {@code role} on the prefix java/ (locks and elections) to {@code token}. */
  private static String grant(String token, String role) throws Exception {
    byte[] digest = MessageDigest.getInstance("SHA-256")
        .digest(token.getBytes(StandardCharsets.UTF_8));
    return "[[grant]]\nname = \"" + token + "\"\ntoken_sha256 = \""
        + HexFormat.of().formatHex(digest) + "\"\nrole = \"" + role
        + "\"\nlocks = [\"java/\"]\nelections = [\"java/\"]\n";
  }

  private static void openssl(Path dir, String... args) throws Exception {
    String[] command = new String[args.length + 1];
    command[0] = "openssl";
    System.arraycopy(args, 0, command, 1, args.length);
    Process process = new ProcessBuilder(command).directory(dir.toFile())
        .redirectErrorStream(true).start();
    String out = new String(process.getInputStream().readAllBytes());
    if (process.waitFor() != 0) {
      throw new IllegalStateException("openssl failed: " + out);
    }
  }

  @Test
  void tlsChecksEachServerOfAListAgainstItsOwnName() throws Exception {
    Path dir = Files.createTempDirectory("leasehold-tls");
    openssl(dir, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=java test ca", "-days", "1");
    openssl(dir, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost");
    // Only the name: a server reached as 127.0.0.1 fails the check.
    Files.writeString(dir.resolve("ext.cnf"),
        "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n");
    openssl(dir, "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.pem", "-days", "1", "-extfile", "ext.cnf");
    byte[] ca = Files.readAllBytes(dir.resolve("ca.pem"));
    int closed;
    try (java.net.ServerSocket socket = new java.net.ServerSocket(0)) {
      closed = socket.getLocalPort();
    }
    try (Servers servers = new Servers(2, "--tls-cert", dir.resolve("server.pem").toString(),
        "--tls-key", dir.resolve("server.key").toString())) {
      String port0 = servers.target(0).substring(servers.target(0).lastIndexOf(':') + 1);
      String port1 = servers.target(1).substring(servers.target(1).lastIndexOf(':') + 1);
      // The list's first entry (the channel's own authority) is 127.0.0.1 and down: the server
      // reached is checked against the name it was listed by, localhost.
      try (LeaseholdClient client = LeaseholdClient.connect(
              "127.0.0.1:" + closed + ",localhost:" + port0 + ",localhost:" + port1,
              new LeaseholdClient.Options().caPem(ca));
          Lease lease = client.lease("job").ttl(Duration.ofSeconds(5)).acquire()) {
        assertTrue(lease.fencingToken() > 0);
      }
      try (LeaseholdClient byAddress = LeaseholdClient.connect(
          "127.0.0.1:" + port0 + ",127.0.0.1:" + port1, new LeaseholdClient.Options().caPem(ca))) {
        Throwable refused = assertThrows(Throwable.class,
            () -> byAddress.lease("job").ttl(Duration.ofSeconds(5)).acquire());
        assertEquals(Status.Code.UNAVAILABLE, refusal(refused));
      }
    }
  }
}
