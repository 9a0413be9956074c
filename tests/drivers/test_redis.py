"""Redis faults and probes against a real redis-server on a free loopback port."""

from __future__ import annotations

import time

import lease_helpers
import pytest
import redis

from faultplane.drivers import leases
from faultplane.drivers.base import ActivityContext, DriverError, get_activity

pytestmark = [pytest.mark.anyio, pytest.mark.redis, pytest.mark.timeout(60)]


def act(name: str):  # type: ignore[no-untyped-def]
    return get_activity("redis", name)


@pytest.fixture
def r(redis_server):  # type: ignore[no-untyped-def]
    client = redis.Redis.from_url(redis_server.url, socket_timeout=10)
    client.flushdb()
    yield client
    client.close()


async def test_client_pause_write_blocks_writes_and_rollback_unpauses(redis_server, r) -> None:  # type: ignore[no-untyped-def]
    ctx = ActivityContext(run_id="r1")
    await act("client_pause").invoke(ctx, {"url": redis_server.url, "timeout_ms": 20000, "mode": "WRITE"})
    blocked = redis.Redis.from_url(redis_server.url, socket_timeout=0.3)
    assert blocked.get("k") is None  # reads still pass
    with pytest.raises(redis.TimeoutError):
        blocked.set("k", "v")
    blocked.close()
    assert [e for _, e in await ctx.revert_all()] == [None]
    t0 = time.perf_counter()
    r.set("k", "v")
    assert time.perf_counter() - t0 < 1.0
    assert leases.list_leases() == []


async def test_client_pause_all_blocks_everything_for_the_timeout(redis_server, r) -> None:  # type: ignore[no-untyped-def]
    ctx = ActivityContext(run_id="r1b")
    await act("client_pause").invoke(ctx, {"url": redis_server.url, "timeout_ms": 800})
    t0 = time.perf_counter()
    r.ping()  # held until the pause ends (or is lifted)
    assert 0.3 <= time.perf_counter() - t0 < 5
    assert [e for _, e in await ctx.revert_all()] == [None]


async def test_debug_sleep_stalls_the_server_for_the_duration(redis_server, r) -> None:  # type: ignore[no-untyped-def]
    ctx = ActivityContext(run_id="r2")
    await act("debug_sleep").invoke(ctx, {"url": redis_server.url, "seconds": 0.5})
    t0 = time.perf_counter()
    r.ping()
    stalled = time.perf_counter() - t0
    assert 0.2 <= stalled < 3.0


async def test_exhaust_connections_hits_maxclients_and_rollback_frees(redis_server, r) -> None:  # type: ignore[no-untyped-def]
    ctx = ActivityContext(run_id="r3")
    out = await act("exhaust_connections").invoke(ctx, {"url": redis_server.url})
    assert out["held"] > 100
    extra = redis.Redis.from_url(redis_server.url, socket_timeout=2)
    with pytest.raises(redis.ConnectionError, match="max number of clients"):
        extra.ping()
    extra.close()
    await ctx.revert_all()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            assert redis.Redis.from_url(redis_server.url).ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    n = await get_activity("redis", "connected_clients").invoke(ctx, {"url": redis_server.url})
    assert n < 10


async def test_exhaust_recipe_kills_named_clients(redis_server, r) -> None:  # type: ignore[no-untyped-def]
    ctx = ActivityContext(run_id="r4")
    out = await act("exhaust_connections").invoke(ctx, {"url": redis_server.url, "connections": 5})
    from faultplane.drivers.redis import _kill_named

    assert _kill_named(redis_server.url, out["client_name"]) == 5
    await ctx.revert_all()


async def test_evict_keys_deletes_a_share_and_rollback_restores_with_ttl(redis_server, r) -> None:  # type: ignore[no-untyped-def]
    for i in range(10):
        r.set(f"user:{i}", f"v{i}")
    r.hset("user:h", mapping={"a": "1"})
    r.expire("user:3", 100)
    r.set("other", "keep")
    ctx = ActivityContext(run_id="r5")
    out = await act("evict_keys").invoke(
        ctx, {"url": redis_server.url, "pattern": "user:*", "percentage": 50}
    )
    assert out["matched"] == 11 and out["evicted"] == 6
    assert len(list(r.scan_iter("user:*"))) == 5
    assert r.get("other") == b"keep"
    await ctx.revert_all()
    assert len(list(r.scan_iter("user:*"))) == 11
    assert r.hgetall("user:h") == {b"a": b"1"}
    assert 0 < r.ttl("user:3") <= 100


async def test_evict_refuses_too_many_candidates(redis_server, r) -> None:  # type: ignore[no-untyped-def]
    for i in range(5):
        r.set(f"k{i}", 1)
    with pytest.raises(DriverError, match="max_keys"):
        await act("evict_keys").invoke(ActivityContext(), {"url": redis_server.url, "max_keys": 2})
    assert r.dbsize() == 5


async def test_exhaust_leave_free_and_revert_frees_from_another_process(redis_server, r) -> None:  # type: ignore[no-untyped-def]
    r.config_set("maxclients", 20)
    ctx = ActivityContext(run_id="r4b")
    try:
        out = await act("exhaust_connections").invoke(ctx, {"url": redis_server.url, "leave_free": 2})
        assert out["held"] == out["opened"] - 2 >= 10
        extra = [redis.Redis.from_url(redis_server.url, single_connection_client=True) for _ in range(2)]
        with pytest.raises(redis.ConnectionError, match="max number of clients"):
            redis.Redis.from_url(redis_server.url, single_connection_client=True).ping()
        for c in extra:
            c.close()
        # What the watchdog runs for a dead or hung controller, from another process.
        reap = lease_helpers.reap("--force")
        assert reap.returncode == 0, reap.stderr
        names = [c.get("name") for c in r.client_list()]
        assert out["client_name"] not in names
        assert [e for _, e in await ctx.revert_all()] == [None]
    finally:
        r.config_set("maxclients", 200)


async def test_exhaust_against_an_unreachable_server_fails_cleanly() -> None:
    import psutil

    ctx = ActivityContext(run_id="r4c")
    with pytest.raises(DriverError, match=r"url: redis PING at 127.0.0.1:1: cannot connect: .*refused"):
        await act("exhaust_connections").invoke(ctx, {"url": "redis://127.0.0.1:1/0"})
    assert ctx.reverts == [] and leases.list_leases() == []
    holders = [
        p
        for p in psutil.process_iter(["cmdline"])
        if "faultplane.drivers.holder" in (p.info["cmdline"] or [])
    ]
    assert holders == []


async def test_evict_rollback_keeps_values_the_app_wrote_during_the_fault(redis_server, r) -> None:  # type: ignore[no-untyped-def]
    for i in range(6):
        r.set(f"s:{i}", f"old{i}")
    ctx = ActivityContext(run_id="r6")
    out = await act("evict_keys").invoke(ctx, {"url": redis_server.url, "pattern": "s:*", "count": 6})
    assert out["evicted"] == 6 and r.dbsize() == 0
    # The app re-creates two evicted keys during the fault (a cache refill, a new write).
    r.set("s:1", "new1")
    r.hset("s:2", mapping={"f": "new"})
    assert [e for _, e in await ctx.revert_all()] == [None]
    assert r.get("s:1") == b"new1"
    assert r.hgetall("s:2") == {b"f": b"new"}
    assert [r.get(f"s:{i}") for i in (0, 3, 4, 5)] == [b"old0", b"old3", b"old4", b"old5"]


async def test_probes(redis_server, r) -> None:  # type: ignore[no-untyped-def]
    ctx = ActivityContext()
    lat = await get_activity("redis", "ping_latency").invoke(ctx, {"url": redis_server.url, "samples": 3})
    assert 0 < lat["p50_ms"] < 100
    assert (
        await get_activity("redis", "info").invoke(
            ctx, {"url": redis_server.url, "section": "server", "field": "tcp_port"}
        )
        == redis_server.port
    )
    assert await get_activity("redis", "is_available").invoke(ctx, {"url": redis_server.url})
    assert not await get_activity("redis", "is_available").invoke(
        ctx, {"url": "redis://127.0.0.1:1/0", "timeout_seconds": 0.5}
    )
