"""Property: the one journal-row writer gives the same rows on DuckDB and ClickHouse (chDB), table by table.

The engine's writer (`write_journal`, also behind the queue) is shared by both stores; only how rows replace a
run's earlier rows is each engine's. Generated journals (with injections, so `exposures` rows too, and runs
written twice) are written through it to a fresh DuckDB file and a fresh chDB database, and every table must
read back the same; the DuckDB family-history index must equal the one history query on both.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path
from typing import Any

from clickhouse_helpers import chdb_store
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_same_answers import FAMILIES, journal_sets

from faultplane.core.history import family_runs, query_family_runs
from faultplane.core.store import Store

_COLUMNS = {
    "runs": "run_id, experiment_title, experiment_family, status, dry_run, steady_state_before, "
    "steady_state_after, started_at, ended_at, duration_s, seed, journal_path, tags, blast_stage, verdict",
    "activities": "run_id, seq, phase, name, type, status, started_at, ended_at, duration_s, output, error",
    "journals": "run_id, body",
    "exposures": "run_id, seq, target, fault_kind, stage, green, started_at",
}
_ORDER = {"runs": "run_id", "journals": "run_id", "activities": "run_id, seq", "exposures": "run_id, seq"}


@st.composite
def injected(draw: st.DrawFn) -> list[dict[str, Any]]:
    journals = [dict(j) for j in draw(journal_sets())]
    # by run: a run written twice is the same journal twice (a ClickHouse re-write with fewer rows in a table
    # keeps the older ones there: ReplacingMergeTree replaces rows by key, it deletes none)
    injections: dict[str, list[dict[str, str]]] = {}
    for j in journals:
        if j["run_id"] not in injections:
            n = draw(st.integers(0, 3))
            kinds = draw(st.lists(st.sampled_from(("latency", "timeout", "error")), min_size=n, max_size=n))
            injections[j["run_id"]] = [
                {"target": draw(st.sampled_from(("db:5432", "cache:6379"))), "fault_kind": k} for k in kinds
            ]
        j["injections"] = injections[j["run_id"]]
    return journals


def _norm(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC)
    if isinstance(value, bool):
        return int(value)
    return value


def _tables(store: Any) -> dict[str, list[dict[str, Any]]]:
    final = " FINAL" if store.dialect == "clickhouse" else ""
    return {
        table: [
            {k: _norm(v) for k, v in row.items()}
            for row in store.query(f"SELECT {cols} FROM {table}{final} ORDER BY {_ORDER[table]}")
        ]
        for table, cols in _COLUMNS.items()
    }


def _history(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["run_id"], r["status"], r["blast_stage"]) for r in rows]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(journals=injected(), stage=st.sampled_from((None, 0, 2)))
def test_both_stores_write_the_same_rows(
    journals: list[dict[str, Any]], stage: int | None, chdb_dir: Path, tmp_path: Path
) -> None:
    duck = Store(tmp_path / f"{uuid.uuid4().hex}.duckdb")
    ch = chdb_store(chdb_dir)
    try:
        for j in journals:
            body = json.dumps(j)
            for store in (duck, ch):
                store.write_journal(j, body, f"/journals/{j['run_id']}.json", stage)
        assert _tables(duck) == _tables(ch)
        for family in FAMILIES:
            index = family_runs(duck, family, 50)
            assert _history(index) == _history(query_family_runs(duck, family, 50))
            assert _history(index) == _history(query_family_runs(ch, family, 50))
    finally:
        ch.execute(f"DROP DATABASE IF EXISTS {ch.database}")


def test_a_run_written_again_keeps_only_its_new_rows(tmp_path: Path, chdb_dir: Path) -> None:
    """Re-writing a run replaces every table's rows of it on DuckDB, also where the new journal has none; on
    ClickHouse the run's row is the new one (older activity rows of other keys stay: no deletes there)."""
    duck = Store(tmp_path / "s.duckdb")
    ch = chdb_store(chdb_dir)
    t0 = dt.datetime(2026, 6, 1, tzinfo=dt.UTC).isoformat()
    first = {
        "run_id": "r1",
        "family": "checkout",
        "status": "completed",
        "start": t0,
        "steady_states": {"before": {"steady_state_met": True}, "after": {"steady_state_met": True}},
        "run": [
            {"activity": {"name": "a", "type": "action"}, "status": "succeeded", "start": t0, "output": 1}
        ],
        "injections": [{"target": "db:5432", "fault_kind": "latency"}],
    }
    again = {**first, "status": "failed", "run": [], "injections": []}
    try:
        for store in (duck, ch):
            store.write_journal(first, None, "/j/r1.json", 1)
            store.write_journal(again, None, "/j/r1.json", 1)
        tables = _tables(duck)
        assert [r["status"] for r in tables["runs"]] == ["failed"]
        assert tables["activities"] == [] and tables["exposures"] == []
        ch_tables = _tables(ch)
        assert [r["status"] for r in ch_tables["runs"]] == ["failed"]
    finally:
        ch.execute(f"DROP DATABASE IF EXISTS {ch.database}")
