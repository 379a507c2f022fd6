"""The same client for ``asyncio`` (``grpc.aio``).

    from leasehold_client.aio import lease

    async with lease("nightly-report", ttl=10, wait=30) as held:
        work = asyncio.create_task(do_work(held.fencing_token))
        lost = asyncio.create_task(held.lost.wait())
        await asyncio.wait({work, lost}, return_when=asyncio.FIRST_COMPLETED)

``held.lost`` (an ``asyncio.Event``) is set when the server says the lease is lost, when the
stream breaks, or when the validity the server last confirmed runs out by this process's clock.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator, Optional

import grpc
from grpc import aio
from leasehold.v1 import election_pb2, election_pb2_grpc, lock_pb2, lock_pb2_grpc

from . import (_SILENT, DEFAULT_SERVER, Leader, NotAcquired, _acquire_request, _credentials,
               _leader, _LeaseState, _millis)

__all__ = ["AsyncLease", "AsyncCandidate", "lease", "campaign", "leader", "observe", "connect"]


class AsyncLease(_LeaseState):
    """A held lock. Use ``lease(...)``."""

    def __init__(self, call: aio.StreamStreamCall, name: str):
        self.name = name
        self.lost = asyncio.Event()
        self.lost_reason: Optional[str] = None
        self.fencing_token = 0
        self.token = ""
        self._call = call
        self._released = asyncio.Event()
        self._was_held = False
        self._timer: Optional[asyncio.TimerHandle] = None
        self._watcher: Optional[asyncio.Task] = None

    async def _acquire(self, request: lock_pb2.LeaseAcquire) -> None:
        await self._call.write(lock_pb2.LeaseRequest(acquire=request))
        try:
            while True:
                event = await self._call.read()
                if event is aio.EOF:
                    raise NotAcquired(f"lock {self.name!r}: the server ended the stream")
                if event.HasField("acquired"):
                    break
        except aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.ABORTED:
                raise NotAcquired(error.details()) from None
            raise
        self.fencing_token = event.acquired.fencing_token
        self.token = event.acquired.token
        self._arm(event.acquired.valid_for_ms)
        self._watcher = asyncio.get_running_loop().create_task(self._watch())

    def _arm(self, valid_for_ms: int) -> None:
        """Declares the lease lost if nothing confirms it within valid_for_ms."""
        if self._timer:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(valid_for_ms / 1000, self._lose, _SILENT)

    async def _watch(self) -> None:
        try:
            while True:
                event = await self._call.read()
                if event is aio.EOF:
                    self._lose("the server ended the lease stream")
                    return
                if self._hear(event):
                    return
        except aio.AioRpcError as error:
            self._stream_failed(error)
        finally:
            if self._timer:
                self._timer.cancel()
            self._released.set()

    async def release(self, timeout: float = 10.0) -> bool:
        """Releases the lock; returns True if it was still held."""
        if not self._released.is_set():
            try:
                await self._call.write(lock_pb2.LeaseRequest(release=lock_pb2.LeaseRelease()))
                await self._call.done_writing()
            except (aio.AioRpcError, asyncio.InvalidStateError):
                pass  # The stream already ended; the watcher says how.
            try:
                await asyncio.wait_for(self._released.wait(), timeout)
            except asyncio.TimeoutError:
                self._call.cancel()
        return self._was_held and not self.lost.is_set()


class _WithToken:
    """Adds ``authorization: Bearer <token>`` to a call's metadata."""

    def __init__(self, token: str):
        self._header = ("authorization", f"Bearer {token}")

    def _with_token(self, details):
        metadata = aio.Metadata(*(details.metadata or aio.Metadata()).items(), self._header)
        return details._replace(metadata=metadata)


# One class per kind of call: grpc.aio files each interceptor under the first kind it is.
class _TokenUnaryUnary(_WithToken, aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation, details, request):
        return await continuation(self._with_token(details), request)


class _TokenUnaryStream(_WithToken, aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation, details, request):
        return await continuation(self._with_token(details), request)


class _TokenStreamStream(_WithToken, aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation, details, request_iterator):
        return await continuation(self._with_token(details), request_iterator)


def connect(server: str = DEFAULT_SERVER, *, token: Optional[str] = None,
            root_certificates: Optional[bytes] = None, private_key: Optional[bytes] = None,
            certificate_chain: Optional[bytes] = None, tls: Optional[bool] = None) -> aio.Channel:
    """An asyncio channel to a Leasehold server, for the ``channel=`` argument of every call:
    the same options as :func:`leasehold_client.connect`."""
    interceptors = None
    if token is not None:
        interceptors = [kind(token) for kind in (_TokenUnaryUnary, _TokenUnaryStream,
                                                 _TokenStreamStream)]
    credentials = _credentials(tls, root_certificates, private_key, certificate_chain)
    if credentials is not None:
        return aio.secure_channel(server, credentials, interceptors=interceptors)
    return aio.insecure_channel(server, interceptors=interceptors)


@asynccontextmanager
async def _channel(server: str, channel: Optional[aio.Channel]) -> AsyncIterator[aio.Channel]:
    if channel is not None:
        yield channel
        return
    own = aio.insecure_channel(server)
    try:
        yield own
    finally:
        await own.close()


@asynccontextmanager
async def lease(name: str, *, server: str = DEFAULT_SERVER, ttl: float = 30.0,
                wait: float = 0.0, holder: str = "", fair: bool = True, limit: int = 1,
                shared: bool = False, resume_grace: float = 0.0, resume_token: str = "",
                channel: Optional[aio.Channel] = None) -> AsyncIterator[AsyncLease]:
    """Holds lock ``name`` for the ``async with`` block; NotAcquired if it stays taken. The
    options are those of ``leasehold_client.lease``."""
    request = _acquire_request(name, ttl, wait, holder, fair, limit, shared, resume_grace,
                               resume_token)
    async with _channel(server, channel) as chan:
        held = AsyncLease(lock_pb2_grpc.LockServiceStub(chan).Lease(), name)
        await held._acquire(request)
        try:
            yield held
        finally:
            await held.release()


class AsyncCandidate:
    """One candidacy, held by one Campaign stream. Use ``campaign(...)``."""

    def __init__(self, call: aio.StreamStreamCall, election: str):
        self.election = election
        self._call = call
        self._closed = False

    async def _next(self) -> election_pb2.CampaignResponse:
        event = await self._call.read()
        if event is aio.EOF:
            raise RuntimeError(f"election {self.election!r}: the campaign stream ended")
        return event

    async def elected(self) -> int:
        """Waits in line until this candidate leads; returns its term."""
        event = await self._next()
        if not event.HasField("elected"):
            raise RuntimeError(f"expected elected, got {event}")
        return event.elected.term

    async def proclaim(self, value: bytes) -> None:
        """Publishes a new value while leading."""
        await self._call.write(election_pb2.CampaignRequest(
            proclaim=election_pb2.Proclaim(value=value)))
        event = await self._next()
        if event.HasField("lost"):
            raise RuntimeError(f"leadership lost: {event.lost.reason}")
        if not event.HasField("proclaimed"):
            raise RuntimeError(f"expected proclaimed, got {event}")

    async def lost(self) -> str:
        """Waits until the leadership is lost; returns the reason. Only while leading."""
        try:
            while True:
                event = await self._next()
                if event.HasField("lost"):
                    return event.lost.reason
        except (aio.AioRpcError, RuntimeError) as error:
            return str(error)

    async def resign(self) -> bool:
        """Steps down (or leaves the line); True if this candidate was leading."""
        if self._closed:
            return False
        self._closed = True
        try:
            await self._call.write(election_pb2.CampaignRequest(resign=election_pb2.Resign()))
            await self._call.done_writing()
            while True:
                event = await self._next()
                if event.HasField("resigned"):
                    return event.resigned.was_leader
                if event.HasField("lost"):
                    return False
        except (aio.AioRpcError, asyncio.InvalidStateError, RuntimeError):
            return False  # The stream already ended: nothing is held.


@asynccontextmanager
async def campaign(election: str, value: bytes, *, server: str = DEFAULT_SERVER,
                   ttl: float = 5.0,
                   channel: Optional[aio.Channel] = None) -> AsyncIterator[AsyncCandidate]:
    """Runs for leader of ``election`` for the block; ``await elected()`` to wait in line."""
    async with _channel(server, channel) as chan:
        call = election_pb2_grpc.ElectionServiceStub(chan).Campaign()
        await call.write(election_pb2.CampaignRequest(start=election_pb2.CampaignStart(
            election=election, value=value, ttl_ms=_millis(ttl))))
        candidate = AsyncCandidate(call, election)
        try:
            yield candidate
        finally:
            await candidate.resign()


async def leader(election: str, *, server: str = DEFAULT_SERVER,
                 channel: Optional[aio.Channel] = None) -> Optional[Leader]:
    """The leader of ``election`` now, or None."""
    async with _channel(server, channel) as chan:
        answer = await election_pb2_grpc.ElectionServiceStub(chan).Leader(
            election_pb2.LeaderRequest(election=election))
        return _leader(answer.has_leader, answer.term, answer.value)


async def observe(election: str, *, server: str = DEFAULT_SERVER,
                  channel: Optional[aio.Channel] = None) -> AsyncIterator[Optional[Leader]]:
    """Yields the leader of ``election`` now (None for none), then every change, in order."""
    async with _channel(server, channel) as chan:
        call = election_pb2_grpc.ElectionServiceStub(chan).Observe(
            election_pb2.ObserveRequest(election=election))
        try:
            async for state in call:
                yield _leader(state.has_leader, state.term, state.value)
        finally:
            call.cancel()
