"""What the server answers about others: an election's leader, the locks held now, a lock's
state as ``watch`` reports it, the holders ``revoke`` ended, what ``check`` says of a fencing
token, and what ``observe`` or ``watch`` has yielded so far (the same in threads and asyncio)."""

from __future__ import annotations

import enum
import random
from typing import Any, Callable, Iterable, NamedTuple, Optional, Tuple

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


class LockState(NamedTuple):
    """A lock's state, as ``watch`` reports it (and Describe answers).

    ``held``: whether anyone holds it; ``holder``, ``fencing_token`` and ``ttl_remaining``
    (seconds) describe its oldest holder (``""``, 0, 0 when free); ``holders`` are all of them,
    oldest fencing token first (several for a semaphore or shared readers); ``limit`` the limit
    they hold it with (0 when free); ``shared`` true for readers; ``waiting``: how many wait
    for it now.
    """

    name: str
    held: bool
    holder: str
    fencing_token: int
    ttl_remaining: float
    holders: Tuple[Holder, ...]
    limit: int
    shared: bool
    waiting: int

    def change(self) -> Tuple[Any, ...]:
        """What a change is made of: everything but the remaining TTLs, which run down between
        two changes (two states alike but for them are the same state)."""
        return (self.held, self.holder, self.fencing_token,
                tuple((h.holder, h.fencing_token) for h in self.holders), self.limit,
                self.shared, self.waiting)


class TokenState(enum.Enum):
    """What a fencing token is to its name now: the proto's ``TokenState``, without its
    prefix."""

    #: A server that predates the answer (or a state this client does not know yet).
    UNSPECIFIED = 0
    #: A live holding of the name has this fencing token.
    CURRENT = 1
    #: The name is held, under other fencing tokens only.
    SUPERSEDED = 2
    #: Nobody holds the name.
    FREE = 3


class TokenCheck(NamedTuple):
    """What ``check`` answered: ``state``, and ``current_fencing_token``, the current holder's
    (the oldest, for several holders; 0 when free). ``current`` is True only for
    ``TokenState.CURRENT``."""

    state: TokenState
    current_fencing_token: int

    @property
    def current(self) -> bool:
        return self.state is TokenState.CURRENT


def token_check(answer: lock_pb2.CheckResponse) -> TokenCheck:
    try:
        state = TokenState(answer.state)
    except ValueError:
        state = TokenState.UNSPECIFIED
    return TokenCheck(state, answer.current_fencing_token)


def holders(found: Iterable[lock_pb2.Holder]) -> Tuple[Holder, ...]:
    """The holders of an answer (List's, Describe's, Revoke's)."""
    return tuple(Holder(h.holder, h.fencing_token, h.ttl_remaining_ms / 1000) for h in found)


def is_shared(mode: int) -> bool:
    return mode == lock_pb2.LEASE_MODE_SHARED


def listing(answer: lock_pb2.ListResponse) -> Listing:
    return Listing(
        tuple(HeldLock(lock.name, lock.holder, lock.fencing_token, lock.ttl_remaining_ms / 1000,
                       holders(lock.holders), lock.limit, is_shared(lock.mode))
              for lock in answer.locks),
        answer.truncated)


def lock_state(name: str, state: lock_pb2.DescribeResponse) -> LockState:
    return LockState(name, state.held, state.holder, state.fencing_token,
                     state.ttl_remaining_ms / 1000, holders(state.holders), state.limit,
                     is_shared(state.mode), state.waiting)



def leader_of(has_leader: bool, term: int, value: bytes) -> Optional[Leader]:
    return Leader(term, value) if has_leader else None


def election_state(state: Any) -> Optional[Leader]:
    """The leader an ``ObserveResponse`` names, or None."""
    return leader_of(state.has_leader, state.term, state.value)


_NOTHING_YET = object()


class Observation:
    """One ``observe`` or ``watch``: the last state yielded, and the pause before following
    again when its stream breaks (from the first pause, doubling up to the last, with jitter).
    ``read`` makes a state of a stream's answer; ``key``, what two states must share to be the
    same. The threaded and asyncio loops (``threads.follow``, ``aio_tasks.follow``) read the
    stream and sleep; this decides."""

    def __init__(self, read: Callable[[Any], Any],
                 key: Callable[[Any], Any] = lambda state: state) -> None:
        self.last: Any = _NOTHING_YET
        self._read = read
        self._key = key
        self._delay = FIRST_PAUSE

    @property
    def started(self) -> bool:
        """Whether it has yielded a state (a later stream waits for a server to be ready)."""
        return self.last is not _NOTHING_YET

    def heard(self, state: Any) -> bool:
        """Takes one state of the stream; True if it is new (yield ``last``)."""
        self._delay = FIRST_PAUSE
        now = self._read(state)
        if self.started and self._key(now) == self._key(self.last):
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


def watching(name: str) -> Observation:
    """One ``watch`` of lock ``name``: its states, each change once."""
    return Observation(lambda answer: lock_state(name, answer.state), LockState.change)
