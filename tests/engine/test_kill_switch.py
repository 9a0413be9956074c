"""`faultplane abort --all`: every running experiment stops and rolls back, every active fault is reverted —
even one held by a controller that is hung and cannot revert it itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

import ctk_helpers
from clihelp import cli, env
from faultplane.core.faults import FaultRegistry, FaultSpec

from .test_exit_paths import _start

pytestmark = pytest.mark.usefixtures("lab_policy")


def _wait(predicate, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def test_abort_all_stops_runs_and_reverts_every_fault(tmp_path: Path) -> None:
    victim = subprocess.Popen(["sleep", "120"])
    hung = None
    try:
        # 1. a controller that suspends the victim under a lease, then hangs (we SIGSTOP it)
        exp = {
            "title": "suspend and hang",
            "method": [
                {
                    "type": "action",
                    "name": "suspend",
                    "provider": {
                        "type": "driver",
                        "driver": "process",
                        "name": "suspend",
                        "arguments": {"pid": victim.pid},
                    },
                },
                ctk_helpers.slow_action(tmp_path / "hung-marker", seconds=60),
            ],
        }
        (tmp_path / "hang.yaml").write_text(yaml.safe_dump(exp))
        hung = subprocess.Popen(
            [sys.executable, "-m", "faultplane.cli.main", "run", str(tmp_path / "hang.yaml"), "-q"],
            env=env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait(lambda: "started" in ctk_helpers.lines(str(tmp_path / "hung-marker")))
        assert psutil.Process(victim.pid).status() == psutil.STATUS_STOPPED
        os.kill(hung.pid, signal.SIGSTOP)

        # 2. a fault registered by name (as an agent would over MCP)
        FaultRegistry().register(
            FaultSpec(name="payments.db", fault_type="latency", probability=1.0, duration_seconds=1.0)
        )
        # 3. an ordinary running experiment
        proc, marker = _start_in(tmp_path)

        result = cli("abort", "--all")
        assert result.returncode == 0, result.stderr
        assert "payments.db" in result.stdout

        proc.communicate(timeout=30)
        assert proc.returncode == 130
        assert ctk_helpers.lines(str(marker)) == ["started", "rolled back"]
        assert FaultRegistry().active() == []
        _wait(lambda: psutil.Process(victim.pid).status() != psutil.STATUS_STOPPED)
    finally:
        if hung is not None and hung.poll() is None:
            os.kill(hung.pid, signal.SIGCONT)
            hung.kill()
            hung.wait()
        victim.kill()
        victim.wait()


def _start_in(tmp_path: Path):  # type: ignore[no-untyped-def]
    sub = tmp_path / "run"
    sub.mkdir()
    return _start(sub)


def test_abort_needs_a_target() -> None:
    result = cli("abort")
    assert result.returncode == 2 and "--all" in result.stderr
    assert json.loads(cli("runs", "list", "--format", "json").stdout) == []
