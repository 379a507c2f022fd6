"""The same with asyncio: python hold_lock_async.py (after pip install ./clients/python)."""

import asyncio

from leasehold_client import aio


async def main():
    async with aio.lease("nightly-report", ttl=10, wait=30, holder="report@host-a") as held:
        print("holding nightly-report, fencing token", held.fencing_token)
        try:
            await asyncio.wait_for(held.lost.wait(), 0.5)
            print("lost the lock:", held.lost_reason)
        except asyncio.TimeoutError:
            print("work done")
    print("released")


asyncio.run(main())
