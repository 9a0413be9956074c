"""The numbers behind `faultplane plane demo`: fan-out compounding, and what each resilience pattern buys.

Pure data (the CLI renders it), deterministic for a seed, offline. The story, in three tables:

1. per-task failure compounds with fan-out, 1-(1-p)^n, and a retry budget collapses it;
2. each pattern against the fault it exists for, without and with it, so every row shows the pattern working;
3. all the patterns stacked against mixed plane faults, where no step makes things worse.

Every simulation with the same (plan, fan-out, patterns) is run once and shared, so a number that appears in
two tables is the same number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from faultplane.plane.metrics import PlaneMetrics
from faultplane.plane.plan import FaultPlan, parse_plan
from faultplane.plane.simulator import Patterns, Workload, simulate

__all__ = [
    "CUMULATIVE_PATTERNS",
    "FANOUTS",
    "DemoReport",
    "demo_plan",
    "mixed_plan",
    "pattern_scenarios",
    "run_demo",
]

PER_CALL_ERROR = 0.02
FANOUTS = (1, 2, 4, 8, 16)

NONE = Patterns()
RETRY = Patterns(retry=True)
CUMULATIVE_PATTERNS = (
    NONE,
    RETRY,
    Patterns(retry=True, degradation=True),
    Patterns(retry=True, degradation=True, breaker=True),
    Patterns(retry=True, degradation=True, breaker=True, routing=True),
)
CUMULATIVE_LABELS = ("none", "+ retry budget", "+ degradation", "+ ETA breaker", "+ deadline routing")
ALL_PATTERNS = CUMULATIVE_PATTERNS[-1]


def demo_plan(seed: int = 7) -> FaultPlan:
    return parse_plan({"seed": seed, "faults": [{"type": "error_injection", "rate": PER_CALL_ERROR}]})


def mixed_plan(seed: int = 7) -> FaultPlan:
    """Ordinary plane trouble: sparse errors and timeouts, slow spikes, drift, truncation, a flaky tool.

    Every fault scopes a tool *and* its mirror (`fetch*`), so a mirror escapes none of it, and the flaky tool
    fails 30% of its calls, which retries rescue: the breaker must stay closed and routing has nothing to
    win here. Their own cases are in `pattern_scenarios`.
    """
    return parse_plan(
        {
            "seed": seed,
            "faults": [
                {"type": "error_injection", "rate": PER_CALL_ERROR},
                {"type": "timeout", "probability": 0.01},
                {"type": "latency", "tools": ["fetch*"], "added_ms": 900, "probability": 0.05},
                {
                    "type": "schema_drift",
                    "tools": ["lookup*"],
                    "rename": {"items": "results"},
                    "probability": 0.03,
                },
                {"type": "partial_result", "tools": ["search*"], "keep_fraction": 0.5, "probability": 0.03},
                {
                    "type": "registry_inconsistency",
                    "tools": ["rank*"],
                    "mode": "listed_but_broken",
                    "probability": 0.3,
                },
            ],
        }
    )


@dataclass(frozen=True)
class Scenario:
    """One pattern against the fault it exists for: `baseline` patterns vs `baseline` + the pattern."""

    fault: str
    pattern: str
    plan: dict[str, Any]
    baseline: Patterns
    with_pattern: Patterns
    baseline_label: str


def pattern_scenarios(seed: int = 7) -> list[Scenario]:
    return [
        Scenario(
            "2% of calls fail",
            "retry budget",
            {"faults": [{"type": "error_injection", "rate": PER_CALL_ERROR}]},
            NONE,
            RETRY,
            "none",
        ),
        Scenario(
            "5% of lookup/search answers drift or are truncated",
            "degradation",
            {
                "faults": [
                    {
                        "type": "schema_drift",
                        "tools": ["lookup"],
                        "rename": {"items": "results"},
                        "probability": 0.05,
                    },
                    {
                        "type": "partial_result",
                        "tools": ["search"],
                        "keep_fraction": 0.5,
                        "probability": 0.05,
                    },
                ]
            },
            NONE,
            Patterns(degradation=True),
            "none",
        ),
        Scenario(
            "rank is down (every call fails)",
            "ETA breaker",
            {"faults": [{"type": "registry_inconsistency", "tools": ["rank"], "mode": "listed_but_broken"}]},
            Patterns(retry=True, degradation=True),
            Patterns(retry=True, degradation=True, breaker=True),
            "retry + degradation",
        ),
        Scenario(
            "fetch's primary is 900 ms slower; its mirror is not",
            "deadline routing",
            {"faults": [{"type": "latency", "tools": ["fetch"], "added_ms": 900}]},
            NONE,
            Patterns(routing=True),
            "none",
        ),
    ]


@dataclass
class FanoutRow:
    fanout: int
    analytic: float | None  # 1-(1-p)^n, for the default plan's per-call error p
    without: float
    with_retry: float
    tcaf_with: float


@dataclass
class PatternRow:
    label: str
    metrics: PlaneMetrics


@dataclass
class ScenarioRows:
    fault: str
    pattern: str
    without: PatternRow
    with_pattern: PatternRow


@dataclass
class DemoReport:
    seed: int
    tasks: int
    fanout: int
    fanout_rows: list[FanoutRow]
    scenarios: list[ScenarioRows]
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
            "pattern_scenarios": [
                {
                    "fault": s.fault,
                    "pattern": s.pattern,
                    "without": {"patterns": s.without.label, **_metric_summary(s.without.metrics)},
                    "with": {"patterns": s.with_pattern.label, **_metric_summary(s.with_pattern.metrics)},
                }
                for s in self.scenarios
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
    memo: dict[tuple[int, int, Patterns], PlaneMetrics] = {}

    def run(p: FaultPlan, n: int, patterns: Patterns) -> PlaneMetrics:
        key = (id(p), n, patterns)
        if key not in memo:
            memo[key] = simulate(p, Workload(tasks=tasks, fanout=n), patterns).metrics
        return memo[key]

    fan_rows = []
    for n in sorted({*FANOUTS, fanout}):
        off, on = run(base, n, NONE), run(base, n, RETRY)
        fan_rows.append(
            FanoutRow(
                fanout=n,
                analytic=1.0 - (1.0 - PER_CALL_ERROR) ** n if plan is None else None,
                without=off.task_failure_rate or 0.0,
                with_retry=on.task_failure_rate or 0.0,
                tcaf_with=on.tcaf or 0.0,
            )
        )
    scenarios = []
    for sc in pattern_scenarios(seed):
        # The 2% scenario is the default plan itself, so its numbers are the fan-out table's.
        p = base if (plan is None and sc.pattern == "retry budget") else parse_plan({"seed": seed, **sc.plan})
        scenarios.append(
            ScenarioRows(
                sc.fault,
                sc.pattern,
                PatternRow(sc.baseline_label, run(p, fanout, sc.baseline)),
                PatternRow(
                    f"+ {sc.pattern}" if sc.baseline.any else sc.pattern, run(p, fanout, sc.with_pattern)
                ),
            )
        )
    mixed = mixed_plan(seed)
    steps = zip(CUMULATIVE_LABELS, CUMULATIVE_PATTERNS, strict=True)
    mixed_rows = [PatternRow(label, run(mixed, fanout, p)) for label, p in steps]
    return DemoReport(seed, tasks, fanout, fan_rows, scenarios, mixed_rows, base, mixed)
