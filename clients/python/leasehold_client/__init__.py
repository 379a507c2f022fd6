"""Hold a Leasehold lock, or run for leader, from Python.

    from leasehold_client import lease

    with lease("nightly-report", ttl=10, wait=30, holder="report@host-a") as held:
        print("fencing token", held.fencing_token)
        while not held.lost.is_set():
            ...  # work; stop when the lock is lost

The lock is released when the block ends. ``held.lost`` is set when the server says the lease is
lost, when the stream breaks, or when the server has been silent past the validity it last
confirmed (so a frozen server cannot keep you believing you hold the lock).

Elections: ``campaign`` (a context manager: leave the block to step down), ``leader`` and
``observe``. The same API for ``asyncio`` is in ``leasehold_client.aio``. Times are in seconds.
"""

from __future__ import annotations

import os
import queue
import threading
from contextlib import contextmanager
from typing import Any, Iterator, NamedTuple, Optional

import grpc
from leasehold.v1 import election_pb2, election_pb2_grpc, lock_pb2, lock_pb2_grpc

__all__ = [
    "DEFAULT_SERVER", "Leader", "Lease", "NotAcquired", "Candidate", "lease", "campaign",
    "leader", "observe", "connect",
]

#: Where the server is, unless told: ``LEASEHOLD_SERVER`` (as the CLI reads it) or the default.
DEFAULT_SERVER = os.environ.get("LEASEHOLD_SERVER", "127.0.0.1:50051").removeprefix("http://")

_SILENT = "no renewal confirmed before the lease ran out (server silent)"


class NotAcquired(Exception):
    """The lock stayed taken for the whole wait (gRPC status ABORTED)."""


class Leader(NamedTuple):
    """An election's leader: its term (larger for every new leader) and published value."""

    term: int
    value: bytes


def _millis(seconds: float) -> int:
    return int(seconds * 1000)


class _LeaseState:
    """What a held lease knows of itself, whichever concurrency model reads its stream: whether
    it is lost (and why) and whether it was released. ``lost`` and ``_released`` are threading or
    asyncio events; ``_arm`` is the model's own timer."""

    lost: Any
    lost_reason: Optional[str]
    _released: Any
    _was_held: bool

    def _arm(self, valid_for_ms: int) -> None:
        raise NotImplementedError

    def _lose(self, reason: str) -> None:
        if not self._released.is_set() and not self.lost.is_set():
            self.lost_reason = reason
            self.lost.set()

    def _hear(self, event: lock_pb2.LeaseResponse) -> bool:
        """Applies one event of the server's; True once the lease is released."""
        kind = event.WhichOneof("event")
        if kind == "extended":
            self._arm(event.extended.valid_for_ms)
        elif kind == "lost":
            self._lose(event.lost.reason)
        elif kind == "released":
            self._was_held = event.released.was_held
            return True
        return False

    def _stream_failed(self, error: grpc.RpcError) -> None:
        self._lose(f"lease stream failed: {error.code().name} {error.details()}")


class Lease(_LeaseState):
    """A held lock. Use ``lease(...)`` rather than building one by hand."""

    def __init__(self, stub: lock_pb2_grpc.LockServiceStub, request: lock_pb2.LeaseAcquire):
        name = request.name
        self.name = name
        self.lost = threading.Event()
        self.lost_reason: Optional[str] = None
        self._released = threading.Event()
        self._was_held = False
        self._outbox: queue.Queue = queue.Queue()
        self._outbox.put(lock_pb2.LeaseRequest(acquire=request))
        self._events = stub.Lease(iter(self._outbox.get, None))
        try:
            for event in self._events:
                if event.HasField("acquired"):
                    break
            else:
                raise NotAcquired(f"lock {name!r}: the server ended the stream")
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.ABORTED:
                raise NotAcquired(error.details()) from None
            raise
        self.fencing_token: int = event.acquired.fencing_token
        self.token: str = event.acquired.token
        self._timer: Optional[threading.Timer] = None
        self._arm(event.acquired.valid_for_ms)
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _arm(self, valid_for_ms: int) -> None:
        """Declares the lease lost if nothing confirms it within valid_for_ms."""
        if self._timer:
            self._timer.cancel()
        self._timer = threading.Timer(valid_for_ms / 1000, self._lose, args=(_SILENT,))
        self._timer.daemon = True
        self._timer.start()

    def _watch(self) -> None:
        try:
            for event in self._events:
                if self._hear(event):
                    self._released.set()
            if not self._released.is_set():
                self._lose("the server ended the lease stream")
        except grpc.RpcError as error:
            self._stream_failed(error)
        finally:
            if self._timer:
                self._timer.cancel()
            self._released.set()

    def release(self, timeout: float = 10.0) -> bool:
        """Releases the lock; returns True if it was still held."""
        self._outbox.put(lock_pb2.LeaseRequest(release=lock_pb2.LeaseRelease()))
        self._outbox.put(None)  # half-close
        self._released.wait(timeout)
        return self._was_held and not self.lost.is_set()


class _BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                   grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds `authorization: Bearer <token>` to every call (also on plaintext channels, where
    grpc's own call credentials are refused)."""

    def __init__(self, token: str):
        self._header = ("authorization", f"Bearer {token}")

    def _with_token(self, details):
        metadata = list(details.metadata or []) + [self._header]
        return details._replace(metadata=metadata)

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._with_token(details), request)

    def intercept_stream_unary(self, continuation, details, requests):
        return continuation(self._with_token(details), requests)

    def intercept_stream_stream(self, continuation, details, requests):
        return continuation(self._with_token(details), requests)


def _credentials(tls: Optional[bool], root_certificates: Optional[bytes],
                 private_key: Optional[bytes], certificate_chain: Optional[bytes]
                 ) -> Optional[grpc.ChannelCredentials]:
    """TLS credentials when `tls` is true, or when any certificate is given; else None."""
    secure = tls if tls is not None else any(
        part is not None for part in (root_certificates, private_key, certificate_chain))
    if not secure:
        return None
    return grpc.ssl_channel_credentials(root_certificates=root_certificates,
                                        private_key=private_key,
                                        certificate_chain=certificate_chain)


def connect(server: str = DEFAULT_SERVER, *, token: Optional[str] = None,
            root_certificates: Optional[bytes] = None, private_key: Optional[bytes] = None,
            certificate_chain: Optional[bytes] = None, tls: Optional[bool] = None) -> grpc.Channel:
    """A channel to a Leasehold server, for the `channel=` argument of every call.

    TLS when `tls` is true, or when any certificate is given: `root_certificates` (PEM) to trust
    for the server, `private_key` and `certificate_chain` (PEM) for mutual TLS. `token` is sent
    as a bearer token with every call (the server's --auth-file grants it).
    """
    credentials = _credentials(tls, root_certificates, private_key, certificate_chain)
    if credentials is not None:
        channel = grpc.secure_channel(server, credentials)
    else:
        channel = grpc.insecure_channel(server)
    if token is not None:
        channel = grpc.intercept_channel(channel, _BearerToken(token))
    return channel


@contextmanager
def _channel(server: str, channel: Optional[grpc.Channel]) -> Iterator[grpc.Channel]:
    """The caller's channel, or one of our own for the block."""
    if channel is not None:
        yield channel
        return
    own = grpc.insecure_channel(server)
    try:
        yield own
    finally:
        own.close()


def _acquire_request(name: str, ttl: float, wait: float, holder: str, fair: bool, limit: int,
                     shared: bool, resume_grace: float,
                     resume_token: str) -> lock_pb2.LeaseAcquire:
    mode = lock_pb2.LEASE_MODE_SHARED if shared else lock_pb2.LEASE_MODE_EXCLUSIVE
    return lock_pb2.LeaseAcquire(
        name=name, ttl_ms=_millis(ttl), wait_ms=_millis(wait), holder=holder, fair=fair,
        limit=limit, mode=mode, resume_grace_ms=_millis(resume_grace), resume_token=resume_token)


@contextmanager
def lease(name: str, *, server: str = DEFAULT_SERVER, ttl: float = 30.0, wait: float = 0.0,
          holder: str = "", fair: bool = True, limit: int = 1, shared: bool = False,
          resume_grace: float = 0.0, resume_token: str = "",
          channel: Optional[grpc.Channel] = None) -> Iterator[Lease]:
    """Holds lock ``name`` for the ``with`` block.

    Raises NotAcquired if the lock stays taken for ``wait`` seconds (0: fail at once).
    ``limit``: up to that many holders at once (a semaphore; every holder must give the same).
    ``shared``: hold it with other shared holders (readers); an exclusive one (a writer) waits
    for them all, and readers that come after a waiting writer wait behind it.
    ``resume_grace``: keep the lease that long (at most ``ttl``) after the stream breaks, so that
    ``lease(name, resume_token=held.token)`` can take it back with its fencing token.
    """
    request = _acquire_request(name, ttl, wait, holder, fair, limit, shared, resume_grace,
                               resume_token)
    with _channel(server, channel) as chan:
        held = Lease(lock_pb2_grpc.LockServiceStub(chan), request)
        try:
            yield held
        finally:
            held.release()


class Candidate:
    """One candidacy, held by one Campaign stream. Use ``campaign(...)``."""

    def __init__(self, stub: election_pb2_grpc.ElectionServiceStub, election: str, value: bytes,
                 ttl: float):
        self.election = election
        self._outbox: queue.Queue = queue.Queue()
        self._outbox.put(election_pb2.CampaignRequest(start=election_pb2.CampaignStart(
            election=election, value=value, ttl_ms=_millis(ttl))))
        self._events = stub.Campaign(iter(self._outbox.get, None))
        self._closed = False

    def _next(self) -> election_pb2.CampaignResponse:
        event = next(self._events, None)
        if event is None:
            raise RuntimeError(f"election {self.election!r}: the campaign stream ended")
        return event

    def elected(self) -> int:
        """Waits in line until this candidate leads; returns its term."""
        event = self._next()
        if not event.HasField("elected"):
            raise RuntimeError(f"expected elected, got {event}")
        return event.elected.term

    def proclaim(self, value: bytes) -> None:
        """Publishes a new value while leading."""
        self._outbox.put(election_pb2.CampaignRequest(proclaim=election_pb2.Proclaim(value=value)))
        event = self._next()
        if event.HasField("lost"):
            raise RuntimeError(f"leadership lost: {event.lost.reason}")
        if not event.HasField("proclaimed"):
            raise RuntimeError(f"expected proclaimed, got {event}")

    def lost(self) -> str:
        """Waits until the leadership is lost; returns the reason. Only while leading."""
        try:
            while True:
                event = self._next()
                if event.HasField("lost"):
                    return event.lost.reason
        except (grpc.RpcError, RuntimeError) as error:
            return str(error)

    def resign(self) -> bool:
        """Steps down (or leaves the line); True if this candidate was leading."""
        if self._closed:
            return False
        self._closed = True
        self._outbox.put(election_pb2.CampaignRequest(resign=election_pb2.Resign()))
        self._outbox.put(None)
        try:
            for event in self._events:
                if event.HasField("resigned"):
                    return event.resigned.was_leader
                if event.HasField("lost"):
                    return False
        except grpc.RpcError:
            pass
        return False


@contextmanager
def campaign(election: str, value: bytes, *, server: str = DEFAULT_SERVER, ttl: float = 5.0,
             channel: Optional[grpc.Channel] = None) -> Iterator[Candidate]:
    """Runs for leader of ``election`` for the ``with`` block; call ``elected()`` to wait.

    ``ttl`` bounds how long the election stays leaderless if this process's server dies while
    it leads. Leaving the block steps down.
    """
    with _channel(server, channel) as chan:
        candidate = Candidate(election_pb2_grpc.ElectionServiceStub(chan), election, value, ttl)
        try:
            yield candidate
        finally:
            candidate.resign()


def _leader(has_leader: bool, term: int, value: bytes) -> Optional[Leader]:
    return Leader(term, value) if has_leader else None


def leader(election: str, *, server: str = DEFAULT_SERVER,
           channel: Optional[grpc.Channel] = None) -> Optional[Leader]:
    """The leader of ``election`` now, or None."""
    with _channel(server, channel) as chan:
        answer = election_pb2_grpc.ElectionServiceStub(chan).Leader(
            election_pb2.LeaderRequest(election=election))
        return _leader(answer.has_leader, answer.term, answer.value)


def observe(election: str, *, server: str = DEFAULT_SERVER,
            channel: Optional[grpc.Channel] = None) -> Iterator[Optional[Leader]]:
    """Yields the leader of ``election`` now (None for none), then every change, in order."""
    with _channel(server, channel) as chan:
        states = election_pb2_grpc.ElectionServiceStub(chan).Observe(
            election_pb2.ObserveRequest(election=election))
        try:
            for state in states:
                yield _leader(state.has_leader, state.term, state.value)
        finally:
            states.cancel()
