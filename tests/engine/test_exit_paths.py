"""Every exit path through the CLI: Ctrl-C, SIGTERM and SIGKILL, with rollbacks verified and exit codes."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import toon_format
import yaml

import ctk_helpers
from clihelp import cli, rollback_recorder, start_run
from faultplane.core.store import Store

pytestmark = pytest.mark.usefixtures("lab_policy")


def _experiment(tmp_path: Path, **method_extra: Any) -> Path:
    marker = tmp_path / "marker.txt"
    doc = {
        "title": "long running",
        "method": [
            ctk_helpers.mark_action(tmp_path / "fault"),
            ctk_helpers.slow_action(marker),
        ],
        "rollbacks": [rollback_recorder(marker)],
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _start(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    return start_run(_experiment(tmp_path), tmp_path / "marker.txt"), tmp_path / "marker.txt"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_interrupts_rolls_back_and_exits_130(tmp_path: Path, signum: int) -> None:
    proc, marker = _start(tmp_path)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, (out, err)
    assert ctk_helpers.lines(str(marker)) == ["started", "rolled back"]
    assert not (tmp_path / "fault").exists()  # the driver's revert ran too
    row = Store().query("SELECT status, error FROM runs")[0]
    assert row["status"] == "interrupted"
    assert signal.Signals(signum).name in row["error"]


def test_a_controller_shot_dead_leaves_a_journal_marked_interrupted_on_next_start(tmp_path: Path) -> None:
    proc, _ = _start(tmp_path)
    proc.kill()
    proc.wait(timeout=10)
    assert Store().query("SELECT status FROM runs") == []  # the controller died before writing anything
    listing = cli("runs", "list", "--format", "json")
    assert listing.returncode == 0, listing.stderr
    rows = json.loads(listing.stdout)
    assert rows[0]["status"] == "interrupted"
    shown = cli("journal", "show", rows[0]["run_id"], "--format", "json")
    journal = json.loads(shown.stdout)
    assert journal["status"] == "interrupted"
    assert [r["activity"]["name"] for r in journal["run"]] == ["apply"]  # what ran before the kill is kept
    assert "died mid-run" in journal["error"]


def test_exit_codes_completed_failed_invalid(tmp_path: Path) -> None:
    ok = {
        "title": "ok",
        "method": [
            {"type": "probe", "name": "p", "provider": {"type": "python", "module": "os", "func": "getcwd"}}
        ],
    }
    (tmp_path / "ok.json").write_text(json.dumps(ok))
    assert cli("run", str(tmp_path / "ok.json"), "-q").returncode == 0
    bad = {
        **ok,
        "method": [
            {
                "type": "action",
                "name": "a",
                "provider": {"type": "python", "module": "ctk_helpers", "func": "fail"},
            }
        ],
    }
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    assert cli("run", str(tmp_path / "bad.json"), "-q").returncode == 1
    misspelt = {
        "type": "action",
        "name": "a",
        "provider": {"type": "python", "module": "ctk_helpers", "fnc": "value"},
    }
    (tmp_path / "invalid.json").write_text(json.dumps({**ok, "method": [misspelt]}))
    invalid = cli("run", str(tmp_path / "invalid.json"))
    assert invalid.returncode == 2
    assert "fnc" in invalid.stderr and "Traceback" not in invalid.stderr
    validated = cli("validate", str(tmp_path / "invalid.json"))
    assert validated.returncode == 2 and "rename 'fnc' to 'func'" in validated.stderr
    # a key Chaos Toolkit would ignore is a warning with a suggestion, never a refusal
    (tmp_path / "typo.json").write_text(json.dumps({**ok, "titel": "typo"}))
    warned = cli("validate", str(tmp_path / "typo.json"))
    assert warned.returncode == 0 and "did you mean 'title'?" in warned.stdout + warned.stderr
    assert cli("validate", str(tmp_path / "ok.json")).returncode == 0


def test_run_output_json_and_var(tmp_path: Path) -> None:
    doc = {
        "title": "vars",
        "configuration": {"n": 1},
        "steady-state-hypothesis": {
            "probes": [
                {
                    "type": "probe",
                    "name": "n",
                    "provider": {
                        "type": "python",
                        "module": "ctk_helpers",
                        "func": "value",
                        "arguments": {"v": "${n}"},
                    },
                    "tolerance": 5,
                }
            ]
        },
        "method": [],
    }
    (tmp_path / "v.yaml").write_text(yaml.safe_dump(doc))
    failed = cli("run", str(tmp_path / "v.yaml"), "--format", "json")
    assert failed.returncode == 1 and json.loads(failed.stdout)["steady_state_before"] is False
    passed = cli("run", str(tmp_path / "v.yaml"), "--format", "json", "--var", "n=5")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    result = json.loads(passed.stdout)
    assert result["status"] == "completed" and result["steady_state_before"] is True
    toon = cli("journal", "show", result["run_id"], "--format", "toon")
    # decoded, not searched as text: TOON quotes an id that reads as a number (`"47346779572545e1"`)
    assert toon.returncode == 0 and toon_format.decode(toon.stdout)["run_id"] == result["run_id"]


def test_a_live_run_is_listed_and_aborted_from_another_process(tmp_path: Path) -> None:
    proc, marker = _start(tmp_path)
    try:
        rows = json.loads(cli("runs", "list", "--format", "json").stdout)
        assert rows[0]["status"] == "running"
        stopped = cli("abort", rows[0]["run_id"])
        assert stopped.returncode == 0 and rows[0]["run_id"] in stopped.stdout
        proc.communicate(timeout=30)
        assert proc.returncode == 130
        assert ctk_helpers.lines(str(marker)) == ["started", "rolled back"]
    finally:
        if proc.poll() is None:
            proc.kill()
