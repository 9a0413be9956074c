"""postgres.statement_errors on the shared real server: an ordinary client's writes fail with the injected
SQLSTATE (at the asked share), reads are untouched, and nothing is left after the rollback."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import anyio
import psycopg
import pytest

from faultplane.drivers import leases
from faultplane.drivers.base import ActivityContext, DriverError, get_activity

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


@pytest.fixture
def table(postgres_server) -> Iterator[str]:  # type: ignore[no-untyped-def]
    name = f"orders_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_server.dsn, autocommit=True) as c:
        c.execute(f"CREATE TABLE {name} (id serial PRIMARY KEY, v int)")
        c.execute(f"INSERT INTO {name} (v) VALUES (1)")
    yield name
    with psycopg.connect(postgres_server.dsn, autocommit=True) as c:
        c.execute(f"DROP TABLE {name}")


def _triggers(dsn: str, table: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as c:
        row = c.execute(
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal", [table]
        ).fetchone()
        funcs = c.execute("SELECT count(*) FROM pg_proc WHERE proname LIKE 'faultplane_err_%%'").fetchone()
    assert row is not None and funcs is not None
    return int(row[0]) + int(funcs[0])


async def test_every_write_fails_with_the_injected_deadlock_until_rollback(
    postgres_server, table: str
) -> None:  # type: ignore[no-untyped-def]
    dsn = postgres_server.dsn
    ctx = ActivityContext(run_id="stmterr")
    out = await get_activity("postgres", "statement_errors").invoke(
        ctx, {"dsn": dsn, "table": table, "sqlstate": "40P01"}
    )
    assert out["sqlstate"] == "40P01"
    with psycopg.connect(dsn, autocommit=True) as app:
        with pytest.raises(psycopg.errors.DeadlockDetected, match="deadlock detected"):
            app.execute(f"INSERT INTO {table} (v) VALUES (2)")
        with pytest.raises(psycopg.errors.DeadlockDetected):
            app.execute(f"UPDATE {table} SET v = 3")
        assert app.execute(f"SELECT count(*), max(v) FROM {table}").fetchone() == (1, 1)  # reads work
    assert [e for _, e in await ctx.revert_all()] == [None]
    with psycopg.connect(dsn, autocommit=True) as app:
        app.execute(f"INSERT INTO {table} (v) VALUES (2)")
        assert app.execute(f"SELECT count(*) FROM {table}").fetchone() == (2,)
    assert _triggers(dsn, table) == 0 and leases.list_leases() == []


async def test_a_share_of_inserts_fails_and_the_lease_recipe_removes_it(postgres_server, table: str) -> None:  # type: ignore[no-untyped-def]
    dsn = postgres_server.dsn
    ctx = ActivityContext(run_id="stmterr50")
    await get_activity("postgres", "statement_errors").invoke(
        ctx, {"dsn": dsn, "table": table, "percent": 50, "operations": ["INSERT"]}
    )
    failed = 0
    with psycopg.connect(dsn, autocommit=True) as app:
        for i in range(200):
            try:
                app.execute(f"INSERT INTO {table} (v) VALUES (%s)", [i])
            except psycopg.errors.SerializationFailure:
                failed += 1
        app.execute(f"UPDATE {table} SET v = 0")  # not an operation the fault covers
        assert app.execute(f"SELECT count(*) FROM {table}").fetchone() == (1 + 200 - failed,)
    assert 40 <= failed <= 160  # binomial(200, 0.5): far outside +-8 standard deviations would fail
    (lease,) = leases.list_leases()
    await anyio.to_thread.run_sync(leases.run_recipe, lease.driver, lease.revert, lease.args)
    assert _triggers(dsn, table) == 0


async def test_a_missing_table_is_refused_and_leaves_nothing(postgres_server) -> None:  # type: ignore[no-untyped-def]
    ctx = ActivityContext(run_id="stmterr-bad")
    act = get_activity("postgres", "statement_errors")
    with pytest.raises(
        DriverError, match=r"^table: cannot add an error trigger to 'no_such_table': .*does not exist"
    ):
        await act.invoke(ctx, {"dsn": postgres_server.dsn, "table": "no_such_table"})
    with pytest.raises(DriverError, match=r"arguments.table"):
        await act.invoke(ctx, {"dsn": postgres_server.dsn, "table": "x; DROP TABLE y"})
    assert ctx.reverts == [] and leases.list_leases() == []
    with psycopg.connect(postgres_server.dsn, autocommit=True) as c:
        assert c.execute(
            "SELECT count(*) FROM pg_proc WHERE proname LIKE 'faultplane_err_%%'"
        ).fetchone() == (0,)


def _deadlocks(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pg_stat_clear_snapshot()")
        row = c.execute(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_deadlock_is_a_real_one_the_server_counts(postgres_server, table: str) -> None:  # type: ignore[no-untyped-def]
    dsn = postgres_server.dsn
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"INSERT INTO {table} (v) VALUES (2)")
    before = _deadlocks(dsn)
    ctx = ActivityContext(run_id="dl")
    out = await get_activity("postgres", "deadlock").invoke(ctx, {"dsn": dsn, "table": table, "rounds": 2})
    assert out["deadlocks"] == 2 and out["outcomes"] == ["deadlock", "deadlock"]
    # The server's own statistics count them (flushed by the backends shortly after).
    deadline = anyio.current_time() + 30
    while _deadlocks(dsn) < before + 2 and anyio.current_time() < deadline:
        await anyio.sleep(0.2)
    assert _deadlocks(dsn) >= before + 2
    assert ctx.reverts == [] and leases.list_leases() == []
    with psycopg.connect(dsn, autocommit=True) as c:  # no session of the fault is left
        assert c.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'faultplane-deadlock-%'"
        ).fetchone() == (0,)
        c.execute("SET lock_timeout = '2s'")
        c.execute(f"UPDATE {table} SET v = v + 1")  # no row lock outlives the action


async def test_deadlock_needs_two_rows_and_leaves_nothing(postgres_server, table: str) -> None:  # type: ignore[no-untyped-def]
    ctx = ActivityContext(run_id="dl-bad")
    with pytest.raises(DriverError, match=rf"^table: '{table}' has fewer than two rows"):
        await get_activity("postgres", "deadlock").invoke(ctx, {"dsn": postgres_server.dsn, "table": table})
    assert ctx.reverts == [] and leases.list_leases() == []
