"""Fixtures shared by the Python tests: a real redis-server and leasehold server per test."""

import os
import signal
import socket
import subprocess
import time

import pytest

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
def server_process(redis_port):
    """The real binary on the test's Redis: its address and process id (to freeze it)."""
    proc = subprocess.Popen(
        [BINARY, "serve", "--listen", "127.0.0.1:0", "--redis", f"redis://127.0.0.1:{redis_port}"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    assert line.startswith("leasehold: listening on "), line
    yield line.split()[-1], proc.pid
    proc.send_signal(signal.SIGCONT)
    proc.terminate()
    proc.wait(timeout=15)


@pytest.fixture
def server(server_process):
    """The real binary's address."""
    return server_process[0]
