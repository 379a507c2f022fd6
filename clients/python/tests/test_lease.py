"""The Python client against a real leasehold server and a real redis-server."""

import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import lock_token, wait_until
from leasehold_client import NotAcquired, lease


def redis_cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                          text=True).stdout.strip()


def test_lease_holds_and_releases(server, redis_port):
    with lease("job", server=server, ttl=5, holder="py-test") as held:
        assert held.fencing_token > 0
        assert lock_token(redis_port, "leasehold:{job}:lock") == held.token
        with pytest.raises(NotAcquired, match="py-test"):
            with lease("job", server=server):
                pass
    assert redis_cli(redis_port, "EXISTS", "leasehold:{job}:lock") == "0"


def test_a_wait_that_runs_out_is_refused_with_its_details(server):
    with lease("job", server=server, ttl=20, holder="py-test"):
        with pytest.raises(NotAcquired) as refused:
            with lease("job", server=server, wait=0.2):
                pass
    assert (refused.value.reason, refused.value.holder) == ("WAIT_EXPIRED", "py-test")
    assert int(refused.value.metadata["waited_ms"]) >= 200
    assert 0 < refused.value.retry_after <= 20


def test_waiters_take_turns_without_overlap(server):
    inside = []
    overlaps = []

    def worker(i):
        for _ in range(3):
            with lease("shared", server=server, ttl=5, wait=20, holder=f"w{i}"):
                inside.append(i)
                if len(inside) > 1:
                    overlaps.append(list(inside))
                time.sleep(0.02)
                inside.remove(i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert overlaps == []


def test_lost_is_set_when_the_lock_is_taken_away(server, redis_port):
    with lease("job", server=server, ttl=1.5) as held:
        redis_cli(redis_port, "DEL", "leasehold:{job}:lock")
        assert held.lost.wait(timeout=5), "lost was never set"
        assert "deleted or taken" in held.lost_reason


def test_a_lease_whose_resume_is_refused_is_lost_at_once(cluster, redis_port):
    everyone = ",".join(server.address for server in cluster)
    with lease("job", server=everyone, ttl=10) as held:
        os.kill(cluster[0].proc.pid, signal.SIGSTOP)  # its server (pick_first) notices nothing
        redis_cli(redis_port, "DEL", "leasehold:{job}:lock")
        valid_until = held.valid_until
        cluster[0].kill()
        assert held.lost.wait(15), "lost was never set"
        assert time.monotonic() < valid_until, "lost only when its validity ran out"
        assert held.lost_reason.startswith("could not resume: NOT_FOUND"), held.lost_reason
        assert held.resumes == 0


def test_a_lease_that_cannot_be_resumed_is_lost_when_its_validity_runs_out(cluster):
    everyone = ",".join(server.address for server in cluster)
    with lease("job", server=everyone, ttl=2) as held:
        for server in cluster:
            server.kill()
        assert held.lost.wait(15), "lost was never set"
        # By its own clock, at the end of the validity last confirmed (a timer: give the
        # threads a moment to wake up on a loaded machine).
        assert time.monotonic() < held.valid_until + 1.0, "lost long after its validity ran out"
        assert held.lost_reason.startswith(
            "could not resume before the lease's validity ran out: UNAVAILABLE"), held.lost_reason


def test_a_lease_released_between_streams_is_released_by_token(cluster, redis_port):
    everyone = ",".join(server.address for server in cluster)
    with lease("job", server=everyone, ttl=5) as held:
        for server in cluster:
            server.kill()  # no server to resume on, nor to release on, until one comes back
        answers = []
        releasing = threading.Thread(target=lambda: answers.append(held.release(timeout=15)))
        releasing.start()
        cluster[2].start()
        releasing.join(timeout=20)
        assert answers == [True]  # by token, on the server that came back
        assert not held.lost.is_set(), held.lost_reason
    assert redis_cli(redis_port, "EXISTS", "leasehold:{job}:lock") == "0"


def test_a_lease_of_several_names_resumes_and_is_released_by_token_whole(cluster, redis_port):
    everyone = ",".join(server.address for server in cluster)
    keys = ["leasehold:{b}:lock", "leasehold:{a}:lock"]
    with lease(names=["b", "a"], server=everyone, ttl=3) as held:
        fences = dict(held.fences)
        cluster[0].kill()  # its server (pick_first): the resume asks for both names again
        wait_until(lambda: held.resumes >= 1 or held.lost.is_set(), "the lease resumed")
        assert not held.lost.is_set(), held.lost_reason
        assert held.fences == fences
        assert [lock_token(redis_port, key) for key in keys] == [held.token] * 2
        for server in cluster[1:]:
            server.kill()  # no server to release on until one comes back
        answers = []
        releasing = threading.Thread(target=lambda: answers.append(held.release(timeout=15)))
        releasing.start()
        cluster[2].start()
        releasing.join(timeout=20)
        assert answers == [True]  # by token, every name
    for key in keys:
        assert redis_cli(redis_port, "EXISTS", key) == "0", key
