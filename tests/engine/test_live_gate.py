"""A live SLO gate through the whole engine: a real service degrades under a real fault, the gate aborts the
method within its window and the fault is rolled back."""

from __future__ import annotations

import time

import httpx
import pytest
import yaml

from faultplane.core.faults import FaultRegistry
from faultplane.core.store import Store
from faultplane.examples.demo import EXPERIMENT, demo_service
from faultplane.services.experiments import run_experiment
from faultplane.services.runs import load_journal

pytestmark = pytest.mark.anyio


def _gate_experiment(window_s: float, interval_s: float) -> dict:
    doc = yaml.safe_load(EXPERIMENT.read_text())
    doc["title"] = "gate aborts a slow database"
    doc["slo_gates"] = [
        {
            "name": "orders-latency",
            "sli": "probe",
            "interval_s": interval_s,
            "rollback_on": f"probe > 150 for {window_s}s",
            "probe": doc["slo_gates"][0]["probe"],
        }
    ]
    # hold the fault far longer than the gate's window: only the gate can end the method early
    doc["method"][0]["pauses"] = {"after": 20}
    return doc


async def test_gate_aborts_and_rolls_back_within_the_window(store: Store) -> None:
    window, interval = 1.0, 0.25
    with demo_service() as url:
        t0 = time.monotonic()
        result = await run_experiment(
            _gate_experiment(window, interval), variables={"service_url": url}, store=store
        )
        elapsed = time.monotonic() - t0
        assert result.status == "aborted" and result.exit_code == 3, result.error
        assert "orders-latency" in (result.error or "")
        journal = load_journal(result.run_id, store)
        breach = journal["gates"]["breach"]
        assert breach is not None
        samples = journal["gates"]["samples"]
        assert any(s["breaching"] for s in samples)
        assert all(isinstance(s["ts"], float) for s in samples)
        # the fault was registered, the gate saw it, and the method stopped long before its 20 s pause ended
        assert elapsed < 12
        inject_at = next(p["at"] for p in journal["phases"] if p["phase"] == "inject")
        recover_at = next(p["at"] for p in journal["phases"] if p["phase"] == "recover")
        from datetime import datetime

        inject_s = (datetime.fromisoformat(recover_at) - datetime.fromisoformat(inject_at)).total_seconds()
        first_breach = min(s["ts"] for s in samples if s["breaching"])
        last_sample = max(s["ts"] for s in samples)
        assert (
            last_sample - first_breach <= window + interval + 1.0
        )  # aborted within one interval of the window
        assert inject_s < 8
        # rolled back: the registry is empty and the service is fast again
        assert FaultRegistry().get("demo.db") is None
        assert [r["activity"]["name"] for r in journal["rollbacks"]] == ["restore-database"]
        async with httpx.AsyncClient() as client:
            t = time.perf_counter()
            for _ in range(3):
                (await client.get(f"{url}/orders")).raise_for_status()
            assert (time.perf_counter() - t) / 3 < 0.25
        assert journal["steady_states"]["recovery"]["steady_state_met"] is True
