"""What the server answers about others: an election's leader, the locks held now, and what
``observe`` has yielded so far (the same in threads and asyncio)."""

from __future__ import annotations

import random
from typing import Any, NamedTuple, Optional, Tuple

from leasehold.v1 import lock_pb2

from .errors import Break, resumable
from .validity import FIRST_PAUSE, LAST_PAUSE


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


def listing(answer: lock_pb2.ListResponse) -> Listing:
    def holders(lock: lock_pb2.HeldLock) -> Tuple[Holder, ...]:
        return tuple(Holder(h.holder, h.fencing_token, h.ttl_remaining_ms / 1000)
                     for h in lock.holders)

    return Listing(
        tuple(HeldLock(lock.name, lock.holder, lock.fencing_token, lock.ttl_remaining_ms / 1000,
                       holders(lock), lock.limit, lock.mode == lock_pb2.LEASE_MODE_SHARED)
              for lock in answer.locks),
        answer.truncated)



def leader_of(has_leader: bool, term: int, value: bytes) -> Optional[Leader]:
    return Leader(term, value) if has_leader else None


_NOTHING_YET = object()


class Observation:
    """One ``observe``: the last state yielded, and the pause before following the election
    again when its stream breaks (from the first pause, doubling up to the last, with jitter).
    The threaded and asyncio loops read the stream and sleep; this decides."""

    def __init__(self) -> None:
        self.last: Any = _NOTHING_YET
        self._delay = FIRST_PAUSE

    @property
    def started(self) -> bool:
        """Whether it has yielded a state (a later stream waits for a server to be ready)."""
        return self.last is not _NOTHING_YET

    def heard(self, state: Any) -> bool:
        """Takes one state of the stream; True if it is new (yield ``last``)."""
        self._delay = FIRST_PAUSE
        now = leader_of(state.has_leader, state.term, state.value)
        if now == self.last:
            return False
        self.last = now
        return True

    def follows_again(self, error: Break) -> bool:
        """Whether a stream broken by ``error`` is followed again (else the error is raised):
        not the first (its caller learns the server cannot be reached), nor an answer."""
        return self.started and resumable(error)

    def pause(self) -> float:
        """How long to wait before the next stream."""
        pause = random.uniform(self._delay / 2, self._delay)
        self._delay = min(self._delay * 2, LAST_PAUSE)
        return pause
