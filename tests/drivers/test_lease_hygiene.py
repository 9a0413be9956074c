"""Leases only for what was applied, secrets never on disk in clear, and errors that say where and why.

Every failure variant runs against a real server (Redis with and without a password, PostgreSQL, a standalone
netproxy, sshd) or a real socket that accepts and never answers."""

from __future__ import annotations

import json
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import redis
from lease_helpers import controller
from redis_secret import REDIS_PASSWORD

from faultplane.drivers import leases, sealing
from faultplane.drivers.base import ActivityContext, DriverError, get_activity

pytestmark = [pytest.mark.timeout(90)]


def _files(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file()]


def assert_no_clear_secret(*secrets: str) -> None:
    """No file under the lease folder (leases, parked leases, outcomes, watchdog log) holds a secret."""
    for path in _files(leases.lease_dir()):
        data = path.read_bytes()
        for s in secrets:
            assert s.encode() not in data, f"{s!r} in clear in {path}"


def assert_private() -> None:
    d = leases.lease_dir()
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    for path in _files(d):
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, f"{path} is readable by others"


def assert_nothing_left(ctx: ActivityContext) -> None:
    assert ctx.reverts == []
    assert leases.list_leases() == []
    assert (
        not (leases.lease_dir() / "failed").exists() or list((leases.lease_dir() / "failed").iterdir()) == []
    )
    holders = [
        p
        for p in psutil.process_iter(["cmdline"])
        if "faultplane.drivers.holder" in (p.info["cmdline"] or [])
    ]
    assert holders == []


def _one_line(msg: str) -> str:
    assert "\n" not in msg and "Traceback" not in msg
    assert "[Errno" not in msg.split(":")[0]  # never a bare errno as the whole story
    return msg


# --- 1. a failed action that applied nothing leaves no lease ----------------------------------------------------


def _redis_variants(auth, silent_port: int) -> list[tuple[str, str, str]]:  # type: ignore[no-untyped-def]
    host = f"127.0.0.1:{auth.port}"
    return [
        (
            "closed port",
            "redis://127.0.0.1:1/0",
            r"^url: redis PING at 127\.0\.0\.1:1: cannot connect: .*refused",
        ),
        (
            "wrong password",
            f"redis://:not-{REDIS_PASSWORD}@{host}/0",
            rf"^url: redis PING at {host}: .*credentials",
        ),
        ("missing password", f"redis://{host}/0", rf"^url: redis PING at {host}: .*credentials"),
        ("malformed url", "redis//127.0.0.1:6379", r"arguments\.url: not a Redis URL"),
        ("bad port", "redis://127.0.0.1:notaport/0", r"arguments\.url: not a Redis URL"),
        (
            "never answers",
            f"redis://127.0.0.1:{silent_port}/0",
            rf"^url: redis PING at 127\.0\.0\.1:{silent_port}: no reply within 5s .*is it a Redis server",
        ),
    ]


@pytest.mark.anyio
@pytest.mark.parametrize("action", ["client_pause", "exhaust_connections"])
async def test_failed_redis_faults_leave_no_lease(redis_auth_server, silent_port, action: str) -> None:  # type: ignore[no-untyped-def]
    for variant, url, pattern in _redis_variants(redis_auth_server, silent_port):
        if variant == "never answers" and action == "exhaust_connections":
            continue  # same preflight as client_pause; 5 s each
        ctx = ActivityContext(run_id=f"fail-{action}", secret_values=[REDIS_PASSWORD])
        args = (
            {"url": url, "timeout_ms": 60_000} if action == "client_pause" else {"url": url, "connections": 3}
        )
        with pytest.raises(DriverError, match=pattern) as info:
            await get_activity("redis", action).invoke(ctx, args)
        msg = _one_line(str(info.value))
        assert REDIS_PASSWORD not in msg, variant
        assert_nothing_left(ctx)
    # and the right password works, so the failures above were about the credentials
    ctx = ActivityContext(run_id="ok")
    good = f"redis://:{REDIS_PASSWORD}@127.0.0.1:{redis_auth_server.port}/0"
    if action == "client_pause":
        await get_activity("redis", action).invoke(ctx, {"url": good, "timeout_ms": 60_000, "mode": "WRITE"})
    else:
        await get_activity("redis", action).invoke(ctx, {"url": good, "connections": 3})
    assert len(leases.list_leases()) == 1
    assert [e for _, e in await ctx.revert_all()] == [None]
    assert leases.list_leases() == []


@pytest.mark.anyio
async def test_unreachable_netproxy_control_url_leaves_no_lease(netproxy_control: str) -> None:
    ctx = ActivityContext(run_id="np")
    with pytest.raises(DriverError) as info:
        await get_activity("netproxy", "latency").invoke(
            ctx, {"route": "default", "latency_ms": 100, "control_url": "http://127.0.0.1:1"}
        )
    msg = _one_line(str(info.value))
    assert msg.startswith(
        "control_url: netproxy control API at http://127.0.0.1:1 (POST /routes/default/toxics)"
    )
    assert "cannot connect: connection refused" in msg
    assert_nothing_left(ctx)
    with pytest.raises(
        DriverError, match=r"^control_url: netproxy control API at http://127\.0\.0\.1:1 \(POST /routes\)"
    ):
        await get_activity("netproxy", "create_route").invoke(
            ctx, {"name": "x", "upstream": "127.0.0.1:9", "control_url": "127.0.0.1:1"}
        )
    assert_nothing_left(ctx)
    # the proxy answers but refuses (no such route; an existing route name): nothing applied either
    with pytest.raises(DriverError, match="404"):
        await get_activity("netproxy", "latency").invoke(
            ctx, {"route": "no-such-route", "latency_ms": 100, "control_url": netproxy_control}
        )
    assert_nothing_left(ctx)
    with pytest.raises(DriverError, match=r"409|exists"):
        await get_activity("netproxy", "create_route").invoke(
            ctx, {"name": "default", "upstream": "127.0.0.1:9", "control_url": netproxy_control}
        )
    assert_nothing_left(ctx)
    # the refused create did not remove the route it collided with
    out = await get_activity("netproxy", "routes").invoke(ctx, {"control_url": netproxy_control})
    assert [r["name"] for r in out] == ["default"]


@pytest.mark.anyio
async def test_netproxy_revert_of_a_proxy_that_is_gone_is_a_no_op() -> None:
    # A standalone proxy keeps its toxics in memory: nothing listening means nothing left to remove.
    leases.run_recipe(
        "netproxy", "remove_toxic", {"control_url": "http://127.0.0.1:1", "route": "r", "toxic": "t"}
    )


@pytest.mark.anyio
async def test_failed_postgres_lock_leaves_no_lease(postgres_server, silent_port) -> None:  # type: ignore[no-untyped-def]
    secret = "pgS3cretQ81"
    cases = [
        (
            f"postgresql://postgres:{secret}@127.0.0.1:1/postgres",
            r"^dsn: cannot connect to PostgreSQL at 127\.0\.0\.1:1: .*refused",
        ),
        (
            f"host=127.0.0.1 port=5432 password={secret} dbname",
            r"arguments\.dsn: not a libpq connection string",
        ),
        (
            f"host=127.0.0.1 port={silent_port} user=postgres password={secret} dbname=postgres",
            rf"^dsn: cannot connect to PostgreSQL at 127\.0\.0\.1:{silent_port}: .*timeout.*is it a PostgreSQL server",
        ),
    ]
    for dsn, pattern in cases:
        ctx = ActivityContext(run_id="pgfail")
        with pytest.raises(DriverError, match=pattern) as info:
            await get_activity("postgres", "lock_table").invoke(ctx, {"dsn": dsn, "table": "t"})
        assert secret not in _one_line(str(info.value))
        assert_nothing_left(ctx)
    ctx = ActivityContext(run_id="pgfail2")
    with pytest.raises(DriverError, match=r"^dsn: postgres: cannot open a single connection"):
        await get_activity("postgres", "exhaust_connections").invoke(
            ctx, {"dsn": f"postgresql://postgres:{secret}@127.0.0.1:1/postgres", "connections": 2}
        )
    assert_nothing_left(ctx)


@pytest.mark.anyio
async def test_ssh_server_that_never_answers_is_named(silent_port) -> None:  # type: ignore[no-untyped-def]
    ctx = ActivityContext(run_id="ssh")
    with pytest.raises(DriverError) as info:
        await get_activity("ssh", "suspend_process").invoke(
            ctx,
            {
                "host": "127.0.0.1",
                "port": silent_port,
                "pattern": "x",
                "connect_timeout_seconds": 1,
                "insecure_no_host_check": True,
            },
        )
    msg = _one_line(str(info.value))
    assert msg.startswith(f"host: cannot open SSH to @127.0.0.1:{silent_port}: no SSH handshake within 1s")
    assert_nothing_left(ctx)


# --- 2. secrets never on disk in clear ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_lease_files_are_private_and_hold_no_secret(redis_auth_server, postgres_server) -> None:  # type: ignore[no-untyped-def]
    url = f"redis://:{REDIS_PASSWORD}@127.0.0.1:{redis_auth_server.port}/0"
    pg_secret = "pgLeaseS3cret"
    ctx = ActivityContext(run_id="sec", secret_values=[REDIS_PASSWORD, pg_secret])
    with psycopg_conn(postgres_server.dsn) as c:
        c.execute("CREATE TABLE IF NOT EXISTS hygiene_t (id int)")
    await get_activity("redis", "client_pause").invoke(
        ctx, {"url": url, "timeout_ms": 60_000, "mode": "WRITE"}
    )
    assert_no_clear_secret(REDIS_PASSWORD)
    await get_activity("redis", "exhaust_connections").invoke(ctx, {"url": url, "connections": 2})
    assert_no_clear_secret(REDIS_PASSWORD)
    await get_activity("postgres", "lock_table").invoke(
        ctx, {"dsn": postgres_server.conninfo(password=pg_secret), "table": "hygiene_t", "mode": "SHARE"}
    )
    await get_activity("postgres", "exhaust_connections").invoke(
        ctx, {"dsn": postgres_server.conninfo(password=pg_secret), "connections": 2}
    )
    held = leases.list_leases()
    assert len(held) == 4
    assert_no_clear_secret(REDIS_PASSWORD, pg_secret)
    assert_private()
    for lease in held:
        assert lease.key_id is not None  # every one of them carried a credential
        assert REDIS_PASSWORD not in lease.label and pg_secret not in lease.label
    assert any("***" in lease.label for lease in held)
    assert [e for _, e in await ctx.revert_all()] == [None] * 4
    assert leases.list_leases() == []
    # the revert really used the sealed credential: writes pass again
    client = redis.Redis.from_url(url, socket_timeout=2)
    client.set("k", "v")
    client.close()


def psycopg_conn(dsn: str):  # type: ignore[no-untyped-def]
    import psycopg

    return psycopg.connect(dsn, autocommit=True)


def test_secret_values_anywhere_in_args_are_sealed_and_labels_masked() -> None:
    odd = "pä$$ wörd\u200b🔑"
    lease = leases.create_lease(
        run_id="odd",
        label=f"run cleanup --token {odd} on redis://u:{odd}@h:1",
        driver="redis",
        revert="unpause",
        args={
            "url": "redis://h:1/0",
            "nested": [{"cmd": f"curl -H 'Authorization: {odd}'"}],
            "token": "tok123",
        },
        start_watchdog=False,
        secret_values=[odd],
    )
    raw = lease.path().read_text()
    assert odd not in raw and json.dumps(odd)[1:-1] not in raw and "tok123" not in raw
    assert "redis://h:1/0" in raw  # what is not secret stays readable
    assert odd not in lease.label and "***" in lease.label
    opened = sealing.unseal(lease.args, {lease.key_id: sealing.own_key()})  # type: ignore[dict-item]
    assert opened["nested"][0]["cmd"].endswith(odd + "'") and opened["token"] == "tok123"
    leases.release_lease(lease.lease_id)


def _forge_dead(lease: leases.Lease) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    data = json.loads(lease.path().read_text())
    data["controller_pid"] = dead.pid
    lease.path().write_text(json.dumps(data))
    leases._KEEPER.drop(lease.lease_id)


def test_parked_lease_keeps_its_secret_sealed_and_label_masked() -> None:
    url = f"redis://:{REDIS_PASSWORD}@127.0.0.1:1/0"  # nothing listens: the revert keeps failing
    lease = leases.create_lease(
        run_id="park",
        label=f"redis: CLIENT UNPAUSE {url}",
        driver="redis",
        revert="unpause",
        args={"url": url},
        start_watchdog=False,
        secret_values=[],
    )
    _forge_dead(lease)
    for _ in range(5):
        [res] = leases.reap()
        assert not res.ok and REDIS_PASSWORD not in (res.error or "") and REDIS_PASSWORD not in res.label
    assert leases.list_leases() == []
    [parked] = leases.list_leases(leases.lease_dir() / "failed")
    assert parked.label == "redis: CLIENT UNPAUSE redis://:***@127.0.0.1:1/0"
    assert_no_clear_secret(REDIS_PASSWORD)
    assert_private()
    rows = leases.outcomes("park")
    assert len(rows) == 5 and rows[-1]["parked"] and not rows[-1]["ok"]


SEALING_CONTROLLER = textwrap.dedent(
    """
    import sys
    from faultplane.drivers import leases
    lease = leases.create_lease(run_id="orphan", label="x", driver="redis", revert="unpause",
                                args={"url": sys.argv[1]}, start_watchdog=False)
    print(lease.lease_id, flush=True)
    """
)


def test_a_lease_whose_key_died_is_parked_not_guessed() -> None:
    url = f"redis://:{REDIS_PASSWORD}@127.0.0.1:1/0"
    out = subprocess.run(
        [sys.executable, "-c", SEALING_CONTROLLER, url], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    [res] = leases.reap()
    assert not res.ok and "sealed with key" in (res.error or "")
    [parked] = leases.list_leases(leases.lease_dir() / "failed")
    assert parked.lease_id == out.stdout.strip()
    assert_no_clear_secret(REDIS_PASSWORD)


def _write_blocked(url: str) -> bool:
    c = redis.Redis.from_url(url, socket_timeout=0.3)
    try:
        c.set("probe", "1")
        return False
    except redis.TimeoutError:
        return True
    finally:
        c.close()


@pytest.mark.parametrize("how", ["sigkill", "kill-switch"])
def test_watchdog_unseals_and_reverts_after_the_controller_dies(
    redis_auth_server, lease_env, how: str
) -> None:  # type: ignore[no-untyped-def]
    url = f"redis://:{REDIS_PASSWORD}@127.0.0.1:{redis_auth_server.port}/0"
    steps = [["redis", "client_pause", {"url": url, "timeout_ms": 60_000, "mode": "WRITE"}]]
    with controller(steps, f"wd-{how}", REDIS_PASSWORD, lease_env) as ctl:
        assert _write_blocked(url)
        assert_no_clear_secret(REDIS_PASSWORD)
        [lease] = leases.list_leases()
        assert lease.key_id is not None
        if how == "sigkill":
            ctl.send_signal(signal.SIGKILL)
            ctl.wait(5)
        else:
            # the kill switch, from a process without the key: the key-holding watchdog reverts for it
            results = leases.reap(force=True)
            assert [(r.ok, r.reason) for r in results] == [(True, "forced")]
        t0 = time.monotonic()
        while _write_blocked(url):
            assert time.monotonic() - t0 < 8, "the pause was never lifted"
        while not (rows := leases.outcomes(f"wd-{how}")):  # written just after the revert returns
            assert time.monotonic() - t0 < 10, "the watchdog recorded no outcome"
            time.sleep(0.02)
        assert [r["ok"] for r in rows] == [True]
        assert leases.list_leases() == []
        assert_no_clear_secret(REDIS_PASSWORD)
        assert_private()


# --- 5. exhaustion: achieved against asked -------------------------------------------------------------------


@pytest.mark.anyio
async def test_exhaustion_reports_what_it_held_against_what_was_asked(redis_server) -> None:  # type: ignore[no-untyped-def]
    r = redis.Redis.from_url(redis_server.url)
    try:
        r.config_set("maxclients", 30)
        ctx = ActivityContext(run_id="ask")
        out = await get_activity("redis", "exhaust_connections").invoke(
            ctx, {"url": redis_server.url, "connections": 10_000}
        )
        assert out["requested"] == 10_000 and 20 <= out["held"] < 30
        assert out["shortfall"] == 10_000 - out["held"]
        assert out["achieved"].startswith(f"held {out['held']} of 10000 requested connections (")
        assert [e for _, e in await ctx.revert_all()] == [None]
        with pytest.raises(
            DriverError, match=r"^connections: held only \d+ of 10000 requested .*require_all"
        ):
            await get_activity("redis", "exhaust_connections").invoke(
                ctx, {"url": redis_server.url, "connections": 10_000, "require_all": True}
            )
        assert_nothing_left(ctx)
        assert r.ping()
    finally:
        r.config_set("maxclients", 200)
        r.close()
