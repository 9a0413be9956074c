"""A DuckDB store that cannot be opened fails in one line naming the file and what to check (exit 2), like an
unreachable ClickHouse server, before a run starts anything."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from evidence_helpers import LAB_POLICY

from clihelp import cli
from policy_helpers import use_lab_policy


def _one_line(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_unopenable_duckdb_stores_fail_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(LAB_POLICY, encoding="utf-8")
    use_lab_policy(LAB_POLICY)
    marker = tmp_path / "ran"
    exp = tmp_path / "exp.json"
    action = {
        "type": "action",
        "name": "touch",
        "provider": {"type": "python", "module": "os", "func": "mkdir", "arguments": {"path": str(marker)}},
    }
    exp.write_text(json.dumps({"title": "t", "method": [action]}), encoding="utf-8")

    not_a_db = tmp_path / "notes.duckdb"
    not_a_db.write_text("not a database\n", encoding="utf-8")
    line = _one_line(
        cli("runs", "list", "--store", str(not_a_db)), str(not_a_db), "check that it is a DuckDB"
    )
    assert "--debug" not in line
    monkeypatch.setenv("FAULTPLANE_STORE", str(not_a_db))
    _one_line(cli("analyze"), str(not_a_db))
    monkeypatch.delenv("FAULTPLANE_STORE")

    under_a_file = tmp_path / "plain-file" / "store.duckdb"
    (tmp_path / "plain-file").write_text("", encoding="utf-8")
    # a read command finds no store there; a run cannot create one and starts nothing
    _one_line(cli("runs", "list", "--store", str(under_a_file)), str(under_a_file), "no store")
    _one_line(cli("run", str(exp), "--store", str(under_a_file)), str(under_a_file), "cannot create")
    assert not marker.exists()

    proc = cli("run", str(exp), "--store", str(not_a_db))
    _one_line(proc, str(not_a_db))
    assert not marker.exists()
    assert not_a_db.read_text(encoding="utf-8") == "not a database\n"  # never overwritten
