"""How a failed call's status details become NotAcquired's fields: no server needed (the tests
against the real binary are test_conformance_refusal_details and the asyncio one)."""

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from leasehold_client import NotAcquired, errors

ABORTED = grpc.StatusCode.ABORTED
MESSAGE = 'lock "job" is held by "holder-a"'


class FailedCall(grpc.RpcError):
    """What a failed call answers: its code, message and trailers."""

    def __init__(self, code, message, trailers=()):
        self._code, self._message, self._trailers = code, message, tuple(trailers)

    def code(self):
        return self._code

    def details(self):
        return self._message

    def trailing_metadata(self):
        return self._trailers


def details_trailer(code, message, *details):
    status = status_pb2.Status(code=code.value[0], message=message)
    for detail in details:
        packed = any_pb2.Any()
        packed.Pack(detail)
        status.details.append(packed)
    return ("grpc-status-details-bin", status.SerializeToString())


def error_info(domain="leasehold", reason="LOCK_HELD", **metadata):
    return error_details_pb2.ErrorInfo(domain=domain, reason=reason, metadata=metadata)


def retry_info(seconds, nanos=0):
    info = error_details_pb2.RetryInfo()
    info.retry_delay.seconds, info.retry_delay.nanos = seconds, nanos
    return info


def test_a_refusal_reads_reason_holder_retry_and_metadata():
    refusal = errors.refusal(FailedCall(ABORTED, MESSAGE, [details_trailer(
        ABORTED, MESSAGE, error_info(lock="job", holder="holder-a"), retry_info(12, 500_000_000))]))
    assert isinstance(refusal, NotAcquired)
    assert (refusal.reason, refusal.holder, refusal.retry_after) == ("LOCK_HELD", "holder-a", 12.5)
    assert refusal.metadata == {"lock": "job", "holder": "holder-a"}
    assert str(refusal) == MESSAGE


def test_a_refusal_without_details_still_says_what_happened():
    refusal = errors.refusal(FailedCall(ABORTED, MESSAGE))
    assert (refusal.reason, refusal.holder, refusal.retry_after, refusal.metadata) == (
        None, None, None, {})
    assert str(refusal) == MESSAGE


def test_details_of_another_domain_or_for_another_status_are_not_read():
    foreign = errors.refusal(FailedCall(ABORTED, MESSAGE, [details_trailer(
        ABORTED, MESSAGE, error_info(domain="proxy.example", reason="RATE", holder="x"))]))
    assert (foreign.reason, foreign.holder, foreign.metadata) == (None, None, {})
    rewritten = errors.refusal(FailedCall(ABORTED, MESSAGE, [details_trailer(
        ABORTED, "another message", error_info(holder="holder-a"))]))
    assert (rewritten.reason, rewritten.holder) == (None, None)
    garbled = errors.refusal(FailedCall(ABORTED, MESSAGE,
                                        [("grpc-status-details-bin", b"\xff\xff")]))
    assert garbled.reason is None


def test_other_statuses_are_not_refusals():
    unavailable = grpc.StatusCode.UNAVAILABLE
    trailer = details_trailer(unavailable, "Redis is down", error_info(reason="REDIS_UNAVAILABLE"))
    assert errors.refusal(FailedCall(unavailable, "Redis is down", [trailer])) is None
