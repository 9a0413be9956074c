"""PostgreSQL parameter change and Redis maxmemory pressure / CLIENT KILL on the real servers, each effect
measured by an ordinary client, each revert checked."""

from __future__ import annotations

import time

import psycopg
import pytest
import redis

from faultplane.drivers import leases
from faultplane.drivers.base import ActivityContext, DriverError, get_activity
from proc_helpers import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


def _sleep_ok(dsn: str, seconds: float = 0.3) -> bool:
    """A fresh session (as an application would open) runs pg_sleep: False when statement_timeout cancels it."""
    with psycopg.connect(dsn, autocommit=True) as c:
        try:
            c.execute("SELECT pg_sleep(%s)", [seconds])
            return True
        except psycopg.errors.QueryCanceled:
            return False


async def test_postgres_parameter_change_is_felt_by_new_sessions_and_reverted(postgres_server) -> None:  # type: ignore[no-untyped-def]
    dsn = postgres_server.dsn
    assert _sleep_ok(dsn)
    ctx = ActivityContext(run_id="pgp")
    out = await get_activity("postgres", "set_parameter").invoke(
        ctx, {"dsn": dsn, "name": "statement_timeout", "value": "100ms"}
    )
    assert out["before"] == "0" and out["now"] == "100ms"
    assert not _sleep_ok(dsn)  # statements now fail with "canceling statement due to statement timeout"
    assert len(leases.list_leases()) == 1
    assert [e for _, e in await ctx.revert_all()] == [None]
    assert eventually(lambda: _sleep_ok(dsn))
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute(
            "SELECT count(*) FROM pg_file_settings WHERE name = 'statement_timeout'"
        ).fetchone() == (0,)
    assert leases.list_leases() == []


async def test_postgres_parameter_restore_keeps_an_earlier_alter_system_value(postgres_server) -> None:  # type: ignore[no-untyped-def]
    dsn = postgres_server.dsn
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("ALTER SYSTEM SET work_mem = '8MB'")
        c.execute("SELECT pg_reload_conf()")
    try:
        ctx = ActivityContext(run_id="pgp2")
        await get_activity("postgres", "set_parameter").invoke(
            ctx, {"dsn": dsn, "name": "work_mem", "value": "64kB"}
        )
        assert [e for _, e in await ctx.revert_all()] == [None]

        def work_mem() -> str:
            with psycopg.connect(dsn, autocommit=True) as c:
                return str(c.execute("SHOW work_mem").fetchone()[0])  # type: ignore[index]

        assert eventually(lambda: work_mem() == "8MB")
    finally:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("ALTER SYSTEM RESET work_mem")
            c.execute("SELECT pg_reload_conf()")


async def test_postgres_parameter_refusals_apply_nothing(postgres_server) -> None:  # type: ignore[no-untyped-def]
    ctx = ActivityContext(run_id="pgp3")
    for args, pattern in [
        (
            {"name": "max_connections", "value": "5"},
            r"^name: max_connections can only change with a server restart",
        ),
        ({"name": "no_such_param", "value": "1"}, r"^name: PostgreSQL has no parameter 'no_such_param'"),
        (
            {"name": "statement_timeout", "value": "soon"},
            r"^value: PostgreSQL refused statement_timeout = 'soon'",
        ),
        ({"name": "statement_timeout; DROP", "value": "1"}, r"arguments.name"),
    ]:
        with pytest.raises(DriverError, match=pattern):
            await get_activity("postgres", "set_parameter").invoke(ctx, {"dsn": postgres_server.dsn, **args})
        assert ctx.reverts == [] and leases.list_leases() == []


async def test_redis_maxmemory_pressure_evicts_real_keys_and_reverts(redis_server) -> None:  # type: ignore[no-untyped-def]
    r = redis.Redis.from_url(redis_server.url)
    r.flushdb()
    before = r.config_get("maxmemory", "maxmemory-policy")
    evicted0 = int(r.info("stats")["evicted_keys"])
    ctx = ActivityContext(run_id="mm")
    out = await get_activity("redis", "maxmemory_pressure").invoke(
        ctx, {"url": redis_server.url, "headroom_bytes": 2**20}
    )
    assert out["maxmemory"] == out["used_memory"] + 2**20
    payload = b"v" * 10_000
    for i in range(400):  # ~4 MB into 1 MB of headroom
        r.set(f"mm:{i}", payload)
    evicted = int(r.info("stats")["evicted_keys"]) - evicted0
    assert evicted > 100
    assert r.dbsize() < 400
    assert [e for _, e in await ctx.revert_all()] == [None]
    assert r.config_get("maxmemory", "maxmemory-policy") == before
    r.flushdb()
    r.close()
    assert leases.list_leases() == []


async def test_redis_maxmemory_noeviction_makes_writes_fail(redis_server) -> None:  # type: ignore[no-untyped-def]
    r = redis.Redis.from_url(redis_server.url)
    r.flushdb()
    ctx = ActivityContext(run_id="mm2")
    await get_activity("redis", "maxmemory_pressure").invoke(
        ctx, {"url": redis_server.url, "headroom_bytes": 0, "policy": "noeviction"}
    )
    with pytest.raises(redis.ResponseError, match="used memory > 'maxmemory'"):
        for i in range(200):
            r.set(f"oom:{i}", b"v" * 10_000)
    assert [e for _, e in await ctx.revert_all()] == [None]
    r.set("after", "ok")
    r.flushdb()
    r.close()


async def test_redis_client_kill_drops_the_apps_connections_only(redis_server) -> None:  # type: ignore[no-untyped-def]
    apps = [
        redis.Redis.from_url(redis_server.url, client_name=f"app-{i}", single_connection_client=True)
        for i in range(3)
    ]
    other = redis.Redis.from_url(redis_server.url, client_name="batch", single_connection_client=True)
    for c in [*apps, other]:
        c.ping()
    ctx = ActivityContext(run_id="ck")
    out = await get_activity("redis", "client_kill").invoke(
        ctx, {"url": redis_server.url, "name_pattern": "^app-"}
    )
    assert out["matched"] == 3 and sorted(k["name"] for k in out["killed"]) == ["app-0", "app-1", "app-2"]
    # seen from the server: the app's connections are gone, the batch client's is not
    names = [x["name"] for x in other.client_list()]
    assert not [n for n in names if n.startswith("app-")] and "batch" in names
    assert other.ping()
    with pytest.raises(DriverError, match=r"^name_pattern: give name_pattern"):
        await get_activity("redis", "client_kill").invoke(ctx, {"url": redis_server.url})
    for c in [*apps, other]:
        c.close()


async def test_postgres_idle_transactions_hold_row_locks_and_the_xmin_horizon(postgres_server) -> None:  # type: ignore[no-untyped-def]
    dsn = postgres_server.dsn
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE TABLE IF NOT EXISTS idle_t (id int PRIMARY KEY, v int)")
        c.execute("INSERT INTO idle_t VALUES (1, 0) ON CONFLICT DO NOTHING")
    ctx = ActivityContext(run_id="idle")
    out = await get_activity("postgres", "idle_transaction").invoke(
        ctx, {"dsn": dsn, "sessions": 2, "statement": "SELECT 1 FROM idle_t WHERE id = 1 FOR SHARE"}
    )
    tag = out["application_name"]
    with psycopg.connect(dsn, autocommit=True) as c:
        rows = c.execute(
            "SELECT state, backend_xid IS NOT NULL FROM pg_stat_activity WHERE application_name = %s", [tag]
        ).fetchall()
        assert rows == [("idle in transaction", True)] * 2
        c.execute("SET lock_timeout = '200ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            c.execute("UPDATE idle_t SET v = v + 1 WHERE id = 1")  # the held row lock blocks the writer
    assert len(leases.list_leases()) == 1
    assert [e for _, e in await ctx.revert_all()] == [None]
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [tag]
        ).fetchone() == (0,)
        c.execute("SET lock_timeout = '2s'")
        c.execute("UPDATE idle_t SET v = v + 1 WHERE id = 1")
    assert leases.list_leases() == []
    bad = ActivityContext(run_id="idle2")
    with pytest.raises(DriverError, match=r"^statement: .*no_such_table"):
        await get_activity("postgres", "idle_transaction").invoke(
            bad, {"dsn": dsn, "statement": "SELECT * FROM no_such_table"}
        )
    assert bad.reverts == [] and leases.list_leases() == []


async def test_redis_mass_expiry_expires_keys_together_and_reverts(redis_server) -> None:  # type: ignore[no-untyped-def]
    r = redis.Redis.from_url(redis_server.url)
    r.flushdb()
    for i in range(50):
        r.set(f"cache:{i}", f"v{i}")
    r.set("cache:ttl", "t", ex=3600)
    r.set("other", "o")
    ctx = ActivityContext(run_id="exp")
    out = await get_activity("redis", "mass_expire").invoke(
        ctx, {"url": redis_server.url, "pattern": "cache:*", "seconds": 0.3}
    )
    assert out["matched"] == 51 and out["expiring"] == 51
    time.sleep(0.6)
    assert r.keys("cache:*") == [] and r.get("other") == b"o"  # all gone at once; the rest untouched
    r.set("cache:7", "app-rewrote")  # the application refills one key during the stampede
    assert [e for _, e in await ctx.revert_all()] == [None]
    assert len(r.keys("cache:*")) == 51
    assert r.get("cache:7") == b"app-rewrote" and r.get("cache:8") == b"v8"
    assert 3500 < r.ttl("cache:ttl") <= 3600 and r.ttl("cache:9") == -1  # each key's own TTL back
    r.flushdb()
    r.close()


@pytest.mark.parametrize("mode", ["immediate", "fast"])
async def test_postgres_restart_cuts_sessions_and_the_server_comes_back(
    postgres_server, mode: str, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    dsn = postgres_server.dsn
    app = psycopg.connect(dsn, autocommit=True)
    started = app.execute("SELECT pg_postmaster_start_time()").fetchone()[0]  # type: ignore[index]
    ctx = ActivityContext(run_id="rst")
    out = await get_activity("postgres", "restart").invoke(
        ctx, {"dsn": dsn, "data_dir": str(postgres_server.data_dir), "mode": mode}
    )
    assert out["recovered_in_s"] > 0
    with pytest.raises(psycopg.OperationalError):
        app.execute("SELECT 1")  # the application's session was cut
    app.close()
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute("SELECT pg_postmaster_start_time()").fetchone()[0] > started  # type: ignore[index]
        assert c.execute("SHOW max_connections").fetchone() == ("60",)  # same options as before
    assert ctx.reverts == [] and leases.list_leases() == []
    with pytest.raises(DriverError, match=r"^data_dir: .* is not a PostgreSQL data directory"):
        await get_activity("postgres", "restart").invoke(ctx, {"dsn": dsn, "data_dir": str(tmp_path)})
    assert ctx.reverts == [] and leases.list_leases() == []
