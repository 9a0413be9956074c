"""Running the `faultplane` CLI as a subprocess, with the suite's test drivers and helper probes importable."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import ctk_helpers

TESTS = Path(__file__).resolve().parent


def env() -> dict[str, str]:
    """The environment for a CLI child: this process's (the isolated XDG dirs and store), plus the tests dir
    on PYTHONPATH so `ctk_helpers` imports, registered as a driver module."""
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join([str(TESTS), out.get("PYTHONPATH", "")])
    out["FAULTPLANE_DRIVERS"] = "ctk_helpers"
    return out


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, env=env(), timeout=timeout)


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`python -m faultplane.cli.main ARGS` in `env` (this process's own when None), its output captured as
    text."""
    return subprocess.run(
        [sys.executable, "-m", "faultplane.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def small_experiment(title: str = "small") -> dict[str, Any]:
    """The smallest whole run a user tries first: one steady-state probe and one action, both the python
    function os.path.isdir("/"), which holds on any machine."""
    probe = {"type": "python", "module": "os.path", "func": "isdir", "arguments": {"s": "/"}}
    return {
        "title": title,
        "description": "one probe, one action",
        "steady-state-hypothesis": {
            "title": "root is there",
            "probes": [{"type": "probe", "name": "root", "tolerance": True, "provider": probe}],
        },
        "method": [{"type": "action", "name": "look", "provider": probe}],
    }


def rollback_recorder(marker: Path) -> dict[str, Any]:
    """A rollback action that appends "rolled back" to the marker file, so a test sees that it ran."""
    return {
        "type": "action",
        "name": "undo",
        "provider": {
            "type": "python",
            "module": "ctk_helpers",
            "func": "record",
            "arguments": {"path": str(marker), "line": "rolled back"},
        },
    }


def start_run(experiment: Path, marker: Path) -> subprocess.Popen[str]:
    """`faultplane run` in the background, returned once an activity wrote "started" to the marker."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "faultplane.cli.main", "run", str(experiment), "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
    )
    deadline = time.monotonic() + 30
    while "started" not in ctk_helpers.lines(str(marker)):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the long activity never started"
        time.sleep(0.05)
    return proc
