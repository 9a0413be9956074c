"""`faultplane run` and `validate` with `chaos run`'s flags: variables, var files, strategies, compat."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from clihelp import run_cli

COMPAT = Path(__file__).parent / "ctk" / "compat"
pytestmark = pytest.mark.usefixtures("lab_policy")

EXPERIMENT = """\
title: flags
description: chaos run's flags, given to faultplane
configuration: {level: 0, marks: /dev/null}
steady-state-hypothesis:
  title: the level arrives with its type
  probes:
    - {type: probe, name: typed, provider: {type: python, module: ctkfix, func: typed, arguments: {v: "${level}"}},
       tolerance: "${expected}"}
method:
  - {type: action, name: mark, provider: {type: python, module: ctkfix, func: record, arguments: {path: "${marks}"}}}
rollbacks:
  - {type: action, name: unmark, provider: {type: python, module: ctkfix, func: record, arguments: {path: "${marks}", line: rb}}}
"""


def _cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "FAULTPLANE_STORE": str(tmp / "s.duckdb"),
        "PYTHONPATH": os.pathsep.join([str(COMPAT), os.environ.get("PYTHONPATH", "")]),
    }
    return run_cli(*args, env=env, timeout=120)


def test_variables_types_and_unknown_names(tmp_path: Path) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_text(EXPERIMENT.replace("configuration: {", "configuration: {expected: float, "))
    marks = f"marks={tmp_path / 'marks'}"
    ok = _cli(tmp_path, "run", str(exp), "--format", "json", "--var", "level=1.5", "--var", marks)
    assert ok.returncode == 0, ok.stdout + ok.stderr  # --var level=1.5 is a number
    typed = _cli(tmp_path, "run", str(exp), "--format", "json", "--var", "level:float=2", "--var", marks)
    assert typed.returncode == 0, typed.stdout + typed.stderr  # chaos run's name:type=value
    as_text = _cli(tmp_path, "run", str(exp), "--format", "json", "--var", "level:str=1.5", "--var", marks)
    assert as_text.returncode == 1 and json.loads(as_text.stdout)["status"] == "failed"
    bad = _cli(tmp_path, "validate", str(exp), "--var", "levle=1")
    assert bad.returncode == 2 and "levle" in bad.stderr and "did you mean 'level'?" in bad.stderr
    bad_type = _cli(tmp_path, "validate", str(exp), "--var", "level:int=x")
    assert bad_type.returncode == 2 and "'x' is not a valid int" in bad_type.stderr
    assert "Traceback" not in bad.stderr + bad_type.stderr


def test_var_files_and_strategy_flags(tmp_path: Path) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_text(EXPERIMENT)
    (tmp_path / "a.json").write_text(json.dumps({"configuration": {"level": 1, "expected": "int"}}))
    (tmp_path / "b.yaml").write_text(f"configuration:\n  marks: {tmp_path / 'marks'}\n")
    run = _cli(
        tmp_path, "run", str(exp), "--format", "json", "--var-file", str(tmp_path / "a.json"),
        "--var-file", str(tmp_path / "b.yaml"), "--hypothesis-strategy", "continously",
        "--hypothesis-frequency", "0.05", "--fail-fast", "--rollback-strategy", "never",
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert (tmp_path / "marks").read_text().splitlines() == ["ran"]  # rollbacks: never
    always = _cli(
        tmp_path, "run", str(exp), "--format", "json", "--var-file", str(tmp_path / "a.json"),
        "--var-file", str(tmp_path / "b.yaml"), "--rollback-strategy", "always", "--ctk-compat",
    )  # fmt: skip
    assert always.returncode == 0, always.stdout + always.stderr
    assert (tmp_path / "marks").read_text().splitlines() == ["ran", "ran", "rb"]
    wrong = _cli(tmp_path, "run", str(exp), "--rollback-strategy", "sometimes")
    assert wrong.returncode == 2 and "sometimes" in wrong.stderr and "Traceback" not in wrong.stderr


def test_env_var_file_feeds_env_configuration(tmp_path: Path) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_text(
        "title: env file\ndescription: d\n"
        "configuration: {mode: {type: env, key: FP_CTK_FROM_DOTENV}}\n"
        "steady-state-hypothesis:\n  title: h\n  probes:\n"
        "    - {type: probe, name: m, provider: {type: python, module: ctkfix, func: value,"
        " arguments: {v: '${mode}'}}, tolerance: from-dotenv}\n"
        "method: []\n"
    )
    (tmp_path / "vars.env").write_text("# comment\nFP_CTK_FROM_DOTENV='from-dotenv'\n")
    done = _cli(tmp_path, "run", str(exp), "--format", "json", "--var-file", str(tmp_path / "vars.env"))
    assert done.returncode == 0, done.stdout + done.stderr
    unset = _cli(tmp_path, "validate", str(exp))
    assert unset.returncode == 2 and "FP_CTK_FROM_DOTENV" in unset.stderr


def test_var_file_secrets_replace_their_scope_and_stay_masked(tmp_path: Path) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_text(
        "title: secrets from a var file\ndescription: d\n"
        "secrets: {vault: {token: in-experiment, user: admin}, other: {key: kept}}\n"
        "steady-state-hypothesis:\n  title: h\n  probes:\n"
        "    - {type: probe, name: t, provider: {type: python, module: ctkfix, func: secret_value,"
        " arguments: {key: token}, secrets: [vault]}, tolerance: tok-from-file-42}\n"
        "    - {type: probe, name: k, provider: {type: python, module: ctkfix, func: secret_keys,"
        " secrets: [vault]}, tolerance: token}\n"
        "    - {type: probe, name: o, provider: {type: python, module: ctkfix, func: secret_value,"
        " arguments: {key: key}, secrets: [other]}, tolerance: kept}\n"
        "method: []\n"
    )
    (tmp_path / "early.yaml").write_text("secrets: {vault: {token: overridden}}\n")
    (tmp_path / "late.yaml").write_text("secrets: {vault: {token: tok-from-file-42}, unknown: {x: 1}}\n")
    journal = tmp_path / "j.json"
    done = _cli(
        tmp_path, "run", str(exp), "--format", "json", "--journal", str(journal),
        "--var-file", str(tmp_path / "early.yaml"), "--var-file", str(tmp_path / "late.yaml"),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tok-from-file-42" not in journal.read_text() + done.stdout  # a var file's secret is masked too
    bad = tmp_path / "bad.yaml"
    bad.write_text("secrets: [1, 2]\n")
    refused = _cli(tmp_path, "validate", str(exp), "--var-file", str(bad))
    assert refused.returncode == 2 and "secrets" in refused.stderr and "Traceback" not in refused.stderr


def test_dry_modes_from_the_command_line(tmp_path: Path) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_text(EXPERIMENT.replace("configuration: {", "configuration: {expected: int, "))
    marks = f"marks={tmp_path / 'marks'}"
    journal = tmp_path / "j.json"
    done = _cli(
        tmp_path, "run", str(exp), "--format", "json", "--var", marks, "--journal", str(journal), "--dry", "actions",
        "--rollback-strategy", "always",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tmp_path / "marks").exists()  # neither the action nor the rollback ran
    written = json.loads(journal.read_text())
    assert [(r["status"], r["output"]) for r in written["run"] + written["rollbacks"]] == [
        ("succeeded", None),
        ("succeeded", None),
    ]
    assert written["steady_states"]["before"]["probes"][0]["output"] == "int"  # probes still ran
    wrong = _cli(tmp_path, "run", str(exp), "--dry", "everything")
    assert wrong.returncode == 2 and "everything" in wrong.stderr and "Traceback" not in wrong.stderr
