"""Elections for asyncio: ``campaign`` runs for leader for an ``async with`` block (an
``AsyncCandidate``, driven by ``aio_tasks.HeldTask`` over the core in ``held``); ``leader`` and
``observe`` say who leads; ``revoke_leader`` ends a leadership by force."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Optional

from grpc import aio
from leasehold.v1 import election_pb2, election_pb2_grpc

from .aio_channels import own_channel
from .aio_tasks import HeldTask, follow
from .answers import Leader, Observation, election_state, leader_of
from .held import LeadershipHeld
from .options import DEFAULT_SERVER, grace, millis
from .views import Read


class AsyncCandidate:
    """One candidacy, held by one Campaign stream (or the next, when a leader's stream breaks
    and it resumes elsewhere). Use ``campaign(...)``.

    ``term`` is the term once elected; ``resumes`` counts the leadership's resumptions;
    ``leading`` says whether it leads now, as far as it knows.
    """

    def __init__(self, stub: election_pb2_grpc.ElectionServiceStub, election: str,
                 value: bytes, ttl: float, *, auto_resume: bool = False,
                 resume_grace: float = 0.0):
        self.election = election
        self._stream = HeldTask(
            lambda **model: LeadershipHeld(election, value, millis(ttl), millis(resume_grace),
                                           auto_resume, **model), stub.Campaign)
        self._held = self._stream.held
        self._until = self._stream.waiters.until

    async def _begin(self) -> None:
        self._stream.watch(await self._stream.open())

    term = Read("_held")
    resumes = Read("_held")
    #: Why the leadership was lost, for programs (a ``LostReason``; None until lost, and when
    #: resigned): ``REVOKED`` when an operator ended it (``revoke_leader``).
    lost_code = Read("_held")

    async def elected(self) -> int:
        """Waits in line until this candidate leads; returns its term."""
        held = self._held
        await self._until(lambda: held.term is not None or held.over)
        if held.term is not None:
            return held.term
        raise held.not_elected()

    async def proclaim(self, value: bytes) -> None:
        """Publishes a new value while leading."""
        held = self._held
        request = held.proclaim(value)
        if request is not None:
            sent = held.sent
            await self._stream.send(request)  # between streams, the resumed one publishes it
            await self._until(lambda: held.published >= sent or held.over)
            if held.published >= sent:
                return
        raise held.not_published()

    @property
    def leading(self) -> bool:
        """Whether this candidate leads now, as far as it knows; see ``Candidate.leading`` (the
        validity is read from the event loop's clock, which its timer runs on)."""
        return self._held.believed()

    async def lost(self) -> str:
        """Waits until the leadership is lost; returns the reason. Only while leading."""
        await self._until(lambda: self._held.over)
        return self._held.reason or ""

    async def resign(self) -> bool:
        """Steps down (or leaves the line); True if this candidate was leading."""
        if self._held.letting_go:
            return False
        await self._stream.let_go(lambda: self._held.over, 10)
        return self._held.was_held


@asynccontextmanager
async def campaign(election: str, value: bytes, *, server: str = DEFAULT_SERVER,
                   ttl: float = 5.0, auto_resume: bool = True,
                   resume_grace: Optional[float] = None,
                   channel: Optional[aio.Channel] = None) -> AsyncIterator[AsyncCandidate]:
    """Runs for leader of ``election`` for the block; ``await elected()`` to wait in line. The
    options are those of ``leasehold_client.campaign``."""
    async with own_channel(server, channel) as chan:
        candidate = AsyncCandidate(election_pb2_grpc.ElectionServiceStub(chan), election, value,
                                   ttl, auto_resume=auto_resume,
                                   resume_grace=grace(ttl, resume_grace, auto_resume))
        await candidate._begin()
        try:
            yield candidate
        finally:
            await candidate.resign()



async def leader(election: str, *, server: str = DEFAULT_SERVER,
                 channel: Optional[aio.Channel] = None) -> Optional[Leader]:
    """The leader of ``election`` now, or None."""
    async with own_channel(server, channel) as chan:
        answer = await election_pb2_grpc.ElectionServiceStub(chan).Leader(
            election_pb2.LeaderRequest(election=election))
        return leader_of(answer.has_leader, answer.term, answer.value)



async def observe(election: str, *, server: str = DEFAULT_SERVER,
                  channel: Optional[aio.Channel] = None) -> AsyncIterator[Optional[Leader]]:
    """Yields the leader of ``election`` now (None for none), then every change, in order;
    follows the election again on any server when the stream breaks (as the threaded one)."""
    async with own_channel(server, channel) as chan:
        stub = election_pb2_grpc.ElectionServiceStub(chan)
        request = election_pb2.ObserveRequest(election=election)

        async def open_stream(ready: bool) -> Any:
            return stub.Observe(request, wait_for_ready=ready)

        states = follow(open_stream, Observation(election_state), f"election {election!r}")
        try:
            async for state in states:
                yield state
        finally:
            await states.aclose()  # cancels the call now, not when collected


async def revoke_leader(election: str, term: int = 0, *, server: str = DEFAULT_SERVER,
                        channel: Optional[aio.Channel] = None) -> Optional[Leader]:
    """Ends the leadership of ``election`` by force (of ``term``; 0: whichever leads): as
    ``leasehold_client.revoke_leader``, the leader ended or None."""
    async with own_channel(server, channel) as chan:
        answer = await election_pb2_grpc.ElectionServiceStub(chan).Revoke(
            election_pb2.ElectionServiceRevokeRequest(election=election, term=term))
        return leader_of(answer.revoked, answer.term, answer.value)
