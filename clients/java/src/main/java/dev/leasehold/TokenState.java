package dev.leasehold;

/**
 * What a fencing token is to its name now, as {@link LeaseholdClient#check} answers: the
 * server's {@code TokenState}, typed.
 */
public enum TokenState {
  /** A live holding of the name has this fencing token: the write may go ahead. */
  CURRENT,
  /** The name is held under other fencing tokens only: the writer's holding is over. */
  SUPERSEDED,
  /** Nobody holds the name. */
  FREE,
  /** A server that predates the answer, or a state added since this client was built. */
  UNKNOWN;

  /** The server's state; {@link #UNKNOWN} for none or one added since. */
  static TokenState of(leasehold.v1.Lock.TokenState state) {
    return switch (state) {
      case TOKEN_STATE_CURRENT -> CURRENT;
      case TOKEN_STATE_SUPERSEDED -> SUPERSEDED;
      case TOKEN_STATE_FREE -> FREE;
      case TOKEN_STATE_UNSPECIFIED, UNRECOGNIZED -> UNKNOWN;
    };
  }
}
