"""Elections, threaded: ``campaign`` runs for leader for a ``with`` block (a ``Candidate``,
driven by ``threads.HeldThread`` over the core in ``held``); ``leader`` and ``observe`` say who
leads; ``revoke_leader`` ends a leadership by force."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator, Optional

import grpc
from leasehold.v1 import election_pb2, election_pb2_grpc

from .answers import Leader, Observation, election_state, leader_of
from .channels import own_channel
from .held import LeadershipHeld
from .options import DEFAULT_SERVER, grace, millis
from .threads import HeldThread, follow
from .views import Read


class Candidate:
    """One candidacy, held by one Campaign stream (or the next, when a leader's stream breaks
    and it resumes elsewhere). Use ``campaign(...)``.

    ``term`` is the term once elected; ``resumes`` counts the leadership's resumptions;
    ``leading`` says whether it leads now, as far as it knows.
    """

    def __init__(self, stub: election_pb2_grpc.ElectionServiceStub, election: str, value: bytes,
                 ttl: float, *, auto_resume: bool = False, resume_grace: float = 0.0):
        self.election = election
        self._stream = HeldThread(
            lambda **model: LeadershipHeld(election, value, millis(ttl), millis(resume_grace),
                                           auto_resume, **model), stub.Campaign)
        self._held = self._stream.held
        self._changed = self._stream.changed
        self._stream.watch(self._stream.open())

    term = Read("_held")
    resumes = Read("_held")
    #: Why the leadership was lost, for programs (a ``LostReason``; None until lost, and when
    #: resigned): ``REVOKED`` when an operator ended it (``revoke_leader``).
    lost_code = Read("_held")

    def elected(self) -> int:
        """Waits in line until this candidate leads; returns its term."""
        held = self._held
        with self._changed:
            self._changed.wait_for(lambda: held.term is not None or held.over)
            if held.term is not None:
                return held.term
            raise held.not_elected()

    def proclaim(self, value: bytes) -> None:
        """Publishes a new value while leading."""
        held = self._held
        with self._changed:
            request = held.proclaim(value)
            if request is not None:
                self._stream.send(request)  # between streams, the resumed one publishes it
                sent = held.sent
                self._changed.wait_for(lambda: held.published >= sent or held.over)
                if held.published >= sent:
                    return
            raise held.not_published()

    @property
    def leading(self) -> bool:
        """Whether this candidate leads now, as far as it knows: elected, neither lost nor
        resigned, and (with a resume grace, under which its server confirms every renewal) the
        validity last confirmed not yet run out by this process's clock; also while it resumes
        within that validity. The clock is read here, not only by the timer that ends the
        leadership: a process woken from a freeze that outlasted its validity says False at once,
        before that timer has run."""
        with self._changed:
            return self._held.believed()

    def lost(self) -> str:
        """Waits until the leadership is lost; returns the reason. Only while leading."""
        with self._changed:
            self._changed.wait_for(lambda: self._held.over)
            return self._held.reason or ""

    def resign(self) -> bool:
        """Steps down (or leaves the line); True if this candidate was leading."""
        with self._changed:
            if self._held.letting_go:
                return False
            self._stream.let_go()
            self._changed.wait_for(lambda: self._held.over, timeout=10)
            return self._held.was_held


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
    with own_channel(server, channel) as chan:
        candidate = Candidate(election_pb2_grpc.ElectionServiceStub(chan), election, value, ttl,
                              auto_resume=auto_resume,
                              resume_grace=grace(ttl, resume_grace, auto_resume))
        try:
            yield candidate
        finally:
            candidate.resign()



def leader(election: str, *, server: str = DEFAULT_SERVER,
           channel: Optional[grpc.Channel] = None) -> Optional[Leader]:
    """The leader of ``election`` now, or None."""
    with own_channel(server, channel) as chan:
        answer = election_pb2_grpc.ElectionServiceStub(chan).Leader(
            election_pb2.LeaderRequest(election=election))
        return leader_of(answer.has_leader, answer.term, answer.value)



def observe(election: str, *, server: str = DEFAULT_SERVER,
            channel: Optional[grpc.Channel] = None) -> Iterator[Optional[Leader]]:
    """Yields the leader of ``election`` now (None for none), then every change, in order.

    When the stream breaks (its server stopped), it follows the election again on any server,
    yielding the state it finds there only if it differs from the last one yielded.
    """
    with own_channel(server, channel) as chan:
        stub = election_pb2_grpc.ElectionServiceStub(chan)
        request = election_pb2.ObserveRequest(election=election)
        yield from follow(lambda ready: stub.Observe(request, wait_for_ready=ready),
                          Observation(election_state), f"election {election!r}",
                          threading.Event())


def revoke_leader(election: str, term: int = 0, *, server: str = DEFAULT_SERVER,
                  channel: Optional[grpc.Channel] = None) -> Optional[Leader]:
    """Ends the leadership of ``election`` by force, for an operator: the leader of ``term``
    (0: whichever leads). It is told it lost (``lost_code`` ``LostReason.REVOKED``), cannot
    resume its term, and the next candidate in line is elected with a larger one. Returns the
    leader ended (its term and value), or None when none was (no leader, or another term
    leads). Needs the ``admin`` role on the election (PERMISSION_DENIED otherwise) when the
    server checks tokens."""
    with own_channel(server, channel) as chan:
        answer = election_pb2_grpc.ElectionServiceStub(chan).Revoke(
            election_pb2.ElectionServiceRevokeRequest(election=election, term=term))
        return leader_of(answer.revoked, answer.term, answer.value)
