"""Locks, threaded: ``lease`` holds one (or several names, all or none) for a ``with`` block on
a stream of its own (a ``Lease``, driven by ``threads.HeldThread`` over the core in ``held``);
``list`` shows the locks held now, ``watch`` follows one lock's state, ``check`` says whether a
fencing token is current, and ``revoke`` ends holdings by force."""

from __future__ import annotations

import logging
import threading
import time
from contextlib import ExitStack, contextmanager
from typing import Any, Iterator, Optional, Sequence, Tuple

import grpc
from leasehold.v1 import lock_pb2, lock_pb2_grpc

from .answers import (Holder, Listing, LockState, TokenCheck, holders, listing, token_check,
                      watching)
from .channels import own_channel
from .errors import NotAcquired, describe, refusal
from .held import LeaseHeld
from .options import DEFAULT_SERVER, acquire_request, grace, lock_names
from .threads import HeldThread, follow
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
            answer = self._stub.Release(self._held.release_request(), timeout=timeout,
                                        wait_for_ready=True)
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
def lease(name: Optional[str] = None, *, names: Optional[Sequence[str]] = None,
          server: str = DEFAULT_SERVER, ttl: float = 30.0, wait: float = 0.0,
          holder: str = "", fair: bool = True, limit: int = 1, shared: bool = False,
          auto_resume: bool = True, resume_grace: Optional[float] = None,
          resume_token: str = "", lock_delay: float = 0.0, max_hold: Optional[float] = None,
          channel: Optional[grpc.Channel] = None) -> Iterator[Lease]:
    """Holds lock ``name`` (or every one of ``names``, all or none) for the ``with`` block.

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
    ``names``: several names held as one lease (plain exclusive locks): acquired only when
    every name is taken, lost as a whole when any is; ``held.fences`` has each one's fencing
    token. Callers asking for overlapping sets in any order do not deadlock.
    ``lock_delay``: when the lease is lost (expired, revoked, its stream broken past its grace;
    not after a release), its names cannot be taken for that many seconds more.
    ``max_hold``: a ceiling on the hold, in seconds (at least ``ttl``): the server stops renewing
    it then, and this process stops believing in it no later than ``max_hold`` after it sent
    the acquire (a wait counts against it); ``lost`` is then set with ``lost_code``
    ``LostReason.MAX_HOLD``, and it is not resumed.
    """
    request = acquire_request(lock_names(name, names), ttl, wait, holder, fair, limit, shared,
                              grace(ttl, resume_grace, auto_resume), resume_token, lock_delay,
                              max_hold)
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


def revoke(name: str, fencing_token: int = 0, *, server: str = DEFAULT_SERVER,
           channel: Optional[grpc.Channel] = None) -> Tuple[Holder, ...]:
    """Ends holdings of lock ``name`` by force, for an operator: every holder, or only the one
    with ``fencing_token`` (a semaphore's permit, a shared hold). Each is told it lost
    (``lost_code`` ``LostReason.REVOKED``) and cannot resume; the next waiter gets the lock at
    once, with a larger fencing token. Returns the holders ended, as they were just before;
    empty when nothing was held (or nothing with that fencing token). Needs the ``admin`` role
    on the name (PERMISSION_DENIED otherwise) when the server checks tokens.

    A revoked holder may still act on its lock until it hears: only the fencing token protects
    the resource in between.
    """
    with own_channel(server, channel) as chan:
        answer = lock_pb2_grpc.LockServiceStub(chan).Revoke(
            lock_pb2.RevokeRequest(name=name, fencing_token=fencing_token))
        return holders(answer.revoked)


def check(name: str, fencing_token: int, *, server: str = DEFAULT_SERVER,
          channel: Optional[grpc.Channel] = None) -> TokenCheck:
    """Whether ``fencing_token`` is the current holding of lock ``name``: a ``TokenCheck``, its
    ``state`` ``TokenState.CURRENT``, ``SUPERSEDED`` (held under other fencing tokens:
    ``current_fencing_token`` is the holder's) or ``FREE``. One Redis read on the server, for a
    protected resource to call before each write (give it ``channel=connect(...)``, opened
    once, rather than a new connection per call); needs the ``observe`` role when auth is on.

    A check is not a conditional write: the holding can end between the answer and the write,
    so a resource that must never take a stale write fences itself (docs/contract.md).
    """
    with own_channel(server, channel) as chan:
        answer = lock_pb2_grpc.LockServiceStub(chan).Check(
            lock_pb2.CheckRequest(name=name, fencing_token=fencing_token))
        return token_check(answer)


class Watch:
    """A lock's state, then each change: an iterator of ``LockState``. Use ``watch(...)``.

    ``close()`` (or leaving its ``with`` block) cancels the call, from any thread: an
    iteration waiting for the next state then ends.
    """

    def __init__(self, name: str, server: str, channel: Optional[grpc.Channel]):
        self.name = name
        self._exit = ExitStack()
        self._stub = lock_pb2_grpc.LockServiceStub(
            self._exit.enter_context(own_channel(server, channel)))
        self._request = lock_pb2.WatchRequest(name=name)
        self._guard = threading.Lock()
        self._stopped = threading.Event()
        self._call: Any = None
        self._states = follow(self._open, watching(name), f"watch {name!r}", self._stopped)

    def _open(self, ready: bool) -> Any:
        with self._guard:
            if self._stopped.is_set():
                return None
            self._call = self._stub.Watch(self._request, wait_for_ready=ready)
            return self._call

    def __iter__(self) -> "Watch":
        return self

    def __next__(self) -> LockState:
        return next(self._states)

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def close(self) -> None:
        """Cancels the call (and closes the channel it opened for itself)."""
        with self._guard:
            self._stopped.set()
            call = self._call
        if call is not None:
            call.cancel()
        self._exit.close()


def watch(name: str, *, server: str = DEFAULT_SERVER,
          channel: Optional[grpc.Channel] = None) -> Watch:
    """Follows lock ``name``: its state now, then every change (taken, released, expired,
    revoked, a waiter joining or leaving), as ``LockState`` values, without polling::

        with watch("nightly-report") as states:
            for state in states:
                print(state.held, state.holder, state.fencing_token, state.waiting)

    Leaving the ``with`` block (or ``close()``) cancels the call. A state is never yielded
    twice in a row (two that differ only in their remaining TTLs are the same). When the stream
    breaks (its server stopped) it follows the lock again on any server, yielding the state
    found there only if it differs from the last one yielded; a failure of the first stream is
    raised (as is a refusal, PERMISSION_DENIED without the ``observe`` role).
    """
    return Watch(name, server, channel)
