"""PostgreSQL faults and probes against a real server started on a free loopback port."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from faultplane.drivers import leases
from faultplane.drivers.base import ActivityContext, DriverError, get_activity

pytestmark = [pytest.mark.anyio, pytest.mark.postgres, pytest.mark.timeout(120)]


def act(name: str):  # type: ignore[no-untyped-def]
    return get_activity("postgres", name)


def _victims(dsn: str, n: int, app: str) -> list[psycopg.Connection]:  # type: ignore[type-arg]
    return [psycopg.connect(dsn, application_name=app, autocommit=True) for _ in range(n)]


def _alive(c: psycopg.Connection) -> bool:  # type: ignore[type-arg]
    try:
        c.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


async def test_terminate_backends_with_blast_radius(postgres_server) -> None:  # type: ignore[no-untyped-def]
    dsn = postgres_server.dsn
    conns = _victims(dsn, 4, "victim-a")
    others = _victims(dsn, 2, "bystander")
    try:
        ctx = ActivityContext(run_id="pg1")
        out = await act("terminate_backends").invoke(
            ctx, {"dsn": dsn, "application_name": "victim-%", "count": 3}
        )
        assert out["matched"] == 4 and len(out["terminated"]) == 3
        assert sum(_alive(c) for c in conns) == 1
        assert all(_alive(c) for c in others)
        assert ctx.reverts == []  # nothing to undo: terminated sessions are gone
    finally:
        for c in conns + others:
            c.close()


async def test_exhaust_connections_fills_the_pool_and_rollback_frees_it(postgres_server) -> None:  # type: ignore[no-untyped-def]
    dsn = postgres_server.dsn
    with psycopg.connect(dsn, autocommit=True) as c:
        if not c.execute("SELECT 1 FROM pg_roles WHERE rolname = 'app'").fetchone():
            c.execute("CREATE ROLE app LOGIN")
    ctx = ActivityContext(run_id="pg2")
    try:
        out = await act("exhaust_connections").invoke(ctx, {"dsn": dsn})
        assert out["held"] == out["requested"] > 10
        app_dsn = postgres_server.dsn.replace("postgres@", "app@")
        with pytest.raises(psycopg.OperationalError, match=r"remaining connection slots|too many clients"):
            psycopg.connect(app_dsn, connect_timeout=3).close()
        # The superuser's reserved slots still let the probe in.
        count = await get_activity("postgres", "connection_count").invoke(
            ctx, {"dsn": dsn, "application_name": out["application_name"]}
        )
        assert count == out["held"]
        assert len(leases.list_leases()) == 1
    finally:
        assert [e for _, e in await ctx.revert_all()] == [None]
    with psycopg.connect(dsn, connect_timeout=3) as c:
        c.execute("SELECT 1")
    assert leases.list_leases() == []


async def test_exhaust_lease_recipe_frees_connections_from_another_process(postgres_server) -> None:  # type: ignore[no-untyped-def]
    dsn = postgres_server.dsn
    ctx = ActivityContext(run_id="pg3")
    out = await act("exhaust_connections").invoke(ctx, {"dsn": dsn, "connections": 5})
    [lease] = leases.list_leases()
    # What the watchdog would run for a hung controller: terminate by the fault's application_name.
    from faultplane.drivers.postgres import _terminate_tagged

    assert _terminate_tagged(lease.args["dsn"], lease.args["application_name"]) == 5
    count_probe = get_activity("postgres", "connection_count")
    args = {"dsn": dsn, "application_name": out["application_name"]}
    for _ in range(100):  # backends exit asynchronously after pg_terminate_backend
        if await count_probe.invoke(ctx, args) == 0:
            break
        time.sleep(0.02)
    assert await count_probe.invoke(ctx, args) == 0
    await ctx.revert_all()


async def test_lock_table_blocks_writers_until_rollback(postgres_server) -> None:  # type: ignore[no-untyped-def]
    dsn = postgres_server.dsn
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS fp_locked; CREATE TABLE fp_locked (x int)")
    ctx = ActivityContext(run_id="pg4")
    await act("lock_table").invoke(ctx, {"dsn": dsn, "table": "fp_locked"})
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SET lock_timeout = '300ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            c.execute("INSERT INTO fp_locked VALUES (1)")
    done = threading.Event()

    def writer() -> None:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("INSERT INTO fp_locked VALUES (2)")
        done.set()

    t = threading.Thread(target=writer)
    t.start()
    time.sleep(0.3)
    assert not done.is_set()
    await ctx.revert_all()
    t.join(10)
    assert done.is_set()


async def test_lock_table_refuses_a_missing_table_without_leaving_anything(postgres_server) -> None:  # type: ignore[no-untyped-def]
    ctx = ActivityContext(run_id="pg5")
    with pytest.raises(DriverError, match="table: cannot lock 'no_such_table'"):
        await act("lock_table").invoke(ctx, {"dsn": postgres_server.dsn, "table": "no_such_table"})
    assert ctx.reverts == [] and leases.list_leases() == []


async def test_inject_latency_through_the_netproxy(postgres_server) -> None:  # type: ignore[no-untyped-def]
    dsn = postgres_server.dsn
    ctx = ActivityContext(run_id="pg6")
    probe = get_activity("postgres", "query_latency")
    direct = await probe.invoke(ctx, {"dsn": dsn, "samples": 3})
    out = await act("inject_latency").invoke(ctx, {"dsn": dsn, "latency_ms": 80})
    slow = await probe.invoke(ctx, {"dsn": out["dsn"], "samples": 3})
    assert direct["p50_ms"] < 50
    assert 80 <= slow["p50_ms"] < 1000
    await ctx.revert_all()
    assert not await get_activity("postgres", "is_available").invoke(
        ctx, {"dsn": out["dsn"], "timeout_seconds": 1}
    )
    assert await get_activity("postgres", "is_available").invoke(ctx, {"dsn": dsn})


async def test_unreachable_server_error_names_the_dsn() -> None:
    with pytest.raises(DriverError, match="dsn: cannot connect"):
        await get_activity("postgres", "connection_count").invoke(
            ActivityContext(), {"dsn": "postgresql://postgres@127.0.0.1:1/postgres"}
        )
