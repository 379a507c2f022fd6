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

``watch``, ``revoke``, ``revoke_leader``, ``check`` (``await check(name, fencing_token)``),
``names=``, ``lock_delay=``, ``max_hold=`` and ``lost_code`` (a ``LostReason``) are those of the
threaded client; ``watch`` is an async iterator (``async with watch(name) as states: async for
state in states``).

Its modules, one job each, mirror the threaded ones over the same I/O-free cores (``held``,
``session_core``): ``aio_tasks`` drives a held stream, ``aio_locks``, ``aio_elections``,
``aio_sessions`` and ``aio_channels`` are the API.
"""

from .aio_channels import connect
from .aio_elections import AsyncCandidate, campaign, leader, observe, revoke_leader
from .aio_locks import AsyncLease, AsyncWatch, check, lease, list, revoke, watch
from .aio_sessions import AsyncSession, AsyncSessionCandidate, AsyncSessionLease, session
# Importable from here as they always were (the threaded package's, shared).
from .answers import Holder, Leader, Listing, LockState, TokenCheck, TokenState
from .errors import NotAcquired
from .lost import LostReason
from .options import DEFAULT_SERVER

# `list` is left out, as in leasehold_client: a star import would hide the builtin.
__all__ = ["AsyncLease", "AsyncCandidate", "AsyncSession", "AsyncSessionLease",
           "AsyncSessionCandidate", "lease", "campaign", "leader", "observe", "connect",
           "session", "AsyncWatch", "watch", "revoke", "revoke_leader", "LostReason",
           "LockState", "Holder", "check", "TokenCheck", "TokenState"]
