"""The kill switch: stop every running experiment and revert every active fault, whoever started it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from faultplane.core.store import Store, open_store
from faultplane.services.runs import abort_runs

__all__ = ["kill_all"]


def kill_all(store: Store | None = None) -> list[str]:
    """Returns what it did, one line per thing, for the person who pulled the switch."""
    store = store or open_store()
    report: list[str] = []
    stopped = abort_runs(None, store)
    report.append(f"runs stopped (rolling back): {', '.join(stopped) if stopped else 'none running'}")
    try:
        from faultplane.core.faults import FaultRegistry
    except ImportError:
        FaultRegistry = None  # type: ignore[assignment,misc]
    if FaultRegistry is not None:
        registry = FaultRegistry()
        removed = [f.name for f in registry.active()]
        for name in removed:
            registry.remove(name)
        report.append(f"registered faults removed: {', '.join(removed) if removed else 'none'}")
    try:
        from faultplane.drivers import leases
    except ImportError:
        leases = None  # type: ignore[assignment]
    if leases is not None:
        # force: a live controller's leases too — the switch is pulled because that controller can't be trusted
        reverted = leases.reap(force=True)
        report.append(f"leased faults reverted: {len(reverted)}")
    store.insert(
        "audit",
        [
            {
                "ts": datetime.now(UTC),
                "actor": "cli",
                "action": "abort --all",
                "subject": "*",
                "details": json.dumps(report),
            }
        ],
    )
    return report
