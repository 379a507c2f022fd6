"""Run several of these: one leads, every one prints who does.

    python who_leads.py 127.0.0.1:50051 scheduler alice
    python who_leads.py 127.0.0.1:50051 scheduler bob
    python who_leads.py 127.0.0.1:50051 scheduler carol

Stop the leader (Ctrl-C or kill) and another takes over within a moment. Needs the package:
pip install ./clients/python
"""

import sys
import threading

from leasehold_client import campaign, observe

_print_lock = threading.Lock()


def say(line):
    """One whole line at a time: two threads print."""
    with _print_lock:
        print(line, flush=True)


def follow(server, election):
    """Prints the current leader, then every change."""
    for state in observe(election, server=server):
        say(f"leader: {state.value.decode()} (term {state.term})" if state else "leader: none")


def main():
    server, election, me = sys.argv[1:4]
    threading.Thread(target=follow, args=(server, election), daemon=True).start()
    # The campaign lasts the block; leaving it (Ctrl-C) or dying steps down.
    try:
        with campaign(election, me.encode(), server=server, ttl=5) as candidate:
            say(f"{me}: I lead (term {candidate.elected()})")
            say(f"{me}: lost the leadership: {candidate.lost()}")
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
