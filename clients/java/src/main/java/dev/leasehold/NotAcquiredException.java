package dev.leasehold;

/** The lock stayed taken for the whole wait (status ABORTED); the message names the holder. */
public final class NotAcquiredException extends Exception {
  public NotAcquiredException(String message) {
    super(message);
  }
}
