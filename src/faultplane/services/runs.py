"""Run services: journals, run listings, statistics, aborting."""

from __future__ import annotations

import json
import os
import signal
from typing import Any, Literal

from faultplane.core.formats import dumps
from faultplane.core.store import Store, open_store
from faultplane.engine.journal import live_runs, recover_interrupted
from faultplane.engine.lifecycle import abort_run, active_runs

__all__ = ["abort_runs", "get_journal", "list_runs", "load_journal", "recover", "run_stats"]


def load_journal(run_id: str, store: Store | None = None) -> dict[str, Any]:
    store = store or open_store()
    rows = store.query("SELECT body FROM journals WHERE run_id = ?", [run_id])
    if not rows:
        # LIKE treats `_` and `%` in the prefix as wildcards: it finds a superset, startswith decides. Ids
        # only: a prefix of "%" matches every run, and their bodies are not to be loaded to find that out
        candidates = (
            store.query("SELECT run_id FROM journals WHERE run_id LIKE ? || '%'", [run_id]) if run_id else []
        )
        ids = sorted({str(r["run_id"]) for r in candidates if str(r["run_id"]).startswith(run_id)})
        shown_id = run_id if len(run_id) <= 80 else run_id[:77] + "..."
        if len(ids) > 1:
            more = f" and {len(ids) - 10} more" if len(ids) > 10 else ""
            raise LookupError(
                f"run id {shown_id!r} is ambiguous: it starts {len(ids)} runs ({', '.join(ids[:10])}{more});"
                " fix: give more characters of the run id"
            )
        if ids:
            rows = store.query("SELECT body FROM journals WHERE run_id = ?", [ids[0]])
        if not rows:
            raise LookupError(f"no journal for run {shown_id!r}: list runs with `faultplane runs list`")
    journal: dict[str, Any] = json.loads(rows[0]["body"])
    return journal


def get_journal(run_id: str, fmt: Literal["json", "toon"] = "json", store: Store | None = None) -> str:
    return dumps(load_journal(run_id, store), fmt)


def _of_experiment(experiment: str | None, joiner: Literal["WHERE", "AND"]) -> tuple[str, list[Any]]:
    """The SQL condition keeping one experiment's runs (named by title or family) and its parameters; an
    empty condition when no experiment is named."""
    if not experiment:
        return "", []
    return f" {joiner} (experiment_title = ? OR experiment_family = ?)", [experiment, experiment]


def list_runs(
    store: Store | None = None, experiment: str | None = None, limit: int = 50
) -> list[dict[str, Any]]:
    """Finished runs from the store, after the runs still in progress on this machine."""
    store = store or open_store()
    live = [
        {
            "run_id": j.run_id,
            "experiment_title": j.experiment.get("title"),
            "status": "running",
            "dry_run": j.dry_run,
            "steady_state_before": None,
            "steady_state_after": None,
            "started_at": j.start,
            "duration_s": None,
            "verdict": None,
            "error": None,
        }
        for j in live_runs()
        if not experiment or experiment in (j.experiment.get("title"), j.family)
    ]
    where, params = _of_experiment(experiment, "WHERE")
    sql = (
        "SELECT run_id, experiment_title, status, dry_run, steady_state_before, steady_state_after, "
        f"started_at, duration_s, verdict, error FROM runs{where} ORDER BY started_at DESC LIMIT ?"
    )
    return (live + store.query(sql, [*params, limit]))[:limit]


def run_stats(store: Store | None = None, experiment: str | None = None) -> dict[str, Any]:
    store = store or open_store()
    where, params = _of_experiment(experiment, "AND")
    sql = (
        "SELECT count(*) AS total, sum(CASE WHEN status = 'completed' AND "
        f"coalesce(steady_state_after, true) THEN 1 ELSE 0 END) AS ok FROM runs WHERE NOT dry_run{where}"
    )
    row = store.query(sql, params)[0]
    total = int(row["total"])
    return {"total_runs": total, "success_rate": round(row["ok"] / total, 4) if total else None}


def abort_runs(run_id: str | None = None, store: Store | None = None) -> list[str]:
    """Stop running experiments (one, or all): in this process directly, elsewhere with SIGTERM to the controller.

    The controller rolls back on SIGTERM, exactly as on Ctrl-C. Live runs are found from their event logs on
    this machine; `store` is accepted for symmetry with the other services and not needed.
    """
    del store
    aborted = []
    for rid in active_runs():
        if (run_id is None or rid.startswith(run_id)) and abort_run(rid):
            aborted.append(rid)
    for journal in live_runs():
        rid, pid = journal.run_id, journal.controller_pid
        if (
            rid in aborted
            or (run_id is not None and not rid.startswith(run_id))
            or not pid
            or pid == os.getpid()
        ):
            continue
        try:
            os.kill(pid, signal.SIGTERM)
            aborted.append(rid)
        except ProcessLookupError:
            pass
    return aborted


def recover(store: Store | None = None) -> list[dict[str, Any]]:
    """Mark runs whose controller died as interrupted; return their summaries."""
    return [
        {"run_id": j.run_id, "title": j.experiment.get("title"), "started": j.start.isoformat()}
        for j in recover_interrupted(store or open_store())
    ]
