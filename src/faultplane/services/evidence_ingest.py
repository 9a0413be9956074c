"""Writing evidence: journals into the store (`ingest_journals`, the fleet path) and each journal's `run_metrics`
row (`index_journals`, `sync_metrics` for runs the engine persisted).

Per-run figures are derived here once, when a journal is indexed; readers (`evidence_scores`, `evidence_baselines`)
only query them. What varies by engine is how rows replace earlier rows of the same run: one transaction on DuckDB,
a newer version on ClickHouse (whose readers add FINAL).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from faultplane.core.journal_rows import journal_rows
from faultplane.core.migrations import EVIDENCE_MIGRATIONS
from faultplane.services.evidence_figures import run_metrics_row

# ---- writing -------------------------------------------------------------------------------------------------


def _dialect(store: Any) -> str:
    return str(getattr(store, "dialect", "duckdb"))


def _ensure(store: Any) -> None:
    store.ensure_schema("evidence", EVIDENCE_MIGRATIONS)


def _replace_rows(
    store: Any, tables: Mapping[str, list[dict[str, Any]]], key: str = "run_id", keys: Iterable[Any] = ()
) -> None:
    """Write rows, replacing earlier rows of the same runs (and of `keys`): one transaction on DuckDB, new versions
    on ClickHouse (the store's own `replace_rows`, which also writes the engine's runs)."""
    store.replace_rows(tables, key=key, keys=keys)


def _as_dict(journal: Any) -> dict[str, Any]:
    if hasattr(journal, "model_dump"):
        return journal.model_dump(mode="json")
    if isinstance(journal, str | bytes):
        return json.loads(journal)
    return dict(journal)


def index_journals(store: Any, journals: Iterable[Any], window_s: float | None = None) -> int:
    """Derive and store the `run_metrics` rows of journals already in the store (or about to be)."""
    _ensure(store)
    rows = [run_metrics_row(_as_dict(j), window_s) for j in journals]
    if rows:
        _replace_rows(store, {"run_metrics": rows})
    return len(rows)


def ingest_journals(store: Any, journals: Iterable[Any], batch: int = 5_000) -> int:
    """Write finished journals to the store in bulk: runs, activities, journals and run_metrics rows; returns the
    number of runs written (a run given twice in one batch counts once).

    The fleet path (and the benchmark's): on DuckDB each batch is one transaction of Arrow inserts; on ClickHouse,
    one insert per table and batch. A run given twice keeps its last journal, as writing them one after the other
    would (and as the bulk NDJSON ingest does).
    """
    _ensure(store)
    total = 0
    pending: list[dict[str, Any]] = []

    from pydantic_core import to_json

    def flush(batch: list[dict[str, Any]]) -> int:
        """Write one batch; returns the runs written."""
        # one row per run in a batch: two rows of one run_id broke DuckDB's primary key mid-transaction
        latest = list({j.get("run_id") or id(j): j for j in batch}.values())
        tables: dict[str, list[dict[str, Any]]] = {
            "runs": [],
            "activities": [],
            "journals": [],
            "run_metrics": [],
        }
        for j in latest:
            # pydantic-core's encoder: json.dumps of the whole journal was a third of a ClickHouse ingest
            body = to_json(j, fallback=str, inf_nan_mode="constants").decode()
            for table, rows in journal_rows(j, body=body).items():
                if table in tables:  # bulk-imported journals earn no stage: `exposures` is the engine's own
                    tables[table] += rows
            tables["run_metrics"].append(run_metrics_row(j))
        _replace_rows(store, tables, keys=[j["run_id"] for j in latest])
        return len(latest)

    for journal in journals:
        pending.append(_as_dict(journal))
        if len(pending) >= batch:
            total += flush(pending)
            pending = []
    if pending:
        total += flush(pending)
    return total


def _final(store: Any) -> str:
    return " FINAL" if _dialect(store) == "clickhouse" else ""


def sync_metrics(store: Any) -> int:
    """Index every stored journal that has no `run_metrics` row yet (runs persisted by the engine)."""
    _ensure(store)
    f = _final(store)
    rows = store.query(
        f"SELECT body FROM journals{f} WHERE run_id NOT IN (SELECT run_id FROM run_metrics{f})"
    )
    journals = []
    for r in rows:
        try:
            j = json.loads(r["body"])
        except (TypeError, ValueError):
            continue
        # refused runs are indexed too (and left out by every query), so they are not re-read on every call
        if j.get("status") != "running":
            journals.append(j)
    return index_journals(store, journals) if journals else 0
