"""Where a boundary search is kept: its two tables, writing a finished search, listing the newest.

Decides the `searches` table (one row per search: its status, best trial, boundary and spec) and
`search_trials` (one row per trial, refused and interrupted ones included, with its run id).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from faultplane.core.store import Store, open_store
from faultplane.services.search_spec import SearchResult, SearchSpec

__all__ = ["SEARCH_MIGRATIONS", "list_searches", "persist_search"]

SEARCH_MIGRATIONS = [
    (
        "search-001",
        [
            """CREATE TABLE IF NOT EXISTS searches (
                search_id VARCHAR PRIMARY KEY,
                started_at TIMESTAMPTZ,
                ended_at TIMESTAMPTZ,
                experiment_title VARCHAR,
                sampler VARCHAR,
                seed BIGINT,
                budget INTEGER,
                trials INTEGER,
                status VARCHAR,
                found_breach BOOLEAN,
                objective VARCHAR,
                best_trial INTEGER,
                best_params VARCHAR,
                best_measured DOUBLE,
                boundary VARCHAR,
                spec VARCHAR
            )""",
            """CREATE TABLE IF NOT EXISTS search_trials (
                search_id VARCHAR,
                trial INTEGER,
                params VARCHAR,
                run_id VARCHAR,
                run_status VARCHAR,
                measured DOUBLE,
                breached BOOLEAN,
                margin DOUBLE,
                severity DOUBLE,
                fitness DOUBLE,
                duration_s DOUBLE,
                note VARCHAR
            )""",
        ],
    )
]


def persist_search(store: Store, r: SearchResult, spec: SearchSpec, started: datetime) -> None:
    store.insert(
        "searches",
        [
            {
                "search_id": r.search_id,
                "started_at": started,
                "ended_at": datetime.now(UTC),
                "experiment_title": r.experiment_title,
                "sampler": r.sampler,
                "seed": r.seed,
                "budget": r.budget,
                "trials": len(r.trials),
                "status": r.status,
                "found_breach": r.found_breach,
                "objective": r.objective,
                "best_trial": r.best.trial if r.best else None,
                "best_params": json.dumps(r.best.params) if r.best else None,
                "best_measured": r.best.measured if r.best else None,
                "boundary": json.dumps(r.boundary) if r.boundary else None,
                "spec": spec.model_dump_json(),
            }
        ],
    )
    store.insert(
        "search_trials",
        [
            {
                "search_id": r.search_id,
                "trial": t.trial,
                "params": json.dumps(t.params),
                "run_id": t.run_id,
                "run_status": t.run_status,
                "measured": t.measured,
                "breached": t.breached,
                "margin": t.margin,
                "severity": t.severity,
                "fitness": t.fitness,
                "duration_s": t.duration_s,
                "note": t.note,
            }
            for t in r.trials
        ],
    )


def list_searches(store: Store | None = None, limit: int = 20) -> list[dict[str, Any]]:
    store = store or open_store()
    store.ensure_schema("search", SEARCH_MIGRATIONS)
    return store.query(
        "SELECT search_id, started_at, experiment_title, sampler, seed, trials, status, found_breach, objective, "
        "best_params, best_measured FROM searches ORDER BY started_at DESC LIMIT ?",
        [limit],
    )
