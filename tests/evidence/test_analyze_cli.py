"""`faultplane analyze` and the read-only SQL service on both engines; exports read back in every format."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from faultplane.cli.analyze import app
from faultplane.services import analytics
from faultplane.services import evidence as ev

runner = CliRunner()


def invoke(*args: str) -> Any:
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_default_summary_without_sql(real_runs: Any) -> None:
    store = str(real_runs.store.path)
    res = invoke("--store", store, "--last", "3")
    assert res.exit_code == 0, res.output
    assert "Experiments (trailing 10 runs)" in res.output and "Runs (last 3 of 25)" in res.output
    assert "cache degrading" in res.output and "db improving" in res.output
    assert f"anomaly {real_runs.run_ids[10]}" in res.output

    res = invoke("--store", store, "--all", "--format", "json")
    data = json.loads(res.stdout)
    assert data["runs_shown"] == 25 and {c["experiment"] for c in data["experiments"]} == {
        "svc",
        "db",
        "cache",
    }
    res = invoke("--store", store, "-e", "svc", "--format", "toon")
    assert res.exit_code == 0 and "svc" in res.output


def test_sql_is_read_only(real_runs: Any) -> None:
    store = str(real_runs.store.path)
    res = invoke(
        "--store", store, "--sql", "SELECT status, count(*) AS n FROM runs GROUP BY status ORDER BY status"
    )
    assert res.exit_code == 0 and "completed" in res.output and "2 row(s)" in res.output
    res = invoke("--store", store, "--sql", "DELETE FROM runs")
    assert res.exit_code == 2 and "read-only" in res.output
    assert real_runs.store.query("SELECT count(*) AS n FROM runs")[0]["n"] == 25


@pytest.mark.parametrize("suffix", ["parquet", "csv", "json", "arrow"])
def test_exports_read_back(real_runs: Any, tmp_path: Path, suffix: str) -> None:
    store = str(real_runs.store.path)
    out = tmp_path / f"runs.{suffix}"
    res = invoke("--store", store, "--sql", "SELECT run_id, status, started_at, tags FROM runs ORDER BY run_id",
                 "--export", str(out))  # fmt: skip
    assert res.exit_code == 0, res.output
    ids = sorted(real_runs.run_ids)
    assert _read(out, suffix)["run_id"] == ids

    summary_out = tmp_path / f"summary.{suffix}"
    res = invoke("--store", store, "--all", "--export", str(summary_out), "--format", "json")
    assert res.exit_code == 0
    back = _read(summary_out, suffix)
    assert sorted(back["run_id"]) == ids and "actual_recovery_s" in back


def _read(path: Path, fmt: str) -> dict[str, list[Any]]:
    if fmt == "parquet":
        return pq.read_table(path).to_pydict()
    if fmt == "arrow":
        with pa.OSFile(str(path), "rb") as f:
            return pa.ipc.open_file(f).read_all().to_pydict()
    if fmt == "csv":
        with path.open() as f:
            rows = list(csv.DictReader(f))
    else:
        rows = json.loads(path.read_text())
    return {k: [r[k] for r in rows] for k in rows[0]}


def test_export_errors_name_the_fix(real_runs: Any, tmp_path: Path) -> None:
    res = invoke(
        "--store", str(real_runs.store.path), "--sql", "SELECT 1", "--export", str(tmp_path / "x.xlsx")
    )
    assert res.exit_code == 2 and "--format" in res.output
    with pytest.raises(analytics.QueryError, match="format"):
        analytics.export_query("SELECT 1", tmp_path / "x", "xlsx", store=real_runs.store)


def test_baseline_command(real_runs: Any) -> None:
    store = str(real_runs.store.path)
    res = invoke("baseline", "--store", store, "--probe", "latency", "-e", "db", "--phase", "hypothesis_after",
                 "-m", "percentile", "--percentiles", "0,100", "--format", "json")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["tolerance"] == {"type": "range", "range": [50.0, 170.0]}
    res = invoke("baseline", "--store", store, "--probe", "latency", "-m", "mad")
    assert res.exit_code == 0 and "mad tolerance" in res.output
    res = invoke("baseline", "--store", store, "--probe", "nope")
    assert res.exit_code == 2 and "no numeric readings" in res.output


def test_chaos_analyze_api_unchanged(real_runs: Any) -> None:
    result = analytics.analyze("SELECT run_id FROM runs ORDER BY run_id", store=real_runs.store, limit=5)
    assert result.row_count == 5 and result.truncated and result.columns == ["run_id"]
    with pytest.raises(analytics.QueryError, match="limit"):
        analytics.analyze("SELECT 1", store=real_runs.store, limit=0)


@pytest.mark.clickhouse
def test_analyze_on_clickhouse(real_runs: Any, ch_store: Any, tmp_path: Path) -> None:
    ev.ingest_journals(ch_store, real_runs.journals)
    sql = "SELECT status, count(*) AS n FROM runs GROUP BY status ORDER BY status"
    assert analytics.analyze(sql, store=ch_store) == analytics.analyze(sql, store=real_runs.store)
    capped = analytics.analyze("SELECT run_id FROM runs ORDER BY run_id", store=ch_store, limit=5)
    assert capped.row_count == 5 and capped.truncated
    for bad in ("INSERT INTO audit (actor) VALUES ('x')", "SELECT * FROM file('x.csv', 'CSV', 'a String')",
                "CREATE TABLE t (a String) ENGINE = Memory"):  # fmt: skip
        with pytest.raises(analytics.QueryError, match=r"readonly|read-only"):
            analytics.analyze(bad, store=ch_store)
    out = analytics.export_query("SELECT run_id, tags FROM runs ORDER BY run_id", tmp_path / "r.parquet",
                                 store=ch_store)  # fmt: skip
    assert out.rows == 25 and pq.read_table(tmp_path / "r.parquet").column("run_id").to_pylist() == sorted(
        real_runs.run_ids
    )
    res = invoke("--store", ch_store.url, "--last", "2", "--format", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["runs_total"] == 25
