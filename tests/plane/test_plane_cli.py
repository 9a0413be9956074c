"""`faultplane plane` surfaces: report errors, help text, usage lines."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from faultplane.cli.plane import app
from faultplane.plane.faults import FaultEvent
from faultplane.plane.metrics import CallRecord
from faultplane.plane.plan import parse_plan
from faultplane.plane.recorder import Recorder
from faultplane.services.plane import NoSuchStoreError, parse_patterns, session_report


def test_report_on_a_missing_store_errors_and_creates_nothing(tmp_path: Path) -> None:
    new = tmp_path / "new.duckdb"
    for args in (["report", "--store", str(new)], ["report", "--store", str(new), "--list"]):
        out = CliRunner().invoke(app, args)
        assert out.exit_code == 1
        assert "no such store" in out.output and str(new) in out.output
    assert not new.exists()
    with pytest.raises(NoSuchStoreError):
        session_report(None, new)


def test_report_service_reads_a_recorded_session(tmp_path: Path) -> None:
    store = tmp_path / "s.duckdb"
    rec = Recorder(
        session_id="svc", driver="stdio", target="t", plan=parse_plan({"seed": 4}), store_path=store
    )
    rec.faults([FaultEvent(time.time(), "timeout", "timeout", "tools/call", "a", "1", 4)])
    rec.call(CallRecord(time.time(), "tools/call", "a", "1", "timeout", 5.0, ["timeout"]))
    rec.call(CallRecord(time.time(), "tools/call", "a", "2", "ok", 5.0))
    rec.flush(final=True)
    out = session_report("svc", store)
    assert out["session"]["seed"] == 4
    assert out["metrics"]["tool_calls"] == 2 and out["metrics"]["faults_by_name"] == {"timeout": 1}
    cli = CliRunner().invoke(app, ["report", "--store", str(store), "--json"])
    assert cli.exit_code == 0 and json.loads(cli.output)["metrics"]["availability"] == 0.5
    cli = CliRunner().invoke(app, ["report", "--store", str(store), "--session", "nope"])
    assert cli.exit_code == 1 and "no proxy session 'nope'" in cli.output


def test_proxy_help_documents_every_option_and_the_command() -> None:
    runner = CliRunner()
    out = runner.invoke(app, ["proxy", "http", "--help"], env={"COLUMNS": "200"})
    assert out.exit_code == 0
    lines = out.output.splitlines()
    for opt, words in (
        ("--session", "session id"),
        ("--store", "store file"),
        ("--no-record", "do not write"),
    ):
        line = next(line for line in lines if f"{opt} " in line)
        assert words in line, line
    out = runner.invoke(app, ["proxy", "stdio", "--help"], env={"COLUMNS": "200"})
    usage = next(line for line in out.output.splitlines() if "Usage:" in line)
    assert "-- CMD ARGS..." in usage


def test_simulate_patterns_are_checked() -> None:
    assert parse_patterns("all").breaker and not parse_patterns("none").any
    with pytest.raises(ValueError, match="--patterns: unknown"):
        parse_patterns("retry,magic")
