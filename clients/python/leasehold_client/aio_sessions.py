"""Sessions for asyncio: many locks and campaigns on one Session stream (``session``), the twin
of ``sessions``: a task reads the stream and the event loop's timer keeps the clock for the
I/O-free ``session_core.SessionCore``."""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Optional, Sequence

from grpc import aio
from leasehold.v1 import session_pb2_grpc

from .aio_channels import own_channel
from .aio_tasks import Alarm, Failure, Waiters, nap, read_stream, read_streams, requests
from .options import DEFAULT_SERVER, grace, lock_names
from .session_core import OVER, WAITING, CandidateMember, Member, SessionCore
from .views import HeldOnSession, Read, SessionView

_log = logging.getLogger("leasehold_client")


class AsyncSessionLease(HeldOnSession):
    """A lock held on a session. Use ``session.lock(...)`` or ``await session.acquire(...)``.

    As ``leasehold_client.SessionLease``, with ``lost`` an ``asyncio.Event``.
    """

    def __init__(self, session: "AsyncSession", member: Member):
        self._session = session
        self._member = member

    @property
    def lost(self) -> asyncio.Event:
        return self._member.lost

    async def release(self, timeout: float = 10.0) -> bool:
        """Releases the lock (the session goes on); returns True if it was still held."""
        return await self._session._let_go(self._member, timeout)


class AsyncSessionCandidate(HeldOnSession):
    """A campaign on a session. Use ``session.campaign(...)``.

    ``term`` is the term once elected; ``resumes`` counts the leadership's resumptions.
    """

    _member: CandidateMember

    def __init__(self, session: "AsyncSession", member: CandidateMember):
        self._session = session
        self._member = member
        self._until = session._waiters.until

    term = Read("_member")

    async def elected(self) -> int:
        """Waits in line until this candidate leads; returns its term."""
        member = self._member
        await self._until(lambda: member.state != WAITING)
        return member.elected_term()

    async def proclaim(self, value: bytes) -> None:
        """Publishes a new value while leading."""
        member = self._member
        sent = member.publish(value)
        self._session._core.proclaim(member)
        await self._until(lambda: member.published >= sent or member.state == OVER)
        if member.published < sent:
            raise member.not_published()

    async def lost(self) -> str:
        """Waits until the leadership (or the candidacy) is over; returns why it was lost ("" if
        it was resigned)."""
        await self._until(lambda: self._member.state == OVER)
        return self._member.lost_reason or ""

    async def resign(self, timeout: float = 10.0) -> bool:
        """Steps down (or leaves the line); True if this candidate was leading."""
        return await self._session._let_go(self._member, timeout)


class AsyncSession(SessionView):
    """Many leases on one Session stream. Use ``session(...)``: as
    ``leasehold_client.Session``, with ``lost`` an ``asyncio.Event``."""

    def __init__(self, stub: session_pb2_grpc.SessionServiceStub, ttl: float, *,
                 resume_grace: float, holder: str = "", auto_resume: bool = True):
        self._stub = stub
        self._waiters = Waiters()
        self._wake = asyncio.Event()
        self._watcher: Optional[asyncio.Task] = None
        self._core = SessionCore(
            ttl, resume_grace, holder, auto_resume, now=self._now, new_event=asyncio.Event,
            new_queue=asyncio.Queue, notify=self._waiters.changed, schedule=self._schedule,
            abort=self._abort)
        self._alarm = Alarm(self._core.tick)

    def _begin(self) -> None:
        core = self._core
        core.call = self._stub.Session(requests(core.open_stream()))
        self._watcher = asyncio.get_running_loop().create_task(self._watch(core.call))

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    def _schedule(self, when: Optional[float]) -> None:
        self._alarm.set(when)

    def _abort(self) -> None:
        self._wake.set()
        if self._watcher is not None and self._watcher is not asyncio.current_task():
            self._watcher.cancel()  # stops the stream or the attempt in flight

    async def _watch(self, call: Any) -> None:
        core = self._core
        try:
            await read_streams(call, self._follow, self._after_break, core.end, "session")
        finally:
            if core.call is not None:
                core.call.cancel()
            core.end("the session stream ended")

    async def _follow(self, call: Any) -> Optional[Failure]:
        return await read_stream(call, self._core.hear, "the server ended the session stream")

    async def _after_break(self, error: Failure) -> Any:
        pause = self._core.broke(error)  # type: ignore[arg-type]
        if pause is None:
            return None
        if pause:
            await nap(self._wake, pause)
        return self._core.reopen(lambda outbox: self._stub.Session(requests(outbox),
                                                                   wait_for_ready=True))

    async def _let_go(self, member: Member, timeout: float) -> bool:
        """Releases one lease (or gives up its wait, or resigns); whether it was held."""
        self._core.let_go(member)
        await self._waiters.until_or_timeout(lambda: member.state == OVER, timeout)
        return member.still_held()

    async def acquire(self, name: Optional[str] = None, *,
                      names: Optional[Sequence[str]] = None, wait: float = 0.0,
                      holder: str = "", fair: bool = True, limit: int = 1,
                      shared: bool = False, lock_delay: float = 0.0,
                      max_hold: Optional[float] = None) -> AsyncSessionLease:
        """Takes lock ``name`` (or every one of ``names``) on the session and returns it held,
        until ``release()`` or the session's end: as ``leasehold_client.Session.acquire``."""
        member = self._core.acquire(lock_names(name, names), wait, holder, fair, limit, shared,
                                    lock_delay, max_hold)
        try:
            await self._waiters.until(lambda: member.state != WAITING)
        except asyncio.CancelledError:
            self._core.let_go(member)  # no one will hold it
            raise
        if member.failure is not None:
            raise member.failure
        return AsyncSessionLease(self, member)

    @asynccontextmanager
    async def lock(self, name: Optional[str] = None, *, names: Optional[Sequence[str]] = None,
                   wait: float = 0.0, holder: str = "", fair: bool = True, limit: int = 1,
                   shared: bool = False, lock_delay: float = 0.0,
                   max_hold: Optional[float] = None) -> AsyncIterator[AsyncSessionLease]:
        """Holds lock ``name`` (or ``names``) on the session for the ``async with`` block."""
        held = await self.acquire(name, names=names, wait=wait, holder=holder, fair=fair,
                                  limit=limit, shared=shared, lock_delay=lock_delay,
                                  max_hold=max_hold)
        try:
            yield held
        finally:
            await held.release()

    @asynccontextmanager
    async def campaign(self, election: str,
                       value: bytes) -> AsyncIterator[AsyncSessionCandidate]:
        """Runs for leader of ``election`` on the session for the block; ``await elected()``
        to wait in line. Leaving the block steps down."""
        candidate = AsyncSessionCandidate(self, self._core.campaign(election, value))
        try:
            yield candidate
        finally:
            await candidate.resign()

    async def close(self, timeout: float = 10.0) -> None:
        """Releases every lease on the session and ends it."""
        self._core.begin_close()
        self._wake.set()
        if not await self._waiters.until_or_timeout(lambda: self._core.over, timeout):
            self._core.end("closing timed out", closed=True, abort=True)
        if self._watcher is not None:
            await asyncio.wait({self._watcher}, timeout=timeout)


@asynccontextmanager
async def session(*, server: str = DEFAULT_SERVER, ttl: float = 30.0, holder: str = "",
                  auto_resume: bool = True, resume_grace: Optional[float] = None,
                  channel: Optional[aio.Channel] = None) -> AsyncIterator[AsyncSession]:
    """A session for the ``async with`` block: many locks and campaigns on one stream. The
    options are those of ``leasehold_client.session``; leaving the block releases them all."""
    async with own_channel(server, channel) as chan:
        opened = AsyncSession(session_pb2_grpc.SessionServiceStub(chan), ttl, holder=holder,
                              auto_resume=auto_resume,
                              resume_grace=grace(ttl, resume_grace, auto_resume))
        opened._begin()
        try:
            yield opened
        finally:
            await opened.close()

