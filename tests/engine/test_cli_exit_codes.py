"""Exit codes tell the truth: a run whose rollback failed is not a success, whatever the steady state did."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import ctk_helpers
from faultplane.engine.lifecycle import EXIT_ROLLBACK_FAILED
from policy_helpers import use_lab_policy


def _doc(rollback_provider: dict[str, Any], *, hypothesis_holds: bool = True) -> dict[str, Any]:
    ok = {"type": "python", "module": "os", "func": "getcwd"}
    return {
        "title": "rollback check",
        "description": "d",
        "steady-state-hypothesis": {
            "title": "h",
            "probes": [ctk_helpers.cpu_count_probe(hypothesis_holds)],
        },
        "method": [{"type": "action", "name": "act", "provider": ok}],
        "rollbacks": [{"type": "action", "name": "undo", "provider": rollback_provider}],
    }


def _run(tmp_path: Path, doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    exp = tmp_path / "exp.yaml"
    exp.write_text(yaml.safe_dump(doc))
    use_lab_policy("gates: {required: false}\n")
    out = subprocess.run(
        [sys.executable, "-m", "faultplane", "run", str(exp), "--format", "json", "-q"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    return out.returncode, json.loads(out.stdout)


@pytest.mark.parametrize(
    "provider",
    [
        {"type": "python", "module": "os", "func": "rmdir", "arguments": {"path": "/no/such/dir"}},  # raises
        {"type": "python", "module": "json", "func": "loads", "arguments": {"s": "{not json"}},  # raises
        {"type": "process", "path": "false"},  # exits 1
    ],
    ids=["oserror", "valueerror", "process-exit-1"],
)
def test_a_failed_rollback_exits_5_with_a_status_and_verdict_that_say_so(
    tmp_path: Path, provider: dict
) -> None:
    code, result = _run(tmp_path, _doc(provider))
    assert code == EXIT_ROLLBACK_FAILED == 5
    assert result["status"] == "failed" and not result["success"]
    assert result["verdict"].startswith("rollback failed: the system may still be under the fault")
    assert "rollback 'undo' failed" in result["error"]


def test_a_good_rollback_keeps_exit_0(tmp_path: Path) -> None:
    code, result = _run(tmp_path, _doc({"type": "python", "module": "os", "func": "getcwd"}))
    assert code == 0 and result["status"] == "completed"
