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
from typing import Any, Callable, Deque, Dict, Optional, Sequence, Union

import grpc
from leasehold.v1 import session_pb2

from .errors import NotAcquired, STATUS_CODES, describe, resumable, session_failure
from .lost import LostReason, code_of, of_failure
from .options import lease_mode, millis
from .validity import (FIRST_PAUSE, LAST_PAUSE, LATE_ELECTED, SILENT, Belief, pause, too_late,
                       vouched_until)

_log = logging.getLogger("leasehold_client")

WAITING, HELD, OVER = "waiting", "held", "over"
_CLOSE = session_pb2.SessionRequest(close=session_pb2.SessionClose())


def release_request(member_id: int) -> session_pb2.SessionRequest:
    return session_pb2.SessionRequest(release=session_pb2.SessionRelease(id=member_id))

class Member(Belief):
    """One lease of a session (a lock or a campaign), as its session tracks it. Every field is
    the session's to change (under its lock, for threads); its holder reads them."""

    #: "lock" or "election", for messages.
    what = "lock"

    def __init__(self, member_id: int, name: str, request: session_pb2.SessionRequest,
                 lost: Any, more_names: Sequence[str] = (), max_hold: float = 0.0):
        super().__init__(lost, (name, *more_names), max_hold)  # ``lost``: when it alone is lost
        self.id = member_id
        self.name = name
        self.lost_reason: Optional[str] = None
        self.request = request  # as sent first; a campaign's value is the last proclaimed
        self.state = WAITING
        self.failure: Optional[Exception] = None  # why it was never held
        self.releasing = False

    def resume_request(self) -> session_pb2.SessionRequest:
        request = session_pb2.SessionRequest()
        request.CopyFrom(self.request)
        getattr(request, request.WhichOneof("action")).resume_token = self.token
        return request

    def on_held(self) -> None:
        """Called when it is first held."""

    def on_resumed(self, session: "SessionCore") -> None:
        """Called when a new stream took it back."""

    def not_had(self, reason: str) -> Exception:
        return NotAcquired(f"lock {self.name!r}: {reason}")

    def still_held(self) -> bool:
        """Once let go: whether it was held until then (not lost)."""
        return self.was_held and not self.lost.is_set()


class CandidateMember(Member):
    """A campaign on a session: its term, and what its proclaims have published."""

    what = "election"
    late = LATE_ELECTED

    def __init__(self, member_id: int, name: str, request: session_pb2.SessionRequest,
                 lost: Any):
        super().__init__(member_id, name, request, lost)
        self.term: Optional[int] = None
        self.sent = 0  # proclaims asked for
        self.published = 0  # the last of them confirmed
        self.in_flight: Deque[int] = deque()  # proclaims sent on this stream, unanswered
        self.resent = 0  # the proclaim a resume's campaign carries

    def on_held(self) -> None:
        self.term = self.fencing_token

    def on_resumed(self, session: "SessionCore") -> None:
        self.published = max(self.published, self.resent)
        if self.sent > self.resent:  # proclaimed while the resume was on its way
            session.proclaim(self)

    def not_had(self, reason: str) -> Exception:
        return RuntimeError(f"election {self.name!r}: {reason}")

    def elected_term(self) -> int:
        """Once out of line: its term, or why it never led (raised)."""
        if self.failure is not None:
            raise self.failure
        return self.fencing_token

    def publish(self, value: bytes) -> int:
        """Takes ``value`` to proclaim (``SessionCore.proclaim`` sends it); returns which
        proclaim it is, for ``published``. Only while leading."""
        if self.state != HELD:
            raise RuntimeError(f"election {self.name!r}: not leading"
                               + (f" ({self.lost_reason})" if self.lost_reason else ""))
        self.request.campaign.value = value
        self.sent += 1
        return self.sent

    def not_published(self) -> Exception:
        return RuntimeError(f"leadership lost: {self.lost_reason}")


class SessionCore:
    """A session's state and rules; see the module's comment. Its driver gives it the clock
    (``now``), events and queues of its model (``new_event``, ``new_queue``), a way to wake
    whoever waits for a change (``notify``), a timer (``schedule``: call ``tick`` at that time,
    or at none) and ``abort`` (stop the stream, or the attempt to open one, in flight: the
    session is over)."""

    def __init__(self, ttl: float, resume_grace: float, holder: str, auto_resume: bool, *,
                 now: Callable[[], float], new_event: Callable[[], Any],
                 new_queue: Callable[[], Any], notify: Callable[[], None],
                 schedule: Callable[[Optional[float]], None], abort: Callable[[], None]):
        self._now, self._new_event, self._new_queue = now, new_event, new_queue
        self._notify, self._schedule, self._abort = notify, schedule, abort
        open_ = session_pb2.SessionOpen(ttl_ms=millis(ttl), resume_grace_ms=millis(resume_grace),
                                        holder=holder)
        self._open_request = session_pb2.SessionRequest(open=open_)
        self._grace = resume_grace
        self._auto_resume = auto_resume and open_.resume_grace_ms > 0
        self._members: Dict[int, Member] = {}
        self._next_id = 0
        self._outbox: Any = None  # the live stream's requests; None between streams
        self.call: Any = None
        self._opened = 0.0  # when the live stream was opened: what valid_to_ms counts from
        self._heard = False  # the live stream said something
        self._established = False  # some stream said something: a break is worth resuming
        self.over = False
        self.error: Optional[grpc.RpcError] = None
        self._closing = False
        self._close_sent = False
        self._resuming = False  # from a break until the new stream says something
        self._resume_until = 0.0
        self._last_error = ""
        self._delay = FIRST_PAUSE
        self._armed_at: Optional[float] = None  # when the timer is set for
        self.resumes = 0
        self.lost = self._new_event()
        self.lost_reason: Optional[str] = None
        self.lost_code: Optional[LostReason] = None

    # Requests.
    def _send(self, request: session_pb2.SessionRequest) -> None:
        if self._outbox is not None:  # else the next stream sends what is still needed
            self._outbox.put_nowait(request)

    def open_stream(self) -> Any:
        """The requests of a new stream: `open`, then every lease again (a held one with its
        token, a waiting one afresh)."""
        outbox = self._new_queue()
        outbox.put_nowait(self._open_request)
        for member in sorted(self._members.values(), key=lambda m: m.id):
            if member.state == HELD:
                member.resuming = True
                if isinstance(member, CandidateMember):
                    member.resent = member.sent
                    member.in_flight.clear()
                outbox.put_nowait(member.resume_request())
            elif member.releasing:  # gave up waiting between streams
                self._finish(member, False)
            else:
                outbox.put_nowait(member.request)
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
                and not any(member.resuming for member in self._members.values())):
            self._close_sent = True
            self._outbox.put_nowait(_CLOSE)
            self._outbox.put_nowait(None)  # half-close
            self._outbox = None

    def usable(self) -> None:
        if self.over:
            if self.error is not None:
                raise self.error
            raise RuntimeError(f"session over: {self.lost_reason or 'closed'}")
        if self._closing:
            raise RuntimeError("session closed")

    def acquire(self, names: Sequence[str], wait: float, holder: str, fair: bool, limit: int,
                shared: bool, lock_delay: float = 0.0, max_hold: Optional[float] = None) -> Member:
        """A lock (``names``: its name, then any more held with it, all or none) to take on the
        session, its request sent (or the next stream's). Its ``max_hold`` counts from now,
        no later than the request is sent."""
        member_id = self._take_id()
        name, *more_names = names
        member = Member(member_id, name, session_pb2.SessionRequest(
            acquire=session_pb2.SessionAcquire(
                id=member_id, name=name, more_names=more_names, wait_ms=millis(wait),
                holder=holder, fair=fair, limit=limit, mode=lease_mode(shared),
                lock_delay_ms=millis(lock_delay), max_hold_ms=millis(max_hold or 0))),
            self._new_event(), more_names, max_hold or 0.0)
        member.acquire_sent(self._now())
        return self._add(member)

    def campaign(self, election: str, value: bytes) -> CandidateMember:
        """A campaign on the session, its request sent (or the next stream's)."""
        member_id = self._take_id()
        return self._add(CandidateMember(member_id, election, session_pb2.SessionRequest(
            campaign=session_pb2.SessionCampaign(id=member_id, election=election, value=value)),
            self._new_event()))

    def _add(self, member: Any) -> Any:
        self.usable()
        self._members[member.id] = member
        self._send(member.request)
        return member

    def _take_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def let_go(self, member: Member) -> None:
        """Asks for one lease to be released (or its wait given up)."""
        if member.state == OVER or member.releasing:
            return
        member.releasing = True
        if not member.resuming:  # else once its resume is answered
            self._send(release_request(member.id))

    def proclaim(self, member: CandidateMember) -> None:
        if member.resuming or self._outbox is None:
            return  # the resume carries the last value, or its answer sends it
        member.in_flight.append(member.sent)
        self._send(session_pb2.SessionRequest(proclaim=session_pb2.SessionProclaim(
            id=member.id, value=member.request.campaign.value)))

    def begin_close(self) -> None:
        if not self.over:
            self._closing = True
            self._close_if_due()

    # Endings.
    def _finish(self, member: Member, was_held: bool) -> None:
        """A lease let go at our request (or by the session's close)."""
        if member.state == OVER:
            return
        if member.state == WAITING:
            member.failure = member.not_had("released while waiting")
        member.state = OVER
        member.was_held = was_held
        self._members.pop(member.id, None)

    def _drop(self, member: Member, reason: str, error: Optional[Exception] = None, *,
              tell: bool = True, code: Optional[LostReason] = None) -> None:
        """A lease that is no longer ours: lost if it was held (``code``: the server's, else
        read from ``error``), failed if not. ``tell``: the server may still hold it (we gave up
        on it), so it is released there too."""
        if member.state == OVER:
            return
        was = member.state
        member.state = OVER
        self._members.pop(member.id, None)
        if was == WAITING:
            member.failure = error or member.not_had(reason)
        elif not member.releasing:
            member.lost_reason = reason
            member.lost_code = code if code is not None else of_failure(error)
            member.lost.set()
            _log.info("%s %r lost: %s", member.what, member.name, reason)
        if tell:
            self._send(release_request(member.id))

    def end(self, reason: str, *, closed: bool = False, error: Optional[grpc.RpcError] = None,
             abort: bool = False, code: Optional[LostReason] = None) -> None:
        """The session is over: closed at our request, or lost (every lease with it; ``code``
        as for ``_drop``)."""
        if self.over:
            return
        self.over, self.error = True, error
        outbox, self._outbox = self._outbox, None
        for member in tuple(self._members.values()):
            if closed:
                self._finish(member, member.state == HELD)
            else:
                self._drop(member, reason, error, code=code)
        if outbox is not None:
            outbox.put_nowait(None)
        if not closed and not self._closing:
            self.lost_reason = reason
            self.lost_code = code if code is not None else of_failure(error)
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
                     if member.state == HELD]
        if self._resuming:
            deadlines.append(self._resume_until)
        when = min(deadlines) if deadlines else None
        if when != self._armed_at:  # most answers change nothing: no new timer for them
            self._armed_at = when
            self._schedule(when)

    def tick(self) -> None:
        """The timer: leases past their validity are lost, by this process's clock."""
        self._armed_at = None  # fired
        if self.over:
            return
        now = self._now()
        for member in tuple(self._members.values()):
            if member.state == HELD and member.valid_until <= now:
                reason, code = member.ran_out("lease", self._last_error, SILENT)
                self._drop(member, reason, code=code)
        if self._resuming and now >= self._resume_until:
            self.end(too_late("session", self._last_error), abort=True)
            return
        self._rearm()
        self._close_if_due()
        self._notify()

    # The server's answers.
    def hear(self, event: session_pb2.SessionResponse) -> bool:
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
                if held.state == HELD and not held.resuming:
                    held.believe_until(valid_until)
        elif kind == "acquired":
            self._acquired(member, event.acquired, received)
        elif kind == "proclaimed":
            if isinstance(member, CandidateMember) and member.in_flight:
                member.published = max(member.published, member.in_flight.popleft())
        elif kind == "released":
            if member is not None:
                self._finish(member, event.released.was_held)
        elif kind == "lease_lost":
            if member is not None:
                self._drop(member, event.lease_lost.reason, tell=False,
                           code=code_of(event.lease_lost))
        elif kind == "failed":
            if member is not None:
                self._failed(member, event.failed)
        elif kind == "closed":
            self.end("closed", closed=True)
            return True
        elif kind == "lost":
            self.end(event.lost.reason, code=code_of(event.lost))
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
        if member.state == WAITING:
            late = member.take(answer, valid_until, received)
            if late is not None:
                # Held up on its way: it may be someone else's by now. Not a lease.
                self._drop(member, late)
                return
            member.state = HELD
            member.on_held()
        elif member.resuming:
            mismatch = member.retake(answer, valid_until, received)
            if mismatch is not None:
                self._drop(member, mismatch)
                return
            member.on_resumed(self)
            _log.info("%s %r resumed on the session (fencing token %d)", member.what,
                      member.name, member.fencing_token)
        if member.releasing:  # let go while it was on its way
            self._send(release_request(member.id))

    def _failed(self, member: Member, failed: session_pb2.SessionFailed) -> None:
        error = session_failure(failed)
        if member.state == WAITING:
            self._drop(member, failed.message, error, tell=False)
        elif member.releasing:
            self._finish(member, False)
        else:
            code = STATUS_CODES.get(failed.code, grpc.StatusCode.UNKNOWN).name
            prefix = "could not resume: " if member.resuming else ""
            self._drop(member, f"{prefix}{code} {failed.message}", tell=False,
                       code=of_failure(error))

    # Breaks.
    def broke(self, error: Union[grpc.RpcError, str]) -> Optional[float]:
        """Decides what a broken stream means: None when the session is over, else how long to
        pause before the next stream."""
        outbox, self._outbox, self.call = self._outbox, None, None
        if outbox is not None:
            outbox.put_nowait(None)
        if self.over:
            return None
        if not self._auto_resume or not self._established or not resumable(error):
            if isinstance(error, grpc.RpcError):
                self.end(f"session stream failed: {describe(error)}", error=error)
            else:
                self.end(error)
            return None
        now = self._now()
        wait = 0.0
        if self._heard or not self._resuming:  # a stream that worked: a break of its own
            held = [m.valid_until for m in self._members.values() if m.state == HELD]
            self._resume_until = max([now + self._grace, *held])
            self._delay = FIRST_PAUSE
        else:  # the last attempt got nowhere
            wait = pause(self._delay, self._resume_until, now)
            self._delay = min(self._delay * 2, LAST_PAUSE)
        self._resuming = True
        self._last_error = describe(error)
        for member in self._members.values():
            if member.state == HELD:
                member.resuming = True
        _log.info("session stream broke (%s); resuming it", self._last_error)
        self._rearm()
        return wait

    def reopen(self, open_call: Callable[[Any], Any]) -> Any:
        """Opens the next stream after a break (``open_call`` makes the call from its requests),
        or returns None when the session is over."""
        if self.over:
            return None
        if self._now() >= self._resume_until:
            self.end(too_late("session", self._last_error))
            return None
        outbox = self.open_stream()
        try:
            self.call = open_call(outbox)
        except (ValueError, grpc.RpcError) as error:  # the channel was closed
            self.end(f"could not resume: {error}")
            return None
        return self.call

