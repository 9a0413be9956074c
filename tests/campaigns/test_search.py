"""Boundary search on the bundled demo: real experiment runs, seeded optuna samplers, results stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from faultplane.core.formats import ExperimentError
from faultplane.core.store import Store
from faultplane.services.runs import load_journal
from faultplane.services.search import list_searches, run_search

pytestmark = pytest.mark.anyio


def spec(experiments_dir: Path, url: str, **over: Any) -> dict[str, Any]:
    base = {
        "experiment": str(experiments_dir / "demo-db-latency.yaml"),
        "variables": {"service_url": url},
        # the database latency the demo's admin endpoint sets; more is worse
        "parameters": {"ms": {"type": "int", "low": 0, "high": 2000, "step": 10}},
        # the demo's hypothesis tolerance: orders answer within 1000 ms
        "objective": {"source": "probe", "name": "orders-latency-under-fault", "bound": 1000},
        "budget": 10,
        "seed": 7,
        "sampler": "nsga2",
    }
    return {**base, **over}


async def test_seeded_search_finds_the_latency_boundary_within_budget(
    demo_url: str, experiments_dir: Path, store: Store
) -> None:
    """Budget: 10 trials (10 real runs). Seed 7 with NSGA-II finds a breach within 10% of the 1000 ms bound."""
    result = await run_search(spec(experiments_dir, demo_url), store=store)
    assert result.status == "completed"
    assert len(result.trials) == 10
    assert all(t.run_status == "completed" and t.measured is not None for t in result.trials)
    assert result.found_breach and result.best is not None
    # barely violating: just past the bound, not the largest fault tried
    assert 1000 < result.best.measured < 1100, result.trials
    assert 950 <= result.best.params["ms"] <= 1090
    assert result.best.params["ms"] < max(t.params["ms"] for t in result.trials if t.breached) or (
        sum(t.breached for t in result.trials) == 1
    )
    holds = result.boundary and result.boundary["holds"]
    assert holds is not None and holds["ms"] < result.best.params["ms"]
    # every trial is a real, journaled run; the search and its trials are stored
    rows = store.query("SELECT count(*) AS n FROM runs WHERE experiment_family = 'demo-db-latency-search'")
    assert rows[0]["n"] == 10
    stored = store.query("SELECT * FROM search_trials WHERE search_id = ? ORDER BY trial", [result.search_id])
    assert [r["run_id"] for r in stored] == [t.run_id for t in result.trials]
    [head] = [s for s in list_searches(store) if s["search_id"] == result.search_id]
    assert head["found_breach"] and '"ms"' in head["best_params"]


async def test_an_objective_read_from_a_gate_finds_the_breach_within_budget(
    demo_url: str, experiments_dir: Path, store: Store
) -> None:
    """Fitness from gate measurements: each trial's number is the worst sample the SLO gate took of the real
    orders latency while the fault was held; the bound and its side are the gate's own (`probe > 800`).
    Budget: 8 trials (8 real runs of about 3 s each). NSGA-II, seed 3, population 4."""
    result = await run_search(
        {
            "experiment": str(experiments_dir / "demo-db-latency-gate.yaml"),
            "variables": {"service_url": demo_url},
            "parameters": {"ms": {"type": "int", "low": 0, "high": 1500, "step": 10}},
            "objective": {"source": "gate", "name": "orders-latency"},
            "budget": 8,
            "seed": 3,
            "sampler": "nsga2",
            "population": 4,
        },
        store=store,
    )
    assert result.objective == "gate orders-latency > 800"
    assert result.status == "completed" and len(result.trials) == 8
    assert all(t.run_status == "completed" and t.measured is not None for t in result.trials), result.trials
    for t in result.trials:
        # the measurement is the gate's worst sample in that run's journal, and it is the fault's doing:
        # an order cannot answer faster than the database latency injected for it
        journal = load_journal(t.run_id, store)
        samples = [s["value"] for s in journal["gates"]["samples"] if s["gate"] == "orders-latency"]
        assert samples and t.measured == pytest.approx(max(samples), abs=1e-3)
        assert t.measured >= t.params["ms"]
        assert t.breached == (t.measured > 800)
    assert result.found_breach and result.best is not None
    assert result.best.measured > 800 and result.best.params["ms"] > 700
    breaching = [t for t in result.trials if t.breached]
    assert result.best.fitness == min(t.fitness for t in breaching if t.fitness is not None)
    holds = result.boundary and result.boundary["holds"]
    assert holds is not None and holds["ms"] < result.best.params["ms"]
    assert result.boundary is not None and result.boundary["holds_measured"] <= 800
    stored = store.query(
        "SELECT objective, found_breach FROM searches WHERE search_id = ?", [result.search_id]
    )
    assert stored == [{"objective": "gate orders-latency > 800", "found_breach": True}]


async def test_the_same_seed_proposes_the_same_trials(
    demo_url: str, experiments_dir: Path, store: Store
) -> None:
    a = await run_search(spec(experiments_dir, demo_url, budget=3, sampler="tpe", seed=11), store=store)
    b = await run_search(spec(experiments_dir, demo_url, budget=3, sampler="tpe", seed=11), store=store)
    assert [t.params for t in a.trials] == [t.params for t in b.trials]


async def test_every_trial_goes_through_the_policy(
    demo_url: str, experiments_dir: Path, tmp_path: Path, store: Store
) -> None:
    doc = yaml.safe_load((experiments_dir / "demo-db-latency.yaml").read_text())
    doc["targets"][0]["labels"]["env"] = "production"
    result = await run_search(spec(experiments_dir, demo_url, experiment=doc), store=store)
    assert result.status == "refused"
    assert len(result.trials) == 1 and result.trials[0].run_status == "refused"
    assert "production" in result.message
    assert not result.found_breach


async def test_a_parameter_the_experiment_never_uses_is_rejected_before_any_run(
    demo_url: str, experiments_dir: Path, store: Store
) -> None:
    with pytest.raises(ExperimentError) as info:
        await run_search(
            spec(experiments_dir, demo_url, parameters={"pool": {"type": "int", "low": 1, "high": 5}}),
            store=store,
        )
    assert info.value.issues[0].field == "parameters.pool"
    assert "${pool}" in info.value.issues[0].fix
    assert store.query("SELECT count(*) AS n FROM runs")[0]["n"] == 0


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"objective": {"source": "gate", "name": "no-such-gate"}}, "objective.name"),
        ({"objective": {"source": "probe", "name": "x"}}, "objective"),
        ({"parameters": {"ms": {"type": "int", "low": 5, "high": 1}}}, "parameters"),
        ({"budget": 0}, "budget"),
        ({"sampler": "ga"}, "sampler"),
    ],
)
async def test_bad_specs_name_the_field(
    over: dict[str, Any], field: str, demo_url: str, experiments_dir: Path, store: Store
) -> None:
    with pytest.raises(ExperimentError) as info:
        await run_search(spec(experiments_dir, demo_url, **over), store=store)
    assert info.value.issues[0].field.startswith(field), info.value
    assert info.value.issues[0].fix
