package dev.leasehold;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The leases of a session by id, and what happens to all of them at once: a stream opened or
 * broken, a renewal confirmed, the session's timer, its close or its end. What each means for one
 * lease is {@link SessionMember}'s to say. Guarded by the {@link SessionLink}; every method is
 * called holding it.
 */
final class SessionMembers {
  private final Map<Long, SessionMember> byId = new LinkedHashMap<>();
  private long nextId = 1;

  long nextId() {
    return nextId++;
  }

  void add(SessionMember member) {
    byId.put(member.id, member);
  }

  /** The lease {@code id} names, or null if it is over (or never was). */
  SessionMember get(long id) {
    return byId.get(id);
  }

  void remove(SessionMember member) {
    byId.remove(member.id);
  }

  int size() {
    return byId.size();
  }

  /** A copy to walk while members end (and leave). */
  private List<SessionMember> all() {
    return new ArrayList<>(byId.values());
  }

  /** Sends every lease not on a stream yet (waiting, or to be resumed) on {@code next}. */
  void sendWaiting(SessionLink.Stream next) {
    for (SessionMember member : byId.values()) {
      if (member.on == null && (member.state == SessionMember.State.WAITING
          || member.state == SessionMember.State.RESUMING)) {
        member.sendOn(next);
      }
    }
  }

  /** Whether a resume sent on {@code stream} is still unanswered. */
  boolean resuming(SessionLink.Stream stream) {
    for (SessionMember member : byId.values()) {
      if (member.state == SessionMember.State.RESUMING && member.on == stream) {
        return true;
      }
    }
    return false;
  }

  /** Arms {@code validity} for the earliest validity of a held lease (stops it if none). */
  void arm(ValidityClock validity) {
    long earliest = 0;
    boolean any = false;
    for (SessionMember member : byId.values()) {
      if (member.vouched()) {
        if (!any || member.validUntilNanos - earliest < 0) {
          earliest = member.validUntilNanos;
        }
        any = true;
      }
    }
    if (any) {
      validity.arm(earliest);
    } else {
      validity.stop();
    }
  }

  /**
   * The session's confirmation on {@code from}: vouches until {@code until} for every lease
   * acquired on that stream before it.
   */
  void keptAlive(SessionLink.Stream from, long until) {
    for (SessionMember member : byId.values()) {
      if (member.vouched() && member.on == from
          && member.state != SessionMember.State.RESUMING) {
        member.vouch(until);
      }
    }
  }

  /** The timer fired: each lease whose validity ran out expires. */
  void expire(String lastError) {
    for (SessionMember member : all()) {
      if (member.vouched() && ValidityClock.passed(member.validUntilNanos)) {
        member.expire(lastError);
      }
    }
  }

  /** The leases of {@code from}, a broken stream, wait for the next one. */
  void detach(SessionLink.Stream from) {
    for (SessionMember member : all()) {
      if (member.on == from) {
        member.detach();
      }
    }
  }

  /** The user closes the session: every lease is let go; those still waiting stop. */
  void closing() {
    for (SessionMember member : all()) {
      member.letGo = true;
      if (member.state == SessionMember.State.WAITING) { // Stops waiting with the session.
        member.end(false);
        member.failAcquire(new IllegalStateException("the session was closed"));
      }
    }
  }

  /** The server closed the session: every lease it held is released. */
  void closed() {
    for (SessionMember member : all()) {
      member.end(member.token != null && !member.lostKnown);
      member.failAcquire(new IllegalStateException("the session was closed"));
    }
  }

  /**
   * The session ended ({@code reason} not null: lost, for {@code code}); {@code error} is what
   * waiters are told.
   */
  void endAll(String reason, LostReason code, Throwable error) {
    String loss = reason == null ? "the session ended" : reason;
    for (SessionMember member : all()) {
      if (member.token != null) {
        member.lose("the session was lost: " + loss, code);
      }
      member.end(false);
      member.failAcquire(error != null ? error : new IllegalStateException(
          "the session " + (reason == null ? "was closed" : "was lost: " + reason)));
    }
  }
}
