"""Why a lease was lost, typed (no server needed): the server's ``Lost.code`` and
``SessionLeaseLost.code`` become ``lost_code`` on a lease, a leadership, a session's leases and
the session, and the client names one itself when it ends a lease on its own; and the loop that
``observe`` and ``watch`` share (``threads.follow``), on stand-in streams."""

import asyncio
import queue
import threading

import grpc
import pytest

from leasehold.v1 import lock_pb2, election_pb2, session_pb2
from leasehold_client import LockState, LostReason
from leasehold_client.answers import Holder, watching
from leasehold_client.held import LeadershipHeld, LeaseHeld
from leasehold_client.session_core import SessionCore
from leasehold_client.aio_tasks import follow as aio_follow
from leasehold_client.threads import follow

from conftest import Clock

REVOKED = lock_pb2.Lost(reason="revoked by an operator", code=lock_pb2.LOST_REASON_REVOKED)


def test_every_code_of_the_proto_has_its_reason():
    assert [LostReason.of(code).name for code in lock_pb2.LostReason.values()] == [
        name.removeprefix("LOST_REASON_") for name in lock_pb2.LostReason.keys()]
    assert LostReason.of(99) is LostReason.UNSPECIFIED  # a newer server's


def held_lease(clock):
    lease = LeaseHeld(lock_pb2.LeaseAcquire(name="job", ttl_ms=5000, resume_grace_ms=5000),
                      auto_resume=True, **clock.model())
    lease.opened = clock.now
    assert lease.first(lock_pb2.Acquired(token="t", fencing_token=7, valid_for_ms=5000),
                       clock.now) is None
    return lease


def test_a_lease_told_lost_keeps_the_servers_code():
    lease = held_lease(Clock())
    lease.heard(lock_pb2.LeaseResponse(lost=REVOKED), 100.1)
    assert lease.lost.is_set()
    assert (lease.lost_code, lease.reason) == (LostReason.REVOKED, "revoked by an operator")


def test_a_lease_ended_by_the_clients_own_clock_is_unreachable():
    clock = Clock()
    lease = held_lease(clock)
    clock.now = clock.alarm
    lease.expired()
    assert lease.lost.is_set() and lease.lost_code is LostReason.UNREACHABLE


class Status(grpc.RpcError):
    def __init__(self, code):
        self._code = code

    def code(self):
        return self._code

    def details(self):
        return "stand-in"


@pytest.mark.parametrize("failure, code", [
    (("lost", REVOKED), LostReason.REVOKED),  # the resumed stream's `lost`
    (Status(grpc.StatusCode.NOT_FOUND), LostReason.TAKEN),  # its token holds nothing
    (Status(grpc.StatusCode.PERMISSION_DENIED), LostReason.UNREACHABLE),
])
def test_a_resume_refused_names_why(failure, code):
    lease = held_lease(Clock())
    assert lease.broke("the server ended the lease stream") == "resume"
    assert lease.attempt() is not None
    assert lease.answered(None, failure, 100.2, 100.3) == "over"
    assert lease.lost.is_set() and lease.lost_code is code


def test_a_leadership_told_lost_keeps_the_servers_code():
    clock = Clock()
    leadership = LeadershipHeld("vote", b"me", 5000, 5000, True, **clock.model())
    leadership.heard(election_pb2.CampaignResponse(elected=election_pb2.Elected(
        term=3, token="t", valid_for_ms=5000)), clock.now)
    assert leadership.term == 3
    leadership.heard(election_pb2.CampaignResponse(lost=REVOKED), clock.now)
    assert leadership.lost.is_set() and leadership.lost_code is LostReason.REVOKED


def session_core():
    return SessionCore(5.0, 5.0, "me", True, now=lambda: 100.0, new_event=threading.Event,
                       new_queue=queue.Queue, notify=lambda: None, schedule=lambda when: None,
                       abort=lambda: None)


def acquired(member_id):
    return session_pb2.SessionResponse(acquired=session_pb2.SessionAcquired(
        id=member_id, token=f"t{member_id}", fencing_token=member_id, valid_for_ms=5000))


def test_a_session_lease_lost_alone_and_a_lost_session_keep_the_servers_code():
    core = session_core()
    core.open_stream()
    a, b = core.acquire(["a"], 0, "", True, 1, False), core.acquire(["b"], 0, "", True, 1, False)
    core.hear(acquired(a.id))
    core.hear(acquired(b.id))
    core.hear(session_pb2.SessionResponse(lease_lost=session_pb2.SessionLeaseLost(
        id=a.id, reason="revoked", code=lock_pb2.LOST_REASON_REVOKED)))
    assert a.lost.is_set() and a.lost_code is LostReason.REVOKED
    assert not b.lost.is_set() and b.lost_code is None
    core.hear(session_pb2.SessionResponse(lost=lock_pb2.Lost(
        reason="shutting down", code=lock_pb2.LOST_REASON_SHUTDOWN)))
    assert b.lost.is_set() and b.lost_code is LostReason.SHUTDOWN
    assert core.lost.is_set() and core.lost_code is LostReason.SHUTDOWN
    assert a.lost_code is LostReason.REVOKED  # lost first, alone


def state(held, holder="", fencing_token=0, ttl_ms=0, waiting=0):
    holders = [lock_pb2.Holder(holder=holder, fencing_token=fencing_token,
                               ttl_remaining_ms=ttl_ms)] if held else []
    return lock_pb2.WatchResponse(state=lock_pb2.DescribeResponse(
        held=held, holder=holder, fencing_token=fencing_token, ttl_remaining_ms=ttl_ms,
        holders=holders, limit=1 if held else 0, waiting=waiting))


class Stream:
    """A server-streaming call: its answers, then an error (or its end, or staying open until
    cancelled)."""

    def __init__(self, answers, error=None, stay=False):
        self.answers, self.error, self.stay = answers, error, stay
        self.cancelled = threading.Event()

    def __iter__(self):
        yield from self.answers
        if self.stay:
            self.cancelled.wait(10)
            raise Status(grpc.StatusCode.CANCELLED)
        if self.error is not None:
            raise self.error

    def cancel(self):
        self.cancelled.set()


def following(streams, stopped):
    opened = []

    def open_stream(ready):
        opened.append(ready)
        return streams.pop(0) if streams else None

    return follow(open_stream, watching("job"), "watch 'job'", stopped), opened


def test_follow_yields_each_state_once_and_follows_again_after_a_break():
    unavailable = Status(grpc.StatusCode.UNAVAILABLE)
    streams = [
        Stream([state(False), state(True, "a", 5, 3000), state(True, "a", 5, 2000)],
               unavailable),
        # Another server: the same state (a TTL further on) is not yielded again.
        Stream([state(True, "a", 5, 1000), state(True, "a", 5, 1000, waiting=1),
                state(False, waiting=1)]),
    ]
    states, opened = following(streams, threading.Event())
    seen = [(s.held, s.holder, s.fencing_token, s.waiting) for s in states]
    assert seen == [(False, "", 0, 0), (True, "a", 5, 0), (True, "a", 5, 1), (False, "", 0, 1)]
    assert opened == [False, True]  # the second waits for a server to be ready


def test_follow_raises_the_first_streams_error_and_any_refusal():
    states, _ = following([Stream([], Status(grpc.StatusCode.UNAVAILABLE))], threading.Event())
    with pytest.raises(grpc.RpcError):
        next(states)
    states, _ = following([Stream([state(False)], Status(grpc.StatusCode.PERMISSION_DENIED))],
                         threading.Event())
    assert next(states).held is False
    with pytest.raises(grpc.RpcError):
        next(states)


def test_a_stopped_follow_ends_instead_of_raising():
    stopped = threading.Event()
    stream = Stream([state(True, "a", 5, 3000, waiting=0)], stay=True)
    states, _ = following([stream], stopped)
    first = next(states)
    assert first == LockState("job", True, "a", 5, 3.0, (Holder("a", 5, 3.0),), 1, False, 0)
    threading.Timer(0.05, lambda: (stopped.set(), stream.cancel())).start()
    assert list(states) == []  # the cancelled stream ended it, without an error


class AioStream:
    """A grpc.aio server-streaming call that stays open until cancelled (then raises, as a
    cancelled call's read does)."""

    def __init__(self, answers):
        self.answers = answers
        self._cancelled = asyncio.Event()

    async def __aiter__(self):
        for answer in self.answers:
            yield answer
        await self._cancelled.wait()
        raise asyncio.CancelledError

    def cancel(self):
        self._cancelled.set()

    def cancelled(self):
        return self._cancelled.is_set()


def test_an_async_follow_stopped_from_another_task_ends_instead_of_raising():
    async def scenario():
        stream, stopped = AioStream([state(False)]), []

        async def open_stream(ready):
            return None if stopped else stream

        states = aio_follow(open_stream, watching("job"), "watch 'job'", lambda: bool(stopped))

        async def read():
            return [s.held async for s in states]

        reader = asyncio.create_task(read())
        await asyncio.sleep(0.05)
        stopped.append(True)
        stream.cancel()
        assert await reader == [False]

    asyncio.run(asyncio.wait_for(scenario(), 10))
