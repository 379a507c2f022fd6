"""Locks for asyncio: ``lease`` holds one (or several names, all or none) for an ``async with``
block (an ``AsyncLease``, driven by ``aio_tasks.HeldTask`` over the core in ``held``); ``list``
shows the locks held now, ``watch`` follows one lock's state, ``check`` says whether a fencing
token is current, and ``revoke`` ends holdings by force.
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, AsyncIterator, Optional, Sequence, Tuple

from grpc import aio
from leasehold.v1 import lock_pb2, lock_pb2_grpc

from .aio_channels import own_channel
from .aio_tasks import HeldTask, follow
from .answers import (Holder, Listing, LockState, TokenCheck, holders, listing, token_check,
                      watching)
from .errors import NotAcquired, describe, refusal
from .held import LeaseHeld
from .options import DEFAULT_SERVER, acquire_request, grace, lock_names
from .views import HeldLease

_log = logging.getLogger("leasehold_client")


class AsyncLease(HeldLease):
    """A held lock. Use ``lease(...)``.

    ``lost`` (an ``asyncio.Event``) and ``lost_reason`` say whether and why it was lost;
    ``resumes`` counts the times it was taken back on a new stream after its stream broke;
    ``valid_until`` is when the validity last confirmed runs out (``loop.time()``).
    """

    def __init__(self, stub: lock_pb2_grpc.LockServiceStub, request: lock_pb2.LeaseAcquire,
                 auto_resume: bool = False):
        self.name = request.name
        self._stub = stub
        self._stream = HeldTask(
            lambda **model: LeaseHeld(request, auto_resume=auto_resume, **model), stub.Lease,
            self._release_by_token)
        self._held = self._stream.held

    async def _acquire(self) -> None:
        call = await self._stream.open()
        try:
            while True:
                event = await call.read()
                if event is aio.EOF:
                    raise NotAcquired(f"lock {self.name!r}: the server ended the stream")
                if event.HasField("acquired"):
                    break
        except aio.AioRpcError as error:
            refused = refusal(error)
            if refused is not None:
                raise refused from None
            raise
        late = self._held.first(event.acquired, self._stream.now())
        if late is not None:
            # Held up on its way: the lease may be someone else's by now. The cancelled stream
            # lets go of it (or keeps it only for its grace).
            call.cancel()
            raise NotAcquired(f"lock {self.name!r}: {late}")
        self._stream.watch(call)

    async def _release_by_token(self) -> Optional[bool]:
        """Releases with the unary call, on any server: for a release asked between streams."""
        timeout = max(1.0, self._held.valid_until - self._stream.now())
        try:
            answer = await self._stub.Release(self._held.release_request(), timeout=timeout,
                                              wait_for_ready=True)
            return answer.released
        except aio.AioRpcError as error:
            _log.warning("lease %r: release failed (%s); it expires by itself", self.name,
                         describe(error))
            return None

    async def release(self, timeout: float = 10.0) -> bool:
        """Releases the lock; returns True if it was still held."""
        await self._stream.let_go(self._stream.finished.is_set, timeout)
        return self._held.was_held and not self.lost.is_set()


@asynccontextmanager
async def lease(name: Optional[str] = None, *, names: Optional[Sequence[str]] = None,
                server: str = DEFAULT_SERVER, ttl: float = 30.0, wait: float = 0.0,
                holder: str = "", fair: bool = True, limit: int = 1, shared: bool = False,
                auto_resume: bool = True, resume_grace: Optional[float] = None,
                resume_token: str = "", lock_delay: float = 0.0,
                max_hold: Optional[float] = None,
                channel: Optional[aio.Channel] = None) -> AsyncIterator[AsyncLease]:
    """Holds lock ``name`` (or every one of ``names``, all or none) for the ``async with``
    block; NotAcquired if it stays taken. The options are those of
    ``leasehold_client.lease``."""
    request = acquire_request(lock_names(name, names), ttl, wait, holder, fair, limit, shared,
                              grace(ttl, resume_grace, auto_resume), resume_token, lock_delay,
                              max_hold)
    async with own_channel(server, channel) as chan:
        held = AsyncLease(lock_pb2_grpc.LockServiceStub(chan), request, auto_resume)
        await held._acquire()
        try:
            yield held
        finally:
            await held.release()


async def list(limit: int = 0, *, server: str = DEFAULT_SERVER,
               channel: Optional[aio.Channel] = None) -> Listing:
    """The locks held now, at most ``limit`` (0: the server's maximum, 1,000), and whether more
    are held: as ``leasehold_client.list``, a bounded look for people and tools, not a
    snapshot to act on."""
    async with own_channel(server, channel) as chan:
        answer = await lock_pb2_grpc.LockServiceStub(chan).List(lock_pb2.ListRequest(limit=limit))
        return listing(answer)


async def revoke(name: str, fencing_token: int = 0, *, server: str = DEFAULT_SERVER,
                 channel: Optional[aio.Channel] = None) -> Tuple[Holder, ...]:
    """Ends holdings of lock ``name`` by force (every holder, or the one with
    ``fencing_token``): as ``leasehold_client.revoke``, the holders ended (empty: none)."""
    async with own_channel(server, channel) as chan:
        answer = await lock_pb2_grpc.LockServiceStub(chan).Revoke(
            lock_pb2.RevokeRequest(name=name, fencing_token=fencing_token))
        return holders(answer.revoked)


async def check(name: str, fencing_token: int, *, server: str = DEFAULT_SERVER,
                channel: Optional[aio.Channel] = None) -> TokenCheck:
    """Whether ``fencing_token`` is the current holding of lock ``name``: as
    ``leasehold_client.check``, a ``TokenCheck``."""
    async with own_channel(server, channel) as chan:
        answer = await lock_pb2_grpc.LockServiceStub(chan).Check(
            lock_pb2.CheckRequest(name=name, fencing_token=fencing_token))
        return token_check(answer)


class AsyncWatch:
    """A lock's state, then each change: an async iterator of ``LockState``. Use
    ``watch(...)``. ``await close()`` (or leaving its ``async with`` block) cancels the call:
    an iteration waiting for the next state, in any task, then ends."""

    def __init__(self, name: str, server: str, channel: Optional[aio.Channel]):
        self.name = name
        self._server, self._channel = server, channel
        self._exit = AsyncExitStack()
        self._stub: Optional[lock_pb2_grpc.LockServiceStub] = None
        self._stopped = False
        self._call: Any = None
        self._states = follow(self._open, watching(name), f"watch {name!r}",
                              lambda: self._stopped)

    async def _open(self, ready: bool) -> Any:
        if self._stub is None:
            chan = await self._exit.enter_async_context(own_channel(self._server, self._channel))
            self._stub = lock_pb2_grpc.LockServiceStub(chan)
        if self._stopped:
            return None
        self._call = self._stub.Watch(lock_pb2.WatchRequest(name=self.name),
                                      wait_for_ready=ready)
        return self._call

    def __aiter__(self) -> "AsyncWatch":
        return self

    async def __anext__(self) -> LockState:
        return await self._states.__anext__()

    async def __aenter__(self) -> "AsyncWatch":
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Cancels the call (and closes the channel it opened for itself)."""
        self._stopped = True
        if self._call is not None:
            self._call.cancel()
        try:
            await self._states.aclose()
        except RuntimeError:
            pass  # being read in another task: the cancelled call ends it there
        await self._exit.aclose()


def watch(name: str, *, server: str = DEFAULT_SERVER,
          channel: Optional[aio.Channel] = None) -> AsyncWatch:
    """Follows lock ``name``: its state now, then every change, as ``LockState`` values (as
    ``leasehold_client.watch``)::

        async with watch("nightly-report") as states:
            async for state in states:
                print(state.held, state.holder, state.fencing_token, state.waiting)

    Leaving the block (or ``await close()``) cancels the call.
    """
    return AsyncWatch(name, server, channel)
