"""Blocking python probes run on the loop's thread when the engine owns the process's signals (the CLI) and
nothing else shares the loop; Ctrl-C, SIGTERM and activity timeouts must stop them all the same."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

import ctk_helpers
from clihelp import cli, rollback_recorder, start_run
from faultplane.core.store import Store

pytestmark = pytest.mark.usefixtures("lab_policy")


def _probe(name: str, func: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "probe",
        "name": name,
        "provider": {"type": "python", "module": "ctk_helpers", "func": func, **extra},
    }


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _journal(run_id: str) -> dict[str, Any]:
    shown = cli("journal", "show", run_id, "--format", "json")
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


def _last_run() -> dict[str, Any]:
    return Store().query("SELECT run_id, status, error FROM runs ORDER BY started_at DESC")[0]


def test_cli_runs_blocking_probes_inline_and_background_ones_in_threads(tmp_path: Path) -> None:
    inline = {"title": "inline", "method": [_probe("where", "thread_name"), _probe("loops", "nested_loops")]}
    assert cli("run", str(_write(tmp_path, inline)), "-q").returncode == 0
    journal = _journal(_last_run()["run_id"])
    assert journal["run"][0]["output"] == "MainThread"
    # inline, a probe still sees no running loop: asyncio.run() and anyio.run() work as in a worker thread
    assert journal["run"][1]["output"] == "ok+ok"

    # a background activity shares the loop with the next ones: every blocking probe goes to a worker thread
    slow = _probe("slow", "slow", arguments={"seconds": 0.3})
    shared = {"title": "shared", "method": [{**slow, "background": True}, _probe("where", "thread_name")]}
    assert cli("run", str(_write(tmp_path, shared)), "-q").returncode == 0
    journal = _journal(_last_run()["run_id"])
    where = next(r for r in journal["run"] if r["activity"]["name"] == "where")
    assert where["output"] == "faultplane-provider"


def test_activity_timeout_stops_an_inline_probe(tmp_path: Path) -> None:
    doc = {
        "title": "timeout inline",
        "method": [
            {
                "type": "action",
                "name": "hang",
                "timeout": 0.5,
                "provider": {
                    "type": "python",
                    "module": "ctk_helpers",
                    "func": "stubborn_sleep",
                    "arguments": {"seconds": 30},
                },
            }
        ],
    }
    t0 = time.monotonic()
    done = cli("run", str(_write(tmp_path, doc)), "-q")
    assert time.monotonic() - t0 < 20  # not the 30 s the probe wanted
    assert done.returncode == 1, done.stderr
    run = _journal(_last_run()["run_id"])["run"][0]
    assert run["status"] == "timeout"
    assert run["exception"] == "timed out after 0.5s"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_an_inline_probe_that_swallows_exceptions(tmp_path: Path, signum: int) -> None:
    marker = tmp_path / "marker.txt"
    doc = {
        "title": "stubborn",
        "method": [_probe("hang", "stubborn_sleep", arguments={"seconds": 30, "marker": str(marker)})],
        "rollbacks": [rollback_recorder(marker)],
        "runtime": {"rollbacks": {"strategy": "always"}},
    }
    proc = start_run(_write(tmp_path, doc), marker)
    t0 = time.monotonic()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    assert time.monotonic() - t0 < 10
    assert proc.returncode == 130, (out, err)
    # it ran on the loop's thread (the case a signal has to reach), then the rollback ran
    assert ctk_helpers.lines(str(marker)) == ["started", "MainThread", "rolled back"]
    row = _last_run()
    assert row["status"] == "interrupted"
    assert signal.Signals(signum).name in row["error"]
