"""Grades measure the system, not the operator: a run the operator interrupted, or the policy refused, is
left out of scores, windows and summaries; the same run completed counts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from faultplane.core.model import Journal
from faultplane.core.store import Store
from faultplane.services.evidence import scorecards, summarize, window_rows
from faultplane.services.experiments import run_experiment
from faultplane.services.runs import load_journal

pytestmark = pytest.mark.usefixtures("lab_policy")

DOC = {
    "title": "graded",
    "description": "d",
    "steady-state-hypothesis": {
        "title": "h",
        "probes": [
            {"type": "probe", "name": "cwd", "provider": {"type": "python", "module": "os", "func": "getcwd"}}
        ],
    },
    "method": [
        {"type": "probe", "name": "pid", "provider": {"type": "python", "module": "os", "func": "getpid"}}
    ],
}


def _copy_as(store: Store, journal: dict[str, Any], run_id: str, status: str) -> None:
    doc = {**journal, "run_id": run_id, "status": status}
    store.write_journal(Journal.model_validate(doc), json.dumps(doc), f"/tmp/{run_id}.json")


@pytest.mark.parametrize("status", ["interrupted", "refused"])
def test_operator_and_policy_outcomes_are_not_graded(tmp_path: Path, status: str) -> None:
    store = Store(tmp_path / "s.duckdb")

    async def go() -> Any:
        return await run_experiment(DOC, store=store, journal_dir=tmp_path / "j")

    result = anyio.run(go)
    journal = load_journal(result.run_id, store)
    for i in range(3):
        _copy_as(store, journal, f"{status}-{i}", status)
    [card] = scorecards(store)
    assert card.runs == 1 and card.pass_rate == 1.0 and card.score == 100.0  # three operator stops ignored
    assert {r["run_id"] for r in window_rows(store, 10)} == {result.run_id}
    assert summarize(store, last=None).runs and all(
        r.status == "completed" for r in summarize(store, last=None).runs
    )
