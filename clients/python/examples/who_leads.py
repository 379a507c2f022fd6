"""Run several of these: one leads, every one prints who does.

    python who_leads.py 127.0.0.1:50051 scheduler alice
    python who_leads.py 127.0.0.1:50051 scheduler bob
    python who_leads.py 127.0.0.1:50051 scheduler carol

Stop the leader (Ctrl-C or kill) and another takes over within a moment. Uses only the stubs
generated from proto/leasehold/v1/election.proto (clients/python/generate.sh).
"""

import os
import queue
import sys
import threading

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "leasehold_client", "_gen"))
from leasehold.v1 import election_pb2 as pb  # noqa: E402
from leasehold.v1 import election_pb2_grpc as rpc  # noqa: E402


_print_lock = threading.Lock()


def say(line):
    """One whole line at a time: two threads print."""
    with _print_lock:
        print(line, flush=True)


def follow(stub, election):
    """Prints the current leader, then every change."""
    for state in stub.Observe(pb.ObserveRequest(election=election)):
        if state.has_leader:
            say(f"leader: {state.value.decode()} (term {state.term})")
        else:
            say("leader: none")


def main():
    server, election, me = sys.argv[1:4]
    stub = rpc.ElectionServiceStub(grpc.insecure_channel(server))
    threading.Thread(target=follow, args=(stub, election), daemon=True).start()

    # The campaign stream stays open while we lead; closing it (or dying) steps down.
    requests = queue.Queue()
    requests.put(pb.CampaignRequest(
        start=pb.CampaignStart(election=election, value=me.encode(), ttl_ms=5000)))
    try:
        for event in stub.Campaign(iter(requests.get, None)):
            if event.HasField("elected"):
                say(f"{me}: I lead (term {event.elected.term})")
            elif event.HasField("lost"):
                say(f"{me}: lost the leadership: {event.lost.reason}")
                return
    except KeyboardInterrupt:
        requests.put(pb.CampaignRequest(resign=pb.Resign()))
        requests.put(None)


if __name__ == "__main__":
    main()
