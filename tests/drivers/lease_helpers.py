"""Lease tests' tools: `reap` as the watchdog runs it (another process), a controller process holding faults
under leases, killed and its reverts awaited, and the cleanup of the watchdogs controllers start, which outlive
the test otherwise."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psutil

from faultplane.drivers import leases


def stop_watchdogs() -> None:
    """SIGTERM every lease watchdog still running (one per controller process: each holds its controller's
    sealing key); a pid in a stale lock file that now belongs to another program is left alone."""
    for lock in leases.lease_dir().glob("watchdog*.lock"):
        text = lock.read_text().strip()
        alive = text.isdigit() and psutil.pid_exists(int(text))
        if alive and "faultplane.drivers.leases" in " ".join(psutil.Process(int(text)).cmdline()):
            os.kill(int(text), signal.SIGTERM)


_STEPS_CONTROLLER = textwrap.dedent(
    """
    import json, sys, time, anyio
    from faultplane.drivers.base import ActivityContext, get_activity

    async def main():
        ctx = ActivityContext(run_id=sys.argv[2], configuration={"lease_ttl_s": 5.0}, secret_values=[sys.argv[3]])
        for driver, name, args in json.loads(sys.argv[1]):
            await get_activity(driver, name).invoke(ctx, args)
        print("injected", flush=True)
        time.sleep(120)

    anyio.run(main)
    """
)


@contextmanager
def controller(
    steps: list[list[Any]], run_id: str, secret: str, env: dict[str, str]
) -> Iterator[subprocess.Popen[str]]:
    """A controller process that injects `steps` ([driver, activity, arguments] each) under leases of `run_id`,
    with `secret` among its secret values, then sleeps; yielded once it has injected them. On exit it is killed
    if still alive, and the watchdogs it started are stopped."""
    ctl = subprocess.Popen(
        [sys.executable, "-c", _STEPS_CONTROLLER, json.dumps(steps), run_id, secret],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert ctl.stdout is not None and ctl.stdout.readline().strip() == "injected"
        yield ctl
    finally:
        if ctl.poll() is None:
            ctl.kill()
            ctl.wait(5)
        stop_watchdogs()


def reverted_after_kill(
    ctl: subprocess.Popen[str], run_id: str, count: int, timeout: float = 60
) -> list[Any]:
    """SIGKILL the controller `ctl`, check its watchdog reverts every lease within `timeout` seconds, and return the
    outcome rows of `run_id` once `count` are written (each just after its revert returns)."""
    ctl.kill()
    ctl.wait(5)
    deadline = time.monotonic() + timeout
    while leases.list_leases() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leases.list_leases() == []
    while len(rows := leases.outcomes(run_id)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return rows


def reap(*flags: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`python -m faultplane.drivers.leases reap FLAGS` in another process: what the watchdog runs for a dead or
    hung controller."""
    return subprocess.run(
        [sys.executable, "-m", "faultplane.drivers.leases", "reap", *flags],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def resume_lease(pid: int, run_id: str, **options: Any) -> leases.Lease:
    """A lease whose revert resumes the (stopped) process `pid`, without a watchdog: as a controller leaves it
    after suspending that process."""
    return leases.create_lease(
        run_id=run_id,
        label="resume",
        driver="process",
        revert="resume",
        args={"processes": [[pid, psutil.Process(pid).create_time()]]},
        start_watchdog=False,
        **options,
    )
