"""Sessions for asyncio: many locks and campaigns on one Session stream (``session``), the twin
of ``sessions``: a task reads the stream and the event loop's timer keeps the clock for the
I/O-free ``session_core.SessionCore``."""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Optional

from grpc import aio
from leasehold.v1 import session_pb2_grpc

from .aio_channels import own_channel
from .aio_tasks import Alarm, Failure, Waiters, nap, read_stream, read_streams, requests
from .options import DEFAULT_SERVER, grace
from .session_core import HELD, OVER, WAITING, CandidateMember, Member, SessionCore

_log = logging.getLogger("leasehold_client")


class AsyncSessionLease(Member):
    """A lock held on a session. Use ``session.lock(...)`` or ``await session.acquire(...)``.

    As ``leasehold_client.SessionLease``, with ``lost`` an ``asyncio.Event``.
    """

    _session: "AsyncSession"

    @property
    def lost(self) -> asyncio.Event:
        return self._lost_event

    async def release(self, timeout: float = 10.0) -> bool:
        """Releases the lock (the session goes on); returns True if it was still held."""
        self._session._let_go(self)
        await self._session._until_or_timeout(lambda: self._state == OVER, timeout)
        return self._was_held and not self._lost_event.is_set()


class AsyncSessionCandidate(CandidateMember):
    """A campaign on a session. Use ``session.campaign(...)``.

    ``term`` is the term once elected; ``resumes`` counts the leadership's resumptions.
    """

    _session: "AsyncSession"

    async def elected(self) -> int:
        """Waits in line until this candidate leads; returns its term."""
        await self._session._until(lambda: self._state != WAITING)
        if self._failure is not None:
            raise self._failure
        return self.fencing_token

    async def proclaim(self, value: bytes) -> None:
        """Publishes a new value while leading."""
        if self._state != HELD:
            raise RuntimeError(f"election {self.name!r}: not leading"
                               + (f" ({self.lost_reason})" if self.lost_reason else ""))
        self._request.campaign.value = value
        self._sent += 1
        sent = self._sent
        self._session._proclaim(self)
        await self._session._until(lambda: self._published >= sent or self._state == OVER)
        if self._published < sent:
            raise RuntimeError(f"leadership lost: {self.lost_reason}")

    async def lost(self) -> str:
        """Waits until the leadership (or the candidacy) is over; returns why it was lost ("" if
        it was resigned)."""
        await self._session._until(lambda: self._state == OVER)
        return self.lost_reason or ""

    async def resign(self, timeout: float = 10.0) -> bool:
        """Steps down (or leaves the line); True if this candidate was leading."""
        self._session._let_go(self)
        await self._session._until_or_timeout(lambda: self._state == OVER, timeout)
        return self._was_held and not self._lost_event.is_set()


class AsyncSession(SessionCore):
    """Many leases on one Session stream. Use ``session(...)``: as
    ``leasehold_client.Session``, with ``lost`` an ``asyncio.Event``."""

    def __init__(self, stub: session_pb2_grpc.SessionServiceStub, ttl: float, *,
                 resume_grace: float, holder: str = "", auto_resume: bool = True):
        self._stub = stub
        self._waiters = Waiters()
        self._until = self._waiters.until
        self._until_or_timeout = self._waiters.until_or_timeout
        self._wake = asyncio.Event()
        self._alarm = Alarm(self._tick)
        self._watcher: Optional[asyncio.Task] = None
        self._setup(ttl, resume_grace, holder, auto_resume)

    def _begin(self) -> None:
        self._call = self._stub.Session(requests(self._open_stream()))
        self._watcher = asyncio.get_running_loop().create_task(self._watch(self._call))

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _new_event(self) -> asyncio.Event:
        return asyncio.Event()

    def _new_queue(self) -> asyncio.Queue:
        return asyncio.Queue()

    def _notify(self) -> None:
        self._waiters.changed()

    def _schedule(self, when: Optional[float]) -> None:
        self._alarm.set(when)

    def _abort(self) -> None:
        self._wake.set()
        if self._watcher is not None and self._watcher is not asyncio.current_task():
            self._watcher.cancel()  # stops the stream or the attempt in flight

    async def _watch(self, call: Any) -> None:
        try:
            await read_streams(call, self._follow, self._after_break, self._end, "session")
        finally:
            if self._call is not None:
                self._call.cancel()
            self._end("the session stream ended")

    async def _follow(self, call: Any) -> Optional[Failure]:
        return await read_stream(call, self._hear, "the server ended the session stream")

    async def _after_break(self, error: Failure) -> Any:
        pause = self._broke(error)  # type: ignore[arg-type]
        if pause is None:
            return None
        if pause:
            await nap(self._wake, pause)
        return self._reopen(lambda outbox: self._stub.Session(requests(outbox),
                                                              wait_for_ready=True))

    async def acquire(self, name: str, *, wait: float = 0.0, holder: str = "",
                      fair: bool = True, limit: int = 1, shared: bool = False
                      ) -> AsyncSessionLease:
        """Takes lock ``name`` on the session and returns it held, until ``release()`` or the
        session's end: as ``leasehold_client.Session.acquire``."""
        member_id, request = self._acquire_request(name, wait, holder, fair, limit, shared)
        held = AsyncSessionLease(self, member_id, name, request)
        self._add(held)
        try:
            await self._until(lambda: held._state != WAITING)
        except asyncio.CancelledError:
            self._let_go(held)  # no one will hold it
            raise
        if held._failure is not None:
            raise held._failure
        return held

    @asynccontextmanager
    async def lock(self, name: str, *, wait: float = 0.0, holder: str = "", fair: bool = True,
                   limit: int = 1, shared: bool = False) -> AsyncIterator[AsyncSessionLease]:
        """Holds lock ``name`` on the session for the ``async with`` block."""
        held = await self.acquire(name, wait=wait, holder=holder, fair=fair, limit=limit,
                                  shared=shared)
        try:
            yield held
        finally:
            await held.release()

    @asynccontextmanager
    async def campaign(self, election: str,
                       value: bytes) -> AsyncIterator[AsyncSessionCandidate]:
        """Runs for leader of ``election`` on the session for the block; ``await elected()``
        to wait in line. Leaving the block steps down."""
        member_id, request = self._campaign_request(election, value)
        candidate = AsyncSessionCandidate(self, member_id, election, request)
        self._add(candidate)
        try:
            yield candidate
        finally:
            await candidate.resign()

    async def close(self, timeout: float = 10.0) -> None:
        """Releases every lease on the session and ends it."""
        self._begin_close()
        self._wake.set()
        if not await self._until_or_timeout(lambda: self._over, timeout):
            self._end("closing timed out", closed=True, abort=True)
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

