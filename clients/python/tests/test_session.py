"""Sessions (many leases on one stream), beyond the conformance scenarios: validity by the
client's clock, a break without resumption, and a resume the server refuses."""

import os
import signal
import subprocess

import grpc
import pytest

from leasehold_client import NotAcquired, lease, session

from conftest import CuttableProxy, free_port, lock_token, wait_until


def redis_cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                          text=True).stdout.strip()


def test_session_leases_are_lost_by_the_client_clock_when_the_server_freezes(server_process):
    address, pid = server_process
    with session(server=address, ttl=0.6) as held:
        a, b = held.acquire("a"), held.acquire("b")
        os.kill(pid, signal.SIGSTOP)
        try:
            assert a.lost.wait(10) and b.lost.wait(10), "lost was never set"
            assert "server silent" in a.lost_reason and "server silent" in b.lost_reason
        finally:
            os.kill(pid, signal.SIGCONT)


def test_a_broken_session_without_resumption_loses_every_lease(server, cuttable):
    with session(server=cuttable.address, ttl=3, auto_resume=False) as held:
        a, b = held.acquire("a"), held.acquire("b")
        cuttable.cut()
        assert held.lost.wait(10) and a.lost.wait(1) and b.lost.wait(1)
        assert "session stream failed" in a.lost_reason, a.lost_reason
        assert held.resumes == 0
        with pytest.raises(grpc.RpcError):  # the session is over
            held.acquire("c")
    # Without a grace, the server let them go when the stream broke.
    with lease("a", server=server) as again:
        assert again.fencing_token > a.fencing_token


def test_a_resume_the_server_refuses_loses_that_lease_alone(cluster, redis_port):
    proxy = CuttableProxy(cluster[0].address)
    with session(server=f"{proxy.address},{cluster[1].address}", ttl=3) as held:
        a, b = held.acquire("a"), held.acquire("b")
        os.kill(cluster[0].proc.pid, signal.SIGSTOP)  # it renews nothing, notices nothing
        redis_cli(redis_port, "DEL", "leasehold:{a}:lock")
        proxy.cut()  # the session resumes on cluster[1], where "a" holds nothing
        assert a.lost.wait(10), "a's lost was never set"
        assert "NOT_FOUND" in a.lost_reason, a.lost_reason
        wait_until(lambda: b.resumes >= 1 or b.lost.is_set(), "b resumed")
        assert not b.lost.is_set(), b.lost_reason
        assert lock_token(redis_port, "leasehold:{b}:lock") == b.token
        assert not b.lost.wait(3.5), b.lost_reason  # longer than the TTL: renewed
        assert not held.lost.is_set()


def test_a_session_with_no_server_fails_its_first_lock():
    with session(server=f"127.0.0.1:{free_port()}", ttl=1) as held:
        with pytest.raises(grpc.RpcError) as failed:
            held.acquire("a")
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
        assert not isinstance(failed.value, NotAcquired)


def test_a_release_and_a_close_asked_during_a_resume_let_go_on_the_next_server(cluster,
                                                                             redis_port):
    everyone = ",".join(server.address for server in cluster)
    with session(server=everyone, ttl=3) as held:
        a, b = held.acquire("a"), held.acquire("b")
        cluster[0].kill()  # its server: the session resumes elsewhere
        assert a.release()  # asked at once: sent once "a" is taken back
        assert redis_cli(redis_port, "EXISTS", "leasehold:{a}:lock") == "0"
        cluster[1].kill()
    # Closed (on the third server) as soon as "b" was taken back there: not left for its grace.
    assert redis_cli(redis_port, "EXISTS", "leasehold:{b}:lock") == "0"
    assert not a.lost.is_set() and not b.lost.is_set(), (a.lost_reason, b.lost_reason)
    assert b.resumes >= 1 and held.resumes >= 1
