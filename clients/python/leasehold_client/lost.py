"""Why a lease, a leadership or a session was lost, for programs: ``LostReason``, read from the
server's ``Lost.code`` and ``SessionLeaseLost.code`` (proto/leasehold/v1/lock.proto), or named
by the client itself when it ends a lease on its own (its clock ran out, a resume failed).

A holder reads it as ``lost_code`` beside ``lost_reason`` (the words, for people, which may be
reworded): ``if held.lost_code is LostReason.REVOKED: ...`` (an operator ended it: do not take
the lock straight back).
"""

from __future__ import annotations

import enum
from typing import Any

import grpc


class LostReason(enum.Enum):
    """The proto's ``LostReason``, without its prefix."""

    #: A server that predates the code (the words in ``lost_reason`` still say why).
    UNSPECIFIED = 0
    #: The key was deleted, expired, or holds another holder's token (also: a resume the
    #: server answered NOT_FOUND, its token holding nothing any more).
    TAKEN = 1
    #: No renewal could be confirmed before it ran out: Redis or the server unreachable, or
    #: too slow; also when this client's own clock ended it, or it could not be resumed.
    UNREACHABLE = 2
    #: The server shut down and it had no resume grace.
    SHUTDOWN = 3
    #: An operator revoked it (``revoke``, ``revoke_leader``): it cannot be resumed.
    REVOKED = 4
    #: It reached its ``max_hold`` (the server stopped renewing it, or this client's own count
    #: from when it sent the acquire ran out first): final, never resumed. Its key may hold
    #: until its TTL runs out; stop work now.
    MAX_HOLD = 5

    @classmethod
    def of(cls, code: int) -> "LostReason":
        """The server's code (an int of the proto enum); one this client does not know yet
        (from a newer server) reads as UNSPECIFIED."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNSPECIFIED


def code_of(lost: Any) -> LostReason:
    """The code of the server's ``Lost`` or ``SessionLeaseLost``."""
    return LostReason.of(lost.code)


def of_failure(error: Any) -> LostReason:
    """The code for a lease the client ends because a stream failed, a resume was refused or
    nothing confirmed it in time: TAKEN when the server said its token holds nothing
    (NOT_FOUND), else UNREACHABLE."""
    if isinstance(error, grpc.RpcError) and error.code() == grpc.StatusCode.NOT_FOUND:
        return LostReason.TAKEN
    return LostReason.UNREACHABLE
