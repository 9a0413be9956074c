"""How one search trial is measured against the objective, and how close to the boundary it lands.

Decides the trial's measured value (the worst reading, from a gate's samples, a named probe's outputs, or the
load generator's figures in its journal), whether it breaches the bound, and its fitness.

Fitness (minimised), with `margin` the signed distance of the measurement past the bound, relative to the bound
(positive = on the breaching side) and `severity` in [0, 1] how hard the fault pushes (0 = gentlest):

    breached:      f = min(ln(1 + margin), 10) + 0.1 * severity     (just past the bound, smallest fault first)
    not breached:  f = 11 + min(ln(1 + |margin|), 10)                (any breach beats any hold; nearer is better)

The logarithm keeps an error rate of 60% against a 1% budget (margin 59) distinguishable from one of 7%
(margin 6) without letting either swamp the severity term near the bound.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from faultplane.services.search_spec import Objective

__all__ = ["breaches_bound", "describe_objective", "fitness", "measure"]

_MARGIN_CAP = 10.0
_SEVERITY_WEIGHT = 0.1
_HOLD_OFFSET = _MARGIN_CAP + 1.0


def describe_objective(obj: Objective, gate: Any | None) -> tuple[str, float, str]:
    """(op, bound, text) with gate defaults filled in."""
    op = obj.op
    bound = obj.bound
    if gate is not None:
        pred = gate.predicate
        op = op or (pred.op if pred.op in (">", ">=", "<", "<=") else ">")
        bound = bound if bound is not None else pred.threshold
    op = op or ">"
    assert bound is not None
    return (
        op,
        bound,
        f"{obj.source} {obj.name}{'.' + obj.value_path if obj.value_path else ''} {op} {bound:g}",
    )


def breaches_bound(op: str, value: float, bound: float) -> bool:
    return {">": value > bound, ">=": value >= bound, "<": value < bound, "<=": value <= bound}[op]


def _worst(values: list[float], op: str) -> float | None:
    if not values:
        return None
    return max(values) if op in (">", ">=") else min(values)


def measure(journal: Mapping[str, Any], obj: Objective, op: str) -> tuple[float | None, bool, str | None]:
    """(worst measured value, whether a gate recorded its breach, note) from one trial's journal."""
    from faultplane.engine.sli import SliError, to_number

    if obj.source == "gate":
        gates = journal.get("gates") or {}
        vals = [
            float(s["value"])
            for s in gates.get("samples") or []
            if s.get("gate") == obj.name and isinstance(s.get("value"), int | float)
        ]
        breach = gates.get("breach") or {}
        tripped = breach.get("gate") == obj.name
        note = None
        if tripped and breach.get("value") is None:
            note = f"gate tripped without a reading: {breach.get('reason') or breach.get('error')}"
        return _worst(vals, op), tripped, note
    if obj.source == "probe":
        runs: list[Mapping[str, Any]] = list(journal.get("run") or [])
        for key in ("before", "after"):
            runs += ((journal.get("steady_states") or {}).get(key) or {}).get("probes") or []
        vals = []
        errors = []
        for r in runs:
            if (r.get("activity") or {}).get("name") != obj.name:
                continue
            if r.get("status") != "succeeded":
                errors.append(r.get("exception") or r.get("status"))
                continue
            try:
                vals.append(to_number(r.get("output"), obj.value_path))
            except SliError as exc:
                errors.append(str(exc))
        note = f"probe {obj.name!r} had no reading: {errors[0]}" if errors and not vals else None
        if not vals and not errors:
            note = f"no probe named {obj.name!r} ran in this trial"
        return _worst(vals, op), False, note
    load = dict(journal.get("load") or {})
    # the load summary keeps run-wide percentiles under latency_ms.{p50,p95,p99}: accept the gates' names
    for key, val in (load.get("latency_ms") or {}).items():
        load.setdefault(f"latency_{key}", val)
    for container in (load, load.get("summary") or {}, load.get("inject") or {}, load.get("during") or {}):
        if isinstance(container, Mapping) and obj.name in container:
            try:
                return to_number(container[obj.name], obj.value_path), False, None
            except SliError as exc:
                return None, False, str(exc)
    return None, False, f"the journal has no load figure {obj.name!r} (does the experiment declare `load:`?)"


def fitness(breached: bool, margin: float, severity: float) -> float:
    if breached:
        return min(math.log1p(max(margin, 0.0)), _MARGIN_CAP) + _SEVERITY_WEIGHT * severity
    return _HOLD_OFFSET + min(math.log1p(abs(margin)), _MARGIN_CAP)
