package dev.leasehold;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import leasehold.v1.Lock.NameFence;

/**
 * What every held thing shares, on its own stream ({@link Lease}, {@link Candidate}) or on a
 * session's ({@link SessionMember}): the acquisition's token and fencing token, whether its loss
 * is known, whether the user let go of it, and the loss told once. The owner guards the fields with
 * its lock (the lease, the candidate, the session).
 */
abstract class Holding {
  /** Completes with the reason once it is lost; never if the user let go first. */
  final CompletableFuture<String> lost = new CompletableFuture<>();

  /** The acquisition's secret (also its resume token); null until held. */
  String token;
  /** Its fencing token (a leadership's term); 0 until held. */
  long fencingToken;
  /** Each name's fencing token, in the order asked (the first's is {@link #fencingToken}). */
  Map<String, Long> fences = Map.of();
  /** Known to be lost (told or not): it is never resumed or vouched for again. */
  boolean lostKnown;
  /** The user let go (release, resign, close): a loss from now on is not news to anyone. */
  boolean letGo;
  /** How many times it was taken back on a new stream after its stream broke. */
  int resumes;
  /** Why it was lost, set with the first loss reported (before {@link #lost} completes). */
  LostReason lostCode;

  /**
   * Holds the owner's lock. Notes that it is lost (if {@code reason} is not null) for {@code
   * code}, and returns the reason to report, or null when the user let go first. The first loss
   * reported is the one {@link #lost} completes with, so its code is the one kept.
   */
  final String lossOf(String reason, LostReason code) {
    if (reason == null) {
      return null;
    }
    lostKnown = true;
    if (letGo) {
      return null;
    }
    if (lostCode == null) {
      lostCode = code;
    }
    return reason;
  }

  /**
   * Each name's fencing token from an acquisition's {@code fences} (the first name, then the
   * others in the order asked), unmodifiable and in that order; from a server that predates them
   * (no fences), {@code name} alone with {@code fencingToken}.
   */
  static Map<String, Long> fences(List<NameFence> fences, String name, long fencingToken) {
    if (fences.isEmpty()) {
      return Map.of(name, fencingToken);
    }
    Map<String, Long> ordered = new LinkedHashMap<>();
    for (NameFence fence : fences) {
      ordered.put(fence.getName(), fence.getFencingToken());
    }
    return Collections.unmodifiableMap(ordered);
  }

  /**
   * Not holding the lock. Waits up to {@code waitMs} for {@code released}, the answer to letting
   * go: whether it was still held (and not lost meanwhile); false if no answer came.
   */
  final boolean stillHeld(CompletableFuture<Boolean> released, long waitMs) {
    try {
      return released.get(waitMs, TimeUnit.MILLISECONDS) && !lost.isDone();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    } catch (ExecutionException | TimeoutException e) {
      return false;
    }
  }
}
