"""Locks, threaded: ``lease`` holds one for a ``with`` block on a stream of its own (a
``Lease``, driven by ``threads.HeldThread`` over the core in ``held``); ``list`` shows the locks
held now."""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from typing import Iterator, Optional

import grpc
from leasehold.v1 import lock_pb2, lock_pb2_grpc

from .answers import Listing, listing
from .channels import own_channel
from .errors import NotAcquired, describe, refusal
from .held import LeaseHeld
from .options import DEFAULT_SERVER, acquire_request, grace
from .threads import HeldThread
from .views import HeldLease

_log = logging.getLogger("leasehold_client")


class Lease(HeldLease):
    """A held lock. Use ``lease(...)`` rather than building one by hand.

    ``lost`` (a ``threading.Event``) and ``lost_reason`` say whether and why it was lost;
    ``resumes`` counts the times it was taken back on a new stream after its stream broke;
    ``valid_until`` is when the validity last confirmed runs out (``time.monotonic()``).
    """

    def __init__(self, stub: lock_pb2_grpc.LockServiceStub, request: lock_pb2.LeaseAcquire,
                 auto_resume: bool = False):
        self.name = request.name
        self._stub = stub
        self._stream = HeldThread(
            lambda **model: LeaseHeld(request, auto_resume=auto_resume, **model), stub.Lease,
            self._release_by_token)
        self._held = self._stream.held
        events = self._stream.open()
        try:
            for event in events:
                if event.HasField("acquired"):
                    break
            else:
                self._stream.close()
                raise NotAcquired(f"lock {self.name!r}: the server ended the stream")
        except grpc.RpcError as error:
            self._stream.close()  # ends the request iterator of the failed stream
            refused = refusal(error)
            if refused is not None:
                raise refused from None
            raise
        received = time.monotonic()
        with self._stream.changed:
            late = self._held.first(event.acquired, received)
        if late is not None:
            # Held up on its way: the lease may be someone else's by now. The cancelled stream
            # lets go of it (or keeps it only for its grace).
            events.cancel()
            self._stream.close()
            raise NotAcquired(f"lock {self.name!r}: {late}")
        self._stream.watch(events)

    def _release_by_token(self) -> Optional[bool]:
        """Releases with the unary call, on any server: for a release asked between streams."""
        timeout = max(1.0, self._held.valid_until - time.monotonic())
        try:
            answer = self._stub.Release(lock_pb2.ReleaseRequest(name=self.name, token=self.token),
                                        timeout=timeout, wait_for_ready=True)
            return answer.released
        except (grpc.RpcError, ValueError) as error:
            _log.warning("lease %r: release failed (%s); it expires by itself", self.name,
                         describe(error) if isinstance(error, grpc.RpcError) else error)
            return None

    def release(self, timeout: float = 10.0) -> bool:
        """Releases the lock; returns True if it was still held."""
        self._stream.let_go()
        self._stream.finished.wait(timeout)
        return self._held.was_held and not self.lost.is_set()


@contextmanager
def lease(name: str, *, server: str = DEFAULT_SERVER, ttl: float = 30.0, wait: float = 0.0,
          holder: str = "", fair: bool = True, limit: int = 1, shared: bool = False,
          auto_resume: bool = True, resume_grace: Optional[float] = None,
          resume_token: str = "", channel: Optional[grpc.Channel] = None) -> Iterator[Lease]:
    """Holds lock ``name`` for the ``with`` block.

    Raises NotAcquired if the lock stays taken for ``wait`` seconds (0: fail at once).
    ``limit``: up to that many holders at once (a semaphore; every holder must give the same).
    ``shared``: hold it with other shared holders (readers); an exclusive one (a writer) waits
    for them all, and readers that come after a waiting writer wait behind it.
    ``auto_resume`` (the default): when the lease's stream breaks, take the lease back on any
    server (same token and fencing token) before its validity runs out; ``lost`` is set only
    if that fails. False: a broken stream loses the lease, as a grace of 0 does on the server.
    ``resume_grace``: how long the server keeps the lease (at most ``ttl``) after the stream
    breaks; default ``ttl`` with ``auto_resume``, else 0. ``resume_token``: take back a kept
    lease by hand (``held.token`` of the broken one), keeping its fencing token.
    """
    request = acquire_request(name, ttl, wait, holder, fair, limit, shared,
                              grace(ttl, resume_grace, auto_resume), resume_token)
    with own_channel(server, channel) as chan:
        held = Lease(lock_pb2_grpc.LockServiceStub(chan), request, auto_resume)
        try:
            yield held
        finally:
            held.release()


def list(limit: int = 0, *, server: str = DEFAULT_SERVER,
         channel: Optional[grpc.Channel] = None) -> Listing:
    """The locks held now, at most ``limit`` of them (0: the server's maximum, 1,000).

    ``truncated`` says whether more are held than were returned: the server bounds every answer
    so that one call cannot make it walk and send a whole large Redis. It is a bounded SCAN of
    the server's key prefix, not a snapshot: a lock taken or released during the call may or
    may not appear. So it is for looking (an operator, a dashboard, a test), not for deciding
    who may act: that is what holding a lease, and its fencing token, are for.
    """
    with own_channel(server, channel) as chan:
        answer = lock_pb2_grpc.LockServiceStub(chan).List(lock_pb2.ListRequest(limit=limit))
        return listing(answer)

