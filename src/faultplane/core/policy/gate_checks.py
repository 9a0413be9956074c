"""Gate sanity: can the experiment's SLO gates stop it when the system really breaks?

A gate is refused when it is not a numeric bound, measures another SLI than it names, can never trip (a
fraction above 1, a latency below 0), samples less often than its window, or reads an SLI nothing in the run
measures. The policy's `gates:` rules then ask for enough valid gates, and for a window on at least one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from faultplane.core.gates import LOAD_SLIS, GateSpec
from faultplane.core.policy.model import GateRules
from faultplane.core.policy.verdict import Violation

__all__ = ["check_gates"]


_FRACTION_SLIS = {"error_rate", "availability"}
_GATE_EXAMPLE = '`slo_gates: [{name: errors, sli: error_rate, rollback_on: "error_rate > 0.01 for 30s"}]`'


def _gate_source_problem(spec: GateSpec, raw: Mapping[str, Any]) -> tuple[str, str] | None:
    """(message, fix) when nothing in the run can measure this gate: it would abort the run at its first
    sample (or, with `on_missing: ignore`, guard nothing), so it is refused up front instead."""
    if spec.sli in LOAD_SLIS and not raw.get("load"):
        return (
            f"gate {spec.name!r} reads {spec.sli} from the built-in load generator, but the experiment has no "
            "`load:`, so nothing can measure it",
            "declare `load: {url: http://127.0.0.1:8080/, rate: 20}`, or measure it with `sli: probe` "
            "(a `probe:` activity) or `sli: prometheus` (a `prometheus: {url, query}` block)",
        )
    if spec.sli == "prometheus" and not (spec.prometheus or {}).get("url"):
        return (
            f"gate {spec.name!r} queries Prometheus but names no server",
            "add `url:` to its `prometheus:` block, e.g. http://127.0.0.1:9090",
        )
    return None


_UNREACHABLE_FIX = (
    "bound the SLI where it can go, e.g. `error_rate > 0.01 for 30s` or `availability < 0.99 for 30s`"
)


def _never_trips(sli: str, op: str, threshold: float, *, percent: bool = False) -> str | None:
    """Why a gate's predicate can never be true for this SLI (every built-in SLI is >= 0; fractions <= 1; a
    threshold written as a percentage is a share, 0 %..100 %, whatever measures it)."""
    shown = f"{threshold * 100:g}%" if percent else f"{threshold:g}"
    if percent and (
        (op in (">", ">=") and (threshold > 1 or (op == ">" and threshold == 1)))
        or (op in ("<", "<=") and (threshold < 0 or (op == "<" and threshold == 0)))
        or (op == "==" and not 0 <= threshold <= 1)
    ):
        return f"a percentage lies between 0% and 100%, so `{sli} {op} {shown}` can never trip"
    if sli in ("probe", "prometheus"):
        return None  # their values are the author's; only the share rule above is known (and the baseline)
    if op in ("<", "<=") and (threshold < 0 or (op == "<" and threshold == 0)):
        return f"{sli} is never below {shown}, so `{sli} {op} {shown}` can never trip"
    if op == "==" and threshold < 0:
        return f"{sli} is never negative, so `{sli} {op} {shown}` can never trip"
    if sli in _FRACTION_SLIS and (
        (op in (">", ">=") and (threshold > 1 or (op == ">" and threshold == 1)))
        or (op == "==" and threshold > 1)
    ):
        return f"{sli} is a fraction, never above 1, so `{sli} {op} {shown}` can never trip"
    return None


def check_gates(raw: Mapping[str, Any], rules: GateRules) -> list[Violation]:
    out: list[Violation] = []
    gates = raw.get("slo_gates")
    if gates is None:
        gates = []
    if not isinstance(gates, list):
        return [Violation("gates.required", "slo_gates", "must be a list of gates", f"write {_GATE_EXAMPLE}")]
    valid: list[GateSpec] = []
    for i, g in enumerate(gates):
        where = f"slo_gates[{i}]"
        try:
            spec = GateSpec.model_validate(g)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            msg = str(err.get("ctx", {}).get("error") or err["msg"])
            out.append(
                Violation(
                    "gates.numeric",
                    f"{where}.{loc}" if loc else where,
                    f"gate is not a numeric bound: {msg}",
                    'write the gate as `<sli> <op> <number> for <N>s`, e.g. "error_rate > 0.01 for 30s"',
                )
            )
            continue
        pred = spec.predicate
        if spec.sli not in ("probe", "prometheus") and pred.metric != spec.sli:
            out.append(
                Violation(
                    "gates.numeric",
                    f"{where}.rollback_on",
                    f"predicate measures {pred.metric!r} but the gate's sli is {spec.sli!r}",
                    f"use `{spec.sli} {pred.op} <number>` or change `sli:` to {pred.metric!r}",
                )
            )
            continue
        if spec.sli in _FRACTION_SLIS and not 0 <= pred.threshold <= 1:
            out.append(
                Violation(
                    "gates.numeric",
                    f"{where}.rollback_on",
                    f"{spec.sli} is a fraction between 0 and 1, so {pred.threshold:g} can never be crossed",
                    f"write e.g. `{spec.sli} {pred.op} 0.01` or `{spec.sli} {pred.op} 1%`",
                )
            )
            continue
        never = _never_trips(spec.sli, pred.op, pred.threshold, percent="%" in spec.rollback_on)
        if never is not None:
            out.append(Violation("gates.unreachable", f"{where}.rollback_on", never, _UNREACHABLE_FIX))
            continue
        if not math.isfinite(pred.threshold):
            out.append(
                Violation("gates.numeric", f"{where}.rollback_on", "threshold is not finite", "use a number")
            )
            continue
        if pred.window_s > 0 and spec.interval_s > pred.window_s:
            out.append(
                Violation(
                    "gates.window",
                    f"{where}.interval_s",
                    f"samples every {spec.interval_s:g}s but the window is {pred.window_s:g}s",
                    "sample at least once per window: lower interval_s or widen `for <N>s`",
                )
            )
            continue
        source = _gate_source_problem(spec, raw)
        if source is not None:
            out.append(Violation("gates.source", f"{where}.sli", *source))
            continue
        valid.append(spec)
    if rules.required and len(valid) < max(rules.min_gates, 1 if rules.required else 0) and not out:
        out.append(
            Violation(
                "gates.required",
                "slo_gates",
                f"the experiment declares {len(valid)} SLO gate(s); at least {max(rules.min_gates, 1)} needed "
                "so a live breach can stop the fault",
                f"add a numeric gate with a window, e.g. {_GATE_EXAMPLE}",
            )
        )
    if rules.require_window and valid and not any(s.predicate.window_s > 0 for s in valid):
        out.append(
            Violation(
                "gates.window",
                "slo_gates",
                "no gate has a window (`for <N>s`), so a single noisy sample would decide",
                'add a window to a gate, e.g. rollback_on: "error_rate > 0.01 for 30s"',
            )
        )
    return out
