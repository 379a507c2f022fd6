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

Why a lease was lost, for programs: ``held.lost_code``, a ``LostReason`` (``TAKEN``,
``UNREACHABLE``, ``SHUTDOWN``, ``REVOKED``, ``MAX_HOLD``...), beside ``held.lost_reason``, the
words for people; a leadership and a session's leases say it the same way.

Several names at once, all or none: ``lease(names=["a", "b"])`` (and a session's
``lock(names=...)``), each name's fencing token in ``held.fences``. ``lock_delay=`` keeps a lost
lease's names from being taken for a while; ``max_hold=`` puts a ceiling on the hold (lost with
``LostReason.MAX_HOLD``). ``check(name, fencing_token)`` tells a protected resource whether a
fencing token is still the current holding (a ``TokenCheck``: ``TokenState.CURRENT``,
``SUPERSEDED`` or ``FREE``).

For operators: ``watch(name)`` follows a lock's state (held by whom, with which fencing token,
how many wait), a ``LockState`` per change, until its ``with`` block ends; ``revoke(name)`` ends
its holdings by force (or one, by its fencing token) and returns the holders ended;
``revoke_leader(election)`` ends a leadership. With auth on, revoking needs the ``admin`` role.

A refused lease raises ``NotAcquired``, whose ``reason``, ``holder``, ``retry_after`` and
``metadata`` come from the status details the server sends (docs/errors.md): program against
those, not against the message, which is for people and may be reworded.

The package, one job a module: ``errors`` (what a failed call means), ``lost`` (why a lease was
lost), ``answers`` (leaders, listings, lock states), ``options`` (targets, channel arguments,
requests), ``validity`` (how long a lease is believed), ``held`` (one lease or leadership on
its own stream, free of I/O) and ``session_core`` (many on a session's stream, free of I/O),
then their drivers: threads here (``threads``, ``locks``, ``elections``, ``sessions``,
``channels``), asyncio in ``aio``.
"""

from .answers import HeldLock, Holder, Leader, Listing, LockState, TokenCheck, TokenState
from .channels import connect
from .elections import Candidate, campaign, leader, observe, revoke_leader
from .errors import LeaseFailed, NotAcquired
from .locks import Lease, Watch, check, lease, list, revoke, watch
from .lost import LostReason
from .options import DEFAULT_SERVER
from .sessions import Session, SessionCandidate, SessionLease, session

# `list` is left out: `from leasehold_client import *` would hide the builtin. Call it as
# `leasehold_client.list()`.
__all__ = [
    "DEFAULT_SERVER", "Leader", "Lease", "NotAcquired", "Candidate", "Holder", "HeldLock",
    "Listing", "lease", "campaign", "leader", "observe", "connect", "Session", "SessionLease",
    "SessionCandidate", "LeaseFailed", "session", "LostReason", "LockState", "Watch", "watch",
    "revoke", "revoke_leader", "check", "TokenCheck", "TokenState",
]
