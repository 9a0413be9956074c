"""Tables fit the terminal: whole words at 80 columns, records when a table cannot fit, one time format."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from faultplane.cli.term import Table, timestamp
from policy_helpers import use_lab_policy

RUN_ID = "4aab79b1371b4640"


def _render(table: object, width: int) -> str:
    console = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(table)
    return console.export_text()


def _wide_table() -> object:
    t = Table("run", "experiment", "status", "before", "after", "started", "seconds", title="runs")
    t.add_row(
        RUN_ID,
        "Orders API tolerates a slow database",
        "interrupted",
        "True",
        "None",
        "2026-11-25 08:27:28Z",
        "12.25",
    )
    return t


@pytest.mark.parametrize("width", [40, 60, 80])
def test_a_table_too_wide_becomes_records_with_every_value_whole(width: int) -> None:
    out = _render(_wide_table(), width)
    assert all(len(line) <= width for line in out.splitlines())
    assert RUN_ID in out and "2026-11-25 08:27:28Z" in out and "interrupted" in out
    assert "…" not in out
    assert any(line.startswith("experiment") for line in out.splitlines())  # one `column  value` per line


def test_a_table_that_fits_stays_a_table() -> None:
    out = _render(_wide_table(), 160)
    assert "┃ run" in out and RUN_ID in out and "Orders API tolerates a slow database" in out


def test_a_long_word_in_a_table_is_folded_not_cut() -> None:
    t = Table("path", "size")
    t.add_row("/very/long/" + "x" * 120 + "/file.json", "1")
    out = _render(t, 80)
    assert "…" not in out and "file.json" in out.replace("\n", "").replace("│", "").replace(" ", "")


@pytest.mark.parametrize(
    "value, shown",
    [
        (dt.datetime(2026, 11, 25, 8, 27, 28, 999, tzinfo=dt.UTC), "2026-11-25 08:27:28Z"),
        (dt.datetime(2026, 11, 25, 8, 27, 28), "2026-11-25 08:27:28Z"),  # naive: the store's UTC
        (
            dt.datetime(2026, 11, 25, 9, 27, 28, tzinfo=dt.timezone(dt.timedelta(hours=1))),
            "2026-11-25 08:27:28Z",
        ),
        ("2026-11-25T08:27:28.5+00:00", "2026-11-25 08:27:28Z"),
        ("2026-11-25T08:27:28Z", "2026-11-25 08:27:28Z"),
        (1795594048.0, "2026-11-25 08:07:28Z"),
        (None, ""),
        ("not a time", "not a time"),
    ],
)
def test_one_time_format_everywhere(value: object, shown: str) -> None:
    assert timestamp(value) == shown


def test_runs_list_at_80_columns_shows_whole_run_ids(tmp_path: Path) -> None:
    exp = tmp_path / "a-rather-long-experiment-name.json"
    probe = {"type": "python", "module": "os", "func": "getcwd"}
    exp.write_text(
        json.dumps(
            {
                "title": "An experiment whose title is long enough to need wrapping in a narrow terminal",
                "description": "d",
                "method": [{"type": "probe", "name": "p", "provider": probe}],
            }
        )
    )
    use_lab_policy("gates: {required: false}\n")
    env = {**os.environ, "COLUMNS": "80"}
    run = subprocess.run(
        [sys.executable, "-m", "faultplane", "run", str(exp), "-q", "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    run_id = json.loads(run.stdout)["run_id"]
    listed = subprocess.run(
        [sys.executable, "-m", "faultplane", "runs", "list"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert listed.returncode == 0 and run_id in listed.stdout
    assert all(len(line) <= 80 for line in listed.stdout.splitlines())
    shown = subprocess.run(
        [sys.executable, "-m", "faultplane", "journal", "show", run_id],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert shown.returncode == 0 and all(len(line) <= 80 for line in shown.stdout.splitlines())


@pytest.mark.parametrize(
    ("argv", "whole"),
    [
        (["drivers", "list"], "netproxy"),
        (["experiments", "list"], "demo-latency"),
        (["gameday", "templates"], "DORA"),
        (["compliance", "requirements"], "SOC2-A1.3"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v,
)
def test_every_listing_fits_80_columns_without_cutting_a_word(argv: list[str], whole: str) -> None:
    env = {**os.environ, "COLUMNS": "80"}
    out = subprocess.run(
        [sys.executable, "-m", "faultplane", *argv], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines and max(map(len, lines)) <= 80
    assert "…" not in out.stdout and whole in out.stdout  # wrapped or folded, never cut short
