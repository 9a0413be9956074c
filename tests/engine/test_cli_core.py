"""The core CLI commands through a real `faultplane` process: dry run, variable files, schema, formats."""

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
from clihelp import run_cli

pytestmark = pytest.mark.usefixtures("lab_policy")
TESTS = Path(__file__).resolve().parent.parent


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200")
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    return run_cli(*args, env=env)


def _experiment(tmp_path: Path) -> Path:
    """A run that needs `expected` and records `label` from its configuration."""
    marker = tmp_path / "marker.txt"
    doc: dict[str, Any] = {
        "title": "configured",
        "configuration": {"expected": 1, "label": "default"},
        "steady-state-hypothesis": {
            "title": "value as expected",
            "probes": [
                {
                    "type": "probe",
                    "name": "value",
                    "provider": {
                        "type": "python",
                        "module": "ctk_helpers",
                        "func": "value",
                        "arguments": {"v": 7},
                    },
                    "tolerance": "${expected}",
                }
            ],
        },
        "method": [
            {
                "type": "action",
                "name": "write",
                "provider": {
                    "type": "python",
                    "module": "ctk_helpers",
                    "func": "record",
                    "arguments": {"path": str(marker), "line": "${label}"},
                },
            }
        ],
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def test_dry_run_walks_the_plan_and_touches_nothing(tmp_path: Path) -> None:
    exp = _experiment(tmp_path)
    r = cli("run", str(exp), "--dry-run", "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(r.stdout)
    assert result["status"] == "completed" and result["steady_state_before"] is None
    assert ctk_helpers.lines(str(tmp_path / "marker.txt")) == []
    shown = json.loads(cli("journal", "show", result["run_id"], "-f", "json").stdout)
    assert shown["dry_run"] is True and [a["status"] for a in shown["run"]] == ["skipped"]


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("vars.yaml", "expected: 7\nlabel: from-yaml\n"),
        ("vars.json", '{"expected": 7, "label": "from-json"}'),
        ("vars.env", "# comment\nexpected=7\nlabel='from-env'\n"),
    ],
)
def test_var_file_kinds(tmp_path: Path, name: str, text: str) -> None:
    exp = _experiment(tmp_path)
    (tmp_path / name).write_text(text, encoding="utf-8")
    r = cli("run", str(exp), "--var-file", str(tmp_path / name), "--format", "json")
    label = "from-" + name.split(".")[1]
    if name.endswith(".env"):
        # .env values are strings: "7" is not the probe's integer 7, and the run says so
        assert r.returncode == 1 and json.loads(r.stdout)["steady_state_before"] is False
        assert ctk_helpers.lines(str(tmp_path / "marker.txt")) == []
        r = cli(
            "run", str(exp), "--var-file", str(tmp_path / name), "--var", "expected=7", "--format", "json"
        )
    assert r.returncode == 0, r.stdout + r.stderr
    assert ctk_helpers.lines(str(tmp_path / "marker.txt")) == [label]
    journal = json.loads(cli("journal", "show", json.loads(r.stdout)["run_id"], "-f", "json").stdout)
    # the journal keeps the values the run used, not the defaults written in the file
    assert journal["experiment"]["configuration"] == {"expected": 7, "label": label}


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("bad.json", '{"expected": 7,', "invalid JSON"),
        ("bad.yaml", "expected: [7\nlabel: x\n", "invalid YAML"),
        ("list.yaml", "- 1\n- 2\n", "expected a mapping"),
    ],
)
def test_malformed_var_file_is_exit_2_naming_the_file(
    tmp_path: Path, name: str, text: str, problem: str
) -> None:
    exp = _experiment(tmp_path)
    bad = tmp_path / name
    bad.write_text(text, encoding="utf-8")
    for command in ("run", "validate"):
        r = cli(command, str(exp), "--var-file", str(bad))
        assert r.returncode == 2, (command, r.stdout, r.stderr)
        err = " ".join(r.stderr.split())
        assert "Traceback" not in r.stderr and problem in err and name in err and "fix:" in err


@pytest.mark.parametrize(
    ("args", "option", "allowed"),
    [
        (("journal", "show", "abc", "-f", "xml"), "--format", ("table", "json", "toon")),
        (("runs", "list", "-f", "xml"), "--format", ("table", "json", "toon")),
        (("run", "x.yaml", "-o", "bogus"), "--format", ("text", "json", "toon")),
        (("validate", "x.yaml", "--output", "bogus"), "--format", ("text", "json")),
    ],
)
def test_unknown_formats_are_rejected(args: tuple[str, ...], option: str, allowed: tuple[str, ...]) -> None:
    r = cli(*args)
    assert r.returncode == 2
    assert option in r.stderr and all(f"'{a}'" in r.stderr for a in allowed)


def test_schema_prints_the_json_schemas() -> None:
    exp = cli("schema")
    assert exp.returncode == 0
    schema = json.loads(exp.stdout)
    assert {"title", "method", "steady-state-hypothesis"} <= set(schema["properties"])
    journal = json.loads(cli("schema", "journal").stdout)
    assert {"run_id", "status", "rollbacks"} <= set(journal["properties"])
    wrong = cli("schema", "bogus")
    assert wrong.returncode == 2 and "experiment" in wrong.stderr and "journal" in wrong.stderr


def test_journal_show_table(tmp_path: Path) -> None:
    exp = _experiment(tmp_path)
    r = cli("run", str(exp), "--var", "expected=7", "--format", "json")
    run_id = json.loads(r.stdout)["run_id"]
    table = cli("journal", "show", run_id)
    assert table.returncode == 0, table.stderr
    out = table.stdout
    assert "configured" in out and run_id in out and "completed" in out
    rows = [line for line in out.splitlines() if "│" in line]
    assert any("hypothesis_before" in line and "value" in line and "succeeded" in line for line in rows)
    assert any("method" in line and "write" in line and "action" in line for line in rows)
    missing = cli("journal", "show", "no-such-run")
    assert missing.returncode == 2 and "no-such-run" in missing.stderr


def test_a_core_command_mounts_only_the_core_cli() -> None:
    probe = (
        "import sys; sys.argv = ['faultplane', 'run', '--help']\n"
        "import faultplane.cli.main\n"
        "heavy = {'duckdb', 'pydantic', 'anyio', 'httpx', 'pyarrow', 'faultplane.cli.plane', 'faultplane.cli.mcp'}\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"  # start-up of `faultplane run` pays only for what the run needs
    everything = cli("--help")
    assert everything.returncode == 0
    assert all(name in everything.stdout for name in ("run", "journal", "plane", "mcp", "guard"))
