"""`faultplane compliance periodic`: this period's coverage beside the previous one, for cron and CI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from faultplane.services.compliance import ComplianceError
from faultplane.services.coverage_diff import parse_period
from policy_helpers import use_lab_policy


def _tagged_run(tmp_path: Path, tags: list[str]) -> str:
    exp = tmp_path / f"exp-{'-'.join(tags)}.yaml"
    exp.write_text(
        yaml.safe_dump(
            {
                "title": f"evidence for {' '.join(tags)}",
                "description": "d",
                "tags": tags,
                "method": [
                    {
                        "type": "probe",
                        "name": "p",
                        "provider": {"type": "python", "module": "os", "func": "getcwd"},
                    }
                ],
            }
        )
    )
    out = _fp("run", str(exp), "-q", "--format", "json", tmp_path=tmp_path)
    assert out.returncode == 0, out.stderr
    return str(json.loads(out.stdout)["run_id"])


def _fp(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    use_lab_policy("gates: {required: false}\n")
    env = {**os.environ, "FAULTPLANE_STORE_WRITER": "inline"}
    return subprocess.run(
        [sys.executable, "-m", "faultplane", *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_a_requirement_falling_out_of_coverage_exits_1_and_is_named(tmp_path: Path) -> None:
    _tagged_run(tmp_path, ["DORA-11"])
    reports = tmp_path / "reports"
    today = datetime.now(UTC)
    first = _fp("compliance", "periodic", "-o", str(reports), "-f", "DORA", "--json", tmp_path=tmp_path)
    assert first.returncode == 0, first.stderr
    change = json.loads(first.stdout)
    assert change["baseline"] == "store one period ago"  # no earlier report in the folder yet
    assert change["closed_gaps"] == ["DORA-11"] and change["new_gaps"] == [] and not change["fell"]
    assert {"DORA-24", "DORA-25"} <= set(change["still_open"])
    for kind in ("json", "markdown", "html", "change"):
        assert Path(change["files"][kind]).is_file()

    a_year_on = (today + timedelta(days=400)).strftime("%Y-%m-%d")  # DORA-11 must be tested yearly
    later = _fp(
        "compliance", "periodic", "-o", str(reports), "-f", "DORA", "--as-of", a_year_on, tmp_path=tmp_path
    )
    assert later.returncode == 1, later.stdout + later.stderr
    assert "coverage fell" in later.stdout and "new gaps: DORA-11" in later.stdout
    change_md = sorted(reports.glob("coverage-change-*.md"))[-1].read_text()
    assert "coverage FELL" in change_md and "DORA-11" in change_md and "previous report" in change_md


def test_coverage_that_held_exits_0_against_the_previous_report(tmp_path: Path) -> None:
    _tagged_run(tmp_path, ["DORA-24"])
    reports = tmp_path / "reports"
    assert _fp("compliance", "periodic", "-o", str(reports), "-f", "DORA", tmp_path=tmp_path).returncode == 0
    _tagged_run(tmp_path, ["DORA-25"])
    second = _fp("compliance", "periodic", "-o", str(reports), "-f", "DORA", "--json", tmp_path=tmp_path)
    assert second.returncode == 0, second.stderr
    change = json.loads(second.stdout)
    assert change["baseline"] == "previous report"
    assert change["closed_gaps"] == ["DORA-25"] and not change["fell"]
    assert change["coverage"] > change["previous_coverage"]


@pytest.mark.parametrize(
    "args, field",
    [
        (["--period", "soon"], "--period"),
        (["--period", "-3d"], "--period"),
        (["--period", "0"], "--period"),
        (["--as-of", "yesterday"], "--as-of"),
        (["-f", "GDPR"], "frameworks"),
    ],
)
def test_bad_input_names_the_option(tmp_path: Path, args: list[str], field: str) -> None:
    out = _fp("compliance", "periodic", "-o", str(tmp_path / "r"), *args, tmp_path=tmp_path)
    assert out.returncode == 2 and field in out.stderr and "Traceback" not in out.stderr


def test_a_foreign_file_in_the_folder_is_refused_not_trusted(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "coverage-2020-01-01T000000Z.json").write_text('{"not": "a report"}')
    out = _fp("compliance", "periodic", "-o", str(reports), tmp_path=tmp_path)
    assert out.returncode == 2 and "coverage-2020-01-01T000000Z.json" in out.stderr


@pytest.mark.parametrize("text, days", [("30d", 30), ("4w", 28), ("12h", 0.5), ("7", 7), (" 1.5d ", 1.5)])
def test_periods(text: str, days: float) -> None:
    assert parse_period(text) == pytest.approx(days)


def test_a_period_that_is_not_one() -> None:
    with pytest.raises(ComplianceError, match="--period"):
        parse_period("1y")
