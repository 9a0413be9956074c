"""The numbers behind `faultplane plane demo`: fan-out compounding, and what each resilience pattern buys.

Pure data (the CLI renders it): deterministic for a seed, offline, a second or so of CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from faultplane.plane.metrics import PlaneMetrics
from faultplane.plane.plan import FaultPlan, parse_plan
from faultplane.plane.simulator import Patterns, Workload, simulate

__all__ = ["CUMULATIVE_PATTERNS", "DemoReport", "demo_plan", "mixed_plan", "run_demo"]

PER_CALL_ERROR = 0.02

CUMULATIVE_PATTERNS = (
    Patterns(),
    Patterns(retry=True),
    Patterns(retry=True, degradation=True),
    Patterns(retry=True, degradation=True, breaker=True),
    Patterns(retry=True, degradation=True, breaker=True, routing=True),
)
CUMULATIVE_LABELS = ("none", "+ retry budget", "+ degradation", "+ ETA breaker", "+ deadline routing")
ALL_PATTERNS = CUMULATIVE_PATTERNS[-1]


def demo_plan(seed: int = 7) -> FaultPlan:
    return parse_plan({"seed": seed, "faults": [{"type": "error_injection", "rate": PER_CALL_ERROR}]})


def mixed_plan(seed: int = 7) -> FaultPlan:
    """Ordinary plane trouble: sparse errors and timeouts, slow spikes, drift, truncation, a broken tool."""
    return parse_plan(
        {
            "seed": seed,
            "faults": [
                {"type": "error_injection", "rate": PER_CALL_ERROR},
                {"type": "timeout", "probability": 0.01},
                {"type": "latency", "tools": ["fetch"], "added_ms": 900, "probability": 0.05},
                {
                    "type": "schema_drift",
                    "tools": ["lookup"],
                    "rename": {"items": "results"},
                    "probability": 0.03,
                },
                {"type": "partial_result", "tools": ["search"], "keep_fraction": 0.5, "probability": 0.03},
                {
                    "type": "registry_inconsistency",
                    "tools": ["rank"],
                    "mode": "listed_but_broken",
                    "probability": 0.5,
                },
            ],
        }
    )


@dataclass
class FanoutRow:
    fanout: int
    analytic: float | None  # 1-(1-p)^n, for the default plan's per-call error p
    without: float
    with_patterns: float
    tcaf_with: float


@dataclass
class PatternRow:
    label: str
    metrics: PlaneMetrics


@dataclass
class DemoReport:
    seed: int
    tasks: int
    fanout: int
    fanout_rows: list[FanoutRow]
    error_rows: list[PatternRow]
    mixed_rows: list[PatternRow]
    plan: FaultPlan
    mixed: FaultPlan

    def as_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "tasks": self.tasks,
            "fanout": self.fanout,
            "per_call_error": PER_CALL_ERROR,
            "fanout_compounding": [r.__dict__ for r in self.fanout_rows],
            "patterns_error_plan": [
                {"patterns": r.label, **_metric_summary(r.metrics)} for r in self.error_rows
            ],
            "patterns_mixed_plan": [
                {"patterns": r.label, **_metric_summary(r.metrics)} for r in self.mixed_rows
            ],
        }


def _metric_summary(m: PlaneMetrics) -> dict[str, Any]:
    return {
        "task_failure_rate": m.task_failure_rate,
        "blast_radius": m.blast_radius,
        "failed_safely": m.failed_safely,
        "failed_silently": m.failed_silently,
        "tcsr": m.tcsr,
        "eta": m.eta,
        "tcaf": m.tcaf,
        "task_outcomes": m.task_outcomes,
    }


def run_demo(
    *, seed: int = 7, tasks: int = 1000, fanout: int = 8, plan: FaultPlan | None = None
) -> DemoReport:
    base = plan or demo_plan(seed)
    fan_rows = []
    for n in (1, 2, 4, 8, 16):
        w = Workload(tasks=max(1, tasks // 2), fanout=n)
        off = simulate(base, w, Patterns()).metrics
        on = simulate(base, w, ALL_PATTERNS).metrics
        fan_rows.append(
            FanoutRow(
                fanout=n,
                analytic=1.0 - (1.0 - PER_CALL_ERROR) ** n if plan is None else None,
                without=off.task_failure_rate or 0.0,
                with_patterns=on.task_failure_rate or 0.0,
                tcaf_with=on.tcaf or 0.0,
            )
        )
    w = Workload(tasks=tasks, fanout=fanout)
    steps = list(zip(CUMULATIVE_LABELS, CUMULATIVE_PATTERNS, strict=True))
    error_rows = [PatternRow(label, simulate(base, w, p).metrics) for label, p in steps]
    mixed = mixed_plan(seed)
    mixed_rows = [PatternRow(label, simulate(mixed, w, p).metrics) for label, p in steps]
    return DemoReport(seed, tasks, fanout, fan_rows, error_rows, mixed_rows, base, mixed)
