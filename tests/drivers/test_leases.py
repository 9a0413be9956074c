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

import psutil
import pytest

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


def _stop_watchdog() -> None:
    lock = leases.lease_dir() / "watchdog.lock"
    if lock.exists() and lock.read_text().strip().isdigit():
        pid = int(lock.read_text())
        if psutil.pid_exists(pid) and "faultplane.drivers.leases" in " ".join(psutil.Process(pid).cmdline()):
            os.kill(pid, signal.SIGTERM)


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
        _stop_watchdog()


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
        _stop_watchdog()


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
    lease = leases.create_lease(
        run_id="x",
        label="resume",
        driver="process",
        revert="resume",
        args={"processes": [[target.pid, psutil.Process(target.pid).create_time()]]},
        start_watchdog=False,
    )
    # Forge a dead controller: a pid that exited.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = lease.path()
    data = json.loads(path.read_text())
    data["controller_pid"] = dead.pid
    path.write_text(json.dumps(data))
    leases._KEEPER.drop(lease.lease_id)
    out = subprocess.run(
        [sys.executable, "-m", "faultplane.drivers.leases", "reap"],
        capture_output=True,
        text=True,
        timeout=30,
    )
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
