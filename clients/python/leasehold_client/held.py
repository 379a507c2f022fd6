"""The state of one lease or leadership held by its own stream (``LockService.Lease``,
``ElectionService.Campaign``), free of I/O: which request to send, what each answer means, until
when it may be believed, and what a broken stream decides (resume it, release by token, or
over). ``LeaseHeld`` and ``LeadershipHeld`` are its two kinds.

It never blocks, reads no stream and starts no timer: its driver does (``threads.HeldThread``
for ``Lease`` and ``Candidate``, ``aio_tasks.HeldTask`` for their asyncio twins). The driver gives
it the clock (``now``), a timer (``schedule``: call ``expired`` at that time, or at none), a way
to wake its waiters (``notify``) and the ``lost`` event (a ``threading`` or an ``asyncio`` one),
and, with threads, holds a lock around every call. It is a ``validity.Belief``, as a session's
leases are (``session_core.Member``, many to one stream): the same token, fencing token and
validity, taken and taken back by the same rule.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional, Sequence

import grpc
from leasehold.v1 import election_pb2, lock_pb2

from .errors import Break, describe, resumable
from .lost import LostReason, code_of, of_failure
from .validity import (FIRST_PAUSE, LAST_PAUSE, LATE_ELECTED, LEADER_SILENT, SILENT, Belief,
                       other_leadership, pause, vouched_until)

_log = logging.getLogger("leasehold_client")

#: What ``broke``, ``attempt`` and ``answered`` decide: resume (again), release the lease with
#: the unary call by its token (a release was asked between two streams), or nothing more.
RESUME, RETRY, RELEASE, OVER = "resume", "retry", "release", "over"
#: What ``heard`` says of the stream: it carries on (None), said its last word (``DONE``), or
#: must be cancelled (``CANCEL``: news that came too late; the cancelled stream lets go).
DONE, CANCEL = "done", "cancel"


class Held(Belief):
    """What both kinds share; see the module's comment."""

    #: What is held, for messages: "lease" or "leadership"; ``label`` names it in the log.
    what = "lease"
    label = "lease"
    #: The stream, for messages: "lease" or "campaign"; ``ended``: how it broke when it just
    #: ended, without its last word.
    stream = "lease"
    ended = "the server ended the lease stream"
    #: The answer that holds it, on the first stream and on a resume: "acquired" or "elected".
    answer = "acquired"
    #: Why it is lost when the server stopped confirming it.
    silent = SILENT
    #: A release asked between two streams is sent by token (a lease), rather than on the
    #: stream that resumes (a campaign's resign).
    releases_by_token = True

    def __init__(self, name: str, *, auto_resume: bool, clocked: bool, lost: Any,
                 now: Callable[[], float], schedule: Callable[[Optional[float]], None],
                 notify: Callable[[], None] = lambda: None, more_names: Sequence[str] = (),
                 max_hold: float = 0.0):
        # ``lost``: set when it is lost (not when it is let go)
        super().__init__(lost, (name, *more_names), max_hold)
        self.name = name
        #: When the live stream was opened: what ``valid_to_ms`` counts from.
        self.opened = 0.0
        #: Lost, let go or failed: nothing more is believed or decided.
        self.over = False
        self.reason: Optional[str] = None
        self.error: Optional[grpc.RpcError] = None
        #: ``release()`` or ``resign()`` was asked.
        self.letting_go = False
        self.last_error = ""
        self._auto_resume = auto_resume
        #: Whether the server confirms every renewal (``extended``), so that this process's
        #: clock ends the belief when they stop; without (a campaign with no grace), it cannot.
        self.clocked = clocked
        self._delay = FIRST_PAUSE
        self.now = now
        self._schedule = schedule
        self.notify = notify

    # What a kind says.
    def start_request(self, resume_token: str) -> Any:
        """The first request of a stream: to hold it, or to take it back by its token."""
        raise NotImplementedError

    def stop_request(self) -> Any:
        """The request that lets it go on its stream."""
        raise NotImplementedError

    def heard(self, event: Any, received: float) -> Optional[str]:
        """Applies one answer of the live stream: None, ``DONE`` or ``CANCEL``."""
        raise NotImplementedError

    def may_resume(self) -> bool:
        return True

    def resumed(self) -> None:
        """Called when a new stream took it back."""

    def log_lost(self, reason: str) -> None:
        _log.info("lease %r lost: %s", self.name, reason)

    # Validity.
    def vouch(self, valid_until: float) -> None:
        """Believed until ``valid_until`` (never past the ceiling): the driver's timer calls
        ``expired`` then."""
        self.believe_until(valid_until)
        self._schedule(self.valid_until if self.clocked else None)

    def first(self, answer: Any, received: float) -> Optional[str]:
        """Takes the first stream's ``acquired`` or ``elected``; why it cannot be believed (it
        came too late, or does not cover every name: the stream must be cancelled), or None
        once held. The first stream's opening is when its acquire was sent: the ceiling of
        ``max_hold`` counts from then."""
        self.acquire_sent(self.opened)
        late = self.take(answer, vouched_until(self.opened, received, answer), received)
        if late is None:
            self.vouch(self.valid_until)
        return late

    def believed(self) -> bool:
        """Whether it is held as far as this process knows: not over, not being let go and, if
        clocked, the validity last confirmed not run out by this process's clock (read here, not
        only by the timer: a process woken from a freeze answers False at once)."""
        return (not self.over and not self.letting_go
                and (not self.clocked or self.now() < self.valid_until))

    def expired(self) -> bool:
        """The timer: nothing confirmed it in time. True if an attempt to resume is in flight
        (the driver stops it)."""
        if self.over:
            return False
        reason, code = self.ran_out(self.what, self.last_error, self.silent)
        self.end(reason, code=code)
        return self.resuming

    # Endings.
    def end(self, reason: Optional[str], error: Optional[grpc.RpcError] = None, *,
            lost: bool = True, code: Optional[LostReason] = None) -> None:
        """Over: lost (``reason``; ``code`` the server's, else read from ``error``), or let go
        (``lost=False``)."""
        if self.over:
            return
        self.over, self.reason, self.error = True, reason, error
        self._schedule(None)
        if lost and reason is not None:
            self.lost_code = code if code is not None else of_failure(error)
            self.lost.set()
            self.log_lost(reason)
        self.notify()

    def released(self, was_held: Optional[bool]) -> None:
        """Released by its token, between two streams: ``was_held``, or None if that failed (it
        expires by itself)."""
        if was_held is not None:
            self.was_held = was_held
        self.end(None, lost=False)

    def watch_ended(self) -> None:
        """The driver stopped reading streams (for good)."""
        self.end(None, lost=False)

    # Letting go.
    def let_go(self) -> bool:
        """``release()`` or ``resign()``: True the first time (send ``stop_request`` on the live
        stream, if there is one, and half-close it)."""
        if self.letting_go:
            return False
        self.letting_go = True
        return True

    # Breaks and resumes.
    def broke(self, error: Break) -> str:
        """The live stream ended without its last word: ``RESUME``, ``RELEASE`` or ``OVER``."""
        if self.over:
            return OVER
        if self.letting_go and self.releases_by_token:
            return RELEASE  # its release may never have arrived
        if not self.may_resume() or not self._auto_resume or not resumable(error):
            if isinstance(error, grpc.RpcError):
                self.end(f"{self.stream} stream failed: {describe(error)}", error)
            else:
                self.end(error)
            return OVER
        self.resuming = True
        self.last_error = describe(error)
        self._delay = FIRST_PAUSE
        _log.info("%s %r: stream broke (%s); resuming the %s", self.label, self.name,
                  self.last_error, self.what)
        return RESUME

    def attempt(self) -> Optional[Any]:
        """The request of the next attempt to resume, or None: over, or ``RELEASE`` is due
        (``letting_go``)."""
        if self.over or (self.letting_go and self.releases_by_token):
            return None
        if self.now() >= self.valid_until:
            reason, code = self.ran_out(self.what, self.last_error, self.silent)
            self.end(reason, code=code)
            return None
        return self.start_request(self.token)

    def answered(self, answer: Any, failure: Any, opened: float, received: float) -> str:
        """What an attempt's stream said: ``answer`` (the field ``answer``), or ``failure`` (the
        server's ``lost`` as ``("lost", message)``, the call's error, or a sentence).
        ``RESUME``: held again on that stream (send ``stop_request`` on it if ``letting_go``);
        ``OVER``: cancel it; for a failure, ``RELEASE``, ``OVER`` or ``RETRY`` (after
        ``retry_pause()``)."""
        if self.over:
            return OVER
        if answer is not None:
            mismatch = self.retake(answer, vouched_until(opened, received, answer), received)
            if mismatch is not None:
                self.end(mismatch)
                return OVER
            self.opened = opened
            self.vouch(self.valid_until)
            self.resumed()
            _log.info("%s %r: %s resumed (fencing token %d)", self.label, self.name, self.what,
                      self.fencing_token)
            self.notify()
            return RESUME
        if isinstance(failure, tuple):
            self.end(failure[1].reason, code=code_of(failure[1]))  # the server said `lost`
            return OVER
        if not resumable(failure):
            self.end(f"could not resume: {describe(failure)}", code=of_failure(failure))
            return OVER
        self.last_error = describe(failure)
        if self.letting_go and self.releases_by_token:
            return RELEASE
        return RETRY

    def retry_pause(self) -> float:
        """How long to wait before the next attempt (jittered, doubling, not past validity)."""
        wait = pause(self._delay, self.valid_until, self.now())
        self._delay = min(self._delay * 2, LAST_PAUSE)
        _log.debug("%s %r: resume failed (%s); again in %.3f s", self.label, self.name,
                   self.last_error, wait)
        return wait


class LeaseHeld(Held):
    """A lock held by a Lease stream."""

    def __init__(self, request: lock_pb2.LeaseAcquire, **model: Any):
        super().__init__(request.name, clocked=True, more_names=request.more_names,
                         max_hold=request.max_hold_ms / 1000, **model)
        self._request = request

    def start_request(self, resume_token: str) -> lock_pb2.LeaseRequest:
        request = lock_pb2.LeaseAcquire()
        request.CopyFrom(self._request)
        if resume_token:
            request.resume_token = resume_token
        return lock_pb2.LeaseRequest(acquire=request)

    def stop_request(self) -> lock_pb2.LeaseRequest:
        return lock_pb2.LeaseRequest(release=lock_pb2.LeaseRelease())

    def release_request(self) -> lock_pb2.ReleaseRequest:
        """The unary release by token, of every name (a release asked between two streams)."""
        return lock_pb2.ReleaseRequest(name=self.name, token=self.token,
                                       more_names=self.names[1:])

    def heard(self, event: lock_pb2.LeaseResponse, received: float) -> Optional[str]:
        kind = event.WhichOneof("event")
        if kind == "extended":
            self.vouch(vouched_until(self.opened, received, event.extended))
        elif kind == "lost":
            self.end(event.lost.reason, code=code_of(event.lost))
            return DONE
        elif kind == "released":
            self.was_held = event.released.was_held
            self.end(None, lost=False)
            return DONE
        return None


class LeadershipHeld(Held):
    """A candidacy on a Campaign stream, and the leadership once elected: its term (None before),
    and what its proclaims have published."""

    what = "leadership"
    label = "election"
    stream = "campaign"
    ended = "the campaign stream ended"
    answer = "elected"
    silent = LEADER_SILENT
    late = LATE_ELECTED
    releases_by_token = False  # the stream that resumes resigns

    def __init__(self, election: str, value: bytes, ttl_ms: int, grace_ms: int,
                 auto_resume: bool, **model: Any):
        super().__init__(election, auto_resume=auto_resume and grace_ms > 0,
                         clocked=grace_ms > 0, **model)
        self.term: Optional[int] = None
        self._value = value  # the value to publish: the last proclaimed, or asked for
        self._ttl_ms = ttl_ms
        self._grace_ms = grace_ms
        self.sent = 0  # proclaims asked for
        self.published = 0  # proclaims confirmed

    def start_request(self, resume_token: str) -> election_pb2.CampaignRequest:
        return election_pb2.CampaignRequest(start=election_pb2.CampaignStart(
            election=self.name, value=self._value, ttl_ms=self._ttl_ms,
            resume_token=resume_token, resume_grace_ms=self._grace_ms))

    def stop_request(self) -> election_pb2.CampaignRequest:
        return election_pb2.CampaignRequest(resign=election_pb2.Resign())

    def number(self, answer: election_pb2.Elected) -> int:
        return answer.term

    def heard(self, event: election_pb2.CampaignResponse, received: float) -> Optional[str]:
        kind = event.WhichOneof("event")
        outcome = None
        if kind == "elected":
            late = self.first(event.elected, received)
            if late is not None:
                # Held up on its way: another may lead by now. Not a leadership: ended as a
                # lost one is, its stream cancelled.
                _log.info("election %r: %s", self.name, late)
                self.end(late)
                return CANCEL
            self.term = self.fencing_token
        elif kind == "extended":
            self.vouch(vouched_until(self.opened, received, event.extended))
        elif kind == "proclaimed":
            self.published = min(self.published + 1, self.sent)
        elif kind == "lost":
            self.end(event.lost.reason, code=code_of(event.lost))
            outcome = DONE
        elif kind == "resigned":
            if not self.over:
                self.was_held = event.resigned.was_leader
            self.end("resigned", lost=False)
            outcome = DONE
        self.notify()
        return outcome

    def other(self, answer: election_pb2.Elected) -> Optional[str]:
        return other_leadership(self.term, answer)

    def may_resume(self) -> bool:
        return self.term is not None

    def resumed(self) -> None:
        self.published = self.sent  # the start published the last value

    def log_lost(self, reason: str) -> None:
        if self.term is not None:
            _log.info("election %r: leadership lost: %s", self.name, reason)

    def believed(self) -> bool:
        return self.term is not None and super().believed()

    def watch_ended(self) -> None:
        self.end("the campaign stream ended")

    def proclaim(self, value: bytes) -> Optional[election_pb2.CampaignRequest]:
        """Asks to publish ``value``: the request to send on the live stream (a resumed one
        publishes it anyway), or None when over."""
        if self.over:
            return None
        self._value = value
        self.sent += 1
        return election_pb2.CampaignRequest(proclaim=election_pb2.Proclaim(value=value))

    def not_elected(self) -> Exception:
        """What ``elected()`` raises for a candidacy over before it led."""
        return self.error or RuntimeError(f"election {self.name!r}: {self.reason}")

    def not_published(self) -> Exception:
        """What ``proclaim()`` raises for a leadership over before its value was published."""
        return self.error or RuntimeError(f"leadership lost: {self.reason}")

