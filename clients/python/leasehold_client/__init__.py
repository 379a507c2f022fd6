"""Hold a Leasehold lock, or run for leader, from Python.

    from leasehold_client import lease

    with lease("nightly-report", ttl=10, wait=30, holder="report@host-a") as held:
        print("fencing token", held.fencing_token)
        while not held.lost.is_set():
            ...  # work; stop when the lock is lost

The lock is released when the block ends. ``held.lost`` is set when the server says the lease is
lost, when the stream breaks and the lease cannot be resumed, or when the server has been silent
past the validity it last confirmed (so a frozen server cannot keep you believing you hold the
lock).

``server`` is one server (``host:port``), several (``"10.0.0.1:50051,10.0.0.2:50051"``), a name
that resolves to several addresses, or any gRPC target (``dns:///leasehold.internal:50051``,
``ipv4:10.0.0.1:50051,10.0.0.2:50051``). One channel holds them all and gRPC's ``pick_first``
sends each call to the first that answers. A held lease outlives its server: when its stream
breaks (the server was stopped for a deploy, crashed, or the connection failed) the client takes
it back on another server, with the same token and fencing token, without telling you anything
(``auto_resume=False`` turns that off for one lease). A leader keeps its term the same way.

Many leases on one stream: ``session`` opens a session (one stream, one TTL, renewed and
confirmed together, as etcd's ``concurrency.Session``) on which ``lock``, ``acquire`` and
``campaign`` hold any number of locks and leaderships; leaving its block releases them all::

    with session(ttl=10, holder="worker-7") as s:
        with s.lock("shard-1") as one, s.lock("shard-2") as two:
            ...  # each has its own fencing_token, lost and release()

Each lease on it is lost alone (its own ``lost``) when its key is, and all of them when the
session is; a broken session stream is opened again on another server and every lease taken
back with its token, as a single lease is.

Elections: ``campaign`` (a context manager: leave the block to step down), ``leader`` and
``observe``. ``leasehold_client.list()`` shows the locks held now. The same API for ``asyncio`` is
in ``leasehold_client.aio``. Times are in seconds.

A refused lease raises ``NotAcquired``, whose ``reason``, ``holder``, ``retry_after`` and
``metadata`` come from the status details the server sends (docs/errors.md): program against
those, not against the message, which is for people and may be reworded.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import queue
import random
import socket
import threading
import time
from collections import deque
from contextlib import contextmanager
from typing import (Any, Callable, Deque, Dict, Iterator, List, NamedTuple, Optional, Sequence,
                    Tuple, Union)

import grpc
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from leasehold.v1 import (election_pb2, election_pb2_grpc, lock_pb2, lock_pb2_grpc, session_pb2,
                          session_pb2_grpc)

# `list` is left out: `from leasehold_client import *` would hide the builtin. Call it as
# `leasehold_client.list()`.
__all__ = [
    "DEFAULT_SERVER", "Leader", "Lease", "NotAcquired", "Candidate", "Holder", "HeldLock",
    "Listing", "lease", "campaign", "leader", "observe", "connect", "Session", "SessionLease",
    "SessionCandidate", "LeaseFailed", "session",
]

#: Where the server is, unless told: ``LEASEHOLD_SERVER`` (as the CLI reads it) or the default.
#: Like ``server=``, it may list several servers, separated by commas.
DEFAULT_SERVER = os.environ.get("LEASEHOLD_SERVER", "127.0.0.1:50051").removeprefix("http://")

_SILENT = "no renewal confirmed before the lease ran out (server silent)"
_LEADER_SILENT = "no renewal confirmed before the leadership ran out (server silent)"
#: An `acquired` or `elected` that arrives after the validity it gives has run out (held up on
#: its way, as by a partition that healed): the lease may be someone else's by now, another may
#: lead.
_LATE_ACQUIRED = "acquired, but the news arrived after its validity had run out"
_LATE_ELECTED = "elected, but the news arrived after the leadership's validity had run out"

_log = logging.getLogger("leasehold_client")

#: How a broken stream may end and still be resumed elsewhere: the server or the connection went
#: away. Any other status (NOT_FOUND, PERMISSION_DENIED, ...) is an answer, and final.
_RESUMABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN,
                        grpc.StatusCode.INTERNAL, grpc.StatusCode.CANCELLED,
                        grpc.StatusCode.DEADLINE_EXCEEDED})
#: Pauses between attempts to resume: from the first, doubling up to the last, with jitter.
_FIRST_PAUSE, _LAST_PAUSE = 0.02, 0.5

#: gRPC resolver schemes: a ``server`` starting with one is handed to gRPC as it is.
_SCHEMES = ("dns:", "ipv4:", "ipv6:", "unix:", "unix-abstract:", "vsock:", "xds:",
            "google-c2p:")
#: Reconnect soon after a server comes back (gRPC's defaults start at 1 s and grow to 2 min).
_CHANNEL_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 100),
                    ("grpc.max_reconnect_backoff_ms", 2000)]


#: The ``domain`` of the server's ``google.rpc.ErrorInfo``: another one (a proxy's) is not ours.
_ERROR_DOMAIN = "leasehold"


class NotAcquired(Exception):
    """The lock was not acquired (gRPC status ABORTED): it is taken and the request did not wait,
    it stayed taken for the whole wait, or (Redlock) no contender won a majority. Also raised,
    without a ``reason``, when the stream ended before the lock was acquired, or when the
    ``acquired`` arrived after the validity it gave had run out (held up on its way, as by a
    partition that healed): the client cancels that stream rather than hold a lease that may be
    someone else's by now.

    ``str(error)`` is the server's message, for people. Programs read the fields, which come
    from the status details the server sends with the refusal (``google.rpc.ErrorInfo`` and
    ``RetryInfo``, docs/errors.md), because the message may be reworded:

    ``reason``: why, as the server names it: ``LOCK_HELD`` (taken, and ``wait`` was 0),
    ``WAIT_EXPIRED`` (still taken when ``wait`` ran out) or ``NO_MAJORITY``; None when the
    refusal carried no details (a server older than them, the stream ended without a word, or
    the ``acquired`` came too late).
    ``holder``: the holder's description, as it gave it (may be ``""``); None if not named.
    ``retry_after``: seconds after which the server advises a retry (for a taken lock, the
    holder's remaining TTL: before then only its release frees the lock); None when it cannot
    tell (the key has no expiry, or the lock is free but others are ahead in line).
    ``metadata``: every named value the server sent (``lock``, ``holder``, ``waited_ms``...),
    as strings.
    """

    def __init__(self, message: str, *, reason: Optional[str] = None,
                 holder: Optional[str] = None, retry_after: Optional[float] = None,
                 metadata: Optional[Dict[str, str]] = None):
        super().__init__(message)
        self.reason = reason
        self.holder = holder
        self.retry_after = retry_after
        self.metadata: Dict[str, str] = dict(metadata or {})


def _error_details(error: grpc.RpcError) -> Tuple[Optional[str], Dict[str, str], Optional[float]]:
    """The reason, metadata and retry delay (seconds) of a failed call's status details (the
    ``grpc-status-details-bin`` trailer), as far as it has them.

    Works on a sync call's error and on ``grpc.aio``'s ``AioRpcError`` alike (both answer
    ``trailing_metadata()``, ``code()`` and ``details()`` at once). Details that do not match the
    status they came with (rewritten on the way) or cannot be read are ignored: the status
    itself still says what happened.
    """
    try:
        status = rpc_status.from_call(error)
    except (ValueError, DecodeError):
        status = None
    reason: Optional[str] = None
    metadata: Dict[str, str] = {}
    retry_after: Optional[float] = None
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            if info.domain == _ERROR_DOMAIN and reason is None:
                reason, metadata = info.reason, dict(info.metadata)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            retry_after = retry.retry_delay.seconds + retry.retry_delay.nanos / 1e9
    return reason, metadata, retry_after


def _refusal(error: grpc.RpcError) -> Optional[NotAcquired]:
    """The NotAcquired to raise for a call that failed with ``error``, or None if ``error`` is
    not a refusal (raise it as it is). Every place a status may become NotAcquired, threaded or
    asyncio, goes through here, so they all read the details the same way."""
    if error.code() != grpc.StatusCode.ABORTED:
        return None
    reason, metadata, retry_after = _error_details(error)
    return NotAcquired(error.details() or "lock not acquired", reason=reason,
                       holder=metadata.get("holder"), retry_after=retry_after,
                       metadata=metadata)


class Leader(NamedTuple):
    """An election's leader: its term (larger for every new leader) and published value."""

    term: int
    value: bytes


class Holder(NamedTuple):
    """One holder of a lock: its description, fencing token, and remaining TTL in seconds."""

    holder: str
    fencing_token: int
    ttl_remaining: float


class HeldLock(NamedTuple):
    """One held lock, as ``list()`` reports it.

    ``holder``, ``fencing_token`` and ``ttl_remaining`` (seconds) describe its oldest holder;
    ``holders`` are all of them, oldest fencing token first (several for a semaphore or shared
    readers). ``limit`` is the limit they hold it with (1 for a plain lock or readers);
    ``shared`` is true for readers.
    """

    name: str
    holder: str
    fencing_token: int
    ttl_remaining: float
    holders: Tuple[Holder, ...]
    limit: int
    shared: bool


class Listing(NamedTuple):
    """What ``list()`` found: the held locks (in no particular order), and whether more are
    held than it returned."""

    locks: Tuple[HeldLock, ...]
    truncated: bool


def _listing(answer: lock_pb2.ListResponse) -> Listing:
    def holders(lock: lock_pb2.HeldLock) -> Tuple[Holder, ...]:
        return tuple(Holder(h.holder, h.fencing_token, h.ttl_remaining_ms / 1000)
                     for h in lock.holders)

    return Listing(
        tuple(HeldLock(lock.name, lock.holder, lock.fencing_token, lock.ttl_remaining_ms / 1000,
                       holders(lock), lock.limit, lock.mode == lock_pb2.LEASE_MODE_SHARED)
              for lock in answer.locks),
        answer.truncated)


def _millis(seconds: float) -> int:
    return int(seconds * 1000)


def _host_port(entry: str) -> Tuple[str, str]:
    host, sep, port = entry.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"server {entry!r}: expected host:port")
    return host.removeprefix("[").removesuffix("]"), port


def _target(server: str) -> Tuple[str, List[Tuple[str, Any]]]:
    """The gRPC target for ``server``, and the channel options it needs.

    A gRPC target (``dns:``, ``ipv4:``, ``unix:``...) is used as it is, and a single
    ``host:port`` too (gRPC's DNS resolver gives ``pick_first`` every address of the name). A
    comma-separated list becomes one ``ipv4:``/``ipv6:`` target of every address (names are
    resolved now), so ``pick_first`` moves between them; its first entry is the authority (for
    TLS, certificates must be valid for that name).
    """
    server = server.strip()
    if server.startswith(_SCHEMES):
        return server, []
    entries = [entry.strip().removeprefix("http://") for entry in server.split(",")]
    entries = [entry for entry in entries if entry]
    if not entries:
        raise ValueError(f"no server address in {server!r}")
    if len(entries) == 1:
        return entries[0], []
    addresses: List[Tuple[Union[ipaddress.IPv4Address, ipaddress.IPv6Address], str]] = []
    for entry in entries:
        host, port = _host_port(entry)
        try:
            found = [ipaddress.ip_address(host)]
        except ValueError:
            try:
                infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
            except OSError as error:
                _log.warning("server %s left out: %s", entry, error)
                continue
            found = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
        for address in found:
            if (address, port) not in addresses:
                addresses.append((address, port))
    if not addresses:
        raise ValueError(f"no address found for any of {server!r}")
    if all(address.version == 4 for address, _ in addresses):
        target = "ipv4:" + ",".join(f"{address}:{port}" for address, port in addresses)
    else:  # IPv4 ones as IPv4-mapped IPv6 addresses: one target holds one family
        target = "ipv6:" + ",".join(
            f"[{address if address.version == 6 else '::ffff:' + str(address)}]:{port}"
            for address, port in addresses)
    return target, [("grpc.default_authority", entries[0])]


def _describe(error: Union[grpc.RpcError, str]) -> str:
    if isinstance(error, grpc.RpcError):
        return f"{error.code().name} {error.details()}"
    return error


def _resumable(error: Union[grpc.RpcError, str]) -> bool:
    """Whether a stream that ended so broke (rather than answered): a string is a stream that
    ended without its last word."""
    return not isinstance(error, grpc.RpcError) or error.code() in _RESUMABLE


def _pause(delay: float, until: float, now: float) -> float:
    """A jittered pause of about ``delay``, not past ``until``."""
    return max(0.0, min(random.uniform(delay / 2, delay), until - now))


def _grace(ttl: float, resume_grace: Optional[float], auto_resume: bool) -> float:
    """The grace to ask for: the caller's, else the TTL when resuming by itself, else none."""
    if resume_grace is not None:
        return resume_grace
    return ttl if auto_resume else 0.0


def _resumed(call: Any, field: str, what: str) -> Tuple[Any, Any]:
    """Reads a resuming stream up to its answer (`field`: "acquired", "elected"): `(answer,
    None)`, or `(None, failure)` for a `lost` (as `("lost", reason)`), the stream ending first
    (a sentence), or a failed call (the `grpc.RpcError`)."""
    try:
        for event in call:
            if event.HasField(field):
                return getattr(event, field), None
            if event.HasField("lost"):
                return None, ("lost", event.lost.reason)
    except grpc.RpcError as error:
        return None, error
    return None, f"the server ended the stream before resuming the {what}"

def _too_late(what: str, error: str) -> str:
    return f"could not resume before the {what}'s validity ran out: {error}"


def _vouched_until(opened: float, received: float, vouch: Any) -> float:
    """Until when ``vouch`` (an ``acquired``, ``extended`` or ``elected``) vouches for a lease
    or a leadership, by the clock of ``opened`` and ``received``: ``valid_for_ms`` from its
    receipt, and never past ``valid_to_ms`` after ``opened``, when the client opened the stream
    (the server counts it from when the stream reached it, which is later). That bound still
    holds when the message was held up on its way: a healed partition delivers old messages
    late, and one read as fresh would keep its client believing past the key. ``valid_to_ms``
    0: a server that predates it, only the receipt counts. A result not after ``received``:
    the news came too late to be believed at all."""
    from_receipt = received + vouch.valid_for_ms / 1000
    if not vouch.valid_to_ms:
        return from_receipt
    return min(from_receipt, opened + vouch.valid_to_ms / 1000)


def _refused_leadership(answer: Any, term: Optional[int], valid_until: float,
                        received: float) -> Optional[str]:
    """Why a resume's ``elected`` (received at ``received``, vouching until ``valid_until``) is
    not the leadership of ``term`` any more, or None if it is."""
    if answer.term != term:
        return f"resumed with term {answer.term} instead of {term}"
    if valid_until <= received:
        return f"could not resume: {_LATE_ELECTED}"
    return None


def _believes(term: Optional[int], over: bool, grace_ms: int, valid_until: float,
              now: float) -> bool:
    """Whether a candidate leads as far as it knows (``Candidate.leading``): elected, not over,
    and, with a grace (without one the server sends no ``extended``), not past ``valid_until``."""
    return term is not None and not over and (not grace_ms or now < valid_until)


class _LeaseState:
    """What a held lease knows of itself, whichever concurrency model reads its stream: whether
    it is lost (and why) and whether it was released. ``lost`` and ``_released`` are threading or
    asyncio events; ``_arm`` is the model's own timer."""

    name: str
    lost: Any
    lost_reason: Optional[str]
    fencing_token: int
    token: str
    _request: lock_pb2.LeaseAcquire
    _released: Any
    _was_held: bool
    #: When the current stream was opened, by ``_now()``: what ``valid_to_ms`` counts from.
    _opened: float

    def _now(self) -> float:
        """The model's clock, which ``valid_until`` and ``_opened`` are on."""
        raise NotImplementedError

    def _arm(self, valid_until: float) -> None:
        raise NotImplementedError

    def _lose(self, reason: str) -> None:
        if not self._released.is_set() and not self.lost.is_set():
            self.lost_reason = reason
            self.lost.set()
            _log.info("lease %r lost: %s", self.name, reason)

    def _hear(self, event: lock_pb2.LeaseResponse) -> bool:
        """Applies one event of the server's; True once the stream has said its last word
        (released or lost)."""
        kind = event.WhichOneof("event")
        if kind == "extended":
            self._arm(_vouched_until(self._opened, self._now(), event.extended))
        elif kind == "lost":
            self._lose(event.lost.reason)
            return True
        elif kind == "released":
            self._was_held = event.released.was_held
            return True
        return False

    def _broke(self, error: Union[grpc.RpcError, str]) -> str:
        """The lost reason for a stream that ended with ``error``, not resumed."""
        if isinstance(error, grpc.RpcError):
            return f"lease stream failed: {_describe(error)}"
        return error

    def _resume_request(self) -> lock_pb2.LeaseRequest:
        request = lock_pb2.LeaseAcquire()
        request.CopyFrom(self._request)
        request.resume_token = self.token
        return lock_pb2.LeaseRequest(acquire=request)

    def _same_lease(self, answer: lock_pb2.Acquired) -> Optional[str]:
        """Why a resume's answer is not this lease, or None if it is."""
        if answer.token != self.token or answer.fencing_token != self.fencing_token:
            return (f"resumed with fencing token {answer.fencing_token} instead of "
                    f"{self.fencing_token}")
        return None


_RELEASE = lock_pb2.LeaseRequest(release=lock_pb2.LeaseRelease())


class Lease(_LeaseState):
    """A held lock. Use ``lease(...)`` rather than building one by hand.

    ``lost`` (a ``threading.Event``) and ``lost_reason`` say whether and why it was lost;
    ``resumes`` counts the times it was taken back on a new stream after its stream broke;
    ``valid_until`` is when the validity last confirmed runs out (``time.monotonic()``).
    """

    def __init__(self, stub: lock_pb2_grpc.LockServiceStub, request: lock_pb2.LeaseAcquire,
                 auto_resume: bool = False):
        name = request.name
        self.name = name
        self.lost = threading.Event()
        self.lost_reason: Optional[str] = None
        self.resumes = 0
        self._stub = stub
        self._request = request
        self._auto_resume = auto_resume
        self._released = threading.Event()
        self._was_held = False
        # Guards what the watcher thread, the timer and release() share: the stream's outbox
        # (None between streams), the resume attempt in flight, the flags and the validity.
        self._mutex = threading.RLock()
        self._wake = threading.Event()  # cuts a pause between resume attempts short
        self._releasing = False
        self._resuming = False
        self._attempt: Optional[Any] = None
        self._last_error = ""
        self._timer: Optional[threading.Timer] = None
        self._generation = 0
        self.valid_until = 0.0
        self._outbox: Optional[queue.Queue] = queue.Queue()
        self._outbox.put(lock_pb2.LeaseRequest(acquire=request))
        self._opened = time.monotonic()
        self._events = stub.Lease(iter(self._outbox.get, None))
        try:
            for event in self._events:
                if event.HasField("acquired"):
                    break
            else:
                self._outbox.put(None)
                raise NotAcquired(f"lock {name!r}: the server ended the stream")
        except grpc.RpcError as error:
            self._outbox.put(None)  # ends the request iterator of the failed stream
            refusal = _refusal(error)
            if refusal is not None:
                raise refusal from None
            raise
        received = time.monotonic()
        valid_until = _vouched_until(self._opened, received, event.acquired)
        if valid_until <= received:
            # Held up on its way: the lease may be someone else's by now. The cancelled stream
            # lets go of it (or keeps it only for its grace).
            self._events.cancel()
            self._outbox.put(None)
            raise NotAcquired(f"lock {name!r}: {_LATE_ACQUIRED}")
        self.fencing_token: int = event.acquired.fencing_token
        self.token: str = event.acquired.token
        self._arm(valid_until)
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _lose(self, reason: str) -> None:
        with self._mutex:
            super()._lose(reason)

    def _now(self) -> float:
        return time.monotonic()

    def _arm(self, valid_until: float) -> None:
        """Declares the lease lost if nothing confirms it again before ``valid_until``."""
        with self._mutex:
            self._generation += 1
            self.valid_until = valid_until
            if self._timer:
                self._timer.cancel()
            self._timer = threading.Timer(max(0.0, valid_until - time.monotonic()), self._expire,
                                          args=(self._generation,))
            self._timer.daemon = True
            self._timer.start()

    def _expire(self, generation: int) -> None:
        with self._mutex:
            if generation != self._generation:
                return  # re-armed meanwhile
            attempt = self._attempt if self._resuming else None
            self._lose(_too_late("lease", self._last_error) if self._resuming else _SILENT)
        self._wake.set()
        if attempt is not None:
            attempt.cancel()

    def _watch(self) -> None:
        events = self._events
        try:
            while events is not None:
                error = self._follow(events)
                events = None if error is None else self._after_break(error)
        except Exception as error:  # a bug of ours must not leave the lease believed held
            _log.exception("lease %r: watcher failed", self.name)
            self._lose(f"client error: {error!r}")
        finally:
            with self._mutex:
                self._generation += 1
                if self._timer:
                    self._timer.cancel()
                if self._outbox is not None:
                    self._outbox.put(None)
                    self._outbox = None
            self._released.set()

    def _follow(self, events) -> Optional[Union[grpc.RpcError, str]]:
        """Reads one stream to its end: None if it ended with its last word, else how it broke."""
        try:
            for event in events:
                if self._hear(event):
                    return None
            return "the server ended the lease stream"
        except grpc.RpcError as error:
            return error

    def _after_break(self, error: Union[grpc.RpcError, str]):
        """The next stream after a break (resumed), or None when the lease is over."""
        with self._mutex:
            if self._outbox is not None:
                self._outbox.put(None)  # ends the old request iterator
                self._outbox = None
            if self.lost.is_set():
                return None
            if not self._releasing:
                if not self._auto_resume or not _resumable(error):
                    self._lose(self._broke(error))
                    return None
                self._resuming = True
                self._last_error = _describe(error)
        if self._releasing:  # its release may never have arrived: release by token
            self._release_by_token()
            return None
        _log.info("lease %r: stream broke (%s); resuming it", self.name, _describe(error))
        return self._resume()

    def _resume(self):
        delay = _FIRST_PAUSE
        while True:
            with self._mutex:
                if self.lost.is_set():
                    return None
                if self._releasing:
                    break
                if time.monotonic() >= self.valid_until:
                    self._lose(_too_late("lease", self._last_error))
                    return None
                outbox: queue.Queue = queue.Queue()
                outbox.put(self._resume_request())
                opened = time.monotonic()
                try:
                    call = self._stub.Lease(iter(outbox.get, None), wait_for_ready=True)
                except ValueError as error:  # the channel was closed
                    self._lose(f"could not resume: {error}")
                    return None
                self._attempt = call
            answer, failure = _resumed(call, "acquired", "lease")
            received = time.monotonic()
            with self._mutex:
                self._attempt = None
                if answer is not None:
                    if not self.lost.is_set():
                        valid_until = _vouched_until(opened, received, answer)
                        mismatch = self._same_lease(answer)
                        if mismatch is None and valid_until <= received:
                            mismatch = f"could not resume: {_LATE_ACQUIRED}"
                        if mismatch is None:
                            self._resuming = False
                            self._outbox = outbox
                            self.resumes += 1
                            self._opened = opened
                            self._arm(valid_until)
                            if self._releasing:  # release() came while we were between streams
                                outbox.put(_RELEASE)
                                outbox.put(None)
                                self._outbox = None
                            _log.info("lease %r resumed (fencing token %d)", self.name,
                                      self.fencing_token)
                            return call
                        self._lose(mismatch)
                    call.cancel()  # lost: the cancelled stream lets go
                    outbox.put(None)
                    return None
                outbox.put(None)
                if self.lost.is_set():
                    return None
                if isinstance(failure, tuple):
                    self._lose(failure[1])  # the server said `lost`
                    return None
                if not _resumable(failure):
                    self._lose(f"could not resume: {_describe(failure)}")
                    return None
                self._last_error = _describe(failure)
                if self._releasing:
                    break
                pause = _pause(delay, self.valid_until, time.monotonic())
            _log.debug("lease %r: resume failed (%s); again in %.3f s", self.name,
                       self._last_error, pause)
            self._wake.wait(pause)
            self._wake.clear()
            delay = min(delay * 2, _LAST_PAUSE)
        self._release_by_token()
        return None

    def _release_by_token(self) -> None:
        """Releases with the unary call, on any server: for a release asked between streams."""
        timeout = max(1.0, self.valid_until - time.monotonic())
        try:
            answer = self._stub.Release(lock_pb2.ReleaseRequest(name=self.name, token=self.token),
                                        timeout=timeout, wait_for_ready=True)
            self._was_held = answer.released
        except (grpc.RpcError, ValueError) as error:
            _log.warning("lease %r: release failed (%s); it expires by itself", self.name,
                         _describe(error) if isinstance(error, grpc.RpcError) else error)

    def release(self, timeout: float = 10.0) -> bool:
        """Releases the lock; returns True if it was still held."""
        with self._mutex:
            self._releasing = True
            if self._outbox is not None:
                self._outbox.put(_RELEASE)
                self._outbox.put(None)  # half-close
                self._outbox = None
        self._wake.set()
        self._released.wait(timeout)
        return self._was_held and not self.lost.is_set()


class _BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                   grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds `authorization: Bearer <token>` to every call (also on plaintext channels, where
    grpc's own call credentials are refused)."""

    def __init__(self, token: str):
        self._header = ("authorization", f"Bearer {token}")

    def _with_token(self, details):
        metadata = [*(details.metadata or ()), self._header]
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


def _channel_args(server: str, options: Sequence[Tuple[str, Any]]
                  ) -> Tuple[str, List[Tuple[str, Any]]]:
    """The target and options of a channel to ``server``: ours, then the caller's (which win)."""
    target, needed = _target(server)
    given = {key for key, _ in options}
    ours = [option for option in _CHANNEL_OPTIONS + needed if option[0] not in given]
    return target, [*ours, *options]


def connect(server: str = DEFAULT_SERVER, *, token: Optional[str] = None,
            root_certificates: Optional[bytes] = None, private_key: Optional[bytes] = None,
            certificate_chain: Optional[bytes] = None, tls: Optional[bool] = None,
            options: Sequence[Tuple[str, Any]] = ()) -> grpc.Channel:
    """A channel to Leasehold servers, for the `channel=` argument of every call.

    `server` as for every call: one server, a comma-separated list, a name with several
    addresses, or a gRPC target. TLS when `tls` is true, or when any certificate is given:
    `root_certificates` (PEM) to trust for the server, `private_key` and `certificate_chain`
    (PEM) for mutual TLS. `token` is sent as a bearer token with every call (the server's
    --auth-file grants it). `options`: more gRPC channel arguments.
    """
    target, channel_options = _channel_args(server, options)
    credentials = _credentials(tls, root_certificates, private_key, certificate_chain)
    if credentials is not None:
        channel = grpc.secure_channel(target, credentials, options=channel_options)
    else:
        channel = grpc.insecure_channel(target, options=channel_options)
    if token is not None:
        channel = grpc.intercept_channel(channel, _BearerToken(token))
    return channel


@contextmanager
def _channel(server: str, channel: Optional[grpc.Channel]) -> Iterator[grpc.Channel]:
    """The caller's channel, or one of our own for the block."""
    if channel is not None:
        yield channel
        return
    target, options = _channel_args(server, ())
    own = grpc.insecure_channel(target, options=options)
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
    request = _acquire_request(name, ttl, wait, holder, fair, limit, shared,
                               _grace(ttl, resume_grace, auto_resume), resume_token)
    with _channel(server, channel) as chan:
        held = Lease(lock_pb2_grpc.LockServiceStub(chan), request, auto_resume)
        try:
            yield held
        finally:
            held.release()


class Candidate:
    """One candidacy, held by one Campaign stream (or the next, when a leader's stream breaks
    and it resumes elsewhere). Use ``campaign(...)``.

    ``term`` is the term once elected; ``resumes`` counts the leadership's resumptions;
    ``leading`` says whether it leads now, as far as it knows.
    """

    def __init__(self, stub: election_pb2_grpc.ElectionServiceStub, election: str, value: bytes,
                 ttl: float, *, auto_resume: bool = False, resume_grace: float = 0.0):
        self.election = election
        self.term: Optional[int] = None
        self.resumes = 0
        self._stub = stub
        self._value = value  # the value to publish: the last proclaimed, or asked for
        self._ttl_ms = _millis(ttl)
        self._grace_ms = _millis(resume_grace)
        self._auto_resume = auto_resume and self._grace_ms > 0
        self._token = ""
        # Guards everything below, shared by the watcher thread, the timer and the caller.
        self._changed = threading.Condition(threading.RLock())
        self._over = False  # lost, resigned or failed: nothing more happens
        self._reason: Optional[str] = None
        self._error: Optional[grpc.RpcError] = None
        self._was_leader = False
        self._sent = 0  # proclaims asked for
        self._published = 0  # proclaims confirmed
        self._closed = False
        self._resuming = False
        self._attempt: Optional[Any] = None
        self._last_error = ""
        self._wake = threading.Event()
        self._timer: Optional[threading.Timer] = None
        self._generation = 0
        self._valid_until = 0.0
        self._outbox: Optional[queue.Queue] = queue.Queue()
        self._outbox.put(election_pb2.CampaignRequest(start=self._start("")))
        self._opened = time.monotonic()  # what the current stream's valid_to_ms counts from
        events = stub.Campaign(iter(self._outbox.get, None))
        threading.Thread(target=self._watch, args=(events,), daemon=True).start()

    def _start(self, resume_token: str) -> election_pb2.CampaignStart:
        return election_pb2.CampaignStart(
            election=self.election, value=self._value, ttl_ms=self._ttl_ms,
            resume_token=resume_token, resume_grace_ms=self._grace_ms)

    def _end(self, reason: str, error: Optional[grpc.RpcError] = None) -> None:
        with self._changed:
            if not self._over:
                self._over, self._reason, self._error = True, reason, error
                if self.term is not None and reason != "resigned":
                    _log.info("election %r: leadership lost: %s", self.election, reason)
                self._changed.notify_all()
        self._wake.set()

    def _arm(self, valid_until: float) -> None:
        """Ends the leadership if nothing confirms it again before ``valid_until`` (only with a
        grace: without one the server sends no `extended`)."""
        with self._changed:
            self._generation += 1
            self._valid_until = valid_until
            if self._timer:
                self._timer.cancel()
            if self._grace_ms:
                self._timer = threading.Timer(max(0.0, valid_until - time.monotonic()),
                                              self._expire, args=(self._generation,))
                self._timer.daemon = True
                self._timer.start()

    def _expire(self, generation: int) -> None:
        with self._changed:
            if generation != self._generation or self._over:
                return
            attempt = self._attempt if self._resuming else None
            self._end(_too_late("leadership", self._last_error) if self._resuming
                      else _LEADER_SILENT)
        if attempt is not None:
            attempt.cancel()

    def _watch(self, events) -> None:
        try:
            while events is not None:
                error = self._follow(events)
                events = None if error is None else self._after_break(error)
        except Exception as error:  # a bug of ours must not leave the leadership believed held
            _log.exception("election %r: watcher failed", self.election)
            self._end(f"client error: {error!r}")
        finally:
            with self._changed:
                self._generation += 1
                if self._timer:
                    self._timer.cancel()
                if self._outbox is not None:
                    self._outbox.put(None)
                    self._outbox = None
            self._end("the campaign stream ended")

    def _follow(self, events) -> Optional[Union[grpc.RpcError, str]]:
        """Reads one stream to its end: None if it ended with its last word, else how it broke."""
        try:
            for event in events:
                kind = event.WhichOneof("event")
                received = time.monotonic()
                with self._changed:
                    if kind == "elected":
                        valid_until = _vouched_until(self._opened, received, event.elected)
                        if valid_until <= received:
                            # Held up on its way: another may lead by now. Not a leadership:
                            # ended as a lost one is, its stream cancelled.
                            _log.info("election %r: %s", self.election, _LATE_ELECTED)
                            events.cancel()
                            self._end(_LATE_ELECTED)
                            return None
                        self.term, self._token = event.elected.term, event.elected.token
                        self._arm(valid_until)
                    elif kind == "extended":
                        self._arm(_vouched_until(self._opened, received, event.extended))
                    elif kind == "proclaimed":
                        self._published = min(self._published + 1, self._sent)
                    elif kind == "lost":
                        self._end(event.lost.reason)
                        return None
                    elif kind == "resigned":
                        if not self._over:
                            self._was_leader = event.resigned.was_leader
                        self._end("resigned")
                        return None
                    self._changed.notify_all()
            return "the campaign stream ended"
        except grpc.RpcError as error:
            return error

    def _after_break(self, error: Union[grpc.RpcError, str]):
        """The next stream after a break (resumed), or None when the candidacy is over."""
        with self._changed:
            if self._outbox is not None:
                self._outbox.put(None)
                self._outbox = None
            if self._over:
                return None
            if self.term is None or not self._auto_resume or not _resumable(error):
                if isinstance(error, grpc.RpcError):
                    self._end(f"campaign stream failed: {_describe(error)}", error)
                else:
                    self._end(error)
                return None
            self._resuming = True
            self._last_error = _describe(error)
        _log.info("election %r: stream broke (%s); resuming the leadership", self.election,
                  _describe(error))
        return self._resume()

    def _resume(self):
        delay = _FIRST_PAUSE
        while True:
            with self._changed:
                if self._over:
                    return None
                if time.monotonic() >= self._valid_until:
                    self._end(_too_late("leadership", self._last_error))
                    return None
                outbox: queue.Queue = queue.Queue()
                outbox.put(election_pb2.CampaignRequest(start=self._start(self._token)))
                opened = time.monotonic()
                try:
                    call = self._stub.Campaign(iter(outbox.get, None), wait_for_ready=True)
                except ValueError as error:  # the channel was closed
                    self._end(f"could not resume: {error}")
                    return None
                self._attempt = call
            answer, failure = _resumed(call, "elected", "leadership")
            received = time.monotonic()
            with self._changed:
                self._attempt = None
                if answer is not None:
                    valid_until = _vouched_until(opened, received, answer)
                    refused = _refused_leadership(answer, self.term, valid_until, received)
                    if not self._over and refused is None:
                        self._resuming = False
                        self._outbox = outbox
                        self.resumes += 1
                        self._published = self._sent  # the start published the last value
                        self._opened = opened
                        self._arm(valid_until)
                        if self._closed:  # resign() came while we were between streams
                            outbox.put(election_pb2.CampaignRequest(
                                resign=election_pb2.Resign()))
                            outbox.put(None)
                            self._outbox = None
                        self._changed.notify_all()
                        _log.info("election %r: leadership resumed (term %d)", self.election,
                                  self.term)
                        return call
                    if refused is not None:
                        self._end(refused)
                    call.cancel()
                    outbox.put(None)
                    return None
                outbox.put(None)
                if self._over:
                    return None
                if isinstance(failure, tuple):
                    self._end(failure[1])
                    return None
                if not _resumable(failure):
                    self._end(f"could not resume: {_describe(failure)}")
                    return None
                self._last_error = _describe(failure)
                pause = _pause(delay, self._valid_until, time.monotonic())
            self._wake.wait(pause)
            self._wake.clear()
            delay = min(delay * 2, _LAST_PAUSE)

    def elected(self) -> int:
        """Waits in line until this candidate leads; returns its term."""
        with self._changed:
            self._changed.wait_for(lambda: self.term is not None or self._over)
            if self.term is not None:
                return self.term
            if self._error is not None:
                raise self._error
            raise RuntimeError(f"election {self.election!r}: {self._reason}")

    def proclaim(self, value: bytes) -> None:
        """Publishes a new value while leading."""
        with self._changed:
            if not self._over:
                self._value = value
                self._sent += 1
                if self._outbox is not None:  # else the resumed stream publishes it
                    self._outbox.put(election_pb2.CampaignRequest(
                        proclaim=election_pb2.Proclaim(value=value)))
                sent = self._sent
                self._changed.wait_for(lambda: self._published >= sent or self._over)
                if self._published >= sent:
                    return
            if self._error is not None:
                raise self._error
            raise RuntimeError(f"leadership lost: {self._reason}")

    @property
    def leading(self) -> bool:
        """Whether this candidate leads now, as far as it knows: elected, neither lost nor
        resigned, and (with a resume grace, under which its server confirms every renewal) the
        validity last confirmed not yet run out by this process's clock; also while it resumes
        within that validity. The clock is read here, not only by the timer that ends the
        leadership: a process woken from a freeze that outlasted its validity says False at once,
        before that timer has run."""
        with self._changed:
            return _believes(self.term, self._over or self._closed, self._grace_ms,
                             self._valid_until, time.monotonic())

    def lost(self) -> str:
        """Waits until the leadership is lost; returns the reason. Only while leading."""
        with self._changed:
            self._changed.wait_for(lambda: self._over)
            return self._reason or ""

    def resign(self) -> bool:
        """Steps down (or leaves the line); True if this candidate was leading."""
        with self._changed:
            if self._closed:
                return False
            self._closed = True
            if self._outbox is not None:  # else the resumed stream resigns
                self._outbox.put(election_pb2.CampaignRequest(resign=election_pb2.Resign()))
                self._outbox.put(None)
                self._outbox = None
            self._wake.set()
            self._changed.wait_for(lambda: self._over, timeout=10)
            return self._was_leader


@contextmanager
def campaign(election: str, value: bytes, *, server: str = DEFAULT_SERVER, ttl: float = 5.0,
             auto_resume: bool = True, resume_grace: Optional[float] = None,
             channel: Optional[grpc.Channel] = None) -> Iterator[Candidate]:
    """Runs for leader of ``election`` for the ``with`` block; call ``elected()`` to wait.

    ``ttl`` bounds how long the election stays leaderless if this process's server dies while
    it leads. ``auto_resume`` (the default): a leader whose stream breaks takes its leadership
    back on any server, with the same term, before it runs out (``resume_grace``, default
    ``ttl``, is how long the server keeps it); ``lost()`` returns only if that fails. Leaving
    the block steps down.
    """
    with _channel(server, channel) as chan:
        candidate = Candidate(election_pb2_grpc.ElectionServiceStub(chan), election, value, ttl,
                              auto_resume=auto_resume,
                              resume_grace=_grace(ttl, resume_grace, auto_resume))
        try:
            yield candidate
        finally:
            candidate.resign()


# Sessions: many leases on one Session stream (proto/leasehold/v1/session.proto).
#
# `_SessionCore` is what a session knows and decides, whichever concurrency model reads its
# stream (threads here, asyncio in `aio`): its leases by id, the validity of each, what to send
# on a new stream after a break, and what every answer of the server's means. It never blocks;
# the model supplies the clock, events, queues, the timer and the waiting (`_now`, `_new_event`,
# `_new_queue`, `_notify`, `_schedule`, `_abort`), and holds its lock (threads) around every call.

_WAITING, _HELD, _OVER = "waiting", "held", "over"
_CLOSE = session_pb2.SessionRequest(close=session_pb2.SessionClose())
_STATUS_CODES = {code.value[0]: code for code in grpc.StatusCode}


class LeaseFailed(grpc.RpcError):
    """A lease on a session could not be had, with the status a Lease stream would have ended
    with (``failed`` on the session: INVALID_ARGUMENT, FAILED_PRECONDITION, NOT_FOUND,
    RESOURCE_EXHAUSTED, UNAVAILABLE...). It answers ``code()``, ``details()`` and
    ``trailing_metadata()`` as a failed call does, so it is read as one (ABORTED, a refusal, is
    raised as ``NotAcquired`` instead, with its details)."""

    def __init__(self, code: int, message: str, status: bytes = b""):
        super().__init__(message)
        self._code = _STATUS_CODES.get(code, grpc.StatusCode.UNKNOWN)
        self._message = message
        self._status = status

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._message

    def trailing_metadata(self) -> Tuple[Tuple[str, bytes], ...]:
        """The status details as a call's trailer carries them (``grpc-status-details-bin``)."""
        return (("grpc-status-details-bin", self._status),) if self._status else ()

    def __str__(self) -> str:
        return f"{self._code.name}: {self._message}"


def _failure(failed: session_pb2.SessionFailed) -> Exception:
    """What to raise for a lease answered ``failed``: NotAcquired for a refusal (with its
    details, read as a stream's status is), else a LeaseFailed."""
    error = LeaseFailed(failed.code, failed.message, failed.status)
    return _refusal(error) or error


class _Member:
    """One lease of a session (a lock or a campaign), as its session tracks it. Every field is
    the session's to change (under its lock, for threads)."""

    #: "lock" or "election", for messages.
    _what = "lock"

    def __init__(self, session: "_SessionCore", member_id: int, name: str,
                 request: session_pb2.SessionRequest):
        self.id = member_id
        self.name = name
        self.token = ""
        self.fencing_token = 0
        #: When the validity last confirmed for this lease runs out (the session's clock).
        self.valid_until = 0.0
        #: How many times it was taken back on a new stream after its session's stream broke.
        self.resumes = 0
        self.lost_reason: Optional[str] = None
        self._session = session
        self._request = request  # as sent first; a campaign's value is the last proclaimed
        self._lost_event = session._new_event()
        self._state = _WAITING
        self._failure: Optional[Exception] = None  # why it was never held
        self._resuming = False  # held, re-sent with its token on a new stream, not answered yet
        self._releasing = False
        self._was_held = False

    def _resume_request(self) -> session_pb2.SessionRequest:
        request = session_pb2.SessionRequest()
        request.CopyFrom(self._request)
        getattr(request, request.WhichOneof("action")).resume_token = self.token
        return request

    def _held(self) -> None:
        """Called when it is first held."""

    def _resumed(self) -> None:
        """Called when a new stream took it back."""

    def _not_had(self, reason: str) -> Exception:
        return NotAcquired(f"lock {self.name!r}: {reason}")

    def _late(self) -> str:
        return _LATE_ACQUIRED


class _CandidateMember(_Member):
    """A campaign on a session: what its proclaims have published."""

    _what = "election"

    def __init__(self, session: "_SessionCore", member_id: int, name: str,
                 request: session_pb2.SessionRequest):
        super().__init__(session, member_id, name, request)
        self.term: Optional[int] = None
        self._sent = 0  # proclaims asked for
        self._published = 0  # the last of them confirmed
        self._in_flight: Deque[int] = deque()  # proclaims sent on this stream, unanswered
        self._resent = 0  # the proclaim a resume's campaign carries

    def _held(self) -> None:
        self.term = self.fencing_token

    def _resumed(self) -> None:
        self._published = max(self._published, self._resent)
        if self._sent > self._resent:  # proclaimed while the resume was on its way
            self._session._proclaim(self)

    def _not_had(self, reason: str) -> Exception:
        return RuntimeError(f"election {self.name!r}: {reason}")

    def _late(self) -> str:
        return _LATE_ELECTED


class _SessionCore:
    """A session's state and rules; see the comment above."""

    lost: Any
    lost_reason: Optional[str]
    resumes: int

    # The concurrency model's part.
    def _now(self) -> float:
        raise NotImplementedError

    def _new_event(self) -> Any:
        raise NotImplementedError

    def _new_queue(self) -> Any:
        raise NotImplementedError

    def _notify(self) -> None:
        """Wakes whoever waits for a change."""
        raise NotImplementedError

    def _schedule(self, when: Optional[float]) -> None:
        """Calls ``_tick`` at ``when`` (the model's clock), instead of any earlier schedule."""
        raise NotImplementedError

    def _abort(self) -> None:
        """Stops the stream (or the attempt to open one) in flight: the session is over."""
        raise NotImplementedError

    def _setup(self, ttl: float, resume_grace: float, holder: str, auto_resume: bool) -> None:
        open_ = session_pb2.SessionOpen(ttl_ms=_millis(ttl), resume_grace_ms=_millis(resume_grace),
                                        holder=holder)
        self._open_request = session_pb2.SessionRequest(open=open_)
        self._grace = resume_grace
        self._auto_resume = auto_resume and open_.resume_grace_ms > 0
        self._members: Dict[int, _Member] = {}
        self._next_id = 0
        self._outbox: Any = None  # the live stream's requests; None between streams
        self._call: Any = None
        self._opened = 0.0  # when the live stream was opened: what valid_to_ms counts from
        self._heard = False  # the live stream said something
        self._established = False  # some stream said something: a break is worth resuming
        self._over = False
        self._error: Optional[grpc.RpcError] = None
        self._closing = False
        self._close_sent = False
        self._resuming = False  # from a break until the new stream says something
        self._resume_until = 0.0
        self._last_error = ""
        self._delay = _FIRST_PAUSE
        self._armed_at: Optional[float] = None  # when the timer is set for
        self.resumes = 0
        self.lost = self._new_event()
        self.lost_reason = None

    # Requests.
    def _send(self, request: session_pb2.SessionRequest) -> None:
        if self._outbox is not None:  # else the next stream sends what is still needed
            self._outbox.put_nowait(request)

    def _open_stream(self) -> Any:
        """The requests of a new stream: `open`, then every lease again (a held one with its
        token, a waiting one afresh)."""
        outbox = self._new_queue()
        outbox.put_nowait(self._open_request)
        for member in sorted(self._members.values(), key=lambda m: m.id):
            if member._state == _HELD:
                member._resuming = True
                if isinstance(member, _CandidateMember):
                    member._resent = member._sent
                    member._in_flight.clear()
                outbox.put_nowait(member._resume_request())
            elif member._releasing:  # gave up waiting between streams
                self._finish(member, False)
            else:
                outbox.put_nowait(member._request)
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
                and not any(member._resuming for member in self._members.values())):
            self._close_sent = True
            self._outbox.put_nowait(_CLOSE)
            self._outbox.put_nowait(None)  # half-close
            self._outbox = None

    def _usable(self) -> None:
        if self._over:
            if self._error is not None:
                raise self._error
            raise RuntimeError(f"session over: {self.lost_reason or 'closed'}")
        if self._closing:
            raise RuntimeError("session closed")

    def _add(self, member: _Member) -> None:
        self._usable()
        self._members[member.id] = member
        self._send(member._request)

    def _take_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _acquire_request(self, name: str, wait: float, holder: str, fair: bool, limit: int,
                         shared: bool) -> Tuple[int, session_pb2.SessionRequest]:
        member_id = self._take_id()
        mode = lock_pb2.LEASE_MODE_SHARED if shared else lock_pb2.LEASE_MODE_EXCLUSIVE
        return member_id, session_pb2.SessionRequest(acquire=session_pb2.SessionAcquire(
            id=member_id, name=name, wait_ms=_millis(wait), holder=holder, fair=fair,
            limit=limit, mode=mode))

    def _campaign_request(self, election: str,
                          value: bytes) -> Tuple[int, session_pb2.SessionRequest]:
        member_id = self._take_id()
        return member_id, session_pb2.SessionRequest(campaign=session_pb2.SessionCampaign(
            id=member_id, election=election, value=value))

    def _let_go(self, member: _Member) -> None:
        """Asks for one lease to be released (or its wait given up)."""
        if member._state == _OVER or member._releasing:
            return
        member._releasing = True
        if not member._resuming:  # else once its resume is answered
            self._send(_release(member.id))

    def _proclaim(self, member: _CandidateMember) -> None:
        if member._resuming or self._outbox is None:
            return  # the resume carries the last value, or its answer sends it
        member._in_flight.append(member._sent)
        self._send(session_pb2.SessionRequest(proclaim=session_pb2.SessionProclaim(
            id=member.id, value=member._request.campaign.value)))

    def _begin_close(self) -> None:
        if not self._over:
            self._closing = True
            self._close_if_due()

    # Endings.
    def _finish(self, member: _Member, was_held: bool) -> None:
        """A lease let go at our request (or by the session's close)."""
        if member._state == _OVER:
            return
        if member._state == _WAITING:
            member._failure = member._not_had("released while waiting")
        member._state = _OVER
        member._was_held = was_held
        self._members.pop(member.id, None)

    def _drop(self, member: _Member, reason: str, error: Optional[Exception] = None, *,
              tell: bool = True) -> None:
        """A lease that is no longer ours: lost if it was held, failed if not. ``tell``: the
        server may still hold it (we gave up on it), so it is released there too."""
        if member._state == _OVER:
            return
        was = member._state
        member._state = _OVER
        self._members.pop(member.id, None)
        if was == _WAITING:
            member._failure = error or member._not_had(reason)
        elif not member._releasing:
            member.lost_reason = reason
            member._lost_event.set()
            _log.info("%s %r lost: %s", member._what, member.name, reason)
        if tell:
            self._send(_release(member.id))

    def _end(self, reason: str, *, closed: bool = False, error: Optional[grpc.RpcError] = None,
             abort: bool = False) -> None:
        """The session is over: closed at our request, or lost (every lease with it)."""
        if self._over:
            return
        self._over, self._error = True, error
        outbox, self._outbox = self._outbox, None
        for member in tuple(self._members.values()):
            if closed:
                self._finish(member, member._state == _HELD)
            else:
                self._drop(member, reason, error)
        if outbox is not None:
            outbox.put_nowait(None)
        if not closed and not self._closing:
            self.lost_reason = reason
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
                     if member._state == _HELD]
        if self._resuming:
            deadlines.append(self._resume_until)
        when = min(deadlines) if deadlines else None
        if when != self._armed_at:  # most answers change nothing: no new timer for them
            self._armed_at = when
            self._schedule(when)

    def _tick(self) -> None:
        """The timer: leases past their validity are lost, by this process's clock."""
        self._armed_at = None  # fired
        if self._over:
            return
        now = self._now()
        for member in tuple(self._members.values()):
            if member._state == _HELD and member.valid_until <= now:
                self._drop(member, _too_late("lease", self._last_error) if member._resuming
                           else _SILENT)
        if self._resuming and now >= self._resume_until:
            self._end(_too_late("session", self._last_error), abort=True)
            return
        self._rearm()
        self._close_if_due()
        self._notify()

    # The server's answers.
    def _hear(self, event: session_pb2.SessionResponse) -> bool:
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
            valid_until = _vouched_until(self._opened, received, event.kept_alive)
            for held in self._members.values():
                if held._state == _HELD and not held._resuming:
                    held.valid_until = valid_until
        elif kind == "acquired":
            self._acquired(member, event.acquired, received)
        elif kind == "proclaimed":
            if isinstance(member, _CandidateMember) and member._in_flight:
                member._published = max(member._published, member._in_flight.popleft())
        elif kind == "released":
            if member is not None:
                self._finish(member, event.released.was_held)
        elif kind == "lease_lost":
            if member is not None:
                self._drop(member, event.lease_lost.reason, tell=False)
        elif kind == "failed":
            if member is not None:
                self._failed(member, event.failed)
        elif kind == "closed":
            self._end("closed", closed=True)
            return True
        elif kind == "lost":
            self._end(event.lost.reason)
            return True
        self._rearm()
        self._close_if_due()
        self._notify()
        return False

    def _acquired(self, member: Optional[_Member], answer: session_pb2.SessionAcquired,
                  received: float) -> None:
        valid_until = _vouched_until(self._opened, received, answer)
        if member is None:  # let go meanwhile (lost by our clock, say): let it go there too
            self._send(_release(answer.id))
            return
        if member._state == _WAITING:
            if valid_until <= received:
                # Held up on its way: it may be someone else's by now. Not a lease.
                self._drop(member, member._late())
                return
            member.token, member.fencing_token = answer.token, answer.fencing_token
            member._state = _HELD
            member.valid_until = valid_until
            member._held()
        elif member._resuming:
            mismatch = None
            if answer.token != member.token or answer.fencing_token != member.fencing_token:
                mismatch = (f"resumed with fencing token {answer.fencing_token} instead of "
                            f"{member.fencing_token}")
            elif valid_until <= received:
                mismatch = f"could not resume: {member._late()}"
            if mismatch is not None:
                self._drop(member, mismatch)
                return
            member._resuming = False
            member.resumes += 1
            member.valid_until = valid_until
            member._resumed()
            _log.info("%s %r resumed on the session (fencing token %d)", member._what,
                      member.name, member.fencing_token)
        if member._releasing:  # let go while it was on its way
            self._send(_release(member.id))

    def _failed(self, member: _Member, failed: session_pb2.SessionFailed) -> None:
        error = _failure(failed)
        if member._state == _WAITING:
            self._drop(member, failed.message, error, tell=False)
        elif member._releasing:
            self._finish(member, False)
        else:
            code = _STATUS_CODES.get(failed.code, grpc.StatusCode.UNKNOWN).name
            prefix = "could not resume: " if member._resuming else ""
            self._drop(member, f"{prefix}{code} {failed.message}", tell=False)

    # Breaks.
    def _broke(self, error: Union[grpc.RpcError, str]) -> Optional[float]:
        """Decides what a broken stream means: None when the session is over, else how long to
        pause before the next stream."""
        outbox, self._outbox, self._call = self._outbox, None, None
        if outbox is not None:
            outbox.put_nowait(None)
        if self._over:
            return None
        if not self._auto_resume or not self._established or not _resumable(error):
            if isinstance(error, grpc.RpcError):
                self._end(f"session stream failed: {_describe(error)}", error=error)
            else:
                self._end(error)
            return None
        now = self._now()
        pause = 0.0
        if self._heard or not self._resuming:  # a stream that worked: a break of its own
            held = [m.valid_until for m in self._members.values() if m._state == _HELD]
            self._resume_until = max([now + self._grace, *held])
            self._delay = _FIRST_PAUSE
        else:  # the last attempt got nowhere
            pause = _pause(self._delay, self._resume_until, now)
            self._delay = min(self._delay * 2, _LAST_PAUSE)
        self._resuming = True
        self._last_error = _describe(error)
        for member in self._members.values():
            if member._state == _HELD:
                member._resuming = True
        _log.info("session stream broke (%s); resuming it", self._last_error)
        self._rearm()
        return pause

    def _reopen(self, open_call: Callable[[Any], Any]) -> Any:
        """Opens the next stream after a break (``open_call`` makes the call from its requests),
        or returns None when the session is over."""
        if self._over:
            return None
        if self._now() >= self._resume_until:
            self._end(_too_late("session", self._last_error))
            return None
        outbox = self._open_stream()
        try:
            self._call = open_call(outbox)
        except (ValueError, grpc.RpcError) as error:  # the channel was closed
            self._end(f"could not resume: {error}")
            return None
        return self._call


def _release(member_id: int) -> session_pb2.SessionRequest:
    return session_pb2.SessionRequest(release=session_pb2.SessionRelease(id=member_id))


class SessionLease(_Member):
    """A lock held on a session. Use ``session.lock(...)`` or ``session.acquire(...)``.

    ``fencing_token`` and ``token`` as for a ``Lease``; ``lost`` (a ``threading.Event``) and
    ``lost_reason`` say whether and why this lease alone was lost; ``resumes`` counts the times
    it was taken back on a new stream; ``valid_until`` is when the validity last confirmed for
    it runs out (``time.monotonic()``).
    """

    _session: "Session"

    @property
    def lost(self) -> threading.Event:
        return self._lost_event

    def release(self, timeout: float = 10.0) -> bool:
        """Releases the lock (the session goes on); returns True if it was still held."""
        changed = self._session._changed
        with changed:
            self._session._let_go(self)
            changed.wait_for(lambda: self._state == _OVER, timeout)
            return self._was_held and not self._lost_event.is_set()


class SessionCandidate(_CandidateMember):
    """A campaign on a session. Use ``session.campaign(...)``.

    ``term`` is the term once elected; ``resumes`` counts the leadership's resumptions.
    """

    _session: "Session"

    def elected(self) -> int:
        """Waits in line until this candidate leads; returns its term."""
        changed = self._session._changed
        with changed:
            changed.wait_for(lambda: self._state != _WAITING)
            if self._failure is not None:
                raise self._failure
            return self.fencing_token

    def proclaim(self, value: bytes) -> None:
        """Publishes a new value while leading."""
        changed = self._session._changed
        with changed:
            if self._state != _HELD:
                raise RuntimeError(f"election {self.name!r}: not leading"
                                   + (f" ({self.lost_reason})" if self.lost_reason else ""))
            self._request.campaign.value = value
            self._sent += 1
            sent = self._sent
            self._session._proclaim(self)
            changed.wait_for(lambda: self._published >= sent or self._state == _OVER)
            if self._published < sent:
                raise RuntimeError(f"leadership lost: {self.lost_reason}")

    def lost(self) -> str:
        """Waits until the leadership (or the candidacy) is over; returns why it was lost ("" if
        it was resigned)."""
        changed = self._session._changed
        with changed:
            changed.wait_for(lambda: self._state == _OVER)
            return self.lost_reason or ""

    def resign(self, timeout: float = 10.0) -> bool:
        """Steps down (or leaves the line); True if this candidate was leading."""
        changed = self._session._changed
        with changed:
            self._session._let_go(self)
            changed.wait_for(lambda: self._state == _OVER, timeout)
            return self._was_held and not self._lost_event.is_set()


class Session(_SessionCore):
    """Many leases on one Session stream, renewed and confirmed together. Use ``session(...)``.

    ``lost`` (a ``threading.Event``) and ``lost_reason`` say whether and why the whole session
    was lost (every lease on it with it); ``resumes`` counts the times its stream was opened
    again on a server after a break.
    """

    def __init__(self, stub: session_pb2_grpc.SessionServiceStub, ttl: float, *,
                 resume_grace: float, holder: str = "", auto_resume: bool = True):
        self._stub = stub
        # Guards the session and its leases, shared by the watcher thread, the timer and callers.
        self._changed = threading.Condition(threading.RLock())
        self._wake = threading.Event()  # cuts a pause between attempts to resume short
        self._timer: Optional[threading.Timer] = None
        self._generation = 0
        self._setup(ttl, resume_grace, holder, auto_resume)
        with self._changed:
            outbox = self._open_stream()
            self._call = stub.Session(iter(outbox.get, None))
        self._watcher = threading.Thread(target=self._watch, args=(self._call,), daemon=True)
        self._watcher.start()

    def _now(self) -> float:
        return time.monotonic()

    def _new_event(self) -> threading.Event:
        return threading.Event()

    def _new_queue(self) -> queue.Queue:
        return queue.Queue()

    def _notify(self) -> None:
        self._changed.notify_all()

    def _schedule(self, when: Optional[float]) -> None:
        self._generation += 1
        if self._timer:
            self._timer.cancel()
            self._timer = None
        if when is not None:
            self._timer = threading.Timer(max(0.0, when - time.monotonic()), self._on_timer,
                                          args=(self._generation,))
            self._timer.daemon = True
            self._timer.start()

    def _on_timer(self, generation: int) -> None:
        with self._changed:
            if generation == self._generation:  # else re-armed meanwhile
                self._tick()

    def _abort(self) -> None:
        self._wake.set()
        if self._call is not None:
            self._call.cancel()

    def _watch(self, call: Any) -> None:
        try:
            while call is not None:
                error = self._follow(call)
                call = None if error is None else self._after_break(error)
        except Exception as error:  # a bug of ours must not leave leases believed held
            _log.exception("session: watcher failed")
            with self._changed:
                self._end(f"client error: {error!r}")
        finally:
            with self._changed:
                self._end("the session stream ended")

    def _follow(self, call: Any) -> Optional[Union[grpc.RpcError, str]]:
        """Reads one stream to its end: None if it ended with its last word, else how it broke."""
        try:
            for event in call:
                with self._changed:
                    if self._hear(event):
                        return None
            return "the server ended the session stream"
        except grpc.RpcError as error:
            return error

    def _after_break(self, error: Union[grpc.RpcError, str]) -> Any:
        with self._changed:
            pause = self._broke(error)
        if pause is None:
            return None
        if pause:
            self._wake.wait(pause)
            self._wake.clear()
        with self._changed:
            return self._reopen(lambda outbox: self._stub.Session(iter(outbox.get, None),
                                                                  wait_for_ready=True))

    def acquire(self, name: str, *, wait: float = 0.0, holder: str = "", fair: bool = True,
                limit: int = 1, shared: bool = False) -> SessionLease:
        """Takes lock ``name`` on the session and returns it held, until ``release()`` or the
        session's end. The options are those of ``lease()`` (``holder``: the session's if
        empty); NotAcquired if it stays taken, the failed call's error for other refusals."""
        with self._changed:
            member_id, request = self._acquire_request(name, wait, holder, fair, limit, shared)
            held = SessionLease(self, member_id, name, request)
            self._add(held)
            self._changed.wait_for(lambda: held._state != _WAITING)
            if held._failure is not None:
                raise held._failure
            return held

    @contextmanager
    def lock(self, name: str, *, wait: float = 0.0, holder: str = "", fair: bool = True,
             limit: int = 1, shared: bool = False) -> Iterator[SessionLease]:
        """Holds lock ``name`` on the session for the ``with`` block (see ``acquire``)."""
        held = self.acquire(name, wait=wait, holder=holder, fair=fair, limit=limit,
                            shared=shared)
        try:
            yield held
        finally:
            held.release()

    @contextmanager
    def campaign(self, election: str, value: bytes) -> Iterator[SessionCandidate]:
        """Runs for leader of ``election`` on the session for the ``with`` block (in line as
        long as the session lives); call ``elected()`` to wait. Leaving the block steps down."""
        with self._changed:
            member_id, request = self._campaign_request(election, value)
            candidate = SessionCandidate(self, member_id, election, request)
            self._add(candidate)
        try:
            yield candidate
        finally:
            candidate.resign()

    def close(self, timeout: float = 10.0) -> None:
        """Releases every lease on the session and ends it."""
        with self._changed:
            self._begin_close()
            self._wake.set()
            if not self._changed.wait_for(lambda: self._over, timeout):
                self._end("closing timed out", closed=True, abort=True)
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
    with _channel(server, channel) as chan:
        opened = Session(session_pb2_grpc.SessionServiceStub(chan), ttl, holder=holder,
                         auto_resume=auto_resume,
                         resume_grace=_grace(ttl, resume_grace, auto_resume))
        try:
            yield opened
        finally:
            opened.close()


def _leader(has_leader: bool, term: int, value: bytes) -> Optional[Leader]:
    return Leader(term, value) if has_leader else None


def leader(election: str, *, server: str = DEFAULT_SERVER,
           channel: Optional[grpc.Channel] = None) -> Optional[Leader]:
    """The leader of ``election`` now, or None."""
    with _channel(server, channel) as chan:
        answer = election_pb2_grpc.ElectionServiceStub(chan).Leader(
            election_pb2.LeaderRequest(election=election))
        return _leader(answer.has_leader, answer.term, answer.value)


def list(limit: int = 0, *, server: str = DEFAULT_SERVER,
         channel: Optional[grpc.Channel] = None) -> Listing:
    """The locks held now, at most ``limit`` of them (0: the server's maximum, 1,000).

    ``truncated`` says whether more are held than were returned: the server bounds every answer
    so that one call cannot make it walk and send a whole large Redis. It is a bounded SCAN of
    the server's key prefix, not a snapshot: a lock taken or released during the call may or
    may not appear. So it is for looking (an operator, a dashboard, a test), not for deciding
    who may act: that is what holding a lease, and its fencing token, are for.
    """
    with _channel(server, channel) as chan:
        answer = lock_pb2_grpc.LockServiceStub(chan).List(lock_pb2.ListRequest(limit=limit))
        return _listing(answer)


_NOTHING_YET = object()


def observe(election: str, *, server: str = DEFAULT_SERVER,
            channel: Optional[grpc.Channel] = None) -> Iterator[Optional[Leader]]:
    """Yields the leader of ``election`` now (None for none), then every change, in order.

    When the stream breaks (its server stopped), it follows the election again on any server,
    yielding the state it finds there only if it differs from the last one yielded.
    """
    with _channel(server, channel) as chan:
        stub = election_pb2_grpc.ElectionServiceStub(chan)
        last: Any = _NOTHING_YET
        delay = _FIRST_PAUSE
        while True:
            states = stub.Observe(election_pb2.ObserveRequest(election=election),
                                  wait_for_ready=last is not _NOTHING_YET)
            try:
                for state in states:
                    delay = _FIRST_PAUSE
                    now = _leader(state.has_leader, state.term, state.value)
                    if now != last:
                        last = now
                        yield now
                return
            except grpc.RpcError as error:
                if last is _NOTHING_YET or not _resumable(error):
                    raise
                _log.info("election %r: observing again (%s)", election, _describe(error))
            finally:
                states.cancel()
            time.sleep(random.uniform(delay / 2, delay))  # a backoff pause between attempts
            delay = min(delay * 2, _LAST_PAUSE)
