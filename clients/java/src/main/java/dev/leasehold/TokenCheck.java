package dev.leasehold;

import leasehold.v1.Lock.CheckResponse;

/**
 * The answer of {@link LeaseholdClient#check}: the fencing token's {@link TokenState}, and the
 * fencing token of the name's current holding (the oldest, for several holders) when it is held,
 * 0 when it is free.
 */
public record TokenCheck(TokenState state, long currentFencingToken) {
  /** Whether the fencing token checked is the current holding's: the write may go ahead. */
  public boolean isCurrent() {
    return state == TokenState.CURRENT;
  }

  static TokenCheck of(CheckResponse answer) {
    return new TokenCheck(TokenState.of(answer.getState()), answer.getCurrentFencingToken());
  }
}
