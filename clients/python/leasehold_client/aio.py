"""The same client for ``asyncio`` (``grpc.aio``).

    from leasehold_client.aio import lease

    async with lease("nightly-report", ttl=10, wait=30) as held:
        work = asyncio.create_task(do_work(held.fencing_token))
        lost = asyncio.create_task(held.lost.wait())
        await asyncio.wait({work, lost}, return_when=asyncio.FIRST_COMPLETED)

``held.lost`` (an ``asyncio.Event``) is set when the server says the lease is lost, when the
stream breaks and the lease cannot be resumed on another server, or when the validity the
server last confirmed runs out by this process's clock. ``server``, ``auto_resume`` and the
other options are those of the threaded client (``leasehold_client``).

Sessions, many leases on one stream, as ``leasehold_client.session``::

    async with session(ttl=10) as s:
        async with s.lock("shard-1") as one, s.campaign("leader", b"me") as me:
            await me.elected()
"""

from __future__ import annotations

import asyncio
import random
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, Optional, Sequence, Set, Tuple, Union

import grpc
from grpc import aio
from leasehold.v1 import (election_pb2, election_pb2_grpc, lock_pb2, lock_pb2_grpc,
                          session_pb2_grpc)

from . import (_FIRST_PAUSE, _HELD, _LAST_PAUSE, _LATE_ACQUIRED, _LATE_ELECTED, _LEADER_SILENT,
               _OVER, _believes, _RELEASE, _SILENT, _WAITING, DEFAULT_SERVER, Leader, Listing,
               NotAcquired, _acquire_request, _CandidateMember, _channel_args, _credentials,
               _describe, _grace, _leader, _LeaseState, _listing, _log, _Member, _millis,
               _pause, _refusal, _refused_leadership, _resumable, _SessionCore, _too_late,
               _vouched_until)

# `list` is left out, as in leasehold_client: a star import would hide the builtin.
__all__ = ["AsyncLease", "AsyncCandidate", "AsyncSession", "AsyncSessionLease",
           "AsyncSessionCandidate", "lease", "campaign", "leader", "observe", "connect",
           "session"]

_Failure = Union[grpc.RpcError, str, Tuple[str, str]]
_WRITE_FAILED = (aio.AioRpcError, asyncio.InvalidStateError)


async def _resumed(call: Any, request: Any, field: str,
                   what: str) -> Tuple[Any, Optional[_Failure]]:
    """Sends a resuming stream its request and reads up to its answer (`field`: "acquired",
    "elected"): `(answer, None)`, or `(None, failure)` for a `lost`, the stream ending first,
    or a failed call. A cancelled caller cancels the call."""
    try:
        await call.write(request)
        while True:
            event = await call.read()
            if event is aio.EOF:
                return None, f"the server ended the stream before resuming the {what}"
            if event.HasField(field):
                return getattr(event, field), None
            if event.HasField("lost"):
                return None, ("lost", event.lost.reason)
    except _WRITE_FAILED as error:
        return None, error if isinstance(error, aio.AioRpcError) else str(error)
    except asyncio.CancelledError:
        call.cancel()
        raise


async def _nap(wake: asyncio.Event, seconds: float) -> None:
    """Waits ``seconds``, or less if ``wake`` is set."""
    try:
        await asyncio.wait_for(wake.wait(), seconds)
    except asyncio.TimeoutError:
        pass
    wake.clear()


class _Waiters:
    """Waiting for a change of state: ``await self._until(condition)``, woken by every
    ``self._changed()``."""

    _waiters: Set[asyncio.Future]

    def _changed(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    async def _until(self, done: Callable[[], bool]) -> None:
        while not done():
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.add(waiter)
            try:
                await waiter
            finally:
                self._waiters.discard(waiter)


class AsyncLease(_LeaseState):
    """A held lock. Use ``lease(...)``.

    ``lost`` (an ``asyncio.Event``) and ``lost_reason`` say whether and why it was lost;
    ``resumes`` counts the times it was taken back on a new stream after its stream broke;
    ``valid_until`` is when the validity last confirmed runs out (``loop.time()``).
    """

    def __init__(self, stub: lock_pb2_grpc.LockServiceStub, request: lock_pb2.LeaseAcquire,
                 auto_resume: bool = False):
        self.name = request.name
        self.lost = asyncio.Event()
        self.lost_reason: Optional[str] = None
        self.fencing_token = 0
        self.token = ""
        self.resumes = 0
        self.valid_until = 0.0
        self._opened = 0.0
        self._stub = stub
        self._request = request
        self._auto_resume = auto_resume
        self._call: Optional[aio.StreamStreamCall] = None  # the live stream; None between
        self._released = asyncio.Event()
        self._was_held = False
        self._releasing = False
        self._release_sent = False
        self._resuming = False
        self._last_error = ""
        self._wake = asyncio.Event()
        self._timer: Optional[asyncio.TimerHandle] = None
        self._generation = 0
        self._watcher: Optional[asyncio.Task] = None

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    async def _acquire(self) -> None:
        self._opened = self._now()
        call = self._stub.Lease()
        await call.write(lock_pb2.LeaseRequest(acquire=self._request))
        try:
            while True:
                event = await call.read()
                if event is aio.EOF:
                    raise NotAcquired(f"lock {self.name!r}: the server ended the stream")
                if event.HasField("acquired"):
                    break
        except aio.AioRpcError as error:
            refusal = _refusal(error)
            if refusal is not None:
                raise refusal from None
            raise
        received = self._now()
        valid_until = _vouched_until(self._opened, received, event.acquired)
        if valid_until <= received:
            # Held up on its way: the lease may be someone else's by now. The cancelled stream
            # lets go of it (or keeps it only for its grace).
            call.cancel()
            raise NotAcquired(f"lock {self.name!r}: {_LATE_ACQUIRED}")
        self._call = call
        self.fencing_token = event.acquired.fencing_token
        self.token = event.acquired.token
        self._arm(valid_until)
        self._watcher = asyncio.get_running_loop().create_task(self._watch())

    def _arm(self, valid_until: float) -> None:
        """Declares the lease lost if nothing confirms it again before ``valid_until``."""
        if self._timer:
            self._timer.cancel()
        self._generation += 1
        self.valid_until = valid_until
        self._timer = asyncio.get_running_loop().call_at(valid_until, self._expire,
                                                         self._generation)

    def _expire(self, generation: int) -> None:
        if generation != self._generation:
            return
        if self._resuming:
            self._lose(_too_late("lease", self._last_error))
            if self._watcher:
                self._watcher.cancel()  # stops the attempt in flight
        else:
            self._lose(_SILENT)

    async def _watch(self) -> None:
        call = self._call
        try:
            while call is not None:
                error = await self._follow(call)
                call = None if error is None else await self._after_break(error)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a bug of ours must not leave the lease believed held
            _log.exception("lease %r: watcher failed", self.name)
            self._lose(f"client error: {error!r}")
        finally:
            self._generation += 1
            if self._timer:
                self._timer.cancel()
            if self._call is not None:
                self._call.cancel()
            self._released.set()

    async def _follow(self, call: aio.StreamStreamCall) -> Optional[_Failure]:
        """Reads one stream to its end: None if it ended with its last word, else how it broke."""
        try:
            while True:
                event = await call.read()
                if event is aio.EOF:
                    return "the server ended the lease stream"
                if self._hear(event):
                    self._call = None
                    return None
        except aio.AioRpcError as error:
            return error

    async def _after_break(self, error: _Failure) -> Optional[aio.StreamStreamCall]:
        """The next stream after a break (resumed), or None when the lease is over."""
        self._call = None
        if self.lost.is_set():
            return None
        if self._releasing:  # its release may never have arrived: release by token
            await self._release_by_token()
            return None
        if not self._auto_resume or not _resumable(error):
            self._lose(self._broke(error))
            return None
        self._resuming = True
        self._last_error = _describe(error)
        _log.info("lease %r: stream broke (%s); resuming it", self.name, self._last_error)
        return await self._resume()

    async def _resume(self) -> Optional[aio.StreamStreamCall]:
        loop = asyncio.get_running_loop()
        delay = _FIRST_PAUSE
        while not self._releasing:
            if self.lost.is_set():
                return None
            if loop.time() >= self.valid_until:
                self._lose(_too_late("lease", self._last_error))
                return None
            opened = loop.time()
            call = self._stub.Lease(wait_for_ready=True)
            answer, failure = await _resumed(call, self._resume_request(), "acquired", "lease")
            received = loop.time()
            if answer is not None:
                valid_until = _vouched_until(opened, received, answer)
                mismatch = self._same_lease(answer)
                if mismatch is None and valid_until <= received:
                    mismatch = f"could not resume: {_LATE_ACQUIRED}"
                if mismatch is not None:
                    self._lose(mismatch)
                    call.cancel()
                    return None
                self._resuming = False
                self._call = call
                self.resumes += 1
                self._opened = opened
                self._arm(valid_until)
                _log.info("lease %r resumed (fencing token %d)", self.name, self.fencing_token)
                if self._releasing:  # release() came while we were between streams
                    await self._send_release(call)
                return call
            if isinstance(failure, tuple):
                self._lose(failure[1])  # the server said `lost`
                return None
            if not _resumable(failure):
                self._lose(f"could not resume: {_describe(failure)}")
                return None
            self._last_error = _describe(failure)
            pause = _pause(delay, self.valid_until, loop.time())
            _log.debug("lease %r: resume failed (%s); again in %.3f s", self.name,
                       self._last_error, pause)
            await _nap(self._wake, pause)
            delay = min(delay * 2, _LAST_PAUSE)
        await self._release_by_token()
        return None

    async def _release_by_token(self) -> None:
        """Releases with the unary call, on any server: for a release asked between streams."""
        timeout = max(1.0, self.valid_until - asyncio.get_running_loop().time())
        try:
            answer = await self._stub.Release(
                lock_pb2.ReleaseRequest(name=self.name, token=self.token), timeout=timeout,
                wait_for_ready=True)
            self._was_held = answer.released
        except aio.AioRpcError as error:
            _log.warning("lease %r: release failed (%s); it expires by itself", self.name,
                         _describe(error))

    async def _send_release(self, call: aio.StreamStreamCall) -> None:
        self._release_sent = True
        try:
            await call.write(_RELEASE)
            await call.done_writing()
        except _WRITE_FAILED:
            pass  # The stream already ended; the watcher says how.

    async def release(self, timeout: float = 10.0) -> bool:
        """Releases the lock; returns True if it was still held."""
        self._releasing = True
        self._wake.set()
        if self._call is not None and not self._release_sent and not self._released.is_set():
            await self._send_release(self._call)
        try:
            await asyncio.wait_for(self._released.wait(), timeout)
        except asyncio.TimeoutError:
            if self._watcher:
                self._watcher.cancel()
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
            certificate_chain: Optional[bytes] = None, tls: Optional[bool] = None,
            options: Sequence[Tuple[str, Any]] = ()) -> aio.Channel:
    """An asyncio channel to Leasehold servers, for the ``channel=`` argument of every call:
    the same options as :func:`leasehold_client.connect`."""
    interceptors = None
    if token is not None:
        interceptors = [kind(token) for kind in (_TokenUnaryUnary, _TokenUnaryStream,
                                                 _TokenStreamStream)]
    target, channel_options = _channel_args(server, options)
    credentials = _credentials(tls, root_certificates, private_key, certificate_chain)
    if credentials is not None:
        return aio.secure_channel(target, credentials, options=channel_options,
                                  interceptors=interceptors)
    return aio.insecure_channel(target, options=channel_options, interceptors=interceptors)


@asynccontextmanager
async def _channel(server: str, channel: Optional[aio.Channel]) -> AsyncIterator[aio.Channel]:
    if channel is not None:
        yield channel
        return
    target, options = _channel_args(server, ())
    own = aio.insecure_channel(target, options=options)
    try:
        yield own
    finally:
        await own.close()


@asynccontextmanager
async def lease(name: str, *, server: str = DEFAULT_SERVER, ttl: float = 30.0,
                wait: float = 0.0, holder: str = "", fair: bool = True, limit: int = 1,
                shared: bool = False, auto_resume: bool = True,
                resume_grace: Optional[float] = None, resume_token: str = "",
                channel: Optional[aio.Channel] = None) -> AsyncIterator[AsyncLease]:
    """Holds lock ``name`` for the ``async with`` block; NotAcquired if it stays taken. The
    options are those of ``leasehold_client.lease``."""
    request = _acquire_request(name, ttl, wait, holder, fair, limit, shared,
                               _grace(ttl, resume_grace, auto_resume), resume_token)
    async with _channel(server, channel) as chan:
        held = AsyncLease(lock_pb2_grpc.LockServiceStub(chan), request, auto_resume)
        await held._acquire()
        try:
            yield held
        finally:
            await held.release()


class AsyncCandidate(_Waiters):
    """One candidacy, held by one Campaign stream (or the next, when a leader's stream breaks
    and it resumes elsewhere). Use ``campaign(...)``.

    ``term`` is the term once elected; ``resumes`` counts the leadership's resumptions;
    ``leading`` says whether it leads now, as far as it knows.
    """

    def __init__(self, stub: election_pb2_grpc.ElectionServiceStub, election: str,
                 value: bytes, ttl: float, *, auto_resume: bool = False,
                 resume_grace: float = 0.0):
        self.election = election
        self.term: Optional[int] = None
        self.resumes = 0
        self._stub = stub
        self._value = value  # the value to publish: the last proclaimed, or asked for
        self._ttl_ms = _millis(ttl)
        self._grace_ms = _millis(resume_grace)
        self._auto_resume = auto_resume and self._grace_ms > 0
        self._token = ""
        self._call: Optional[aio.StreamStreamCall] = None  # the live stream; None between
        self._over = False  # lost, resigned or failed: nothing more happens
        self._reason: Optional[str] = None
        self._error: Optional[aio.AioRpcError] = None
        self._was_leader = False
        self._sent = 0  # proclaims asked for
        self._published = 0  # proclaims confirmed
        self._closed = False
        self._resign_sent = False
        self._resuming = False
        self._last_error = ""
        self._valid_until = 0.0
        self._opened = 0.0  # when the current stream was opened: what valid_to_ms counts from
        self._wake = asyncio.Event()
        self._waiters: Set[asyncio.Future] = set()
        self._timer: Optional[asyncio.TimerHandle] = None
        self._generation = 0
        self._watcher: Optional[asyncio.Task] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None  # its loop, once begun

    def _start_request(self, resume_token: str) -> election_pb2.CampaignRequest:
        return election_pb2.CampaignRequest(start=election_pb2.CampaignStart(
            election=self.election, value=self._value, ttl_ms=self._ttl_ms,
            resume_token=resume_token, resume_grace_ms=self._grace_ms))

    async def _begin(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._opened = self._loop.time()
        self._call = self._stub.Campaign()
        await self._call.write(self._start_request(""))
        self._watcher = asyncio.get_running_loop().create_task(self._watch(self._call))

    def _end(self, reason: str, error: Optional[aio.AioRpcError] = None) -> None:
        if not self._over:
            self._over, self._reason, self._error = True, reason, error
            if self.term is not None and reason != "resigned":
                _log.info("election %r: leadership lost: %s", self.election, reason)
        self._wake.set()
        self._changed()

    def _arm(self, valid_until: float) -> None:
        """Ends the leadership if nothing confirms it again before ``valid_until`` (only with a
        grace: without one the server sends no `extended`)."""
        if self._timer:
            self._timer.cancel()
        self._generation += 1
        self._valid_until = valid_until
        if self._grace_ms:
            self._timer = asyncio.get_running_loop().call_at(valid_until, self._expire,
                                                             self._generation)

    def _expire(self, generation: int) -> None:
        if generation != self._generation or self._over:
            return
        if self._resuming:
            self._end(_too_late("leadership", self._last_error))
            if self._watcher:
                self._watcher.cancel()  # stops the attempt in flight
        else:
            self._end(_LEADER_SILENT)

    async def _watch(self, call: Optional[aio.StreamStreamCall]) -> None:
        try:
            while call is not None:
                error = await self._follow(call)
                call = None if error is None else await self._after_break(error)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a bug of ours must not leave the leadership believed held
            _log.exception("election %r: watcher failed", self.election)
            self._end(f"client error: {error!r}")
        finally:
            self._generation += 1
            if self._timer:
                self._timer.cancel()
            if self._call is not None:
                self._call.cancel()
            self._end("the campaign stream ended")

    async def _follow(self, call: aio.StreamStreamCall) -> Optional[_Failure]:
        """Reads one stream to its end: None if it ended with its last word, else how it broke."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                event = await call.read()
                if event is aio.EOF:
                    return "the campaign stream ended"
                kind = event.WhichOneof("event")
                received = loop.time()
                if kind == "elected":
                    valid_until = _vouched_until(self._opened, received, event.elected)
                    if valid_until <= received:
                        # Held up on its way: another may lead by now. Not a leadership: ended
                        # as a lost one is, its stream cancelled.
                        _log.info("election %r: %s", self.election, _LATE_ELECTED)
                        call.cancel()
                        self._call = None
                        self._end(_LATE_ELECTED)
                        return None
                    self.term, self._token = event.elected.term, event.elected.token
                    self._arm(valid_until)
                elif kind == "extended":
                    self._arm(_vouched_until(self._opened, received, event.extended))
                elif kind == "proclaimed":
                    self._published = min(self._published + 1, self._sent)
                elif kind == "lost":
                    self._call = None
                    self._end(event.lost.reason)
                    return None
                elif kind == "resigned":
                    self._call = None
                    if not self._over:
                        self._was_leader = event.resigned.was_leader
                    self._end("resigned")
                    return None
                self._changed()
        except aio.AioRpcError as error:
            return error

    async def _after_break(self, error: _Failure) -> Optional[aio.StreamStreamCall]:
        """The next stream after a break (resumed), or None when the candidacy is over."""
        self._call = None
        if self._over:
            return None
        if self.term is None or not self._auto_resume or not _resumable(error):
            if isinstance(error, aio.AioRpcError):
                self._end(f"campaign stream failed: {_describe(error)}", error)
            else:
                self._end(str(error))
            return None
        self._resuming = True
        self._last_error = _describe(error)
        _log.info("election %r: stream broke (%s); resuming the leadership", self.election,
                  self._last_error)
        return await self._resume()

    async def _resume(self) -> Optional[aio.StreamStreamCall]:
        loop = asyncio.get_running_loop()
        delay = _FIRST_PAUSE
        while not self._over:
            if loop.time() >= self._valid_until:
                self._end(_too_late("leadership", self._last_error))
                return None
            opened = loop.time()
            call = self._stub.Campaign(wait_for_ready=True)
            answer, failure = await _resumed(call, self._start_request(self._token), "elected",
                                             "leadership")
            received = loop.time()
            if answer is not None:
                valid_until = _vouched_until(opened, received, answer)
                refused = _refused_leadership(answer, self.term, valid_until, received)
                if self._over or refused is not None:
                    if refused is not None:
                        self._end(refused)
                    call.cancel()
                    return None
                self._resuming = False
                self._call = call
                self.resumes += 1
                self._published = self._sent  # the start published the last value
                self._opened = opened
                self._arm(valid_until)
                _log.info("election %r: leadership resumed (term %d)", self.election, self.term)
                self._changed()
                if self._closed:  # resign() came while we were between streams
                    await self._send_resign(call)
                return call
            if isinstance(failure, tuple):
                self._end(failure[1])
                return None
            if not _resumable(failure):
                self._end(f"could not resume: {_describe(failure)}")
                return None
            self._last_error = _describe(failure)
            await _nap(self._wake, _pause(delay, self._valid_until, loop.time()))
            delay = min(delay * 2, _LAST_PAUSE)
        return None

    async def elected(self) -> int:
        """Waits in line until this candidate leads; returns its term."""
        await self._until(lambda: self.term is not None or self._over)
        if self.term is not None:
            return self.term
        if self._error is not None:
            raise self._error
        raise RuntimeError(f"election {self.election!r}: {self._reason}")

    async def proclaim(self, value: bytes) -> None:
        """Publishes a new value while leading."""
        if not self._over:
            self._value = value
            self._sent += 1
            sent = self._sent
            if self._call is not None:  # else the resumed stream publishes it
                try:
                    await self._call.write(election_pb2.CampaignRequest(
                        proclaim=election_pb2.Proclaim(value=value)))
                except _WRITE_FAILED:
                    pass  # the stream broke: resumed, it publishes the value; else lost
            await self._until(lambda: self._published >= sent or self._over)
            if self._published >= sent:
                return
        if self._error is not None:
            raise self._error
        raise RuntimeError(f"leadership lost: {self._reason}")

    @property
    def leading(self) -> bool:
        """Whether this candidate leads now, as far as it knows; see ``Candidate.leading`` (the
        validity is read from the event loop's clock, which its timer runs on)."""
        if self._loop is None:
            return False
        return _believes(self.term, self._over or self._closed, self._grace_ms,
                         self._valid_until, self._loop.time())

    async def lost(self) -> str:
        """Waits until the leadership is lost; returns the reason. Only while leading."""
        await self._until(lambda: self._over)
        return self._reason or ""

    async def _send_resign(self, call: aio.StreamStreamCall) -> None:
        self._resign_sent = True
        try:
            await call.write(election_pb2.CampaignRequest(resign=election_pb2.Resign()))
            await call.done_writing()
        except _WRITE_FAILED:
            pass  # The stream already ended; the watcher says how.

    async def resign(self) -> bool:
        """Steps down (or leaves the line); True if this candidate was leading."""
        if self._closed:
            return False
        self._closed = True
        self._wake.set()
        if self._call is not None and not self._resign_sent:
            await self._send_resign(self._call)  # else the resumed stream resigns
        try:
            await asyncio.wait_for(self._until(lambda: self._over), 10)
        except asyncio.TimeoutError:
            if self._watcher:
                self._watcher.cancel()
        return self._was_leader


@asynccontextmanager
async def campaign(election: str, value: bytes, *, server: str = DEFAULT_SERVER,
                   ttl: float = 5.0, auto_resume: bool = True,
                   resume_grace: Optional[float] = None,
                   channel: Optional[aio.Channel] = None) -> AsyncIterator[AsyncCandidate]:
    """Runs for leader of ``election`` for the block; ``await elected()`` to wait in line. The
    options are those of ``leasehold_client.campaign``."""
    async with _channel(server, channel) as chan:
        candidate = AsyncCandidate(election_pb2_grpc.ElectionServiceStub(chan), election, value,
                                   ttl, auto_resume=auto_resume,
                                   resume_grace=_grace(ttl, resume_grace, auto_resume))
        await candidate._begin()
        try:
            yield candidate
        finally:
            await candidate.resign()


class AsyncSessionLease(_Member):
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
        await self._session._until_or_timeout(lambda: self._state == _OVER, timeout)
        return self._was_held and not self._lost_event.is_set()


class AsyncSessionCandidate(_CandidateMember):
    """A campaign on a session. Use ``session.campaign(...)``.

    ``term`` is the term once elected; ``resumes`` counts the leadership's resumptions.
    """

    _session: "AsyncSession"

    async def elected(self) -> int:
        """Waits in line until this candidate leads; returns its term."""
        await self._session._until(lambda: self._state != _WAITING)
        if self._failure is not None:
            raise self._failure
        return self.fencing_token

    async def proclaim(self, value: bytes) -> None:
        """Publishes a new value while leading."""
        if self._state != _HELD:
            raise RuntimeError(f"election {self.name!r}: not leading"
                               + (f" ({self.lost_reason})" if self.lost_reason else ""))
        self._request.campaign.value = value
        self._sent += 1
        sent = self._sent
        self._session._proclaim(self)
        await self._session._until(lambda: self._published >= sent or self._state == _OVER)
        if self._published < sent:
            raise RuntimeError(f"leadership lost: {self.lost_reason}")

    async def lost(self) -> str:
        """Waits until the leadership (or the candidacy) is over; returns why it was lost ("" if
        it was resigned)."""
        await self._session._until(lambda: self._state == _OVER)
        return self.lost_reason or ""

    async def resign(self, timeout: float = 10.0) -> bool:
        """Steps down (or leaves the line); True if this candidate was leading."""
        self._session._let_go(self)
        await self._session._until_or_timeout(lambda: self._state == _OVER, timeout)
        return self._was_held and not self._lost_event.is_set()


async def _requests(outbox: asyncio.Queue) -> AsyncIterator[Any]:
    """A stream's requests, as they are queued; None ends them (a half-close)."""
    while True:
        request = await outbox.get()
        if request is None:
            return
        yield request


class AsyncSession(_Waiters, _SessionCore):
    """Many leases on one Session stream. Use ``session(...)``: as
    ``leasehold_client.Session``, with ``lost`` an ``asyncio.Event``."""

    def __init__(self, stub: session_pb2_grpc.SessionServiceStub, ttl: float, *,
                 resume_grace: float, holder: str = "", auto_resume: bool = True):
        self._stub = stub
        self._waiters: Set[asyncio.Future] = set()
        self._wake = asyncio.Event()
        self._timer: Optional[asyncio.TimerHandle] = None
        self._watcher: Optional[asyncio.Task] = None
        self._setup(ttl, resume_grace, holder, auto_resume)

    def _begin(self) -> None:
        self._call = self._stub.Session(_requests(self._open_stream()))
        self._watcher = asyncio.get_running_loop().create_task(self._watch(self._call))

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _new_event(self) -> asyncio.Event:
        return asyncio.Event()

    def _new_queue(self) -> asyncio.Queue:
        return asyncio.Queue()

    def _notify(self) -> None:
        self._changed()

    def _schedule(self, when: Optional[float]) -> None:
        if self._timer:
            self._timer.cancel()
            self._timer = None
        if when is not None:
            self._timer = asyncio.get_running_loop().call_at(when, self._tick)

    def _abort(self) -> None:
        self._wake.set()
        if self._watcher is not None and self._watcher is not asyncio.current_task():
            self._watcher.cancel()  # stops the stream or the attempt in flight

    async def _watch(self, call: Any) -> None:
        try:
            while call is not None:
                error = await self._follow(call)
                call = None if error is None else await self._after_break(error)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # a bug of ours must not leave leases believed held
            _log.exception("session: watcher failed")
            self._end(f"client error: {error!r}")
        finally:
            if self._call is not None:
                self._call.cancel()
            self._end("the session stream ended")

    async def _follow(self, call: Any) -> Optional[_Failure]:
        """Reads one stream to its end: None if it ended with its last word, else how it broke."""
        try:
            while True:
                event = await call.read()
                if event is aio.EOF:
                    return "the server ended the session stream"
                if self._hear(event):
                    return None
        except aio.AioRpcError as error:
            return error

    async def _after_break(self, error: _Failure) -> Any:
        pause = self._broke(error)  # type: ignore[arg-type]
        if pause is None:
            return None
        if pause:
            await _nap(self._wake, pause)
        return self._reopen(lambda outbox: self._stub.Session(_requests(outbox),
                                                              wait_for_ready=True))

    async def _until_or_timeout(self, done: Callable[[], bool], timeout: float) -> bool:
        try:
            await asyncio.wait_for(self._until(done), timeout)
            return True
        except asyncio.TimeoutError:
            return done()

    async def acquire(self, name: str, *, wait: float = 0.0, holder: str = "",
                      fair: bool = True, limit: int = 1, shared: bool = False
                      ) -> AsyncSessionLease:
        """Takes lock ``name`` on the session and returns it held, until ``release()`` or the
        session's end: as ``leasehold_client.Session.acquire``."""
        member_id, request = self._acquire_request(name, wait, holder, fair, limit, shared)
        held = AsyncSessionLease(self, member_id, name, request)
        self._add(held)
        try:
            await self._until(lambda: held._state != _WAITING)
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
    async with _channel(server, channel) as chan:
        opened = AsyncSession(session_pb2_grpc.SessionServiceStub(chan), ttl, holder=holder,
                              auto_resume=auto_resume,
                              resume_grace=_grace(ttl, resume_grace, auto_resume))
        opened._begin()
        try:
            yield opened
        finally:
            await opened.close()


async def leader(election: str, *, server: str = DEFAULT_SERVER,
                 channel: Optional[aio.Channel] = None) -> Optional[Leader]:
    """The leader of ``election`` now, or None."""
    async with _channel(server, channel) as chan:
        answer = await election_pb2_grpc.ElectionServiceStub(chan).Leader(
            election_pb2.LeaderRequest(election=election))
        return _leader(answer.has_leader, answer.term, answer.value)


async def list(limit: int = 0, *, server: str = DEFAULT_SERVER,
               channel: Optional[aio.Channel] = None) -> Listing:
    """The locks held now, at most ``limit`` (0: the server's maximum, 1,000), and whether more
    are held: as ``leasehold_client.list``, a bounded look for people and tools, not a
    snapshot to act on."""
    async with _channel(server, channel) as chan:
        answer = await lock_pb2_grpc.LockServiceStub(chan).List(lock_pb2.ListRequest(limit=limit))
        return _listing(answer)


_NOTHING_YET = object()


async def observe(election: str, *, server: str = DEFAULT_SERVER,
                  channel: Optional[aio.Channel] = None) -> AsyncIterator[Optional[Leader]]:
    """Yields the leader of ``election`` now (None for none), then every change, in order;
    follows the election again on any server when the stream breaks (as the threaded one)."""
    async with _channel(server, channel) as chan:
        stub = election_pb2_grpc.ElectionServiceStub(chan)
        last: Any = _NOTHING_YET
        delay = _FIRST_PAUSE
        while True:
            call = stub.Observe(election_pb2.ObserveRequest(election=election),
                                wait_for_ready=last is not _NOTHING_YET)
            try:
                async for state in call:
                    delay = _FIRST_PAUSE
                    now = _leader(state.has_leader, state.term, state.value)
                    if now != last:
                        last = now
                        yield now
                return
            except aio.AioRpcError as error:
                if last is _NOTHING_YET or not _resumable(error):
                    raise
                _log.info("election %r: observing again (%s)", election, _describe(error))
            finally:
                call.cancel()
            await asyncio.sleep(random.uniform(delay / 2, delay))  # backoff between attempts
            delay = min(delay * 2, _LAST_PAUSE)
