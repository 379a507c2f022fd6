"""Sessions, threaded: many locks and campaigns on one Session stream, renewed and confirmed
together (``session``). A watcher thread reads the stream and a ``threading.Timer`` keeps the
clock for the I/O-free ``session_core.SessionCore``, holding ``_changed`` around every call."""

from __future__ import annotations

import logging
import queue
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator, Optional, Sequence

import grpc
from leasehold.v1 import session_pb2_grpc

from .channels import own_channel
from .errors import Break
from .options import DEFAULT_SERVER, grace, lock_names
from .session_core import OVER, WAITING, CandidateMember, Member, SessionCore
from .threads import Alarm, read_stream, read_streams
from .views import HeldOnSession, Read, SessionView

_log = logging.getLogger("leasehold_client")


class SessionLease(HeldOnSession):
    """A lock held on a session. Use ``session.lock(...)`` or ``session.acquire(...)``.

    ``fencing_token`` and ``token`` as for a ``Lease``; ``lost`` (a ``threading.Event``) and
    ``lost_reason`` say whether and why this lease alone was lost (``lost_code``: why, for
    programs, a ``LostReason``); ``resumes`` counts the times
    it was taken back on a new stream; ``valid_until`` is when the validity last confirmed for
    it runs out (``time.monotonic()``).
    """

    def __init__(self, session: "Session", member: Member):
        self._session = session
        self._member = member

    @property
    def lost(self) -> threading.Event:
        return self._member.lost

    def release(self, timeout: float = 10.0) -> bool:
        """Releases the lock (the session goes on); returns True if it was still held."""
        return self._session._let_go(self._member, timeout)


class SessionCandidate(HeldOnSession):
    """A campaign on a session. Use ``session.campaign(...)``.

    ``term`` is the term once elected; ``resumes`` counts the leadership's resumptions.
    """

    _member: CandidateMember

    def __init__(self, session: "Session", member: CandidateMember):
        self._session = session
        self._member = member
        self._changed = session._changed

    term = Read("_member")

    def elected(self) -> int:
        """Waits in line until this candidate leads; returns its term."""
        member = self._member
        with self._changed:
            self._changed.wait_for(lambda: member.state != WAITING)
            return member.elected_term()

    def proclaim(self, value: bytes) -> None:
        """Publishes a new value while leading."""
        member = self._member
        with self._changed:
            sent = member.publish(value)
            self._session._core.proclaim(member)
            self._changed.wait_for(lambda: member.published >= sent or member.state == OVER)
            if member.published < sent:
                raise member.not_published()

    def lost(self) -> str:
        """Waits until the leadership (or the candidacy) is over; returns why it was lost ("" if
        it was resigned)."""
        with self._changed:
            self._changed.wait_for(lambda: self._member.state == OVER)
            return self._member.lost_reason or ""

    def resign(self, timeout: float = 10.0) -> bool:
        """Steps down (or leaves the line); True if this candidate was leading."""
        return self._session._let_go(self._member, timeout)


class Session(SessionView):
    """Many leases on one Session stream, renewed and confirmed together. Use ``session(...)``.

    ``lost`` (a ``threading.Event``) and ``lost_reason`` say whether and why the whole session
    was lost (every lease on it with it), ``lost_code`` why for programs; ``resumes`` counts
    the times its stream was opened again on a server after a break.
    """

    def __init__(self, stub: session_pb2_grpc.SessionServiceStub, ttl: float, *,
                 resume_grace: float, holder: str = "", auto_resume: bool = True):
        self._stub = stub
        # Guards the session and its leases, shared by the watcher thread, the timer and callers.
        self._changed = threading.Condition(threading.RLock())
        self._wake = threading.Event()  # cuts a pause between attempts to resume short
        core = self._core = SessionCore(
            ttl, resume_grace, holder, auto_resume, now=time.monotonic,
            new_event=threading.Event, new_queue=queue.Queue, notify=self._changed.notify_all,
            schedule=self._schedule, abort=self._abort)
        self._alarm = Alarm(self._changed, core.tick)
        with self._changed:
            outbox = core.open_stream()
            core.call = stub.Session(iter(outbox.get, None))
        self._watcher = threading.Thread(target=self._watch, args=(core.call,), daemon=True)
        self._watcher.start()

    def _schedule(self, when: Optional[float]) -> None:
        self._alarm.set(when)

    def _abort(self) -> None:
        self._wake.set()
        if self._core.call is not None:
            self._core.call.cancel()

    def _watch(self, call: Any) -> None:
        try:
            read_streams(call, self._follow, self._after_break, self._crashed, "session")
        finally:
            self._crashed("the session stream ended")

    def _crashed(self, reason: str) -> None:
        with self._changed:
            self._core.end(reason)

    def _follow(self, call: Any) -> Optional[Break]:
        return read_stream(call, self._changed, self._core.hear,
                           "the server ended the session stream")

    def _after_break(self, error: Break) -> Any:
        with self._changed:
            pause = self._core.broke(error)
        if pause is None:
            return None
        if pause:
            self._wake.wait(pause)
            self._wake.clear()
        with self._changed:
            return self._core.reopen(lambda outbox: self._stub.Session(iter(outbox.get, None),
                                                                       wait_for_ready=True))

    def _let_go(self, member: Member, timeout: float) -> bool:
        """Releases one lease (or gives up its wait, or resigns); whether it was held."""
        with self._changed:
            self._core.let_go(member)
            self._changed.wait_for(lambda: member.state == OVER, timeout)
            return member.still_held()

    def acquire(self, name: Optional[str] = None, *, names: Optional[Sequence[str]] = None,
                wait: float = 0.0, holder: str = "", fair: bool = True, limit: int = 1,
                shared: bool = False, lock_delay: float = 0.0,
                max_hold: Optional[float] = None) -> SessionLease:
        """Takes lock ``name`` (or every one of ``names``, all or none) on the session and
        returns it held, until ``release()`` or the session's end. The options are those of
        ``lease()`` (``holder``: the session's if empty; at ``max_hold`` this lease alone is
        lost, with ``LostReason.MAX_HOLD``); NotAcquired if it stays taken, the failed call's
        error for other refusals."""
        with self._changed:
            member = self._core.acquire(lock_names(name, names), wait, holder, fair, limit,
                                        shared, lock_delay, max_hold)
            self._changed.wait_for(lambda: member.state != WAITING)
            if member.failure is not None:
                raise member.failure
            return SessionLease(self, member)

    @contextmanager
    def lock(self, name: Optional[str] = None, *, names: Optional[Sequence[str]] = None,
             wait: float = 0.0, holder: str = "", fair: bool = True, limit: int = 1,
             shared: bool = False, lock_delay: float = 0.0,
             max_hold: Optional[float] = None) -> Iterator[SessionLease]:
        """Holds lock ``name`` (or ``names``) on the session for the ``with`` block (see
        ``acquire``)."""
        held = self.acquire(name, names=names, wait=wait, holder=holder, fair=fair,
                            limit=limit, shared=shared, lock_delay=lock_delay,
                            max_hold=max_hold)
        try:
            yield held
        finally:
            held.release()

    @contextmanager
    def campaign(self, election: str, value: bytes) -> Iterator[SessionCandidate]:
        """Runs for leader of ``election`` on the session for the ``with`` block (in line as
        long as the session lives); call ``elected()`` to wait. Leaving the block steps down."""
        with self._changed:
            candidate = SessionCandidate(self, self._core.campaign(election, value))
        try:
            yield candidate
        finally:
            candidate.resign()

    def close(self, timeout: float = 10.0) -> None:
        """Releases every lease on the session and ends it."""
        with self._changed:
            self._core.begin_close()
            self._wake.set()
            if not self._changed.wait_for(lambda: self._core.over, timeout):
                self._core.end("closing timed out", closed=True, abort=True)
        self._watcher.join(timeout)


@contextmanager
def session(*, server: str = DEFAULT_SERVER, ttl: float = 30.0, holder: str = "",
            auto_resume: bool = True, resume_grace: Optional[float] = None,
            channel: Optional[grpc.Channel] = None) -> Iterator[Session]:
    """A session for the ``with`` block: many locks and campaigns on one stream, renewed and
    confirmed together. Leaving the block releases every lease on it.

        with session(ttl=10, holder="worker-7") as s:
            with s.lock("shard-1") as one, s.lock("shard-2") as two:
                ...

    ``ttl``: every lease's TTL in Redis. ``holder``: the holder of every lock that names none.
    ``auto_resume`` (the default): when the stream breaks, the session is opened again on any
    server and every held lease taken back (same token, same fencing token) before its validity
    runs out; a lease that cannot be is lost alone. ``resume_grace``: how long the server keeps
    the leases after a break (at most ``ttl``); default ``ttl`` with ``auto_resume``, else 0.
    Each lease's ``lost`` is set when it alone is lost (its key deleted or taken), when the
    session is, or when the validity last confirmed runs out by this process's clock.
    """
    with own_channel(server, channel) as chan:
        opened = Session(session_pb2_grpc.SessionServiceStub(chan), ttl, holder=holder,
                         auto_resume=auto_resume,
                         resume_grace=grace(ttl, resume_grace, auto_resume))
        try:
            yield opened
        finally:
            opened.close()
