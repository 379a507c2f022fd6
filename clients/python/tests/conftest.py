"""Fixtures shared by the Python tests: a real redis-server and leasehold server per test."""

import os
import queue
import signal
import socket
import struct
import subprocess
import sys
import threading
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


def _serve(redis_port, *extra):
    """Runs the real binary on the test's Redis (with ``extra`` arguments for ``serve``) until
    the generator is closed: yields its address and process id (to freeze it)."""
    proc = subprocess.Popen(
        [BINARY, "serve", "--listen", "127.0.0.1:0", "--redis", f"redis://127.0.0.1:{redis_port}",
         *extra],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    assert line.startswith("leasehold: listening on "), line
    yield line.split()[-1], proc.pid
    proc.send_signal(signal.SIGCONT)
    proc.terminate()
    proc.wait(timeout=15)


@pytest.fixture
def server_process(redis_port):
    """The real binary on the test's Redis: its address and process id (to freeze it)."""
    yield from _serve(redis_port)


@pytest.fixture
def fast_keepalive_server(redis_port):
    """The real binary pinging its clients' connections every 200 ms and cutting one whose ping
    goes unanswered for 300 ms (a frozen client's): its address."""
    for address, _ in _serve(redis_port, "--keepalive-interval", "200ms",
                             "--keepalive-timeout", "300ms"):
        yield address


@pytest.fixture
def server(server_process):
    """The real binary's address."""
    return server_process[0]


class CuttableProxy:
    """A TCP proxy in front of the server whose connections can all be cut at once, as a network
    break would (no gRPC goodbye: the server sees the transport fail)."""

    def __init__(self, upstream: str):
        host, port = upstream.rsplit(":", 1)
        self._upstream = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._sockets = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._upstream)
            self._sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source, sink):
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass

    def cut(self):
        self._listener.close()
        sockets, self._sockets = self._sockets, []
        for sock in sockets:
            # SO_LINGER 0: close with a reset, as a dead link or a crashed peer would.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes the pipe blocked in recv
            except OSError:
                pass
            sock.close()


@pytest.fixture
def cuttable(server):
    """A proxy in front of the server, to cut the connections through it."""
    proxy = CuttableProxy(server)
    yield proxy
    proxy.cut()


class Server:
    """One server process on a port of its own, to stop (SIGTERM), kill (SIGKILL) and start
    again on the same port, as a rolling restart or a crash does."""

    def __init__(self, redis_port):
        self._redis = f"redis://127.0.0.1:{redis_port}"
        self.address = f"127.0.0.1:{free_port()}"
        self.proc = None
        self.start()

    def start(self):
        """Starts it; returns once it listens (it serves from then on)."""
        deadline = time.monotonic() + 10
        while True:
            proc = subprocess.Popen(
                [BINARY, "serve", "--listen", self.address, "--redis", self._redis,
                 "--drain", "5s"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            line = proc.stdout.readline()
            if line.startswith("leasehold: listening on "):
                self.proc = proc
                return
            proc.wait(timeout=15)  # the port is not free yet (a closing socket): again
            assert time.monotonic() < deadline, f"{self.address}: could not start: {line!r}"
            time.sleep(0.05)

    def stop(self):
        """SIGTERM, as a deploy does; returns once the process has exited."""
        self.proc.terminate()
        assert self.proc.wait(timeout=15) == 0

    def kill(self):
        """SIGKILL: the process does nothing more, its connections drop."""
        self.proc.kill()
        self.proc.wait(timeout=15)

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=15)


@pytest.fixture
def cluster(redis_port):
    """Three servers on one Redis, each on its own port."""
    servers = [Server(redis_port) for _ in range(3)]
    yield servers
    for server in servers:
        server.close()


def wait_until(condition, what, timeout=15.0):
    """Polls ``condition`` until it holds (a bounded poll, not a sleep)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting: {what}"
        time.sleep(0.01)


class Clock:
    """A driver's clock and timer, stood in for the I/O-free cores: ``now`` is set by hand,
    ``alarm`` is when the core last asked to be woken."""

    def __init__(self):
        self.now = 100.0
        self.alarm = None

    def model(self):
        return dict(lost=threading.Event(), now=lambda: self.now,
                    schedule=lambda when: setattr(self, "alarm", when))


def lock_token(port, key):
    """The token in a lock key's value (`<token>:<fencing token>:<attachment>:<holder>`)."""
    value = subprocess.run(["redis-cli", "-p", str(port), "GET", key], capture_output=True,
                           text=True).stdout.strip()
    return value.split(":", 1)[0]


#: The helper script whose process a test freezes: an election's leader (see its docstring).
FROZEN_LEADER = os.path.join(os.path.dirname(__file__), "frozen_leader.py")


class Child:
    """A helper script run in a process of its own, so that the test can freeze it (SIGSTOP) and
    wake it (SIGCONT): its stdout lines are read here with a deadline each, commands go to its
    stdin, and ``close`` kills it (woken first)."""

    def __init__(self, *args):
        self.proc = subprocess.Popen([sys.executable, *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self._lines = queue.Queue()
        self._seen = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)  # stdout ended: it exited

    def next(self, timeout):
        """The next line it reports, within ``timeout`` seconds."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the child reported nothing within {timeout} s after "
                                 f"{self._seen}") from None
        if line is None:
            self._lines.put(None)
            raise AssertionError(f"the child exited after reporting {self._seen}")
        self._seen.append(line)
        return line

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def signal(self, sig):
        self.proc.send_signal(sig)

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(timeout=15)
