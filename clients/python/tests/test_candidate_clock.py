"""A leader's belief by its own clock: frozen past the validity its server last confirmed, it
stops believing the moment it is woken, before any word from the server (threads and asyncio)."""

import signal
import threading
import time

import pytest

from conftest import FROZEN_LEADER, Child
from leasehold_client import campaign
from test_conformance import wait_for_line


@pytest.mark.parametrize("flavour", ["sync", "aio"])
def test_a_leader_frozen_past_its_validity_stops_believing_the_moment_it_wakes(
        fast_keepalive_server, server, redis_port, flavour):
    address = fast_keepalive_server
    child = Child(FROZEN_LEADER, address, "frozen", flavour, "1.5")
    try:
        elected = child.next(30)
        assert elected.startswith("elected "), elected
        term = int(elected.split()[1])
        # The second candidate through another server on the same Redis, with the default
        # keepalive: the 300 ms one is for the frozen child, and a loaded test process once
        # missed it too (its stream cut while in line).
        with campaign("frozen", b"second", server=server, ttl=4) as second:
            second_terms = []
            second_elected = threading.Event()

            def wait_elected():
                try:
                    second_terms.append(second.elected())
                finally:
                    second_elected.set()

            threading.Thread(target=wait_elected, daemon=True).start()
            wait_for_line(redis_port, "leasehold:election:{frozen}:line", 1)
            child.signal(signal.SIGSTOP)
            try:
                # Its validity (1.5 s) runs out while it is frozen; its connection cut by the
                # keepalive, the server keeps the leadership for its grace (1.5 s), then elects
                # the second.
                assert second_elected.wait(10), "the second candidate was not elected"
                assert second_terms and second_terms[0] > term, (second_terms, term)
                time.sleep(1)  # the rest of the freeze (3 s in all): only time
            finally:
                child.signal(signal.SIGCONT)
            # By its own clock, before any word from the server or its own timer.
            assert child.next(10) == "woken leading=False"
            lost = child.next(10)
            assert lost.startswith("lost ") and ("validity ran out" in lost
                                                 or "server silent" in lost), lost
            assert second.leading
    finally:
        child.close()
