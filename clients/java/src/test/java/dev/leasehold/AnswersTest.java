package dev.leasehold;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import leasehold.v1.Lock.CheckResponse;
import leasehold.v1.Lock.NameFence;
import org.junit.jupiter.api.Test;

/** How the server's answers of issue 41 read: an acquisition's fences, a check's state. */
class AnswersTest {
  private static NameFence fence(String name, long fencingToken) {
    return NameFence.newBuilder().setName(name).setFencingToken(fencingToken).build();
  }

  @Test
  void fencesKeepTheOrderAsked() {
    Map<String, Long> fences =
        Holding.fences(List.of(fence("b", 7), fence("a", 9), fence("c", 3)), "b", 7);
    assertEquals(List.of("b", "a", "c"), List.copyOf(fences.keySet()));
    assertEquals(List.of(7L, 9L, 3L), List.copyOf(fences.values()));
    assertThrows(UnsupportedOperationException.class, () -> fences.put("d", 1L));
  }

  @Test
  void anOlderServerSendsNoFences() {
    assertEquals(Map.of("job", 42L), Holding.fences(List.of(), "job", 42));
  }

  @Test
  void aCheckAnswersItsState() {
    TokenCheck current = TokenCheck.of(CheckResponse.newBuilder()
        .setState(leasehold.v1.Lock.TokenState.TOKEN_STATE_CURRENT)
        .setCurrentFencingToken(12).build());
    assertEquals(new TokenCheck(TokenState.CURRENT, 12), current);
    assertTrue(current.isCurrent());
    TokenCheck superseded = TokenCheck.of(CheckResponse.newBuilder()
        .setState(leasehold.v1.Lock.TokenState.TOKEN_STATE_SUPERSEDED)
        .setCurrentFencingToken(13).build());
    assertEquals(new TokenCheck(TokenState.SUPERSEDED, 13), superseded);
    assertFalse(superseded.isCurrent());
    assertEquals(new TokenCheck(TokenState.FREE, 0), TokenCheck.of(CheckResponse.newBuilder()
        .setState(leasehold.v1.Lock.TokenState.TOKEN_STATE_FREE).build()));
  }

  @Test
  void anOlderServerOrANewerStateIsUnknown() {
    assertEquals(TokenState.UNKNOWN, TokenCheck.of(CheckResponse.getDefaultInstance()).state());
    CheckResponse later = CheckResponse.newBuilder().setStateValue(99).build();
    assertEquals(TokenState.UNKNOWN, TokenCheck.of(later).state());
    assertFalse(TokenCheck.of(later).isCurrent());
  }
}
