"""Findings an engineer can act on: for each failure mode a session met, the resilience pattern that
addresses it, and what adding that pattern does, measured by replaying the session's own plan through the
simulator with and without it. Patterns the simulator does not model are named with no number."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from faultplane.plane.plan import FaultPlan, RegistryInconsistencyFault
from faultplane.plane.simulator import Patterns, Workload, simulate

__all__ = ["Advice", "advise", "failure_modes"]


@dataclass(frozen=True)
class Advice:
    failure_mode: str
    pattern: str
    why: str
    simulated: bool
    task_failure_without: float | None = None
    task_failure_with: float | None = None
    silent_without: int | None = None
    silent_with: int | None = None

    def sentence(self) -> str:
        head = f"{self.failure_mode}: {self.pattern} — {self.why}"
        if not self.simulated:
            return head + " (not simulated: the simulator has no model of this pattern)"
        return (
            f"{head}. Simulated with this session's plan: tasks failing "
            f"{_pct(self.task_failure_without)} -> {_pct(self.task_failure_with)}, silent failures "
            f"{self.silent_without} -> {self.silent_with}"
        )


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


# failure mode -> (pattern, why, the simulator's switch for it or None)
_CATALOG: dict[str, tuple[str, str, Patterns | None]] = {
    "latency": (
        "timeouts with deadline-aware routing",
        "a slow tool must not spend the whole step budget; route to a faster replica or a degraded path",
        Patterns(routing=True),
    ),
    "cold_tool": (
        "deadline-aware routing",
        "the first call after idle is slow; route around it rather than wait",
        Patterns(routing=True),
    ),
    "head_of_line": (
        "hedging, or one connection per slow tool, with deadline-aware routing",
        "one stalled call holds the calls queued behind it; do not let them share its fate",
        Patterns(routing=True),
    ),
    "timeout": (
        "timeouts with a retry budget",
        "an answer that never comes must end the wait and be retried within a budget, not forever",
        Patterns(retry=True),
    ),
    "error_injection": (
        "a retry budget",
        "transient errors are retried, but only within a budget so a storm cannot multiply the load",
        Patterns(retry=True),
    ),
    "registry_inconsistency": (
        "a circuit breaker per tool",
        "a tool that is advertised and keeps failing should stop being called until it recovers",
        Patterns(breaker=True),
    ),
    "stale_route": (
        "output validation with a correctness circuit breaker",
        "a stale route answers successfully with the wrong thing; only a check of the answer catches it",
        Patterns(degradation=True, breaker=True),
    ),
    "schema_drift": (
        "output-schema validation with graceful degradation",
        "a renamed or retyped field must be rejected and the step degraded, not parsed as truth",
        Patterns(degradation=True),
    ),
    "partial_result": (
        "graceful degradation: partial as a first-class state",
        "a truncated answer must be flagged partial, never treated as complete",
        Patterns(degradation=True),
    ),
    "duplicate_response": (
        "idempotency keys on mutating tools",
        "a replayed answer or request must not act twice (faultplane.plane.idempotency)",
        None,
    ),
    "reorder": (
        "pairing answers by request id",
        "answers arriving out of order must be matched to their requests, never to the last one sent",
        None,
    ),
}


def failure_modes(plan: FaultPlan, observed: set[str]) -> list[str]:
    """The failure modes behind the observed fault names, in plan order; stale routes apart from the other
    registry faults, since the pattern that catches them differs."""
    out: list[str] = []
    for fault in plan.faults:
        if fault.label not in observed:
            continue
        mode = (
            "stale_route"
            if isinstance(fault, RegistryInconsistencyFault) and fault.mode == "stale_route"
            else fault.type
        )
        if mode not in out:
            out.append(mode)
    return out


def advise(
    plan: FaultPlan, observed: set[str], *, tools: Sequence[str] = (), workload: Workload | None = None
) -> list[Advice]:
    """One piece of advice per failure mode met, each with the simulated effect of its pattern: the plan
    replayed on a fan-out workload over the session's own `tools` (the simulator's defaults without)."""
    workload = workload or (
        Workload(tasks=400, tools=tuple(sorted(set(tools)))) if tools else Workload(tasks=400)
    )
    modes = failure_modes(plan, observed)
    if not modes:
        return []
    baseline = simulate(plan, workload).metrics
    out = []
    for mode in modes:
        pattern, why, switch = _CATALOG.get(mode, ("-", "no pattern catalogued", None))
        if switch is None:
            out.append(Advice(mode, pattern, why, simulated=False))
            continue
        with_it = simulate(plan, workload, switch).metrics
        out.append(
            Advice(
                mode,
                pattern,
                why,
                simulated=True,
                task_failure_without=baseline.task_failure_rate,
                task_failure_with=with_it.task_failure_rate,
                silent_without=baseline.failed_silently,
                silent_with=with_it.failed_silently,
            )
        )
    return out


def as_dicts(advice: list[Advice]) -> list[dict[str, Any]]:
    return [{**a.__dict__, "sentence": a.sentence()} for a in advice]
