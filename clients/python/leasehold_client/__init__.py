"""Hold a Leasehold lock from Python.

    from leasehold_client import lease

    with lease("nightly-report", ttl=10, wait=30, holder="report@host-a") as held:
        print("fencing token", held.fencing_token)
        while not held.lost.is_set():
            ...  # work; stop when the lock is lost

The lock is released when the block ends. ``held.lost`` is set when the server says the lease is
lost, when the stream breaks, or when the server has been silent past the validity it last
confirmed (so a frozen server cannot keep you believing you hold the lock).
"""

import os
import queue
import sys
import threading
from contextlib import contextmanager

import grpc

# The stubs are generated from proto/ by generate.sh; they import themselves as leasehold.v1.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "_gen"))
from leasehold.v1 import lock_pb2 as pb  # noqa: E402
from leasehold.v1 import lock_pb2_grpc as rpc  # noqa: E402

__all__ = ["lease", "Lease", "NotAcquired", "pb", "rpc"]

DEFAULT_SERVER = os.environ.get("LEASEHOLD_SERVER", "127.0.0.1:50051").removeprefix("http://")


class NotAcquired(Exception):
    """The lock stayed taken for the whole wait (gRPC status ABORTED)."""


class Lease:
    """A held lock. Use ``lease(...)`` rather than building one by hand."""

    def __init__(self, stub, name, ttl, wait, holder, fair):
        self.name = name
        self.lost = threading.Event()
        self.lost_reason = None
        self._released = threading.Event()
        self._was_held = False
        self._outbox = queue.Queue()
        self._outbox.put(pb.LeaseRequest(acquire=pb.LeaseAcquire(
            name=name, ttl_ms=int(ttl * 1000), wait_ms=int(wait * 1000), holder=holder,
            fair=fair)))
        self._events = stub.Lease(iter(self._outbox.get, None))
        try:
            for event in self._events:
                if event.HasField("acquired"):
                    break
            else:
                raise NotAcquired(f"lock {name!r}: the server ended the stream")
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.ABORTED:
                raise NotAcquired(error.details()) from None
            raise
        self.fencing_token = event.acquired.fencing_token
        self.token = event.acquired.token
        self._timer = None
        self._arm(event.acquired.valid_for_ms)
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _arm(self, valid_for_ms):
        """Declares the lease lost if nothing confirms it within valid_for_ms."""
        if self._timer:
            self._timer.cancel()
        self._timer = threading.Timer(
            valid_for_ms / 1000, self._lose,
            args=("no renewal confirmed before the lease ran out (server silent)",))
        self._timer.daemon = True
        self._timer.start()

    def _lose(self, reason):
        if not self._released.is_set() and not self.lost.is_set():
            self.lost_reason = reason
            self.lost.set()

    def _watch(self):
        try:
            for event in self._events:
                kind = event.WhichOneof("event")
                if kind == "extended":
                    self._arm(event.extended.valid_for_ms)
                elif kind == "lost":
                    self._lose(event.lost.reason)
                elif kind == "released":
                    self._was_held = event.released.was_held
                    self._released.set()
            if not self._released.is_set():
                self._lose("the server ended the lease stream")
        except grpc.RpcError as error:
            self._lose(f"lease stream failed: {error.code().name} {error.details()}")
        finally:
            if self._timer:
                self._timer.cancel()
            self._released.set()

    def release(self, timeout=10.0):
        """Releases the lock; returns True if it was still held."""
        self._outbox.put(pb.LeaseRequest(release=pb.LeaseRelease()))
        self._outbox.put(None)  # half-close
        self._released.wait(timeout)
        return self._was_held and not self.lost.is_set()


@contextmanager
def lease(name, *, server=DEFAULT_SERVER, ttl=30.0, wait=0.0, holder="", fair=True,
          channel=None):
    """Holds lock ``name`` for the ``with`` block. Times are in seconds.

    Raises NotAcquired if the lock stays taken for ``wait`` seconds (0: fail at once).
    """
    own_channel = channel is None
    channel = channel or grpc.insecure_channel(server)
    try:
        held = Lease(rpc.LockServiceStub(channel), name, ttl, wait, holder, fair)
        try:
            yield held
        finally:
            held.release()
    finally:
        if own_channel:
            channel.close()
