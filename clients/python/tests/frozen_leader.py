"""The leader of test_conformance_frozen_leader_not_replaced, in a process of its own so that the
test can freeze it (SIGSTOP) and wake it (SIGCONT) without freezing itself.

Usage: python frozen_leader.py ADDRESS ELECTION sync|aio. It campaigns (TTL 4 s, resume grace
4 s) with the threaded client (``sync``) or the asyncio one (``aio``) and reports on stdout, one
line each: ``elected TERM``; then, once it has taken its leadership back on a new stream after
being woken, ``resumed TERM`` and ``leading TERM`` (it believes it leads and the server names it,
with that term) or ``not-leading ...``; or ``lost REASON``. On ``resign`` from stdin it steps
down: ``resigned True|False``.
"""

import asyncio
import sys
import time

from leasehold_client import aio, campaign, leader

#: How long the poll for the resumption may take: it spans the freeze and the wake.
RESUME_WITHIN = 60.0


def say(line: str) -> None:
    print(line, flush=True)


def report_resumed(candidate, term: int, address: str, election: str) -> bool:
    """After the poll: reports how it ended; True if the leadership was resumed."""
    if candidate.resumes == 0:
        say(f"lost {candidate._reason}" if candidate._over else "timeout: never resumed")
        return False
    say(f"resumed {candidate.term}")
    named = leader(election, server=address)
    if candidate.leading and named is not None and named.term == term:
        say(f"leading {term}")
    else:
        say(f"not-leading: believes {candidate.leading}, the server names {named}")
    return True


def run_sync(address: str, election: str) -> None:
    with campaign(election, b"frozen", server=address, ttl=4, resume_grace=4) as candidate:
        term = candidate.elected()
        say(f"elected {term}")
        # A bounded poll that spans the freeze: the stream breaks while this process is stopped
        # (the server's keepalive cuts the connection), the leadership resumes once it is woken.
        deadline = time.monotonic() + RESUME_WITHIN
        while candidate.resumes == 0 and candidate.leading and time.monotonic() < deadline:
            time.sleep(0.01)
        if report_resumed(candidate, term, address, election):
            if sys.stdin.readline().strip() == "resign":
                say(f"resigned {candidate.resign()}")


async def run_aio(address: str, election: str) -> None:
    async with aio.campaign(election, b"frozen", server=address, ttl=4,
                            resume_grace=4) as candidate:
        term = await candidate.elected()
        say(f"elected {term}")
        deadline = time.monotonic() + RESUME_WITHIN
        while candidate.resumes == 0 and candidate.leading and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if report_resumed(candidate, term, address, election):
            command = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            if command.strip() == "resign":
                say(f"resigned {await candidate.resign()}")


if __name__ == "__main__":
    address, election, flavour = sys.argv[1:4]
    if flavour == "aio":
        asyncio.run(run_aio(address, election))
    else:
        run_sync(address, election)
