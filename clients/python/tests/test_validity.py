"""Until when a message vouches for a lease or a leadership (no server needed): valid_for_ms from
its receipt, never past valid_to_ms after the client opened the stream; and what the clients do
with an `acquired` or `elected` that arrives after that (held up on its way, as by a partition
that healed), shown with stand-in streams that deliver one late."""

import asyncio
import threading
import time

import pytest

from leasehold.v1 import election_pb2, lock_pb2
from leasehold_client import Candidate, Lease, NotAcquired, aio
from leasehold_client.validity import vouched_until

# Every message that vouches: all carry valid_for_ms and valid_to_ms.
VOUCHING = [lock_pb2.Acquired, lock_pb2.Extended, election_pb2.Elected]


@pytest.mark.parametrize("message", VOUCHING)
def test_without_valid_to_the_validity_counts_from_receipt(message):
    # A server that predates valid_to_ms sends 0: only the receipt counts, however late.
    vouch = message(valid_for_ms=2000, valid_to_ms=0)
    assert vouched_until(opened=100.0, received=105.0, vouch=vouch) == pytest.approx(107.0)


@pytest.mark.parametrize("message", VOUCHING)
def test_a_message_held_up_past_its_validity_has_already_run_out(message):
    # Opened at 100, vouched for until 103 by the server's count, but received at 105: 2 s of
    # valid_for_ms from receipt would believe it until 107.
    vouch = message(valid_for_ms=2000, valid_to_ms=3000)
    until = vouched_until(opened=100.0, received=105.0, vouch=vouch)
    assert until == pytest.approx(103.0)
    assert until <= 105.0, "already past on receipt"


@pytest.mark.parametrize("message", VOUCHING)
def test_a_timely_message_vouches_until_the_earlier_bound(message):
    vouch = message(valid_for_ms=2000, valid_to_ms=2200)
    # Delivered 0.5 s after the opening: the bound from the opening (102.2) comes first.
    assert vouched_until(100.0, 100.5, vouch) == pytest.approx(102.2)
    # Delivered at once: the bound from receipt (102.1) comes first.
    vouch = message(valid_for_ms=2000, valid_to_ms=2500)
    assert vouched_until(100.0, 100.1, vouch) == pytest.approx(102.1)


# Stand-ins for a stream whose one answer arrives late: held up for HELD_UP seconds, and
# vouching for only 1 ms after the opening.
HELD_UP = 0.05


def late_acquired():
    return lock_pb2.LeaseResponse(acquired=lock_pb2.Acquired(
        token="0" * 32, fencing_token=7, ttl_ms=5000, valid_for_ms=5000, valid_to_ms=1))


def late_elected():
    return election_pb2.CampaignResponse(elected=election_pb2.Elected(
        term=7, token="0" * 32, valid_for_ms=5000, valid_to_ms=1))


class LateCall:
    """A threaded stream call: yields `answer` late, then stays open until cancelled."""

    def __init__(self, answer):
        self.answer = answer
        self.cancelled = threading.Event()

    def __iter__(self):
        time.sleep(HELD_UP)
        yield self.answer
        self.cancelled.wait(10)

    def cancel(self):
        self.cancelled.set()
        return True


class LateStub:
    def __init__(self, answer):
        self.call = LateCall(answer)

    def Lease(self, requests, **_):
        return self.call

    def Campaign(self, requests, **_):
        return self.call


def test_a_late_acquired_is_not_a_lease_and_its_stream_is_cancelled():
    stub = LateStub(late_acquired())
    with pytest.raises(NotAcquired, match="after its validity had run out") as refused:
        Lease(stub, lock_pb2.LeaseAcquire(name="job", ttl_ms=5000), auto_resume=True)
    assert refused.value.reason is None
    assert stub.call.cancelled.is_set()


def test_a_late_elected_ends_the_candidacy_as_a_lost_leadership():
    stub = LateStub(late_elected())
    candidate = Candidate(stub, "vote", b"me", 5.0, auto_resume=True, resume_grace=5.0)
    with pytest.raises(RuntimeError, match="after the leadership's validity had run out"):
        candidate.elected()
    assert "after the leadership's validity had run out" in candidate.lost()
    assert candidate.term is None
    assert stub.call.cancelled.is_set()


class LateAioCall:
    """A grpc.aio stream call: answers its first read late, then stays open until cancelled."""

    def __init__(self, answer):
        self.answer = answer
        self.cancelled = False
        self.reads = 0

    async def write(self, request):
        pass

    async def read(self):
        self.reads += 1
        if self.reads == 1:
            await asyncio.sleep(HELD_UP)
            return self.answer
        while not self.cancelled:
            await asyncio.sleep(0.01)
        raise asyncio.CancelledError

    def cancel(self):
        self.cancelled = True
        return True


class LateAioStub:
    def __init__(self, answer):
        self.call = LateAioCall(answer)

    def Lease(self, **_):
        return self.call

    def Campaign(self, **_):
        return self.call


def test_async_a_late_acquired_is_not_a_lease_and_its_stream_is_cancelled():
    async def scenario():
        stub = LateAioStub(late_acquired())
        held = aio.AsyncLease(stub, lock_pb2.LeaseAcquire(name="job", ttl_ms=5000), True)
        with pytest.raises(NotAcquired, match="after its validity had run out") as refused:
            await held._acquire()
        assert refused.value.reason is None
        assert stub.call.cancelled

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_async_a_late_elected_ends_the_candidacy_as_a_lost_leadership():
    async def scenario():
        stub = LateAioStub(late_elected())
        candidate = aio.AsyncCandidate(stub, "vote", b"me", 5.0, auto_resume=True,
                                       resume_grace=5.0)
        await candidate._begin()
        with pytest.raises(RuntimeError, match="after the leadership's validity had run out"):
            await candidate.elected()
        assert "after the leadership's validity had run out" in await candidate.lost()
        assert candidate.term is None
        assert stub.call.cancelled

    asyncio.run(asyncio.wait_for(scenario(), 10))
