"""Leases: a fault whose controller dies (or hangs) is reverted by the watchdog; normal reverts win once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import lease_helpers
import psutil
import psycopg
import pytest
import redis
from lease_helpers import stop_watchdogs
from tcp import best_sync_rtt, standalone_netproxy, sync_rtt, threaded_echo_server

from faultplane.drivers import leases
from faultplane.drivers.base import ActivityContext, get_activity

pytestmark = [pytest.mark.timeout(60)]

CONTROLLER = textwrap.dedent(
    """
    import sys, time, anyio
    from faultplane.drivers.base import ActivityContext, get_activity

    async def main():
        ctx = ActivityContext(run_id="ctl", configuration={"lease_ttl_s": float(sys.argv[2])})
        await get_activity("process", "suspend").invoke(ctx, {"pid": int(sys.argv[1])})
        print("suspended", flush=True)
        time.sleep(120)  # a controller stuck mid-fault, never reverting

    anyio.run(main)
    """
)


# A controller that runs driver actions (JSON list of [driver, name, arguments]), prints their results and then
# hangs mid-fault, never reverting: the test kills (SIGKILL) or freezes (SIGSTOP) it.
STEPS_CONTROLLER = textwrap.dedent(
    """
    import json, sys, time, anyio
    from faultplane.drivers.base import ActivityContext, get_activity

    async def main():
        ctx = ActivityContext(run_id="ctl", configuration={"lease_ttl_s": float(sys.argv[2])})
        for driver, name, args in json.loads(sys.argv[1]):
            out = await get_activity(driver, name).invoke(ctx, args)
            print(json.dumps(out), flush=True)
        print("injected", flush=True)
        time.sleep(120)

    anyio.run(main)
    """
)


def _run_steps(
    steps: list[list[Any]], ttl: float, env: dict[str, str]
) -> tuple[subprocess.Popen[str], list[Any]]:
    ctl = subprocess.Popen(
        [sys.executable, "-c", STEPS_CONTROLLER, json.dumps(steps), str(ttl)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert ctl.stdout is not None
    outs = []
    for _ in steps:
        line = ctl.stdout.readline()
        assert line, f"controller exited with {ctl.wait(5)} before finishing its steps"
        outs.append(json.loads(line))
    assert ctl.stdout.readline().strip() == "injected"
    return ctl, outs


def _watchdog_log() -> str:
    log = leases.lease_dir() / "watchdog.log"
    return log.read_text() if log.exists() else ""


def _status(pid: int) -> str:
    try:
        return psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return "gone"


def _wait(pred, timeout: float) -> float | None:  # type: ignore[no-untyped-def]
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return time.monotonic() - t0
        time.sleep(0.02)
    return None


@pytest.fixture
def target():  # type: ignore[no-untyped-def]
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait(5)


def _controller(target_pid: int, ttl: float, env: dict[str, str]) -> subprocess.Popen[str]:
    ctl = subprocess.Popen(
        [sys.executable, "-c", CONTROLLER, str(target_pid), str(ttl)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert ctl.stdout is not None and ctl.stdout.readline().strip() == "suspended"
    return ctl


def test_killed_controller_fault_is_reverted_by_the_watchdog(target, lease_env) -> None:  # type: ignore[no-untyped-def]
    ttl = 3.0
    ctl = _controller(target.pid, ttl, lease_env)
    try:
        assert _wait(lambda: _status(target.pid) == psutil.STATUS_STOPPED, 5) is not None
        [lease] = leases.list_leases()
        assert lease.recipe == {"driver": "process", "revert": "resume", "args": lease.args}
        assert lease.controller_pid == ctl.pid
        ctl.send_signal(signal.SIGKILL)
        ctl.wait(5)
        took = _wait(lambda: _status(target.pid) != psutil.STATUS_STOPPED, ttl + 5)
        assert took is not None, "the suspended process was never resumed"
        assert took < ttl + 2
        assert _wait(lambda: leases.list_leases() == [], 5) is not None
        log = leases.lease_dir() / "watchdog.log"
        assert _wait(lambda: "is gone; reverted" in log.read_text(), 5) is not None
    finally:
        if ctl.poll() is None:
            ctl.kill()
        stop_watchdogs()


def test_hung_controller_lease_expires_and_is_reverted(target, lease_env) -> None:  # type: ignore[no-untyped-def]
    ttl = 1.5
    ctl = _controller(target.pid, ttl, lease_env)
    try:
        time.sleep(ttl * 1.5)
        assert _status(target.pid) == psutil.STATUS_STOPPED  # renewed while the controller lives
        ctl.send_signal(signal.SIGSTOP)  # alive but frozen: renewals stop, so the lease runs out
        took = _wait(lambda: _status(target.pid) != psutil.STATUS_STOPPED, ttl + 5)
        assert took is not None and took >= ttl * 0.5
        log = leases.lease_dir() / "watchdog.log"
        assert _wait(lambda: "expired; reverted" in log.read_text(), 5) is not None
    finally:
        ctl.kill()
        ctl.wait(5)
        stop_watchdogs()


@pytest.mark.anyio
async def test_normal_revert_deletes_the_lease_and_reap_finds_nothing(target) -> None:  # type: ignore[no-untyped-def]
    ctx = ActivityContext(run_id="n")
    await get_activity("process", "suspend").invoke(ctx, {"pid": target.pid})
    assert len(leases.list_leases()) == 1
    await ctx.revert_all()
    assert leases.list_leases() == []
    assert leases.reap(force=True) == []
    assert _wait(lambda: _status(target.pid) != psutil.STATUS_STOPPED, 5) is not None


def test_reap_cli_reverts_a_dead_controllers_lease(target) -> None:  # type: ignore[no-untyped-def]
    os.kill(target.pid, signal.SIGSTOP)
    lease = lease_helpers.resume_lease(target.pid, "x")
    # Forge a dead controller: a pid that exited.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = lease.path()
    data = json.loads(path.read_text())
    data["controller_pid"] = dead.pid
    path.write_text(json.dumps(data))
    leases._KEEPER.drop(lease.lease_id)
    out = lease_helpers.reap(timeout=30)
    assert out.returncode == 0, out.stderr
    [row] = [json.loads(line) for line in out.stdout.splitlines()]
    assert row["ok"] and "is gone" in row["reason"]
    assert _wait(lambda: _status(target.pid) != psutil.STATUS_STOPPED, 5) is not None
    assert leases.list_leases() == []


def test_failing_recipe_is_kept_for_retry_then_parked(tmp_path: Path) -> None:
    calls: list[int] = []

    @leases.revert_recipe("testdrv", "boom")
    def _boom(args: dict[str, object]) -> None:
        calls.append(1)
        raise RuntimeError("cannot revert")

    leases.create_lease(
        run_id="f", label="boom", driver="testdrv", revert="boom", args={}, ttl_s=0.0, start_watchdog=False
    )
    for attempt in range(1, 6):
        [res] = leases.reap()
        assert not res.ok and "cannot revert" in (res.error or "")
        if attempt < 5:
            assert leases.list_leases()[0].attempts == attempt
    assert leases.list_leases() == []
    assert len(list((leases.lease_dir() / "failed").glob("*.json"))) == 1
    assert len(calls) == 5


def test_unknown_recipe_or_unserialisable_args_are_refused() -> None:
    from faultplane.drivers.base import DriverError

    with pytest.raises(DriverError, match="no revert recipe"):
        leases.create_lease(
            run_id="u", label="x", driver="process", revert="nope", args={}, start_watchdog=False
        )
    with pytest.raises(DriverError, match="JSON-serialisable"):
        leases.create_lease(
            run_id="u",
            label="x",
            driver="process",
            revert="resume",
            args={"x": object()},
            start_watchdog=False,
        )
    assert leases.list_leases() == []


def test_a_lease_lives_the_runs_ttl_or_as_long_as_its_fault_waits_on_a_server() -> None:
    """A lease's TTL is the run's `lease_ttl_s` (DEFAULT_TTL_S when unset); a fault that waits on a server
    (postgres.failover, redis.sentinel_failover) asks `lease_ttl` for at least its wait, never for less than
    the run's."""

    def recorded_ttl(configuration: dict[str, Any], at_least: float | None = None) -> float:
        ctx = ActivityContext(run_id="ttl", configuration=configuration)
        ttl = None if at_least is None else leases.lease_ttl(ctx, at_least=at_least)
        entry = leases.leased_revert(
            ctx, label="ttl", driver="process", revert="resume", args={"processes": []}, ttl_s=ttl
        )
        [lease] = [x for x in leases.list_leases() if x.lease_id == entry.lease_id]
        leases.withdraw(ctx, entry)
        return lease.ttl_s

    assert recorded_ttl({}) == leases.DEFAULT_TTL_S
    assert recorded_ttl({"lease_ttl_s": 5}) == 5.0
    assert recorded_ttl({"lease_ttl_s": 5}, at_least=180.0) == 180.0
    assert recorded_ttl({"lease_ttl_s": 600}, at_least=180.0) == 600.0
    assert leases.list_leases() == []


# --- mid-fault controller death for real servers ----------------------------------------------------------------


@pytest.fixture
def small_redis(redis_server):  # type: ignore[no-untyped-def]
    """The session's redis-server with maxclients 20 for this test (an admin connection is kept open)."""
    admin = redis.Redis.from_url(redis_server.url, socket_timeout=10)
    admin.config_set("maxclients", 20)
    yield redis_server, admin
    admin.config_set("maxclients", 200)
    admin.close()


def _redis_ping(url: str) -> str:
    try:
        with redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2) as c:
            return "ok" if c.ping() else "no"
    except redis.RedisError as exc:
        return str(exc)


@pytest.mark.redis
def test_redis_exhaustion_of_every_slot_is_reverted_after_the_controller_is_killed(
    small_redis, lease_env
) -> None:  # type: ignore[no-untyped-def]
    server, admin = small_redis
    ttl = 3.0
    ctl, [out] = _run_steps([["redis", "exhaust_connections", {"url": server.url}]], ttl, lease_env)
    try:
        assert out["held"] >= 15 and "max number of clients" in out["stopped_by"]
        # Every slot is taken: a new client (the revert included, had it needed one) is turned away.
        assert "max number of clients reached" in _redis_ping(server.url)
        ctl.send_signal(signal.SIGKILL)
        ctl.wait(5)
        took = _wait(lambda: _redis_ping(server.url) == "ok", ttl + 5)
        assert took is not None, "new clients still cannot connect after the controller died"
        assert _wait(lambda: "is gone; reverted" in _watchdog_log(), 5) is not None, _watchdog_log()
        names = [c.get("name") for c in admin.client_list()]
        assert out["client_name"] not in names
        assert leases.list_leases() == []
    finally:
        if ctl.poll() is None:
            ctl.kill()
        stop_watchdogs()


@pytest.mark.postgres
def test_postgres_exhaustion_by_a_non_superuser_is_reverted_when_the_controller_hangs(
    postgres_server, lease_env
) -> None:  # type: ignore[no-untyped-def]
    # superuser_reserved_connections does not help a normal user: the fault takes every slot it can get.
    with psycopg.connect(postgres_server.dsn, autocommit=True) as c:
        if not c.execute("SELECT 1 FROM pg_roles WHERE rolname = 'app'").fetchone():
            c.execute("CREATE ROLE app LOGIN")
    app_dsn = postgres_server.dsn.replace("postgres@", "app@")

    def app_connects() -> str:
        try:
            with psycopg.connect(app_dsn, connect_timeout=2) as c:
                c.execute("SELECT 1")
            return "ok"
        except psycopg.OperationalError as exc:
            return str(exc)

    ttl = 2.0
    ctl, [out] = _run_steps([["postgres", "exhaust_connections", {"dsn": app_dsn}]], ttl, lease_env)
    try:
        assert out["held"] > 40
        assert "remaining connection slots" in app_connects()
        time.sleep(ttl * 1.5)
        assert "remaining connection slots" in app_connects()  # renewed while the controller lives
        ctl.send_signal(signal.SIGSTOP)  # hung, not dead: its renewals stop and the lease runs out
        took = _wait(lambda: app_connects() == "ok", ttl + 8)
        assert took is not None, "the app still cannot connect after the lease ran out"
        assert _wait(lambda: "expired; reverted" in _watchdog_log(), 5) is not None, _watchdog_log()
        with psycopg.connect(postgres_server.dsn, autocommit=True) as c:
            left = c.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [out["application_name"]]
            ).fetchone()
        assert left == (0,)
    finally:
        ctl.kill()
        ctl.wait(5)
        stop_watchdogs()


def test_standalone_netproxy_latency_and_route_are_reverted_when_the_controller_hangs(lease_env) -> None:  # type: ignore[no-untyped-def]
    ctl = None
    try:
        with (
            threaded_echo_server() as up,
            standalone_netproxy("--name", "db", "--upstream", f"127.0.0.1:{up}", env=lease_env) as info,
        ):
            control, port = info["control"], int(info["routes"][0]["listen"].rsplit(":", 1)[1])
            assert best_sync_rtt(port) < 0.2
            ttl = 2.0
            steps = [
                [
                    "netproxy",
                    "create_route",
                    {"control_url": control, "name": "extra", "upstream": f"127.0.0.1:{up}"},
                ],
                ["netproxy", "latency", {"control_url": control, "route": "db", "latency_ms": 400}],
            ]
            ctl, _ = _run_steps(steps, ttl, lease_env)
            assert sync_rtt(port) >= 0.4
            assert sorted(r["name"] for r in httpx.get(f"{control}/routes").json()) == ["db", "extra"]
            ctl.send_signal(signal.SIGSTOP)
            took = _wait(lambda: httpx.get(f"{control}/routes/db").json()["toxics"] == [], ttl + 8)
            assert took is not None, "the latency toxic outlived the hung controller's lease"
            assert best_sync_rtt(port) < 0.2
            assert (
                _wait(lambda: [r["name"] for r in httpx.get(f"{control}/routes").json()] == ["db"], 5)
                is not None
            )
            assert _wait(lambda: _watchdog_log().count("expired; reverted") == 2, 5) is not None, (
                _watchdog_log()
            )
    finally:
        if ctl is not None:
            ctl.kill()
            ctl.wait(5)
        stop_watchdogs()
