"""Journals in Chaos Toolkit's format, and what a journal keeps of a failure (as Chaos Toolkit keeps it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clihelp import run_cli
from faultplane.core.store import Store
from faultplane.services.ctk import to_ctk_journal
from faultplane.services.experiments import run_experiment
from faultplane.services.runs import load_journal

COMPAT = Path(__file__).parent / "ctk" / "compat"
CHAOS = shutil.which("chaos", path=str(Path(sys.executable).parent)) or shutil.which("chaos")

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("lab_policy")]
if str(COMPAT) not in sys.path:
    sys.path.insert(0, str(COMPAT))


def _shape(value: Any) -> Any:
    """Keys and value types, recursively: what a reader of the journal relies on."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items() if k not in ("output", "extensions", "activity")}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return type(value).__name__ if value is not None else None


def _chaos_journal(name: str, workdir: Path) -> dict[str, Any]:
    journal = workdir / "ctk.json"
    cmd = [str(CHAOS), "--no-version-check", "--no-log-file", "run", "--journal-path", str(journal)]
    cmd += ["--var", f"workdir={workdir}", str(COMPAT / name)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(COMPAT), os.environ.get("PYTHONPATH", "")])}
    subprocess.run(cmd, env=env, capture_output=True, timeout=60, cwd=workdir)
    return json.loads(journal.read_text())


@pytest.mark.skipif(CHAOS is None, reason="chaostoolkit is not installed (the `test` extra installs it)")
@pytest.mark.parametrize(
    "name", ["65-deviated.yaml", "37-python-action-raises.yaml", "84-controls-experiment.yaml"]
)
async def test_export_has_the_shape_chaos_run_writes(name: str, tmp_path: Path, store: Store) -> None:
    (tmp_path / "ctk").mkdir()
    (tmp_path / "fp").mkdir()
    ctk = _chaos_journal(name, tmp_path / "ctk")
    result = await run_experiment(
        COMPAT / name, variables={"workdir": str(tmp_path / "fp")}, store=store, ctk_compat=True
    )
    exported = to_ctk_journal(load_journal(result.run_id, store))
    json.dumps(exported)  # plain JSON, as chaos writes it
    for key in ("status", "deviated"):
        assert exported[key] == ctk[key]
    for section in ("run", "rollbacks"):
        assert [(r["activity"]["name"], r["status"]) for r in exported[section]] == [
            (r["activity"]["name"], r["status"]) for r in ctk[section]
        ]
    # every key chaos writes is there with the same type (Faultplane adds `extensions`)
    ctk_shape, our_shape = _shape(ctk), _shape(exported)
    for key in ("platform", "node", "start", "end", "duration", "status", "deviated", "run", "rollbacks"):
        assert our_shape[key] == ctk_shape[key], key
    for when in ("before", "after"):
        if ctk["steady_states"][when] is not None:
            assert our_shape["steady_states"][when] == ctk_shape["steady_states"][when], when
    # the experiment inside is one Chaos Toolkit itself accepts
    from chaoslib.experiment import ensure_experiment_is_valid

    ensure_experiment_is_valid(exported["experiment"])


async def test_failed_process_and_exception_are_kept(tmp_path: Path, store: Store) -> None:
    doc = {
        "title": "failures keep their evidence",
        "description": "a process exiting non-zero and a python function raising",
        "method": [
            {
                "type": "action",
                "name": "exit-4",
                "provider": {
                    "type": "process",
                    "path": "sh",
                    "arguments": "-c 'echo out; echo err >&2; exit 4'",
                },
            }
        ],
        "rollbacks": [
            {
                "type": "action",
                "name": "raise",
                "provider": {
                    "type": "python",
                    "module": "ctkfix",
                    "func": "fail",
                    "arguments": {"message": "kaput ü"},
                },
            }
        ],
    }
    result = await run_experiment(doc, store=store)
    journal = load_journal(result.run_id, store)
    run = journal["run"][0]
    assert run["status"] == "failed"
    assert run["output"] == {"status": 4, "stdout": "out\n", "stderr": "err\n"}
    assert "status 4" in run["exception"]
    assert journal["rollbacks"][0]["exception"] == "RuntimeError: kaput ü"
    exported = to_ctk_journal(journal)
    assert exported["run"][0]["output"]["stderr"] == "err\n"
    assert exported["rollbacks"][0]["exception"] == ["RuntimeError: kaput ü"]
    assert exported["status"] == "failed" and exported["extensions"][0]["run_id"] == result.run_id


def test_cli_export_and_journal_format(tmp_path: Path) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_text(
        "title: t\ndescription: d\nmethod:\n  - {type: action, name: a, provider: {type: process, path: 'true'}}\n"
    )
    env = {**os.environ, "FAULTPLANE_STORE": str(tmp_path / "s.duckdb")}
    journal = tmp_path / "j.json"
    run = ["run", str(exp), "--format", "json", "--journal", str(journal), "--journal-format", "ctk"]
    done = run_cli(*run, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    written = json.loads(journal.read_text())
    assert written["status"] == "completed" and written["run"][0]["activity"]["name"] == "a"
    exported = run_cli("journal", "export", run_id, "--format", "ctk", env=env, timeout=120)
    assert exported.returncode == 0, exported.stderr
    assert json.loads(exported.stdout) == written
    missing = run_cli("journal", "export", "nosuchrun", env=env, timeout=120)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr


async def test_controls_get_configuration_and_unloadable_ones_are_warnings(
    tmp_path: Path, store: Store
) -> None:
    record = tmp_path / "calls"
    doc = {
        "title": "controls",
        "description": "a control that reads configuration and secrets, and one that cannot be imported",
        "configuration": {"region": "eu-west-1", "out": str(record)},
        "secrets": {"vault": {"token": "t0ken-ctl"}},
        "controls": [
            {
                "name": "seen",
                "provider": {
                    "type": "python",
                    "module": "ctkfix_seen_control",
                    "arguments": {"path": "${out}"},
                },
            },
            {"name": "ghost", "provider": {"type": "python", "module": "no_such_control_module"}},
        ],
        "method": [
            {
                "type": "action",
                "name": "a",
                "provider": {"type": "python", "module": "ctkfix", "func": "value", "arguments": {"v": 1}},
            }
        ],
    }
    from faultplane.services.experiments import validate_experiment

    report = validate_experiment(doc, with_policy=False)
    assert report.valid
    assert [w.field for w in report.warnings] == ["controls[1]"]  # the unloadable one, where it is written
    assert "no_such_control_module" in report.warnings[0].message
    result = await run_experiment(doc, store=store)
    assert result.status == "completed"
    journal = load_journal(result.run_id, store)
    assert any("no_such_control_module" in w for w in journal["warnings"])
    calls = record.read_text().splitlines()
    assert calls[0] == "before_experiment region=eu-west-1 token=yes"
    assert "after_activity a succeeded" in calls and calls[-1] == "after_experiment completed"
    assert "t0ken-ctl" not in json.dumps(journal)  # secrets reach the control, never the journal
    import ctkfix_seen_control

    # configured once before the run (with `${}` resolved: Chaos Toolkit passes it unresolved there), cleaned after
    assert {"path": str(record), "region": "eu-west-1", "cleaned": True} == ctkfix_seen_control.CONFIGURED


@pytest.mark.parametrize("deviates", [True, False])
async def test_recovery_recheck_repeats_no_probe_unless_something_was_restored(
    deviates: bool, tmp_path: Path, store: Store
) -> None:
    """The recovery re-check neither waits nor repeats side-effecting probes when nothing was rolled back."""
    flag, calls = tmp_path / "flag", tmp_path / "calls"
    probes = [
        {"type": "probe", "name": "counted", "tolerance": "ran",
         "provider": {"type": "python", "module": "ctkfix", "func": "record", "arguments": {"path": str(calls)}}},
        {"type": "probe", "name": "flag-off", "tolerance": False,
         "provider": {"type": "python", "module": "ctkfix", "func": "exists", "arguments": {"path": str(flag)}}},
    ]  # fmt: skip
    target = str(flag) if deviates else str(tmp_path / "elsewhere")
    doc = {
        "title": "no fixed waits",
        "description": "a run that deviates, or holds, with nothing to roll back",
        "steady-state-hypothesis": {"title": "flag off", "probes": probes},
        "method": [{"type": "action", "name": "touch", "provider": {"type": "python", "module": "ctkfix", "func": "record", "arguments": {"path": target}}}],
    }  # fmt: skip
    result = await run_experiment(doc, store=store)
    journal = load_journal(result.run_id, store)
    assert result.status == ("deviated" if deviates else "completed")
    assert calls.read_text().splitlines() == ["ran", "ran"]  # before and after the method, never again
    recovery = journal["steady_states"].get("recovery")
    if deviates:
        assert recovery is None  # nothing was restored: nothing to wait for
    else:
        assert recovery["steady_state_met"] is True and recovery["checks"] == []
