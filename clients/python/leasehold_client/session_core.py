"""A session's state and rules, free of I/O: many leases (locks and campaigns) on one Session
stream (proto/leasehold/v1/session.proto), renewed and confirmed together.

``SessionCore`` is what a session knows and decides, whichever concurrency model reads its
stream (threads in ``sessions``, asyncio in ``aio_sessions``): its leases by id, the validity of
each, what to send on a new stream after a break, and what every answer of the server's means.
It never blocks; the model supplies the clock, events, queues, the timer and the waiting
(``_now``, ``_new_event``, ``_new_queue``, ``_notify``, ``_schedule``, ``_abort``), and holds its
lock (threads) around every call. Its leases follow the rules of validity every held thing does
(``validity``).
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any, Callable, Deque, Dict, Optional, Tuple, Union

import grpc
from leasehold.v1 import session_pb2

from .errors import NotAcquired, STATUS_CODES, describe, resumable, session_failure
from .options import lease_mode, millis
from .validity import (FIRST_PAUSE, LAST_PAUSE, LATE_ACQUIRED, LATE_ELECTED, SILENT, other_lease,
                       pause, too_late, vouched_until)

_log = logging.getLogger("leasehold_client")

WAITING, HELD, OVER = "waiting", "held", "over"
_CLOSE = session_pb2.SessionRequest(close=session_pb2.SessionClose())


def release_request(member_id: int) -> session_pb2.SessionRequest:
    return session_pb2.SessionRequest(release=session_pb2.SessionRelease(id=member_id))

class Member:
    """One lease of a session (a lock or a campaign), as its session tracks it. Every field is
    the session's to change (under its lock, for threads)."""

    #: "lock" or "election", for messages.
    _what = "lock"

    def __init__(self, session: "SessionCore", member_id: int, name: str,
                 request: session_pb2.SessionRequest):
        self.id = member_id
        self.name = name
        self.token = ""
        self.fencing_token = 0
        #: When the validity last confirmed for this lease runs out (the session's clock).
        self.valid_until = 0.0
        #: How many times it was taken back on a new stream after its session's stream broke.
        self.resumes = 0
        self.lost_reason: Optional[str] = None
        self._session = session
        self._request = request  # as sent first; a campaign's value is the last proclaimed
        self._lost_event = session._new_event()
        self._state = WAITING
        self._failure: Optional[Exception] = None  # why it was never held
        self._resuming = False  # held, re-sent with its token on a new stream, not answered yet
        self._releasing = False
        self._was_held = False

    def _resume_request(self) -> session_pb2.SessionRequest:
        request = session_pb2.SessionRequest()
        request.CopyFrom(self._request)
        getattr(request, request.WhichOneof("action")).resume_token = self.token
        return request

    def _held(self) -> None:
        """Called when it is first held."""

    def _resumed(self) -> None:
        """Called when a new stream took it back."""

    def _not_had(self, reason: str) -> Exception:
        return NotAcquired(f"lock {self.name!r}: {reason}")

    def _late(self) -> str:
        return LATE_ACQUIRED


class CandidateMember(Member):
    """A campaign on a session: what its proclaims have published."""

    _what = "election"

    def __init__(self, session: "SessionCore", member_id: int, name: str,
                 request: session_pb2.SessionRequest):
        super().__init__(session, member_id, name, request)
        self.term: Optional[int] = None
        self._sent = 0  # proclaims asked for
        self._published = 0  # the last of them confirmed
        self._in_flight: Deque[int] = deque()  # proclaims sent on this stream, unanswered
        self._resent = 0  # the proclaim a resume's campaign carries

    def _held(self) -> None:
        self.term = self.fencing_token

    def _resumed(self) -> None:
        self._published = max(self._published, self._resent)
        if self._sent > self._resent:  # proclaimed while the resume was on its way
            self._session._proclaim(self)

    def _not_had(self, reason: str) -> Exception:
        return RuntimeError(f"election {self.name!r}: {reason}")

    def _late(self) -> str:
        return LATE_ELECTED


class SessionCore:
    """A session's state and rules; see the comment above."""

    lost: Any
    lost_reason: Optional[str]
    resumes: int

    # The concurrency model's part.
    def _now(self) -> float:
        raise NotImplementedError

    def _new_event(self) -> Any:
        raise NotImplementedError

    def _new_queue(self) -> Any:
        raise NotImplementedError

    def _notify(self) -> None:
        """Wakes whoever waits for a change."""
        raise NotImplementedError

    def _schedule(self, when: Optional[float]) -> None:
        """Calls ``_tick`` at ``when`` (the model's clock), instead of any earlier schedule."""
        raise NotImplementedError

    def _abort(self) -> None:
        """Stops the stream (or the attempt to open one) in flight: the session is over."""
        raise NotImplementedError

    def _setup(self, ttl: float, resume_grace: float, holder: str, auto_resume: bool) -> None:
        open_ = session_pb2.SessionOpen(ttl_ms=millis(ttl), resume_grace_ms=millis(resume_grace),
                                        holder=holder)
        self._open_request = session_pb2.SessionRequest(open=open_)
        self._grace = resume_grace
        self._auto_resume = auto_resume and open_.resume_grace_ms > 0
        self._members: Dict[int, Member] = {}
        self._next_id = 0
        self._outbox: Any = None  # the live stream's requests; None between streams
        self._call: Any = None
        self._opened = 0.0  # when the live stream was opened: what valid_to_ms counts from
        self._heard = False  # the live stream said something
        self._established = False  # some stream said something: a break is worth resuming
        self._over = False
        self._error: Optional[grpc.RpcError] = None
        self._closing = False
        self._close_sent = False
        self._resuming = False  # from a break until the new stream says something
        self._resume_until = 0.0
        self._last_error = ""
        self._delay = FIRST_PAUSE
        self._armed_at: Optional[float] = None  # when the timer is set for
        self.resumes = 0
        self.lost = self._new_event()
        self.lost_reason = None

    # Requests.
    def _send(self, request: session_pb2.SessionRequest) -> None:
        if self._outbox is not None:  # else the next stream sends what is still needed
            self._outbox.put_nowait(request)

    def _open_stream(self) -> Any:
        """The requests of a new stream: `open`, then every lease again (a held one with its
        token, a waiting one afresh)."""
        outbox = self._new_queue()
        outbox.put_nowait(self._open_request)
        for member in sorted(self._members.values(), key=lambda m: m.id):
            if member._state == HELD:
                member._resuming = True
                if isinstance(member, CandidateMember):
                    member._resent = member._sent
                    member._in_flight.clear()
                outbox.put_nowait(member._resume_request())
            elif member._releasing:  # gave up waiting between streams
                self._finish(member, False)
            else:
                outbox.put_nowait(member._request)
        self._outbox = outbox
        self._opened = self._now()
        self._heard = False
        self._close_sent = False
        self._close_if_due()
        return outbox

    def _close_if_due(self) -> None:
        """Sends `close` once asked, when no lease is being resumed (closing a stream with a
        resume in flight could leave that lease in Redis for its grace)."""
        if (self._closing and not self._close_sent and self._outbox is not None
                and not any(member._resuming for member in self._members.values())):
            self._close_sent = True
            self._outbox.put_nowait(_CLOSE)
            self._outbox.put_nowait(None)  # half-close
            self._outbox = None

    def _usable(self) -> None:
        if self._over:
            if self._error is not None:
                raise self._error
            raise RuntimeError(f"session over: {self.lost_reason or 'closed'}")
        if self._closing:
            raise RuntimeError("session closed")

    def _add(self, member: Member) -> None:
        self._usable()
        self._members[member.id] = member
        self._send(member._request)

    def _take_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _acquire_request(self, name: str, wait: float, holder: str, fair: bool, limit: int,
                         shared: bool) -> Tuple[int, session_pb2.SessionRequest]:
        member_id = self._take_id()
        return member_id, session_pb2.SessionRequest(acquire=session_pb2.SessionAcquire(
            id=member_id, name=name, wait_ms=millis(wait), holder=holder, fair=fair,
            limit=limit, mode=lease_mode(shared)))

    def _campaign_request(self, election: str,
                          value: bytes) -> Tuple[int, session_pb2.SessionRequest]:
        member_id = self._take_id()
        return member_id, session_pb2.SessionRequest(campaign=session_pb2.SessionCampaign(
            id=member_id, election=election, value=value))

    def _let_go(self, member: Member) -> None:
        """Asks for one lease to be released (or its wait given up)."""
        if member._state == OVER or member._releasing:
            return
        member._releasing = True
        if not member._resuming:  # else once its resume is answered
            self._send(release_request(member.id))

    def _proclaim(self, member: CandidateMember) -> None:
        if member._resuming or self._outbox is None:
            return  # the resume carries the last value, or its answer sends it
        member._in_flight.append(member._sent)
        self._send(session_pb2.SessionRequest(proclaim=session_pb2.SessionProclaim(
            id=member.id, value=member._request.campaign.value)))

    def _begin_close(self) -> None:
        if not self._over:
            self._closing = True
            self._close_if_due()

    # Endings.
    def _finish(self, member: Member, was_held: bool) -> None:
        """A lease let go at our request (or by the session's close)."""
        if member._state == OVER:
            return
        if member._state == WAITING:
            member._failure = member._not_had("released while waiting")
        member._state = OVER
        member._was_held = was_held
        self._members.pop(member.id, None)

    def _drop(self, member: Member, reason: str, error: Optional[Exception] = None, *,
              tell: bool = True) -> None:
        """A lease that is no longer ours: lost if it was held, failed if not. ``tell``: the
        server may still hold it (we gave up on it), so it is released there too."""
        if member._state == OVER:
            return
        was = member._state
        member._state = OVER
        self._members.pop(member.id, None)
        if was == WAITING:
            member._failure = error or member._not_had(reason)
        elif not member._releasing:
            member.lost_reason = reason
            member._lost_event.set()
            _log.info("%s %r lost: %s", member._what, member.name, reason)
        if tell:
            self._send(release_request(member.id))

    def _end(self, reason: str, *, closed: bool = False, error: Optional[grpc.RpcError] = None,
             abort: bool = False) -> None:
        """The session is over: closed at our request, or lost (every lease with it)."""
        if self._over:
            return
        self._over, self._error = True, error
        outbox, self._outbox = self._outbox, None
        for member in tuple(self._members.values()):
            if closed:
                self._finish(member, member._state == HELD)
            else:
                self._drop(member, reason, error)
        if outbox is not None:
            outbox.put_nowait(None)
        if not closed and not self._closing:
            self.lost_reason = reason
            self.lost.set()
            _log.info("session lost: %s", reason)
        self._armed_at = None
        self._schedule(None)
        if abort:
            self._abort()
        self._notify()

    # The clock.
    def _rearm(self) -> None:
        deadlines = [member.valid_until for member in self._members.values()
                     if member._state == HELD]
        if self._resuming:
            deadlines.append(self._resume_until)
        when = min(deadlines) if deadlines else None
        if when != self._armed_at:  # most answers change nothing: no new timer for them
            self._armed_at = when
            self._schedule(when)

    def _tick(self) -> None:
        """The timer: leases past their validity are lost, by this process's clock."""
        self._armed_at = None  # fired
        if self._over:
            return
        now = self._now()
        for member in tuple(self._members.values()):
            if member._state == HELD and member.valid_until <= now:
                self._drop(member, too_late("lease", self._last_error) if member._resuming
                           else SILENT)
        if self._resuming and now >= self._resume_until:
            self._end(too_late("session", self._last_error), abort=True)
            return
        self._rearm()
        self._close_if_due()
        self._notify()

    # The server's answers.
    def _hear(self, event: session_pb2.SessionResponse) -> bool:
        """Applies one answer; True once the stream has said its last word (closed, lost)."""
        received = self._now()
        if not self._heard:
            self._heard = self._established = True
            if self._resuming:
                self._resuming = False
                self.resumes += 1
                _log.info("session resumed")
        kind = event.WhichOneof("event")
        member = self._members.get(getattr(event, kind).id) if kind in (
            "acquired", "proclaimed", "released", "lease_lost", "failed") else None
        if kind == "kept_alive":
            valid_until = vouched_until(self._opened, received, event.kept_alive)
            for held in self._members.values():
                if held._state == HELD and not held._resuming:
                    held.valid_until = valid_until
        elif kind == "acquired":
            self._acquired(member, event.acquired, received)
        elif kind == "proclaimed":
            if isinstance(member, CandidateMember) and member._in_flight:
                member._published = max(member._published, member._in_flight.popleft())
        elif kind == "released":
            if member is not None:
                self._finish(member, event.released.was_held)
        elif kind == "lease_lost":
            if member is not None:
                self._drop(member, event.lease_lost.reason, tell=False)
        elif kind == "failed":
            if member is not None:
                self._failed(member, event.failed)
        elif kind == "closed":
            self._end("closed", closed=True)
            return True
        elif kind == "lost":
            self._end(event.lost.reason)
            return True
        self._rearm()
        self._close_if_due()
        self._notify()
        return False

    def _acquired(self, member: Optional[Member], answer: session_pb2.SessionAcquired,
                  received: float) -> None:
        valid_until = vouched_until(self._opened, received, answer)
        if member is None:  # let go meanwhile (lost by our clock, say): let it go there too
            self._send(release_request(answer.id))
            return
        if member._state == WAITING:
            if valid_until <= received:
                # Held up on its way: it may be someone else's by now. Not a lease.
                self._drop(member, member._late())
                return
            member.token, member.fencing_token = answer.token, answer.fencing_token
            member._state = HELD
            member.valid_until = valid_until
            member._held()
        elif member._resuming:
            mismatch = other_lease(member.token, member.fencing_token, answer)
            if mismatch is None and valid_until <= received:
                mismatch = f"could not resume: {member._late()}"
            if mismatch is not None:
                self._drop(member, mismatch)
                return
            member._resuming = False
            member.resumes += 1
            member.valid_until = valid_until
            member._resumed()
            _log.info("%s %r resumed on the session (fencing token %d)", member._what,
                      member.name, member.fencing_token)
        if member._releasing:  # let go while it was on its way
            self._send(release_request(member.id))

    def _failed(self, member: Member, failed: session_pb2.SessionFailed) -> None:
        error = session_failure(failed)
        if member._state == WAITING:
            self._drop(member, failed.message, error, tell=False)
        elif member._releasing:
            self._finish(member, False)
        else:
            code = STATUS_CODES.get(failed.code, grpc.StatusCode.UNKNOWN).name
            prefix = "could not resume: " if member._resuming else ""
            self._drop(member, f"{prefix}{code} {failed.message}", tell=False)

    # Breaks.
    def _broke(self, error: Union[grpc.RpcError, str]) -> Optional[float]:
        """Decides what a broken stream means: None when the session is over, else how long to
        pause before the next stream."""
        outbox, self._outbox, self._call = self._outbox, None, None
        if outbox is not None:
            outbox.put_nowait(None)
        if self._over:
            return None
        if not self._auto_resume or not self._established or not resumable(error):
            if isinstance(error, grpc.RpcError):
                self._end(f"session stream failed: {describe(error)}", error=error)
            else:
                self._end(error)
            return None
        now = self._now()
        wait = 0.0
        if self._heard or not self._resuming:  # a stream that worked: a break of its own
            held = [m.valid_until for m in self._members.values() if m._state == HELD]
            self._resume_until = max([now + self._grace, *held])
            self._delay = FIRST_PAUSE
        else:  # the last attempt got nowhere
            wait = pause(self._delay, self._resume_until, now)
            self._delay = min(self._delay * 2, LAST_PAUSE)
        self._resuming = True
        self._last_error = describe(error)
        for member in self._members.values():
            if member._state == HELD:
                member._resuming = True
        _log.info("session stream broke (%s); resuming it", self._last_error)
        self._rearm()
        return wait

    def _reopen(self, open_call: Callable[[Any], Any]) -> Any:
        """Opens the next stream after a break (``open_call`` makes the call from its requests),
        or returns None when the session is over."""
        if self._over:
            return None
        if self._now() >= self._resume_until:
            self._end(too_late("session", self._last_error))
            return None
        outbox = self._open_stream()
        try:
            self._call = open_call(outbox)
        except (ValueError, grpc.RpcError) as error:  # the channel was closed
            self._end(f"could not resume: {error}")
            return None
        return self._call

