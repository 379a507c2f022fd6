"""The threaded driver of a held stream (``held``): a watcher thread reads the live stream and
feeds its answers to the core, a ``threading.Timer`` ends the belief when the validity runs out,
and after a break the same thread resumes on a new stream, pausing between attempts as the core
says. ``Lease`` and ``Candidate`` are its users; every call into the core is made holding
``changed``, the lock their callers wait on. Also ``follow``, the loop of ``observe`` and
``watch``: one state after another, followed again on any server when the stream breaks.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Callable, Iterator, Optional, Tuple

import grpc

from .answers import Observation
from .errors import Break, describe
from .held import CANCEL, OVER, RELEASE, RESUME, Held

_log = logging.getLogger("leasehold_client")


def read_answer(call: Any, field: str, what: str) -> Tuple[Any, Any]:
    """Reads a resuming stream up to its answer (``field``: "acquired", "elected"): ``(answer,
    None)``, or ``(None, failure)`` for a ``lost`` (as ``("lost", message)``), the stream ending
    first (a sentence), or a failed call (the ``grpc.RpcError``)."""
    try:
        for event in call:
            if event.HasField(field):
                return getattr(event, field), None
            if event.HasField("lost"):
                return None, ("lost", event.lost)
    except grpc.RpcError as error:
        return None, error
    return None, f"the server ended the stream before resuming the {what}"


def read_stream(call: Any, lock: Any, hear: Callable[[Any], bool], ended: str) -> Optional[Break]:
    """Reads one stream to its end, each answer to ``hear`` holding ``lock``: None once ``hear``
    says it was the stream's last word, else how it broke (``ended`` if it just ended)."""
    try:
        for event in call:
            with lock:
                if hear(event):
                    return None
        return ended
    except grpc.RpcError as error:
        return error


def read_streams(call: Any, read: Callable[[Any], Optional[Break]],
                 after_break: Callable[[Break], Any], failed: Callable[[str], None],
                 label: str) -> None:
    """Reads ``call`` with ``read``, then each stream ``after_break`` opens after a break,
    until one ends with its last word or ``after_break`` opens none. A bug of ours is
    ``failed``: it must not leave anything believed held."""
    try:
        while call is not None:
            error = read(call)
            call = None if error is None else after_break(error)
    except Exception as error:
        _log.exception("%s: watcher failed", label)
        failed(f"client error: {error!r}")


def follow(open_stream: Callable[[bool], Any], seen: Observation, label: str,
           stopped: threading.Event) -> Iterator[Any]:
    """Yields each new state (``seen`` decides) of the stream ``open_stream(wait_for_ready)``
    opens, and after a break of the streams it opens again, pausing between them, until a
    stream ends, ``open_stream`` opens none (None) or ``stopped`` is set: the stream it cancels
    then ends the iteration rather than raise. The first stream's error is raised, and an
    answer (a refusal) of any."""
    while not stopped.is_set():
        states = open_stream(seen.started)
        if states is None:
            return
        try:
            for state in states:
                if seen.heard(state):
                    yield seen.last
            return
        except grpc.RpcError as error:
            if stopped.is_set():
                return
            if not seen.follows_again(error):
                raise
            _log.info("%s: following again (%s)", label, describe(error))
        finally:
            states.cancel()
        stopped.wait(seen.pause())  # a backoff pause between attempts, cut short by a stop


class Alarm:
    """A timer set again and again (``time.monotonic()``): it calls ``fire`` holding ``lock``
    at the time last set, never at one set before it. Set it holding ``lock``."""

    def __init__(self, lock: Any, fire: Callable[[], None]):
        self._lock = lock
        self._fire = fire
        self._timer: Optional[threading.Timer] = None
        self._generation = 0

    def set(self, when: Optional[float]) -> None:
        """Fires at ``when``, instead of any earlier setting; None: not at all."""
        self._generation += 1
        if self._timer:
            self._timer.cancel()
            self._timer = None
        if when is not None:
            self._timer = threading.Timer(max(0.0, when - time.monotonic()), self._ring,
                                          args=(self._generation,))
            self._timer.daemon = True
            self._timer.start()

    def _ring(self, generation: int) -> None:
        with self._lock:
            if generation == self._generation:  # else set again meanwhile
                self._fire()


class HeldThread:
    """Drives one ``Held`` (made by ``make`` from this driver's clock, timer and events) over
    the streams ``method`` opens (``stub.Lease`` or ``stub.Campaign``). ``release_by_token``:
    the unary release, for a lease let go between two streams; it returns whether it was held,
    or None if it failed."""

    def __init__(self, make: Callable[..., Held], method: Callable[..., Any],
                 release_by_token: Optional[Callable[[], Optional[bool]]] = None):
        self._method = method
        self._release_by_token = release_by_token
        #: Guards the core and the stream's outbox; waited on for changes.
        self.changed = threading.Condition(threading.RLock())
        #: Set when the watcher has stopped for good.
        self.finished = threading.Event()
        self._wake = threading.Event()  # cuts a pause between attempts to resume short
        self._outbox: Optional[queue.Queue] = None  # the live stream's requests; None between
        self._attempt: Optional[Any] = None  # the resume attempt in flight
        self._alarm = Alarm(self.changed, self._expire)
        self.held = make(lost=threading.Event(), now=time.monotonic, schedule=self._alarm.set,
                         notify=self.changed.notify_all)

    def open(self) -> Any:
        """Opens the first stream with the core's first request; returns the call."""
        with self.changed:
            self._outbox = queue.Queue()
            self._outbox.put(self.held.start_request(""))
            self.held.opened = time.monotonic()
            return self._method(iter(self._outbox.get, None))

    def watch(self, call: Any) -> None:
        """Reads ``call`` (and the streams after it) in a thread of its own."""
        threading.Thread(target=self._watch, args=(call,), daemon=True).start()

    def send(self, request: Any) -> None:
        """Sends ``request`` on the live stream; between streams, the next one carries what is
        still needed."""
        with self.changed:
            if self._outbox is not None:
                self._outbox.put(request)

    def let_go(self) -> None:
        """Release or resign: on the live stream now, else once it is resumed or by token."""
        with self.changed:
            if self.held.let_go():
                self._stop()
        self._wake.set()

    def close(self) -> None:
        """Ends the request iterator of the live stream."""
        with self.changed:
            if self._outbox is not None:
                self._outbox.put(None)
                self._outbox = None

    def _stop(self) -> None:
        if self._outbox is not None:
            self._outbox.put(self.held.stop_request())
            self.close()  # half-close

    def _expire(self) -> None:
        """The alarm (holding ``changed``): past the validity, by this process's clock."""
        if self.held.expired() and self._attempt is not None:
            self._attempt.cancel()
        self._wake.set()

    def _watch(self, call: Any) -> None:
        held = self.held
        try:
            read_streams(call, self._follow, self._after_break, self._failed,
                         f"{held.label} {held.name!r}")
        finally:
            with self.changed:
                self._alarm.set(None)
                self.close()
                held.watch_ended()
            self.finished.set()

    def _failed(self, reason: str) -> None:
        with self.changed:
            self.held.end(reason)

    def _follow(self, call: Any) -> Optional[Break]:
        def hear(event: Any) -> bool:
            outcome = self.held.heard(event, time.monotonic())
            if outcome == CANCEL:
                call.cancel()
            return outcome is not None

        return read_stream(call, self.changed, hear, self.held.ended)

    def _after_break(self, error: Break) -> Any:
        """The next stream after a break (resumed), or None when it is over."""
        with self.changed:
            self.close()  # ends the old request iterator
            decision = self.held.broke(error)
        if decision == RELEASE:
            self._release()
        return self._resume() if decision == RESUME else None

    def _resume(self) -> Any:
        while True:
            with self.changed:
                request = self.held.attempt()
                if request is None:
                    break
                outbox: queue.Queue = queue.Queue()
                outbox.put(request)
                opened = time.monotonic()
                try:
                    call = self._method(iter(outbox.get, None), wait_for_ready=True)
                except ValueError as error:  # the channel was closed
                    self.held.end(f"could not resume: {error}")
                    return None
                self._attempt = call
            answer, failure = read_answer(call, self.held.answer, self.held.what)
            received = time.monotonic()
            with self.changed:
                self._attempt = None
                decision = self.held.answered(answer, failure, opened, received)
                if decision == RESUME:
                    self._outbox = outbox
                    if self.held.letting_go:  # asked while between streams
                        self._stop()
                    return call
                outbox.put(None)
                if decision == OVER:
                    if answer is not None:
                        call.cancel()  # the cancelled stream lets go
                    return None
                if decision == RELEASE:
                    break
                pause = self.held.retry_pause()
            self._wake.wait(pause)
            self._wake.clear()
        if not self.held.over:
            self._release()
        return None

    def _release(self) -> None:
        """Releases by token (a release asked between streams, which may never have arrived)."""
        was_held = self._release_by_token() if self._release_by_token else None
        with self.changed:
            self.held.released(was_held)
