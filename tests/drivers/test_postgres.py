"""PostgreSQL faults and probes against a real server started on a free loopback port."""

from __future__ import annotations

import threading
import time

import lease_helpers
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
        assert out["held"] > 10 and "too many clients" in out["stopped_by"]
        assert "3 superuser-reserved slot(s) left free" in out["stopped_by"]
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
    assert out["held"] == 5
    count_probe = get_activity("postgres", "connection_count")
    args = {"dsn": dsn, "application_name": out["application_name"]}
    assert await count_probe.invoke(ctx, args) == 5
    # What the watchdog does for a dead or hung controller, from another process: run the lease's recipe.
    reap = lease_helpers.reap("--force")
    assert reap.returncode == 0, reap.stderr
    assert await count_probe.invoke(ctx, args) == 0  # the recipe waits until the backends are gone
    assert leases.list_leases() == []
    assert [e for _, e in await ctx.revert_all()] == [None]  # the lease is gone: nothing left to do


async def test_exhaust_leave_free_leaves_exactly_that_many_slots(postgres_server) -> None:  # type: ignore[no-untyped-def]
    dsn = postgres_server.dsn
    ctx = ActivityContext(run_id="pg3b")
    try:
        out = await act("exhaust_connections").invoke(ctx, {"dsn": dsn, "leave_free": 2})
        assert out["held"] == out["opened"] - 2 > 10
        assert "3 superuser-reserved slot(s) left free" in out["stopped_by"]
        conns = [psycopg.connect(dsn, connect_timeout=3) for _ in range(5)]
        with pytest.raises(psycopg.OperationalError, match="too many clients"):
            psycopg.connect(dsn, connect_timeout=3).close()
        for c in conns[2:]:
            c.close()
        with pytest.raises(psycopg.OperationalError, match=r"remaining connection slots|too many clients"):
            psycopg.connect(dsn.replace("postgres@", "app@"), connect_timeout=3).close()
        for c in conns[:2]:
            c.close()
    finally:
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


async def test_query_latency_runs_read_only_and_refuses_writes(postgres_server) -> None:  # type: ignore[no-untyped-def]
    dsn = postgres_server.dsn
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS fp_ro; CREATE TABLE fp_ro (x int)")
    probe = get_activity("postgres", "query_latency")
    ctx = ActivityContext()
    with pytest.raises(
        DriverError, match=r"query: cannot execute INSERT in a read-only transaction.*READ ONLY"
    ):
        await probe.invoke(ctx, {"dsn": dsn, "query": "INSERT INTO fp_ro VALUES (1)"})
    with pytest.raises(DriverError, match="read-only transaction"):
        await probe.invoke(
            ctx, {"dsn": dsn, "query": "INSERT INTO fp_ro VALUES (2)", "include_connect": True}
        )
    # A read-write switch is rolled back with its sample, so it cannot open the way for the next one.
    with pytest.raises(DriverError, match="read-only transaction"):
        await probe.invoke(ctx, {"dsn": dsn, "query": "CREATE TABLE fp_ro2 (x int)"})
    out = await probe.invoke(ctx, {"dsn": dsn, "query": "SELECT count(*) FROM fp_ro", "samples": 3})
    assert out["samples"] == 3
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM fp_ro").fetchone() == (0,)
        assert c.execute("SELECT to_regclass('fp_ro2')").fetchone() == (None,)


async def test_exhaust_against_an_unreachable_server_fails_cleanly() -> None:
    ctx = ActivityContext(run_id="pg-x")
    with pytest.raises(DriverError, match=r"postgres: cannot open a single connection: .*refused"):
        await act("exhaust_connections").invoke(ctx, {"dsn": "postgresql://postgres@127.0.0.1:1/postgres"})
    assert ctx.reverts == [] and leases.list_leases() == []
