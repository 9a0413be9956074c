"""Each experiment family's run history: the one query both store engines answer (`query_family_runs`), and an
index of it kept beside the DuckDB store so a policy check needs no database open.

The policy reads a family's newest runs before every run (the staged blast radius, the three-greens advice).
From the database that costs an open, ~20 ms, more than a whole run of quick probes; from this index it
costs one small file read. The index is written only where the `runs` rows are written
(`core.store_base`'s row writer, under the database's write lock, so two processes never interleave); it is
dropped when its database file is created anew and names the file it describes (device and inode); a family
with no index yet is read from the database once and indexed then.

The index serves what history only advises on (the three-greens advice, the stage a run at stage 0 may
reach next). A run that asks for a wider stage is judged on the database itself (`fresh=True`): a guardrail
never rests on a cache.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faultplane.core.hostile import json_file_or_none

if TYPE_CHECKING:
    from faultplane.core.store_base import EvidenceStore

__all__ = [
    "HISTORY_LIMIT",
    "RECORDED_STATUSES",
    "drop_index",
    "family_runs",
    "query_family_runs",
    "record_run",
]

# the runs that count as history: a finished run of any outcome, never a dry run or a refusal
RECORDED_STATUSES = ("completed", "failed", "deviated", "aborted", "interrupted")
HISTORY_LIMIT = 500


def _index_dir(store_path: Path) -> Path:
    return store_path.with_name(store_path.name + ".history")


def _index_path(store_path: Path, family: str) -> Path:
    digest = hashlib.sha1(family.encode("utf-8")).hexdigest()[:20]
    return _index_dir(store_path) / f"{digest}.json"


def drop_index(store_path: Path) -> None:
    """Forget every family's index: the database file behind it was created anew. An index made while
    there was no database at all (empty, marked `without_db`) holds for the new file and is kept."""
    folder = _index_dir(store_path)
    for path in folder.glob("*.json") if folder.is_dir() else []:
        doc = json_file_or_none(path)
        keep = isinstance(doc, dict) and doc.get("without_db") is True
        if not keep:
            path.unlink(missing_ok=True)


def _store_id(store_path: Path) -> list[int] | None:
    try:
        st = os.stat(store_path)
    except FileNotFoundError:
        return None
    return [st.st_dev, st.st_ino]


def _read(store_path: Path, family: str) -> list[dict[str, Any]] | None:
    doc = json_file_or_none(_index_path(store_path, family))
    if not isinstance(doc, dict) or doc.get("family") != family:
        return None
    if doc.get("store") != _store_id(store_path) and doc.get("without_db") is not True:
        return None
    rows = doc.get("rows")
    return rows if isinstance(rows, list) else None


def _write(store_path: Path, family: str, rows: list[dict[str, Any]]) -> None:
    path = _index_path(store_path, family)
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    store_id = _store_id(store_path)
    doc: dict[str, Any] = {"family": family, "store": store_id, "rows": rows[:HISTORY_LIMIT]}
    if store_id is None:
        doc["without_db"] = True  # no database yet, so surely no history: valid for the file once made
    tmp.write_text(json.dumps(doc), encoding="utf-8")
    tmp.replace(path)


def _row(
    run_id: str, status: str, before: Any, after: Any, stage: Any, started_us: int | None
) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "status": status,
        "steady_state_before": before,
        "steady_state_after": after,
        "blast_stage": stage,
        "started_us": started_us,
    }


def _newest_first(row: dict[str, Any]) -> tuple[bool, int]:
    t = row.get("started_us")
    return (t is None, -(t or 0))  # as the database orders them: started_at DESC NULLS LAST


def record_run(store_path: Path, j: Any, blast_stage: int | None) -> None:
    """Add (or replace) one run (a `Journal` or its JSON dict) in its family's index, at the stage its `runs`
    row has. Called with the store's write lock held."""
    doc = j.model_dump(mode="json") if hasattr(j, "model_dump") else j
    family = doc.get("family")
    if not family:
        return
    rows = _read(store_path, family)
    if rows is None:
        return  # not indexed yet: the first reader builds the index from the database, this run included
    rows = [r for r in rows if r.get("run_id") != doc["run_id"]]
    if doc.get("status") in RECORDED_STATUSES and not doc.get("dry_run"):
        states = doc.get("steady_states") or {}
        start = doc.get("start")
        rows.append(
            _row(
                doc["run_id"],
                doc["status"],
                (states.get("before") or {}).get("steady_state_met"),
                (states.get("after") or {}).get("steady_state_met"),
                blast_stage,
                _epoch_us(start if isinstance(start, dt.datetime) else _iso(start)),
            )
        )
        rows.sort(key=_newest_first)
    _write(store_path, family, rows)


def _iso(value: Any) -> dt.datetime | None:
    return None if value is None else dt.datetime.fromisoformat(str(value))


def family_runs(
    store: EvidenceStore, family: str, limit: int = HISTORY_LIMIT, *, fresh: bool = False
) -> list[dict[str, Any]]:
    """The family's newest runs (newest first) in a DuckDB store: status, steady_state_before/after,
    blast_stage. From the index, or with `fresh` from the database (refreshing the index)."""
    if store.has_pending():
        store.flush()  # a finished run not written yet (its process was killed after its journal)
    rows = None if fresh else _read(store.path, family)
    if rows is None and not store.path.exists():
        _write(store.path, family, [])  # no database yet, so no history: a first run does not load DuckDB
        return []
    if rows is None:
        with store.writing():  # the write lock, so no run is recorded between this read and the index
            found = query_family_runs(store, family, HISTORY_LIMIT)
            rows = [
                _row(
                    r["run_id"],
                    r["status"],
                    r["steady_state_before"],
                    r["steady_state_after"],
                    r["blast_stage"],
                    _epoch_us(r["started_at"]),
                )
                for r in found
            ]
            _write(store.path, family, rows)
    return rows[:limit]


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _epoch_us(value: dt.datetime | None) -> int | None:
    """Microseconds since the epoch, exactly (a float timestamp loses the last digit of some)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return (value - _EPOCH) // dt.timedelta(microseconds=1)


def query_family_runs(store: Any, family: str, limit: int = HISTORY_LIMIT) -> list[dict[str, Any]]:
    """The family's newest runs straight from the database: the one history query, in SQL both engines read
    alike (no boolean literals: ClickHouse before 21.x has none; FINAL on ClickHouse, where a re-written run is a
    newer row). The DuckDB index (`family_runs`) is built from it too."""
    final = " FINAL" if getattr(store, "dialect", "duckdb") == "clickhouse" else ""
    placeholders = ", ".join("?" for _ in RECORDED_STATUSES)
    return store.query(
        "SELECT run_id, status, steady_state_before, steady_state_after, blast_stage, started_at "
        f"FROM runs{final} WHERE experiment_family = ? AND status IN ({placeholders}) "
        "AND (dry_run IS NULL OR NOT dry_run) ORDER BY started_at DESC NULLS LAST, run_id DESC LIMIT ?",
        [family, *RECORDED_STATUSES, int(limit)],
    )
