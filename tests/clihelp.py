"""Running the `faultplane` CLI as a subprocess, with the suite's test drivers and helper probes importable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def env() -> dict[str, str]:
    """The environment for a CLI child: this process's (the isolated XDG dirs and store), plus the tests dir
    on PYTHONPATH so `ctk_helpers` imports, registered as a driver module."""
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join([str(TESTS), out.get("PYTHONPATH", "")])
    out["FAULTPLANE_DRIVERS"] = "ctk_helpers"
    return out


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "faultplane.cli.main", *args],
        capture_output=True,
        text=True,
        env=env(),
        timeout=timeout,
    )
