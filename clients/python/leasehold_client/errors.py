"""What a failed call means: a refusal (``NotAcquired``, with the details the server sent), a
session's lease that failed (``LeaseFailed``), or a broken stream that may be resumed elsewhere.

Every place a status becomes an exception, threaded or asyncio, single stream or session, goes
through here, so they all read the details the same way.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple, Union

import grpc
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from leasehold.v1 import session_pb2

#: The ``domain`` of the server's ``google.rpc.ErrorInfo``: another one (a proxy's) is not ours.
ERROR_DOMAIN = "leasehold"

#: How a broken stream may end and still be resumed elsewhere: the server or the connection went
#: away. Any other status (NOT_FOUND, PERMISSION_DENIED, ...) is an answer, and final.
RESUMABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN,
                       grpc.StatusCode.INTERNAL, grpc.StatusCode.CANCELLED,
                       grpc.StatusCode.DEADLINE_EXCEEDED})

#: gRPC's status codes by number, as a session's ``failed`` carries them.
STATUS_CODES = {code.value[0]: code for code in grpc.StatusCode}

#: How a stream ended without its last word: the call's error, or a sentence (it just ended).
Break = Union[grpc.RpcError, str]


class NotAcquired(Exception):
    """The lock was not acquired (gRPC status ABORTED): it is taken and the request did not wait,
    it stayed taken for the whole wait, or (Redlock) no contender won a majority. Also raised,
    without a ``reason``, when the stream ended before the lock was acquired, or when the
    ``acquired`` arrived after the validity it gave had run out (held up on its way, as by a
    partition that healed): the client cancels that stream rather than hold a lease that may be
    someone else's by now.

    ``str(error)`` is the server's message, for people. Programs read the fields, which come
    from the status details the server sends with the refusal (``google.rpc.ErrorInfo`` and
    ``RetryInfo``, docs/errors.md), because the message may be reworded:

    ``reason``: why, as the server names it: ``LOCK_HELD`` (taken, and ``wait`` was 0),
    ``WAIT_EXPIRED`` (still taken when ``wait`` ran out) or ``NO_MAJORITY``; None when the
    refusal carried no details (a server older than them, the stream ended without a word, or
    the ``acquired`` came too late).
    ``holder``: the holder's description, as it gave it (may be ``""``); None if not named.
    ``retry_after``: seconds after which the server advises a retry (for a taken lock, the
    holder's remaining TTL: before then only its release frees the lock); None when it cannot
    tell (the key has no expiry, or the lock is free but others are ahead in line).
    ``metadata``: every named value the server sent (``lock``, ``holder``, ``waited_ms``...),
    as strings.
    """

    def __init__(self, message: str, *, reason: Optional[str] = None,
                 holder: Optional[str] = None, retry_after: Optional[float] = None,
                 metadata: Optional[Dict[str, str]] = None):
        super().__init__(message)
        self.reason = reason
        self.holder = holder
        self.retry_after = retry_after
        self.metadata: Dict[str, str] = dict(metadata or {})


class LeaseFailed(grpc.RpcError):
    """A lease on a session could not be had, with the status a Lease stream would have ended
    with (``failed`` on the session: INVALID_ARGUMENT, FAILED_PRECONDITION, NOT_FOUND,
    RESOURCE_EXHAUSTED, UNAVAILABLE...). It answers ``code()``, ``details()`` and
    ``trailing_metadata()`` as a failed call does, so it is read as one (ABORTED, a refusal, is
    raised as ``NotAcquired`` instead, with its details)."""

    def __init__(self, code: int, message: str, status: bytes = b""):
        super().__init__(message)
        self._code = STATUS_CODES.get(code, grpc.StatusCode.UNKNOWN)
        self._message = message
        self._status = status

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._message

    def trailing_metadata(self) -> Tuple[Tuple[str, bytes], ...]:
        """The status details as a call's trailer carries them (``grpc-status-details-bin``)."""
        return (("grpc-status-details-bin", self._status),) if self._status else ()

    def __str__(self) -> str:
        return f"{self._code.name}: {self._message}"


def error_details(error: grpc.RpcError) -> Tuple[Optional[str], Dict[str, str], Optional[float]]:
    """The reason, metadata and retry delay (seconds) of a failed call's status details (the
    ``grpc-status-details-bin`` trailer), as far as it has them.

    Works on a sync call's error and on ``grpc.aio``'s ``AioRpcError`` alike (both answer
    ``trailing_metadata()``, ``code()`` and ``details()`` at once). Details that do not match the
    status they came with (rewritten on the way) or cannot be read are ignored: the status
    itself still says what happened.
    """
    try:
        status = rpc_status.from_call(error)
    except (ValueError, DecodeError):
        status = None
    reason: Optional[str] = None
    metadata: Dict[str, str] = {}
    retry_after: Optional[float] = None
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            if info.domain == ERROR_DOMAIN and reason is None:
                reason, metadata = info.reason, dict(info.metadata)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            retry_after = retry.retry_delay.seconds + retry.retry_delay.nanos / 1e9
    return reason, metadata, retry_after


def refusal(error: grpc.RpcError) -> Optional[NotAcquired]:
    """The NotAcquired to raise for a call that failed with ``error``, or None if ``error`` is
    not a refusal (raise it as it is)."""
    if error.code() != grpc.StatusCode.ABORTED:
        return None
    reason, metadata, retry_after = error_details(error)
    return NotAcquired(error.details() or "lock not acquired", reason=reason,
                       holder=metadata.get("holder"), retry_after=retry_after,
                       metadata=metadata)


def session_failure(failed: session_pb2.SessionFailed) -> Exception:
    """What to raise for a session's lease answered ``failed``: NotAcquired for a refusal (with
    its details, read as a stream's status is), else a LeaseFailed."""
    error = LeaseFailed(failed.code, failed.message, failed.status)
    return refusal(error) or error


def describe(error: Break) -> str:
    if isinstance(error, grpc.RpcError):
        return f"{error.code().name} {error.details()}"
    return error


def resumable(error: Break) -> bool:
    """Whether a stream that ended so broke (rather than answered): a string is a stream that
    ended without its last word."""
    return not isinstance(error, grpc.RpcError) or error.code() in RESUMABLE
