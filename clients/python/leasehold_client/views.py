"""What a holder reads of what it holds: the public attributes of ``Lease``, ``AsyncLease`` and
of a session's leases and candidates, each read from the core that keeps it (``held``,
``session_core``), so that the threaded and asyncio classes say the same thing the same way."""

from __future__ import annotations

from typing import Any, Optional


class Read:
    """A read-only attribute read from the core its owner keeps in ``core`` (an attribute
    name): ``fencing_token = Read("_held")`` reads ``self._held.fencing_token``."""

    def __init__(self, core: str):
        self._core = core
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, holder: Any, owner: Optional[type] = None) -> Any:
        if holder is None:
            return self
        return getattr(getattr(holder, self._core), self._name)


class HeldLease:
    """What a held lock tells its holder, threaded (``Lease``) or asyncio (``AsyncLease``):
    ``lost`` (an event) and ``lost_reason`` say whether and why it was lost, ``lost_code`` why
    for programs (a ``LostReason``, None until lost); ``resumes`` counts the times it was taken
    back on a new stream after its stream broke; ``valid_until`` is when the validity last
    confirmed runs out (the driver's clock), never past its ``max_hold``. ``names``: every name
    it holds (``name`` first); ``fences``: each one's fencing token, in that order (a dict);
    ``fencing_token`` is the first's."""

    _held: Any  # a held.LeaseHeld
    lost = Read("_held")
    lost_code = Read("_held")
    names = Read("_held")
    fences = Read("_held")
    fencing_token = Read("_held")
    token = Read("_held")
    resumes = Read("_held")
    valid_until = Read("_held")

    @property
    def lost_reason(self) -> Optional[str]:
        return self._held.reason if self._held.lost.is_set() else None


class HeldOnSession:
    """What a lease on a session tells its holder, threaded or asyncio: ``fencing_token``,
    ``token``, ``names`` and ``fences`` as for a ``Lease``; ``lost_reason`` says why this lease
    alone was lost, and ``lost_code`` why for programs (a ``LostReason``: ``REVOKED`` when an
    operator ended it); ``resumes`` counts the times it was taken back on a new stream;
    ``valid_until`` is when the validity last confirmed for it runs out (the driver's clock),
    never past its ``max_hold``. A candidate's ``term`` too."""

    _member: Any  # a session_core.Member
    id = Read("_member")
    name = Read("_member")
    names = Read("_member")
    fences = Read("_member")
    token = Read("_member")
    fencing_token = Read("_member")
    valid_until = Read("_member")
    resumes = Read("_member")
    lost_reason = Read("_member")
    lost_code = Read("_member")


class SessionView:
    """What a whole session tells its holder, threaded (``Session``) or asyncio
    (``AsyncSession``): ``lost`` (an event) and ``lost_reason`` say whether and why every lease
    on it was lost, ``lost_code`` why for programs (a ``LostReason``, None until it is);
    ``resumes`` counts the times the session was taken back on a new stream."""

    _core: Any  # a session_core.SessionCore
    lost = Read("_core")
    lost_reason = Read("_core")
    lost_code = Read("_core")
    resumes = Read("_core")
