"""The README's Python election example: three instances, one leader, all agree."""

import os
import queue
import subprocess
import sys
import threading
import time

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "who_leads.py")


def start(server, name, lines, index):
    proc = subprocess.Popen([sys.executable, EXAMPLE, server, "example", name],
                            stdout=subprocess.PIPE, text=True)

    def read():
        for line in proc.stdout:
            lines.put((index, line.strip()))

    threading.Thread(target=read, daemon=True).start()
    return proc


def until(lines, printed, done, timeout=15):
    """Reads lines into ``printed`` (last leader per instance, and who said "I lead") until
    ``done(printed)``."""
    deadline = time.monotonic() + timeout
    while not done(printed):
        try:
            index, line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"gave up waiting; printed so far: {printed}") from None
        printed["lines"].append((index, line))
        if ": I lead" in line:
            printed["leads"].append(index)
        if line.startswith("leader: "):
            printed["leader"][index] = line.split()[1]


def test_three_instances_agree_on_one_leader_and_hand_over(server):
    lines = queue.Queue()
    printed = {"leader": {}, "leads": [], "lines": []}
    names = ["alice", "bob", "carol"]
    procs = [start(server, "alice", lines, 0)]
    try:
        until(lines, printed, lambda p: p["leader"].get(0) == "alice")
        procs += [start(server, name, lines, i) for i, name in enumerate(names[1:], 1)]
        until(lines, printed, lambda p: all(p["leader"].get(i) == "alice" for i in range(3)))
        assert printed["leads"] == [0]

        procs[0].kill()
        procs[0].wait()
        until(lines, printed, lambda p: len(p["leads"]) > 1 and all(
            p["leader"].get(i) == names[p["leads"][1]] for i in (1, 2)))
        assert printed["leads"][1] in (1, 2)
        assert len(printed["leads"]) == 2
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_sync_election_helpers_hand_over_in_order(server):
    from leasehold_client import Leader, campaign, leader, observe

    changes = observe("sync-vote", server=server)
    assert next(changes) is None
    with campaign("sync-vote", b"a", server=server, ttl=2) as a:
        term_a = a.elected()
        assert leader("sync-vote", server=server) == Leader(term_a, b"a")
        assert next(changes) == Leader(term_a, b"a")
        with campaign("sync-vote", b"b", server=server, ttl=2) as b:
            a.proclaim(b"a2")
            assert next(changes) == Leader(term_a, b"a2")
            assert a.resign()
            term_b = b.elected()
            assert term_b > term_a
            seen = next(changes)
            if seen is None:  # the moment between a's resignation and b's election
                seen = next(changes)
            assert seen == Leader(term_b, b"b")
    changes.close()


def test_a_leader_keeps_its_term_across_a_restart_of_its_server(cluster):
    from leasehold_client import Leader, campaign, leader, observe

    from conftest import wait_until

    everyone = ",".join(server.address for server in cluster)
    changes = observe("restart-vote", server=cluster[2].address)  # a server that stays up
    assert next(changes) is None
    with campaign("restart-vote", b"a", server=everyone, ttl=2) as a:
        term = a.elected()
        assert next(changes) == Leader(term, b"a")
        cluster[0].stop()  # its server (pick_first): the stream ends, the leadership is kept
        wait_until(lambda: a.resumes >= 1, "the leadership resumed")
        cluster[0].start()
        for server in cluster:
            assert leader("restart-vote", server=server.address) == Leader(term, b"a")
        a.proclaim(b"a2")  # on the resumed stream
        # The observer saw no change between the first leadership and the proclaim.
        assert next(changes) == Leader(term, b"a2")
        with campaign("restart-vote", b"b", server=cluster[1].address, ttl=2) as b:
            assert a.resign()
            assert b.elected() > term
    changes.close()
