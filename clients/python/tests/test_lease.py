"""The Python client against a real leasehold server and a real redis-server."""

import os
import socket
import subprocess
import threading
import time

import pytest

from leasehold_client import NotAcquired, lease

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BINARY = os.environ.get("LEASEHOLD_BIN", os.path.join(ROOT, "target", "debug", "leasehold"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_port(tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 5
    while subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).stdout.strip() != b"PONG":
        assert time.monotonic() < deadline, "redis-server did not start"
        time.sleep(0.02)
    yield port
    proc.kill()
    proc.wait()


@pytest.fixture
def server(redis_port):
    proc = subprocess.Popen(
        [BINARY, "serve", "--listen", "127.0.0.1:0", "--redis", f"redis://127.0.0.1:{redis_port}"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    assert line.startswith("leasehold: listening on "), line
    yield line.split()[-1]
    proc.terminate()
    proc.wait(timeout=15)


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
