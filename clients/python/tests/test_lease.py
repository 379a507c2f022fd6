"""The Python client against a real leasehold server and a real redis-server."""

import subprocess
import threading
import time

import pytest

from leasehold_client import NotAcquired, lease


def redis_cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                          text=True).stdout.strip()


def test_lease_holds_and_releases(server, redis_port):
    with lease("job", server=server, ttl=5, holder="py-test") as held:
        assert held.fencing_token > 0
        assert redis_cli(redis_port, "GET", "leasehold:{job}:lock") == held.token
        with pytest.raises(NotAcquired, match="py-test"):
            with lease("job", server=server):
                pass
    assert redis_cli(redis_port, "EXISTS", "leasehold:{job}:lock") == "0"


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
    with lease("job", server=server, ttl=0.3) as held:
        redis_cli(redis_port, "DEL", "leasehold:{job}:lock")
        assert held.lost.wait(timeout=5), "lost was never set"
        assert "deleted or taken" in held.lost_reason
