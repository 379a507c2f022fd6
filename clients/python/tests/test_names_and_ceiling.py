"""Issue 41 in the I/O-free cores (no server needed): several names (sent as ``name`` and
``more_names``, each one's fencing token read from ``fences``, an answer short of a name
refused), ``lock_delay`` and ``max_hold`` sent, the validity capped at ``max_hold`` after the
acquire was sent whatever the server vouches (then lost with ``MAX_HOLD``, never resumed), on a
lease and on a session's lease alike, and ``check``'s answers read as a ``TokenCheck``."""

import queue
import threading

import pytest

from leasehold.v1 import lock_pb2, session_pb2
from leasehold_client import Lease, LostReason, NotAcquired, TokenCheck, TokenState
from leasehold_client.answers import token_check
from leasehold_client.held import LeaseHeld
from leasehold_client.options import acquire_request, lock_names
from leasehold_client.session_core import SessionCore
from leasehold_client.validity import MAX_HOLD_REACHED

from conftest import Clock
from test_validity import LateStub

NAMES = ("b", "a", "c")  # the order asked, not the server's canonical one


def request(names=NAMES, max_hold=None, lock_delay=0.0):
    return acquire_request(names, ttl=5, wait=0, holder="", fair=True, limit=1, shared=False,
                           resume_grace=5, resume_token="", lock_delay=lock_delay,
                           max_hold=max_hold)


def fences(*pairs):
    return [lock_pb2.NameFence(name=name, fencing_token=token) for name, token in pairs]


def acquired(valid_for_ms=5000, pairs=(("c", 9), ("b", 7), ("a", 8))):
    """An ``acquired`` whose fences come in another order than asked: the client keeps its own."""
    return lock_pb2.Acquired(token="t", fencing_token=7, valid_for_ms=valid_for_ms,
                             fences=fences(*pairs))


def held(clock, **options):
    lease = LeaseHeld(request(**options), auto_resume=True, **clock.model())
    lease.opened = clock.now  # the acquire is sent now
    return lease


def test_names_are_sent_as_name_and_more_names_with_the_delay_and_the_ceiling():
    sent = request(max_hold=6 * 3600, lock_delay=15)
    assert (sent.name, list(sent.more_names)) == ("b", ["a", "c"])
    assert (sent.lock_delay_ms, sent.max_hold_ms) == (15000, 6 * 3600 * 1000)
    assert (request().lock_delay_ms, request().max_hold_ms) == (0, 0)  # none unless asked
    assert lock_names("job", None) == ("job",)
    assert lock_names(None, ["b", "a"]) == ("b", "a")
    for name, names in (("job", ["a"]), (None, None), (None, "ab")):
        with pytest.raises(TypeError):
            lock_names(name, names)


def test_fences_are_read_in_the_order_asked_and_every_request_names_them_all():
    clock = Clock()
    lease = held(clock)
    assert lease.first(acquired(), clock.now) is None
    assert lease.names == NAMES
    assert list(lease.fences.items()) == [("b", 7), ("a", 8), ("c", 9)]
    assert lease.fencing_token == 7  # the first's
    # A resume asks for the same names; a release between streams releases them all.
    resume = lease.start_request(lease.token).acquire
    assert (resume.name, list(resume.more_names), resume.resume_token) == ("b", ["a", "c"], "t")
    release = lease.release_request()
    assert (release.name, list(release.more_names), release.token) == ("b", ["a", "c"], "t")


def test_one_name_without_fences_is_its_fencing_token():
    clock = Clock()  # a server that predates fences answers one name with fencing_token alone
    lease = held(clock, names=("job",))
    assert lease.first(lock_pb2.Acquired(token="t", fencing_token=4, valid_for_ms=5000),
                       clock.now) is None
    assert lease.fences == {"job": 4}


@pytest.mark.parametrize("pairs", [(), (("b", 7), ("a", 8)), (("b", 7), ("a", 8), ("d", 9))])
def test_an_answer_short_of_a_name_is_not_the_lease_asked_for(pairs):
    clock = Clock()  # e.g. a server that ignores more_names took "b" alone
    lease = held(clock)
    late = lease.first(lock_pb2.Acquired(token="t", fencing_token=7, valid_for_ms=5000,
                                         fences=fences(*pairs)), clock.now)
    assert late is not None and "every name" in late
    assert lease.token == "" and lease.fences == {}


def test_a_resume_with_other_fences_is_another_lease():
    clock = Clock()
    lease = held(clock)
    lease.first(acquired(), clock.now)
    assert lease.broke("the server ended the lease stream") == "resume"
    other = acquired(pairs=(("b", 7), ("a", 8), ("c", 10)))
    assert lease.answered(other, None, clock.now, clock.now) == "over"
    assert lease.lost.is_set() and "other fencing tokens" in lease.reason


def test_a_lease_whose_answer_misses_a_name_is_not_acquired_and_its_stream_cancelled():
    stub = LateStub(lock_pb2.LeaseResponse(acquired=lock_pb2.Acquired(
        token="t", fencing_token=7, valid_for_ms=5000)))
    with pytest.raises(NotAcquired, match="every name") as refused:
        Lease(stub, request(), auto_resume=True)
    assert refused.value.reason is None
    assert stub.call.cancelled.is_set()


def test_the_validity_never_reaches_past_max_hold_after_the_acquire_was_sent():
    clock = Clock()
    lease = held(clock, max_hold=1.0)
    clock.now = 100.2  # the answer comes 0.2 s later, vouching for 5 s from then
    assert lease.first(acquired(), clock.now) is None
    assert lease.valid_until == pytest.approx(101.0) and clock.alarm == pytest.approx(101.0)
    lease.heard(lock_pb2.LeaseResponse(extended=lock_pb2.Extended(valid_for_ms=5000)), 100.5)
    assert lease.valid_until == pytest.approx(101.0)  # a renewal does not move it on
    clock.now = clock.alarm  # the timer: over, as MAX_HOLD, not as a silent server
    lease.expired()
    assert lease.lost.is_set() and lease.lost_code is LostReason.MAX_HOLD
    assert lease.reason == MAX_HOLD_REACHED
    assert lease.broke("the server ended the lease stream") == "over"  # never resumed


def test_a_broken_stream_is_not_resumed_past_the_ceiling():
    clock = Clock()
    lease = held(clock, max_hold=1.0)
    lease.first(acquired(), clock.now)
    assert lease.broke("the server ended the lease stream") == "resume"
    clock.now = 101.0
    assert lease.attempt() is None
    assert lease.lost_code is LostReason.MAX_HOLD


def test_an_acquired_after_the_ceiling_is_not_a_lease():
    clock = Clock()  # waited past its max_hold: the ceiling counts from the sending
    lease = held(clock, max_hold=1.0)
    assert "max_hold" in lease.first(acquired(), 101.5)


def test_the_servers_max_hold_is_final():
    clock = Clock()
    lease = held(clock, max_hold=1.0)
    lease.first(acquired(), clock.now)
    lost = lock_pb2.Lost(reason="max hold reached", code=lock_pb2.LOST_REASON_MAX_HOLD)
    assert lease.heard(lock_pb2.LeaseResponse(lost=lost), 100.9) == "done"
    assert lease.lost_code is LostReason.MAX_HOLD and lease.reason == "max hold reached"
    assert lease.broke("the server ended the lease stream") == "over"


def session_core(clock):
    return SessionCore(5.0, 5.0, "me", True, now=lambda: clock.now, new_event=threading.Event,
                       new_queue=queue.Queue, notify=lambda: None,
                       schedule=lambda when: setattr(clock, "alarm", when), abort=lambda: None)


def test_a_session_lease_of_several_names_is_capped_and_lost_alone_at_its_ceiling():
    clock = Clock()
    core = session_core(clock)
    outbox = core.open_stream()
    pair = core.acquire(["b", "a"], 0, "", True, 1, False, lock_delay=2, max_hold=1.0)
    other = core.acquire(["c"], 0, "", True, 1, False)
    sent = [outbox.get_nowait() for _ in range(3)][1:]  # after `open`
    assert (sent[0].acquire.name, list(sent[0].acquire.more_names)) == ("b", ["a"])
    assert (sent[0].acquire.lock_delay_ms, sent[0].acquire.max_hold_ms) == (2000, 1000)
    assert (sent[1].acquire.max_hold_ms, list(sent[1].acquire.more_names)) == (0, [])
    clock.now = 100.3
    core.hear(session_pb2.SessionResponse(acquired=session_pb2.SessionAcquired(
        id=pair.id, token="t1", fencing_token=7, valid_for_ms=5000,
        fences=fences(("a", 8), ("b", 7)))))
    core.hear(session_pb2.SessionResponse(acquired=session_pb2.SessionAcquired(
        id=other.id, token="t2", fencing_token=9, valid_for_ms=5000)))
    assert pair.fences == {"b": 7, "a": 8} and other.fences == {"c": 9}
    assert pair.valid_until == pytest.approx(101.0)
    core.hear(session_pb2.SessionResponse(kept_alive=session_pb2.SessionKeptAlive(valid_for_ms=5000)))
    assert pair.valid_until == pytest.approx(101.0)
    assert clock.alarm == pytest.approx(101.0)
    clock.now = clock.alarm
    core.tick()
    assert pair.lost.is_set() and pair.lost_code is LostReason.MAX_HOLD
    assert not other.lost.is_set() and not core.lost.is_set()
    # Taken back on a new stream, a session's lease asks for the same names.
    resumed = pair.resume_request().acquire
    assert (resumed.name, list(resumed.more_names), resumed.resume_token) == ("b", ["a"], "t1")


@pytest.mark.parametrize("state, expected", [
    (lock_pb2.TOKEN_STATE_CURRENT, TokenState.CURRENT),
    (lock_pb2.TOKEN_STATE_SUPERSEDED, TokenState.SUPERSEDED),
    (lock_pb2.TOKEN_STATE_FREE, TokenState.FREE),
    (lock_pb2.TOKEN_STATE_UNSPECIFIED, TokenState.UNSPECIFIED),
    (99, TokenState.UNSPECIFIED),  # a newer server's
])
def test_checks_answers_are_typed(state, expected):
    answer = token_check(lock_pb2.CheckResponse(state=state, current_fencing_token=12))
    assert answer == TokenCheck(expected, 12)
    assert answer.current is (expected is TokenState.CURRENT)


def test_every_token_state_of_the_proto_has_its_member():
    assert [TokenState(value).name for value in lock_pb2.TokenState.values()] == [
        name.removeprefix("TOKEN_STATE_") for name in lock_pb2.TokenState.keys()]
