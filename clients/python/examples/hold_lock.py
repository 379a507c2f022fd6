"""Holds the lock "nightly-report" while it works, stopping if the lock is lost.
Run it against scripts/serve.sh: python hold_lock.py (after pip install ./clients/python)."""

from leasehold_client import lease

with lease("nightly-report", ttl=10, wait=30, holder="report@host-a") as held:
    print("holding nightly-report, fencing token", held.fencing_token)
    if held.lost.wait(0.5):
        print("lost the lock:", held.lost_reason)
    else:
        print("work done")
print("released")
