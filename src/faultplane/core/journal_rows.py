"""The rows a finished journal makes in the store: one `runs` row, its `activities`, its `journals` body and its
`exposures`. Both store engines write exactly these rows (the DuckDB file and ClickHouse differ only in how rows
replace a run's earlier ones), and the evidence service's bulk ingest writes them too, so one function decides
them, from a `Journal` or its JSON dict alike.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["RUN_TABLES", "exposure_table", "journal_rows", "run_tables"]

# the tables that hold a run's own record, written together (one transaction on DuckDB)
RUN_TABLES = ("runs", "activities", "journals")


def _ts(value: Any) -> dt.datetime | None:
    if value is None or isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromisoformat(str(value))


def _as_json_dict(journal: Any) -> dict[str, Any]:
    return journal.model_dump(mode="json") if hasattr(journal, "model_dump") else dict(journal)


def _stage(j: Mapping[str, Any], blast_stage: int | None) -> int | None:
    """The stage the run was allowed: the one given, else the one its policy record names."""
    return blast_stage if blast_stage is not None else (j.get("policy") or {}).get("stage")


def run_tables(
    journal: Any, *, body: str | None = None, journal_path: str | None = None, blast_stage: int | None = None
) -> dict[str, list[dict[str, Any]]]:
    """The `runs`, `activities` and `journals` rows of one journal (a `Journal` or its JSON dict)."""
    j = _as_json_dict(journal)
    run_id = j["run_id"]
    states = j.get("steady_states") or {}
    experiment = j.get("experiment") or {}
    acts: list[tuple[str, Mapping[str, Any]]] = []
    for section, key in (("method", "run"), ("rollbacks", "rollbacks")):
        acts += [(section, r) for r in j.get(key) or []]
    for key in ("before", "after"):
        acts += [(f"hypothesis_{key}", p) for p in (states.get(key) or {}).get("probes", [])]
    runs = [
        {
            "run_id": run_id,
            "experiment_title": experiment.get("title"),
            "experiment_family": j.get("family"),
            "content_hash": j.get("content_hash"),
            "status": j.get("status"),
            "dry_run": bool(j.get("dry_run")),
            "steady_state_before": (states.get("before") or {}).get("steady_state_met"),
            "steady_state_after": (states.get("after") or {}).get("steady_state_met"),
            "started_at": _ts(j.get("start")),
            "ended_at": _ts(j.get("end")),
            "duration_s": j.get("duration"),
            "error": j.get("error"),
            "seed": j.get("seed"),
            "controller_pid": j.get("controller_pid"),
            "journal_path": journal_path,
            "tags": list(experiment.get("tags") or []),
            "blast_stage": _stage(j, blast_stage),
            "verdict": j.get("verdict"),
        }
    ]
    activities = [
        {
            "run_id": run_id,
            "seq": seq,
            "phase": section,
            "name": (r.get("activity") or {}).get("name"),
            "type": (r.get("activity") or {}).get("type"),
            "status": r.get("status"),
            "started_at": _ts(r.get("start")),
            "ended_at": _ts(r.get("end")),
            "duration_s": r.get("duration"),
            "output": json.dumps(r.get("output"), ensure_ascii=False, default=str),
            "error": r.get("exception"),
        }
        for seq, (section, r) in enumerate(acts)
    ]
    if body is None:
        body = json.dumps(j, ensure_ascii=False)
    journals = [{"run_id": run_id, "written_at": dt.datetime.now(dt.UTC), "body": body}]
    return {"runs": runs, "activities": activities, "journals": journals}


def exposure_table(journal: Any, blast_stage: int | None = None) -> list[dict[str, Any]]:
    """The `exposures` rows of one journal (core.exposure): what it injected where, at which stage."""
    from faultplane.core.exposure import exposure_rows

    j = _as_json_dict(journal)
    return [{**r, "started_at": _ts(r["started_at"])} for r in exposure_rows(j, _stage(j, blast_stage))]


def journal_rows(
    journal: Any, *, body: str | None = None, journal_path: str | None = None, blast_stage: int | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Every table's rows of one journal: `run_tables` and `exposures`."""
    j = _as_json_dict(journal)
    tables = run_tables(j, body=body, journal_path=journal_path, blast_stage=blast_stage)
    tables["exposures"] = exposure_table(j, blast_stage)
    return tables
