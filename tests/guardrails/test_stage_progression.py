"""Staged blast radius with real runs: the engine runs experiments against a real service and a real store,
and the next stage allowed is the one after the LAST green run of the family; three greens bring the advice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from guard_helpers import DegradableService, base_experiment, record_run, runnable_experiment

from faultplane.core.model import Journal
from faultplane.core.policy import Policy, evaluate
from faultplane.core.store import Store
from faultplane.engine.lifecycle import execute

pytestmark = pytest.mark.anyio
FAMILY = "payment-db-latency"


def test_next_stage_follows_the_last_green_not_the_highest(store: Store) -> None:
    doc = base_experiment(blast_radius={"percent": 50})
    record_run(store, FAMILY, 0)
    record_run(store, FAMILY, 1)
    record_run(store, FAMILY, 2)
    record_run(store, FAMILY, 0)  # the family went back to a smaller radius
    decision = evaluate(doc, policy=Policy(), store=store)
    assert decision.allowed_stage == 1
    assert "the last green stage is 0" in decision.violations[0].message
    # a red run after the last green does not move the stage either way
    record_run(store, FAMILY, 1, green=False)
    assert evaluate(doc, policy=Policy(), store=store).allowed_stage == 1
    record_run(store, FAMILY, 1)
    assert evaluate(base_experiment(blast_radius={"percent": 25}), policy=Policy(), store=store).allowed


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / ".git").mkdir(exist_ok=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FAULTPLANE_POLICY", raising=False)
    # no approval by stage, so a refusal below can only come from the stage rule
    (tmp_path / "faultplane.policy.yaml").write_text("approval: {min_stage: null}\n")
    return tmp_path


async def test_real_runs_climb_the_stages(project: Path, service: DegradableService) -> None:
    store = Store(project / "runs.duckdb")

    async def run(percent: int) -> Journal:
        doc: dict[str, Any] = runnable_experiment(
            service.url, title="Stage climb", blast_radius={"percent": percent}
        )
        return await execute(doc, store=store)

    first = await run(25)
    assert first.status == "refused" and "no green run yet, so only stage 0 is next" in (first.error or "")

    greens = [await run(10) for _ in range(3)]
    assert [j.status for j in greens] == ["completed"] * 3, [j.error for j in greens]
    assert "consecutive green" not in (greens[1].verdict or "")
    assert "3 consecutive green runs at stage 0" in (greens[2].verdict or "")
    assert "widen the blast radius to stage 1" in (greens[2].verdict or "")

    assert (await run(25)).status == "completed"  # stage 1, after the green stage 0
    assert (await run(10)).status == "completed"  # back to stage 0: now the last green
    skip = await run(50)
    assert skip.status == "refused" and "the last green stage is 0" in (skip.error or ""), skip.error
    assert (await run(25)).status == "completed"
    assert (await run(50)).status == "completed"  # stage 2 right after a green stage 1
    rows = store.query("SELECT blast_stage, status FROM runs ORDER BY started_at")
    assert [(r["blast_stage"], r["status"]) for r in rows] == [
        (1, "refused"),
        (0, "completed"),
        (0, "completed"),
        (0, "completed"),
        (1, "completed"),
        (0, "completed"),
        (2, "refused"),
        (1, "completed"),
        (2, "completed"),
    ]
