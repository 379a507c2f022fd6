"""The asyncio driver of a held stream (``held``), the twin of ``threads``: a task reads the live
stream and feeds its answers to the core, the event loop's timer ends the belief when the
validity runs out, and after a break the same task resumes on a new stream. ``AsyncLease`` and
``AsyncCandidate`` are its users. Also what every asyncio part waits with (``Waiters``,
``nap``), and ``follow``, the loop of ``observe`` and ``watch``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, AsyncIterator, Awaitable, Callable, Optional, Set, Tuple, Union

from grpc import aio

from .answers import Observation
from .errors import Break, describe
from .held import CANCEL, OVER, RELEASE, RESUME, Held

_log = logging.getLogger("leasehold_client")

#: How a stream may fail: its error, a sentence, or the server's ``lost`` as ``("lost", message)``
#: (a ``Lost``: its words and its code).
Failure = Union[Break, Tuple[str, Any]]
#: What a write on a stream that already ended raises.
WRITE_FAILED = (aio.AioRpcError, asyncio.InvalidStateError)


async def read_answer(call: Any, request: Any, field: str,
                      what: str) -> Tuple[Any, Optional[Failure]]:
    """Sends a resuming stream its request and reads up to its answer (``field``: "acquired",
    "elected"): ``(answer, None)``, or ``(None, failure)`` for a ``lost``, the stream ending
    first, or a failed call. A cancelled caller cancels the call."""
    try:
        await call.write(request)
        while True:
            event = await call.read()
            if event is aio.EOF:
                return None, f"the server ended the stream before resuming the {what}"
            if event.HasField(field):
                return getattr(event, field), None
            if event.HasField("lost"):
                return None, ("lost", event.lost)
    except WRITE_FAILED as error:
        return None, error if isinstance(error, aio.AioRpcError) else str(error)
    except asyncio.CancelledError:
        call.cancel()
        raise


async def nap(wake: asyncio.Event, seconds: float) -> None:
    """Waits ``seconds``, or less if ``wake`` is set."""
    try:
        await asyncio.wait_for(wake.wait(), seconds)
    except asyncio.TimeoutError:
        pass
    wake.clear()


async def requests(outbox: asyncio.Queue) -> AsyncIterator[Any]:
    """A stream's requests, as they are queued; None ends them (a half-close)."""
    while True:
        request = await outbox.get()
        if request is None:
            return
        yield request


async def follow(open_stream: Callable[[bool], Awaitable[Any]], seen: Observation, label: str,
                 stopped: Callable[[], bool] = lambda: False) -> AsyncIterator[Any]:
    """Yields each new state (``seen`` decides) of the stream ``await
    open_stream(wait_for_ready)`` opens, and after a break of the streams it opens again, until
    a stream ends, ``open_stream`` opens none (None) or ``stopped()``: a stream cancelled by
    whoever stopped it ends the iteration rather than raise. The first stream's error is
    raised, and an answer (a refusal) of any; the call is cancelled when the iteration ends."""
    while not stopped():
        call = await open_stream(seen.started)
        if call is None:
            return
        try:
            async for state in call:
                if seen.heard(state):
                    yield seen.last
            return
        except asyncio.CancelledError:
            if stopped() and call.cancelled():
                return  # stopped from elsewhere; a cancelled task was not
            raise
        except aio.AioRpcError as error:
            if stopped():
                return
            if not seen.follows_again(error):
                raise
            _log.info("%s: following again (%s)", label, describe(error))
        finally:
            call.cancel()
        await asyncio.sleep(seen.pause())  # a backoff pause between attempts


async def read_stream(call: Any, hear: Callable[[Any], bool], ended: str) -> Optional[Failure]:
    """Reads one stream to its end, each answer to ``hear``: None once ``hear`` says it was the
    stream's last word, else how it broke (``ended`` if it just ended)."""
    try:
        while True:
            event = await call.read()
            if event is aio.EOF:
                return ended
            if hear(event):
                return None
    except aio.AioRpcError as error:
        return error


async def read_streams(call: Any, read: Callable[[Any], Awaitable[Optional[Failure]]],
                       after_break: Callable[[Failure], Awaitable[Any]],
                       failed: Callable[[str], None], label: str) -> None:
    """Reads ``call`` with ``read``, then each stream ``after_break`` opens after a break,
    until one ends with its last word or ``after_break`` opens none. A bug of ours is
    ``failed``: it must not leave anything believed held."""
    try:
        while call is not None:
            error = await read(call)
            call = None if error is None else await after_break(error)
    except Exception as error:  # (a cancelled task is not one: CancelledError passes)
        _log.exception("%s: watcher failed", label)
        failed(f"client error: {error!r}")


class Alarm:
    """The event loop's timer, set again and again: it calls ``fire`` at the time last set."""

    def __init__(self, fire: Callable[[], None]):
        self._fire = fire
        self._timer: Optional[asyncio.TimerHandle] = None

    def set(self, when: Optional[float]) -> None:
        """Fires at ``when`` (``loop.time()``), instead of any earlier setting; None: not at
        all."""
        if self._timer:
            self._timer.cancel()
            self._timer = None
        if when is not None:
            self._timer = asyncio.get_running_loop().call_at(when, self._fire)


class Waiters:
    """Waiting for a change of state: ``await until(condition)``, woken by every
    ``changed()``."""

    def __init__(self) -> None:
        self._waiters: Set[asyncio.Future] = set()

    def changed(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    async def until(self, done: Callable[[], bool]) -> None:
        while not done():
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.add(waiter)
            try:
                await waiter
            finally:
                self._waiters.discard(waiter)

    async def until_or_timeout(self, done: Callable[[], bool], timeout: float) -> bool:
        """``until``, for at most ``timeout`` seconds: whether ``done`` came true."""
        try:
            await asyncio.wait_for(self.until(done), timeout)
            return True
        except asyncio.TimeoutError:
            return done()


class HeldTask:
    """Drives one ``Held`` (made by ``make`` from this driver's clock, timer and events) over
    the streams ``method`` opens (``stub.Lease`` or ``stub.Campaign``, written to and read).
    ``release_by_token``: the unary release, for a lease let go between two streams; it returns
    whether it was held, or None if it failed."""

    def __init__(self, make: Callable[..., Held], method: Callable[..., Any],
                 release_by_token: Optional[Callable[[], Any]] = None):
        self._method = method
        self._release_by_token = release_by_token
        self.waiters = Waiters()
        #: Set when the watcher has stopped for good.
        self.finished = asyncio.Event()
        self._wake = asyncio.Event()  # cuts a pause between attempts to resume short
        self._call: Optional[Any] = None  # the live stream; None between streams
        self._stop_sent = False
        self._alarm = Alarm(self._expire)
        self._watcher: Optional[asyncio.Task] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None  # its loop, once begun
        self.held = make(lost=asyncio.Event(), now=self.now, schedule=self._alarm.set,
                         notify=self.waiters.changed)

    def now(self) -> float:
        """The event loop's clock, which the validity is on."""
        return (self._loop or asyncio.get_running_loop()).time()

    async def open(self) -> Any:
        """Opens the first stream with the core's first request; returns the call."""
        self._loop = asyncio.get_running_loop()
        self.held.opened = self._loop.time()
        call = self._method()
        await call.write(self.held.start_request(""))
        return call

    def watch(self, call: Any) -> None:
        """Reads ``call`` (and the streams after it) in a task of its own."""
        self._call = call
        self._watcher = asyncio.get_running_loop().create_task(self._watch(call))

    async def send(self, request: Any) -> None:
        """Sends ``request`` on the live stream; between streams, the next one carries what is
        still needed."""
        if self._call is not None:
            try:
                await self._call.write(request)
            except WRITE_FAILED:
                pass  # the stream broke: resumed, it sends what is needed; else over

    async def let_go(self, done: Callable[[], bool], timeout: float) -> None:
        """Release or resign: on the live stream now, else once it is resumed or by token; then
        waits (at most ``timeout``, then stops the watcher) until ``done``."""
        self.held.let_go()
        self._wake.set()
        if self._call is not None and not self._stop_sent and not self.finished.is_set():
            await self._stop(self._call)
        if not await self.waiters.until_or_timeout(done, timeout) and self._watcher:
            self._watcher.cancel()

    async def _stop(self, call: Any) -> None:
        self._stop_sent = True
        try:
            await call.write(self.held.stop_request())
            await call.done_writing()
        except WRITE_FAILED:
            pass  # The stream already ended; the watcher says how.

    def _expire(self) -> None:
        if self.held.expired() and self._watcher:
            self._watcher.cancel()  # stops the attempt in flight

    async def _watch(self, call: Any) -> None:
        held = self.held
        try:
            await read_streams(call, self._follow, self._after_break, held.end,
                               f"{held.label} {held.name!r}")
        finally:
            self._alarm.set(None)
            if self._call is not None:
                self._call.cancel()
            held.watch_ended()
            self.finished.set()
            self.waiters.changed()

    async def _follow(self, call: Any) -> Optional[Failure]:
        def hear(event: Any) -> bool:
            outcome = self.held.heard(event, self.now())
            if outcome == CANCEL:
                call.cancel()
            if outcome is None:
                return False
            self._call = None
            return True

        return await read_stream(call, hear, self.held.ended)

    async def _after_break(self, error: Failure) -> Any:
        """The next stream after a break (resumed), or None when it is over."""
        self._call = None
        decision = self.held.broke(error)  # type: ignore[arg-type]
        if decision == RELEASE:
            await self._release()
        return await self._resume() if decision == RESUME else None

    async def _resume(self) -> Any:
        while True:
            request = self.held.attempt()
            if request is None:
                break
            opened = self.now()
            call = self._method(wait_for_ready=True)
            answer, failure = await read_answer(call, request, self.held.answer, self.held.what)
            decision = self.held.answered(answer, failure, opened, self.now())
            if decision == RESUME:
                self._call = call
                if self.held.letting_go:  # asked while between streams
                    await self._stop(call)
                return call
            if decision == OVER:
                if answer is not None:
                    call.cancel()  # the cancelled stream lets go
                return None
            if decision == RELEASE:
                break
            await nap(self._wake, self.held.retry_pause())
        if not self.held.over:
            await self._release()
        return None

    async def _release(self) -> None:
        """Releases by token (a release asked between streams, which may never have arrived)."""
        self.held.released(await self._release_by_token() if self._release_by_token else None)
