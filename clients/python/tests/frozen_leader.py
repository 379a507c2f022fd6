"""The leader of test_conformance_frozen_leader_not_replaced, in a process of its own so that the
test can freeze it (SIGSTOP) and wake it (SIGCONT) without freezing itself.

Usage: python frozen_leader.py ADDRESS ELECTION sync|aio TTL. It campaigns (TTL seconds, the
resume grace the same) with the threaded client (``sync``) or the asyncio one (``aio``) and
reports on stdout, one line each: ``elected TERM``; ``woken leading=True|False``, the first thing
it does once woken from a freeze (a poll that finds more than 1.5 s gone), with whether it then
believes it leads; then, once it has taken its leadership back on a new stream, ``resumed TERM``
and ``leading TERM`` (it believes it leads and the server names it, with that term) or
``not-leading ...``; or ``lost REASON``. On ``resign`` from stdin it steps down:
``resigned True|False``.
"""

import asyncio
import sys
import time

from leasehold_client import aio, campaign, leader

#: How long the poll for the resumption may take: it spans the freeze and the wake.
RESUME_WITHIN = 60.0
#: A gap between two polls longer than this: the process was frozen.
FROZEN = 1.5


def say(line: str) -> None:
    print(line, flush=True)


class Poll:
    """One turn of the poll that spans the freeze: reports ``woken`` first thing after one;
    False once the leadership was resumed or is no longer believed, or the poll took too long."""

    def __init__(self, candidate):
        self.candidate = candidate
        self.deadline = time.monotonic() + RESUME_WITHIN
        self.last = time.monotonic()

    def again(self) -> bool:
        now = time.monotonic()
        if now - self.last > FROZEN:
            say(f"woken leading={self.candidate.leading}")
        self.last = now
        return (self.candidate.resumes == 0 and self.candidate.leading
                and now < self.deadline)


def report_resumed(candidate, term: int, address: str, election: str, reason) -> bool:
    """After the poll: reports how it ended (``reason()``: why it was lost, once it is); True if
    the leadership was resumed."""
    if candidate.resumes == 0:
        say(f"lost {reason()}" if not candidate.leading else "timeout: never resumed")
        return False
    say(f"resumed {candidate.term}")
    named = leader(election, server=address)
    if candidate.leading and named is not None and named.term == term:
        say(f"leading {term}")
    else:
        say(f"not-leading: believes {candidate.leading}, the server names {named}")
    return True


def run_sync(address: str, election: str, ttl: float) -> None:
    # Connected before the campaign: on a busy machine a first connection can otherwise take
    # longer than a short TTL, and the first `elected` arrives too late to be believed.
    leader(election, server=address)
    with campaign(election, b"frozen", server=address, ttl=ttl, resume_grace=ttl) as candidate:
        term = candidate.elected()
        say(f"elected {term}")
        # A bounded poll that spans the freeze: the stream breaks while this process is stopped
        # (the server's keepalive cuts the connection), the leadership resumes once it is woken.
        poll = Poll(candidate)
        while poll.again():
            time.sleep(0.01)
        if report_resumed(candidate, term, address, election, candidate.lost):
            if sys.stdin.readline().strip() == "resign":
                say(f"resigned {candidate.resign()}")


async def run_aio(address: str, election: str, ttl: float) -> None:
    await aio.leader(election, server=address)  # connected first, as in run_sync
    async with aio.campaign(election, b"frozen", server=address, ttl=ttl,
                            resume_grace=ttl) as candidate:
        term = await candidate.elected()
        say(f"elected {term}")
        poll = Poll(candidate)
        while poll.again():
            await asyncio.sleep(0.01)
        reason = ""
        if candidate.resumes == 0 and not candidate.leading:
            reason = await asyncio.wait_for(candidate.lost(), 10)
        if report_resumed(candidate, term, address, election, lambda: reason):
            command = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            if command.strip() == "resign":
                say(f"resigned {await candidate.resign()}")


if __name__ == "__main__":
    address, election, flavour, ttl = sys.argv[1:5]
    if flavour == "aio":
        asyncio.run(run_aio(address, election, float(ttl)))
    else:
        run_sync(address, election, float(ttl))
