"""Chaos Toolkit's global controls: the settings file's `controls:` block and `--control-file` files, on
`faultplane run` and `validate` (the corpus in test_ctk_compat.py compares their hooks with `chaos run`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clihelp import run_cli
from faultplane.core.formats import ExperimentError
from faultplane.core.store import Store
from faultplane.engine.controls import load_global_controls
from faultplane.services.experiments import run_experiment, validate_experiment
from faultplane.services.runs import load_journal

COMPAT = Path(__file__).parent / "ctk" / "compat"
pytestmark = pytest.mark.usefixtures("lab_policy")
if str(COMPAT) not in sys.path:
    sys.path.insert(0, str(COMPAT))

EXPERIMENT = {
    "title": "global controls",
    "description": "no control of its own",
    "method": [
        {
            "type": "action",
            "name": "noop",
            "provider": {"type": "python", "module": "ctkfix", "func": "value", "arguments": {"v": 1}},
        }
    ],
}


def _control(path: Path, *, fail: bool = False, module: str = "ctkfix_global_control") -> dict:
    return {"provider": {"type": "python", "module": module, "arguments": {"path": str(path), "fail": fail}}}


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HOME": str(home),  # where ~/.chaostoolkit/settings.yaml is looked for
        "FAULTPLANE_STORE": str(home / "s.duckdb"),
        "PYTHONPATH": os.pathsep.join([str(COMPAT), os.environ.get("PYTHONPATH", "")]),
    }
    return run_cli(*args, env=env, timeout=120)


def test_default_settings_file_and_control_files_on_the_cli(tmp_path: Path) -> None:
    exp = tmp_path / "e.json"
    exp.write_text(json.dumps(EXPERIMENT))
    (tmp_path / ".chaostoolkit").mkdir()
    settings = {"controls": {"from-settings": _control(tmp_path / "settings.log")}, "runtime": {}}
    (tmp_path / ".chaostoolkit" / "settings.yaml").write_text(json.dumps(settings))
    (tmp_path / "ctl.json").write_text(
        json.dumps(
            {
                "from-file": _control(tmp_path / "file.log"),
                "absent": _control(tmp_path / "x.log", module="no_such_control_module_xyz"),
            }
        )
    )
    checked = _cli(tmp_path, "validate", str(exp), "--control-file", str(tmp_path / "ctl.json"))
    assert checked.returncode == 0, checked.stderr
    assert "no_such_control_module_xyz" in checked.stderr and "cannot be imported" in checked.stderr
    journal = tmp_path / "j.json"
    done = _cli(
        tmp_path, "run", str(exp), "--format", "json", "--journal", str(journal),
        "--control-file", str(tmp_path / "ctl.json"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # configure_control gets the settings (as chaoslib's initialize_global_controls passes them)
    expected = ["configure settings=['controls', 'runtime']", "before_experiment"]
    assert (tmp_path / "settings.log").read_text().splitlines() == expected
    assert (tmp_path / "file.log").read_text().splitlines() == expected
    warnings = json.loads(journal.read_text())["warnings"]
    assert any("no_such_control_module_xyz" in w for w in warnings)


def test_explicit_settings_replace_the_default_and_bad_files_are_one_line_errors(tmp_path: Path) -> None:
    exp = tmp_path / "e.json"
    exp.write_text(json.dumps(EXPERIMENT))
    (tmp_path / ".chaostoolkit").mkdir()
    default = {"controls": {"default": _control(tmp_path / "default.log")}}
    (tmp_path / ".chaostoolkit" / "settings.yaml").write_text(json.dumps(default))
    mine = tmp_path / "mine.yaml"
    mine.write_text(json.dumps({"controls": {"mine": _control(tmp_path / "mine.log")}}))
    done = _cli(tmp_path, "run", str(exp), "--format", "json", "--settings", str(mine))
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "default.log").exists()
    assert (tmp_path / "mine.log").read_text().splitlines()[-1] == "before_experiment"
    (tmp_path / "broken.yaml").write_text("controls: [unclosed\n")
    for flag in ("--settings", "--control-file"):
        bad = _cli(tmp_path, "validate", str(exp), flag, str(tmp_path / "broken.yaml"))
        assert bad.returncode == 2 and "broken.yaml" in bad.stderr and "Traceback" not in bad.stderr
    missing = _cli(tmp_path, "run", str(exp), "--control-file", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "nope.yaml" in missing.stderr and "file not found" in missing.stderr


def test_unreadable_default_settings_is_a_warning(tmp_path: Path) -> None:
    (tmp_path / ".chaostoolkit").mkdir()
    (tmp_path / ".chaostoolkit" / "settings.yaml").write_text("controls: [unclosed\n")
    import faultplane.engine.controls as controls

    loaded = controls.load_global_controls(None, [], default_settings=False)  # nothing asked, nothing read
    assert loaded.controls == [] and loaded.warnings == []
    original = controls.CTK_SETTINGS
    controls.CTK_SETTINGS = tmp_path / ".chaostoolkit" / "settings.yaml"
    try:
        loaded = controls.load_global_controls(None, [], default_settings=True)
    finally:
        controls.CTK_SETTINGS = original
    assert loaded.controls == [] and "settings.yaml" in loaded.warnings[0].field
    with pytest.raises(ExperimentError) as caught:
        load_global_controls(tmp_path / "nope.yaml", [])
    assert caught.value.issues[0].message == "file not found"


@pytest.mark.anyio
async def test_a_global_control_failing_to_configure_is_dropped(tmp_path: Path, store: Store) -> None:
    ctl = tmp_path / "ctl.yaml"
    ctl.write_text(json.dumps({"flaky": _control(tmp_path / "flaky.log", fail=True)}))
    loaded = load_global_controls(None, [ctl])
    assert validate_experiment(EXPERIMENT, global_controls=loaded).valid
    result = await run_experiment(EXPERIMENT, store=store, global_controls=loaded)
    assert result.status == "completed", result.error
    # configured (and failed), then never applied: no before_experiment line
    assert (tmp_path / "flaky.log").read_text().splitlines() == ["configure settings=[]"]
    warnings = load_journal(result.run_id, store)["warnings"]
    assert any("configure_control of 'flaky'" in w and "cannot configure" in w for w in warnings)
