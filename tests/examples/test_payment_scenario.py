"""The payment retry storm end to end: real services on loopback, real load, the real engine and its gates.

Nothing here decides an outcome: the experiments run as a user runs them and the assertions read the journals.
"""

from __future__ import annotations

from typing import Any

import pytest

from faultplane.core.store import Store
from faultplane.examples.payment import SYSTEM, payment_system
from faultplane.examples.payment.scenario import run_scenario
from faultplane.reports.evidence import evidence

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def _rollback_seconds(journal: dict[str, Any]) -> list[dict[str, Any]]:
    """The load's per-second rows that started after the rollbacks had finished."""
    ev = evidence(journal)
    done = max(x for x, section, _ in ev.actions if section == "rollbacks")
    return [r for r in ev.series if r["x"] - 0.5 >= done and not r.get("partial")]


async def test_the_retry_storm_and_its_fix(store: Store) -> None:
    with payment_system(**SYSTEM) as system:
        outcomes = await run_scenario(system, store=store, pause_s=2.0)
    by_step = {o.step: o for o in outcomes}
    summary = {o.step: (o.status, o.error_rate, o.worst_p99_ms, o.amplification, o.breach) for o in outcomes}

    # 1-3: the pools shrink on one instance, the SLOs hold
    for step in ("1", "2", "3"):
        o = by_step[step]
        assert o.status == "completed", summary
        assert o.journal["gates"]["breach"] is None
        assert o.error_rate == 0.0, summary

    # 4: the gate breaches and rolls back; the journal shows the storm's mechanism
    four = by_step["4"]
    assert four.status == "aborted", summary
    breach = four.journal["gates"]["breach"]
    assert breach is not None and breach["gate"] in ("payment-error-rate", "payment-latency-p99")
    assert all(r["status"] == "succeeded" for r in four.journal["rollbacks"])
    assert four.amplification is not None and four.amplification > 3.0, summary
    assert four.limiter_rejections is not None and four.limiter_rejections > 0, summary
    assert "self-inflicted denial of service" in four.postmortem
    assert breach["gate"] in four.postmortem
    # the rollback ends the outage: the steady state returns and the load's last seconds are clean
    recovery = four.journal["steady_states"]["recovery"]
    assert recovery["steady_state_met"] is True, recovery
    after = _rollback_seconds(four.journal)
    assert after, "the load ran on after the rollbacks"
    tail = after[-1]
    assert tail["errors"] == 0 and tail["ok"] > 0, after

    # 4 with the fix: the same fault, the SLOs hold, retries stay contained
    fixed = by_step["4+fix"]
    assert fixed.status == "completed", summary
    assert fixed.journal["gates"]["breach"] is None
    assert fixed.error_rate is not None and fixed.error_rate < 0.01, summary
    assert fixed.amplification is not None and fixed.amplification < 2.0, summary
