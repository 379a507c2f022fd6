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
}
