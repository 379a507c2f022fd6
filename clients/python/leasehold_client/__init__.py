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
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import grpc
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from leasehold.v1 import election_pb2, election_pb2_grpc, lock_pb2, lock_pb2_grpc

# `list` is left out: `from leasehold_client import *` would hide the builtin. Call it as
# `leasehold_client.list()`.
__all__ = [
    "DEFAULT_SERVER", "Leader", "Lease", "NotAcquired", "Candidate", "Holder", "HeldLock",
    "Listing", "lease", "campaign", "leader", "observe", "connect",
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

    ``term`` is the term once elected; ``resumes`` counts the leadership's resumptions.
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
