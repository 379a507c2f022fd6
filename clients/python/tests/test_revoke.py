"""The operator's controls beyond the conformance scenarios, against the real server: one permit
revoked by its fencing token, a session's lease and a leadership revoked (each holder told with
``LostReason.REVOKED``), and the asyncio ``revoke``, ``revoke_leader`` and ``watch``."""

import asyncio
import subprocess

from leasehold_client import (Leader, LostReason, aio, campaign, lease, revoke, revoke_leader,
                              session)


def redis_cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                          text=True).stdout.strip()


def test_one_permit_is_revoked_by_its_fencing_token(server):
    with lease("pool", server=server, limit=2, holder="one") as one, \
            lease("pool", server=server, limit=2, holder="two") as two:
        assert revoke("pool", one.fencing_token + two.fencing_token, server=server) == ()
        revoked = revoke("pool", two.fencing_token, server=server)
        assert [(h.holder, h.fencing_token) for h in revoked] == [("two", two.fencing_token)]
        assert two.lost.wait(2) and two.lost_code is LostReason.REVOKED
        assert not one.lost.is_set() and one.lost_code is None
        # The permit is free again: another holder gets it beside the first.
        with lease("pool", server=server, limit=2) as three:
            assert three.fencing_token > two.fencing_token
        assert not one.lost.is_set()


def test_a_session_lease_revoked_is_lost_alone(server, redis_port):
    with session(server=server, ttl=5) as held:
        a, b = held.acquire("a"), held.acquire("b")
        assert [h.fencing_token for h in revoke("a", server=server)] == [a.fencing_token]
        assert a.lost.wait(2), "the session's lease was not told within 2 s"
        assert a.lost_code is LostReason.REVOKED, (a.lost_code, a.lost_reason)
        assert not b.lost.is_set() and b.lost_code is None
        assert not held.lost.is_set() and held.lost_code is None
        assert redis_cli(redis_port, "EXISTS", "leasehold:{a}:lock") == "0"
        assert b.release()


def test_a_revoked_leader_is_told_and_the_next_candidate_leads(server):
    with campaign("vote", b"a", server=server, ttl=2) as a:
        term = a.elected()  # before the second candidate campaigns: a leads
        with campaign("vote", b"b", server=server, ttl=2) as b:
            assert revoke_leader("vote", term + 1, server=server) is None  # another term
            assert a.leading
            assert revoke_leader("vote", server=server) == Leader(term, b"a")
            assert a.lost()  # returns the reason once lost
            assert a.lost_code is LostReason.REVOKED and not a.leading
            assert b.elected() > term
            assert b.lost_code is None
    assert revoke_leader("vote", server=server) is None


def test_async_revoke_watch_and_revoke_leader(server):
    async def scenario():
        async with aio.watch("job", server=server) as states:
            async def next_state():
                return await asyncio.wait_for(states.__anext__(), 2)

            assert not (await next_state()).held
            async with aio.lease("job", server=server, holder="py-aio") as held:
                state = await next_state()
                assert (state.holder, state.fencing_token) == ("py-aio", held.fencing_token)
                revoked = await aio.revoke("job", server=server)
                assert [h.fencing_token for h in revoked] == [held.fencing_token]
                await asyncio.wait_for(held.lost.wait(), 2)
                assert held.lost_code is aio.LostReason.REVOKED
                assert not (await next_state()).held
            assert await aio.revoke("job", server=server) == ()
        async with aio.campaign("vote", b"a", server=server, ttl=2) as a:
            term = await a.elected()
            assert await aio.revoke_leader("vote", server=server) == Leader(term, b"a")
            assert await asyncio.wait_for(a.lost(), 2)
            assert a.lost_code is aio.LostReason.REVOKED

    asyncio.run(asyncio.wait_for(scenario(), 20))
