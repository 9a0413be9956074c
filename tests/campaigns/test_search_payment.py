"""The pool/retry boundary of the payment example, found by a seeded genetic search within a stated budget.

The system: two payment-service instances (connection pools, 200 ms acquire timeout) behind the caller (retries,
an outbound rate limiter at 100 attempts/s), all real subprocesses on loopback, with 90 payments/s of real load.
Each trial shrinks both pools to `pool_size`, sets the caller's `retries`, sends the load for 3 s and measures
the error rate. The budget: 8 trials (8 real experiment runs, about 35 s). NSGA-II, seed 1, population 4.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from faultplane.core.store import Store
from faultplane.services.search import run_search

payment = pytest.importorskip("faultplane.examples.payment.system")

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_search_finds_the_pool_retry_boundary(experiments_dir: Path, store: Store) -> None:
    with payment.payment_system(acquire_timeout_ms=200) as system:
        result = await run_search(
            {
                "experiment": str(experiments_dir / "payment-pool-retry.yaml"),
                "variables": {**system.variables(), "rate": 90, "load_s": 3},
                "parameters": {
                    "pool_size": {"type": "int", "low": 1, "high": 6, "severity": "decreasing"},
                    "retries": {"type": "int", "low": 0, "high": 4},
                },
                "objective": {
                    "source": "probe",
                    "name": "payments-under-load",
                    "value_path": "error_rate",
                    "bound": 0.01,
                },
                "budget": 8,
                "seed": 1,
                "sampler": "nsga2",
                "population": 4,
                "cooldown_s": 1,
            },
            store=store,
        )
    assert result.status == "completed" and len(result.trials) == 8
    assert all(t.run_status == "completed" for t in result.trials), [t.note for t in result.trials]
    # A pool of one connection per instance cannot carry 90 payments/s: the error budget breaks.
    assert result.found_breach and result.best is not None
    assert result.best.params["pool_size"] == 1
    assert result.best.measured is not None and result.best.measured > 0.01
    # ... while two connections hold it: the boundary lies between them.
    assert result.boundary is not None and result.boundary["holds"] is not None
    assert result.boundary["holds"]["pool_size"] >= 2
    assert result.boundary["holds_measured"] <= 0.01
    # Among the breaching trials the answer is the fittest: nearest the bound, then the smallest fault.
    breaching = [t for t in result.trials if t.breached]
    assert result.best.fitness == min(t.fitness for t in breaching if t.fitness is not None)
    rows = store.query("SELECT count(*) AS n FROM search_trials WHERE search_id = ?", [result.search_id])
    assert rows[0]["n"] == 8
