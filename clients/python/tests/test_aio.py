"""The asyncio client (leasehold_client.aio) against a real leasehold server and redis-server."""

import asyncio
import subprocess

import grpc
import pytest

from conftest import lock_token
from leasehold_client import LeaseFailed, Leader, NotAcquired, aio


def redis_cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                          text=True).stdout.strip()


def test_async_lease_holds_refuses_a_second_holder_and_releases(server, redis_port):
    async def scenario():
        async with aio.lease("job", server=server, ttl=5, holder="py-aio") as held:
            assert held.fencing_token > 0
            assert lock_token(redis_port, "leasehold:{job}:lock") == held.token
            with pytest.raises(NotAcquired, match="py-aio"):
                async with aio.lease("job", server=server):
                    pass
        assert redis_cli(redis_port, "EXISTS", "leasehold:{job}:lock") == "0"

    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_async_refusal_has_the_status_details_and_list_shows_the_lock(server):
    async def scenario():
        async with aio.lease("job", server=server, ttl=20, holder="py-aio") as held:
            with pytest.raises(NotAcquired) as refused:
                async with aio.lease("job", server=server):
                    pass
            assert refused.value.reason == "LOCK_HELD"
            assert refused.value.holder == "py-aio"
            assert 0 < refused.value.retry_after <= 20
            listed = await aio.list(server=server)
            assert [(lock.name, lock.holder, lock.fencing_token) for lock in listed.locks] == [
                ("job", "py-aio", held.fencing_token)]
            assert not listed.truncated
        assert (await aio.list(server=server)).locks == ()

    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_async_lost_is_set_when_the_lock_is_taken_away(server, redis_port):
    async def scenario():
        async with aio.lease("job", server=server, ttl=1.5) as held:
            redis_cli(redis_port, "DEL", "leasehold:{job}:lock")
            await asyncio.wait_for(held.lost.wait(), 5)
            assert "deleted or taken" in held.lost_reason

    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_async_election_hands_over_and_observers_follow(server):
    async def scenario():
        changes = aio.observe("vote", server=server)
        assert await changes.__anext__() is None
        async with aio.campaign("vote", b"a", server=server, ttl=2) as a:
            term_a = await a.elected()
            assert await aio.leader("vote", server=server) == Leader(term_a, b"a")
            assert await changes.__anext__() == Leader(term_a, b"a")
            async with aio.campaign("vote", b"b", server=server, ttl=2) as b:
                await a.proclaim(b"a2")
                assert await changes.__anext__() == Leader(term_a, b"a2")
                assert await a.resign()
                term_b = await b.elected()
                assert term_b > term_a
                seen = await changes.__anext__()
                if seen is None:  # the moment between a's resignation and b's election
                    seen = await changes.__anext__()
                assert seen == Leader(term_b, b"b")
        await changes.aclose()

    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_async_permits_and_readers(server):
    async def scenario():
        async with aio.lease("pool", server=server, limit=2) as first, \
                aio.lease("pool", server=server, limit=2) as second:
            assert first.fencing_token != second.fencing_token
            with pytest.raises(NotAcquired):
                async with aio.lease("pool", server=server, limit=2):
                    pass
        async with aio.lease("catalog", server=server, shared=True), \
                aio.lease("catalog", server=server, shared=True):
            with pytest.raises(NotAcquired):
                async with aio.lease("catalog", server=server):
                    pass

    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_async_lease_survives_rolling_restart(cluster, redis_port):
    everyone = ",".join(server.address for server in cluster)

    async def refused(address):
        with pytest.raises(NotAcquired):
            async with aio.lease("job", server=address, auto_resume=False):
                pass

    async def scenario():
        async with aio.lease("job", server=everyone, ttl=2) as held:
            fencing_token = held.fencing_token
            for server in cluster:
                # In a thread: stopping waits for the process, and the lease needs the loop.
                await asyncio.to_thread(server.stop)
                await asyncio.to_thread(server.start)
                assert not held.lost.is_set(), held.lost_reason
                assert lock_token(redis_port, "leasehold:{job}:lock") == held.token
                for other in cluster:
                    await refused(other.address)
            assert held.resumes >= 1
            assert held.fencing_token == fencing_token
            with pytest.raises(asyncio.TimeoutError):  # longer than its TTL: still renewed
                await asyncio.wait_for(held.lost.wait(), 2.5)
            assert lock_token(redis_port, "leasehold:{job}:lock") == held.token
        assert redis_cli(redis_port, "EXISTS", "leasehold:{job}:lock") == "0"

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_async_lease_that_cannot_be_resumed_is_lost(cluster):
    everyone = ",".join(server.address for server in cluster)

    async def scenario():
        async with aio.lease("job", server=everyone, ttl=2) as held:
            for server in cluster:
                server.kill()
            await asyncio.wait_for(held.lost.wait(), 15)
            assert asyncio.get_running_loop().time() < held.valid_until + 1.0
            assert held.lost_reason.startswith(
                "could not resume before the lease's validity ran out"), held.lost_reason

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_async_leader_keeps_its_term_across_a_restart_of_its_server(cluster):
    everyone = ",".join(server.address for server in cluster)

    async def scenario():
        async with aio.campaign("vote", b"a", server=everyone, ttl=2) as a:
            term = await a.elected()
            await asyncio.to_thread(cluster[0].stop)  # its server (pick_first)
            while a.resumes < 1:  # a bounded poll (the scenario's timeout)
                await asyncio.sleep(0.01)
            await asyncio.to_thread(cluster[0].start)
            for server in cluster:
                assert await aio.leader("vote", server=server.address) == Leader(term, b"a")
            await a.proclaim(b"a2")
            assert await aio.leader("vote", server=cluster[1].address) == Leader(term, b"a2")
            assert await a.resign()
        assert await aio.leader("vote", server=cluster[2].address) is None

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_async_session_holds_locks_and_a_leadership(server, redis_port):
    async def scenario():
        async with aio.session(server=server, ttl=2, holder="py-session") as session:
            async with session.lock("a") as a, session.lock("b", holder="b-holder") as b:
                assert a.fencing_token > 0 and b.fencing_token > 0
                assert lock_token(redis_port, "leasehold:{a}:lock") == a.token
                assert lock_token(redis_port, "leasehold:{b}:lock") == b.token
                # Refused on another session: the failed answer's status details, typed.
                async with aio.session(server=server, ttl=2) as other:
                    with pytest.raises(NotAcquired) as taken:
                        await other.acquire("a")
                    assert taken.value.reason == "LOCK_HELD"
                    assert taken.value.holder == "py-session"
                    assert 0 < taken.value.retry_after <= 2
                    with pytest.raises(LeaseFailed) as bad:
                        await other.acquire("")
                    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                    assert "lock name is empty" in bad.value.details()
                    # The session goes on after a refusal: a waiter gets "a" once it is let go.
                    waiter = asyncio.create_task(other.acquire("a", wait=10))
                    while redis_cli(redis_port, "ZCARD", "leasehold:{a}:line") != "1":
                        await asyncio.sleep(0.005)  # a bounded poll (the scenario's timeout)
                    assert await a.release()
                    second = await waiter
                    assert second.fencing_token > a.fencing_token
                    assert lock_token(redis_port, "leasehold:{a}:lock") == second.token
                # The other session's close freed it; this one's lease on b never noticed.
                assert redis_cli(redis_port, "EXISTS", "leasehold:{a}:lock") == "0"
                redis_cli(redis_port, "DEL", "leasehold:{b}:lock")
                await asyncio.wait_for(b.lost.wait(), 5)
                assert "deleted or taken" in b.lost_reason
                async with session.campaign("vote", b"x") as leader_handle:
                    term = await leader_handle.elected()
                    assert await aio.leader("vote", server=server) == Leader(term, b"x")
                    await leader_handle.proclaim(b"y")
                    assert await aio.leader("vote", server=server) == Leader(term, b"y")
                    assert await leader_handle.resign()
                assert await aio.leader("vote", server=server) is None
                assert not session.lost.is_set()
        assert redis_cli(redis_port, "EXISTS", "leasehold:{a}:lock") == "0"
        assert session.lost_reason is None

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_async_session_survives_rolling_restart(cluster, redis_port):
    everyone = ",".join(server.address for server in cluster)

    async def scenario():
        async with aio.session(server=everyone, ttl=2) as session:
            held = await session.acquire("job")
            async with session.campaign("vote", b"a") as candidate:
                term = await candidate.elected()
                for server in cluster:
                    # SIGTERM: the server hands the session over (UNAVAILABLE) and exits.
                    await asyncio.to_thread(server.stop)
                    await asyncio.to_thread(server.start)
                    while held.resumes < 1 and not held.lost.is_set():  # bounded: the timeout
                        await asyncio.sleep(0.01)
                    assert not held.lost.is_set(), held.lost_reason
                    assert lock_token(redis_port, "leasehold:{job}:lock") == held.token
                    for other in cluster:
                        with pytest.raises(NotAcquired):
                            async with aio.lease("job", server=other.address,
                                                 auto_resume=False):
                                pass
                assert session.resumes >= 1 and candidate.resumes >= 1
                assert candidate.term == term
                await candidate.proclaim(b"a2")
                assert await aio.leader("vote", server=cluster[1].address) == Leader(term, b"a2")
                with pytest.raises(asyncio.TimeoutError):  # longer than its TTL: still renewed
                    await asyncio.wait_for(held.lost.wait(), 2.5)
                assert lock_token(redis_port, "leasehold:{job}:lock") == held.token
        assert redis_cli(redis_port, "EXISTS", "leasehold:{job}:lock") == "0"
        assert await aio.leader("vote", server=cluster[2].address) is None

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_async_several_names_a_ceiling_and_a_check(server, redis_port):
    """Issue 41 through asyncio: a lease and a session's lease of several names hold every key
    with their token and a fencing token each; ``check`` reads them; ``max_hold`` ends one."""
    def key(name):
        return f"leasehold:{{{name}}}:lock"

    async def scenario():
        async with aio.lease(names=["b", "a"], server=server) as pair:
            assert list(pair.fences) == ["b", "a"] and pair.fencing_token == pair.fences["b"]
            for name in ("a", "b"):
                assert lock_token(redis_port, key(name)) == pair.token
                answer = await aio.check(name, pair.fences[name], server=server)
                assert answer.state is aio.TokenState.CURRENT and answer.current
        assert (await aio.check("a", pair.fences["a"], server=server)).state is \
            aio.TokenState.FREE
        async with aio.session(server=server, ttl=1) as session:
            async with session.lock(names=["c", "d"]) as held:
                assert list(held.fences) == ["c", "d"]
                assert lock_token(redis_port, key("d")) == held.token
            capped = await session.acquire("e", max_hold=1)
            await asyncio.wait_for(capped.lost.wait(), 5)
            assert capped.lost_code is aio.LostReason.MAX_HOLD, capped.lost_reason
            assert not session.lost.is_set()
        for name in ("a", "b", "c", "d"):
            assert redis_cli(redis_port, "EXISTS", key(name)) == "0", name

    asyncio.run(asyncio.wait_for(scenario(), 30))
