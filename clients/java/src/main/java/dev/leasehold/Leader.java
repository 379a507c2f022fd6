package dev.leasehold;

import java.util.Arrays;

/**
 * An election's leader: its term (the leadership lease's fencing token, larger for every new
 * leader) and the value it published.
 */
public record Leader(long term, byte[] value) {
  @Override
  public boolean equals(Object other) {
    return other instanceof Leader that && term == that.term && Arrays.equals(value, that.value);
  }

  @Override
  public int hashCode() {
    return 31 * Long.hashCode(term) + Arrays.hashCode(value);
  }

  @Override
  public String toString() {
    return "Leader[term=" + term + ", value=" + new String(value) + "]";
  }
}
