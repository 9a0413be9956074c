"""Evidence of one run: its recovery, fault types, estimate vs actual and score, from its journal alone.

Everything here is a pure function of one journal (its JSON dict form): the figures are derived once, when the
journal is indexed into `run_metrics` (`evidence_ingest`), and every reader takes them from there. Also the
error every evidence function raises (`EvidenceError`). Formulas: docs/evidence.md.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

FAULT_TYPES = ("latency", "error", "timeout", "resource_exhaustion", "network_partition")


class EvidenceError(ValueError):
    """Bad input to an evidence function; the message names the field and the fix."""


# ---- recovery --------------------------------------------------------------------------------------------


def sustained_recovery(checks: Sequence[tuple[float, bool]], window_s: float) -> float | None:
    """Seconds from fault removal until the steady state held on every check for `window_s` seconds.

    `checks` are (seconds since the fault was removed, steady state met) in time order. The recovery time is the
    time of the first check of the first run of passing checks that lasts `window_s` (from its first to a later
    check); None when no such run exists. With `window_s = 0` it is the first passing check.
    """
    if window_s < 0:
        raise EvidenceError(f"window_s: {window_s!r} is negative; fix: 0 or more seconds")
    start: float | None = None
    for t, met in checks:
        if not met:
            start = None
            continue
        if start is None:
            start = t
        if t - start >= window_s:
            return start
    return None


class Recovery(BaseModel):
    measured: bool = Field(description="the run measured recovery (it has a steady-state hypothesis)")
    met: bool | None = None
    time_to_recover_s: float | None = None
    window_s: float = Field(0.0, description="how long the steady state had to hold; 0 = one passing check")
    source: Literal["checks", "engine", "none"] = "none"


def recovery_of(journal: Mapping[str, Any], window_s: float | None = None) -> Recovery:
    """Recovery of one run: from its recorded recovery checks over a sustained window when the journal has them
    (`steady_states.recovery.checks`), else the engine's single-check `time_to_recover_s`."""
    state = ((journal.get("steady_states") or {}).get("recovery")) or None
    if not state:
        return Recovery(measured=False)
    checks = state.get("checks")
    window = float(window_s if window_s is not None else state.get("window_s") or 0.0)
    if checks:
        pairs = [(float(c["t"]), bool(c["met"])) for c in checks]
        ttr = sustained_recovery(pairs, window)
        return Recovery(
            measured=True,
            met=ttr is not None,
            time_to_recover_s=None if ttr is None else round(ttr, 6),
            window_s=window,
            source="checks",
        )
    met = state.get("steady_state_met")
    ttr = state.get("time_to_recover_s")
    return Recovery(
        measured=True,
        met=met,
        time_to_recover_s=float(ttr) if met and ttr is not None else None,
        window_s=0.0,
        source="engine",
    )


# ---- per-run figures -----------------------------------------------------------------------------------------


def fault_types(journal: Mapping[str, Any]) -> list[str]:
    """The fault types the method injected: `fault_type`/`type` arguments of its actions, or a fault type named in
    a driver action (e.g. `netproxy.add_latency`)."""
    found: list[str] = []
    for run in journal.get("run") or []:
        activity = run.get("activity") or {}
        if activity.get("type") != "action":
            continue
        provider = activity.get("provider") or {}
        raw_args = provider.get("arguments")
        args: Mapping[str, Any] = raw_args if isinstance(raw_args, Mapping) else {}
        candidates = [
            args.get("fault_type"),
            (args.get("fault") or {}).get("type") if isinstance(args.get("fault"), Mapping) else None,
        ]
        output = run.get("output")
        if isinstance(output, Mapping):
            candidates.append(output.get("fault_type") or output.get("fault"))
        name = f"{provider.get('driver') or ''}.{provider.get('name') or ''}".lower()
        candidates += [t for t in FAULT_TYPES if t in name or t.replace("_", "-") in name]
        for c in candidates:
            if isinstance(c, str) and c in FAULT_TYPES and c not in found:
                found.append(c)
    return found


def _load_figure(journal: Mapping[str, Any], *names: str) -> float | None:
    load = journal.get("load") or {}
    if isinstance(load, Mapping):
        load = load.get("summary", load)
        for name in names:
            v = load.get(name) if isinstance(load, Mapping) else None
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                return float(v)
    return None


def _gate_peak(journal: Mapping[str, Any], sli: str) -> float | None:
    values = [
        s["value"]
        for s in (journal.get("gates") or {}).get("samples") or []
        if s.get("sli") == sli and isinstance(s.get("value"), int | float)
    ]
    return float(max(values)) if values else None


def actuals(journal: Mapping[str, Any], window_s: float | None = None) -> dict[str, float | None]:
    """What was measured: the load generator's summary first, else the peak of gate samples of that SLI."""
    err = _load_figure(journal, "error_rate")
    p99 = _load_figure(journal, "latency_p99_ms", "latency_p99")
    return {
        "error_rate": err if err is not None else _gate_peak(journal, "error_rate"),
        "latency_p99_ms": p99 if p99 is not None else _gate_peak(journal, "latency_p99"),
        "recovery_seconds": recovery_of(journal, window_s).time_to_recover_s,
    }


class EstimateComparison(BaseModel):
    metric: Literal["error_rate", "latency_p99_ms", "recovery_seconds"]
    estimate: float | None
    actual: float | None
    within: bool | None = Field(description="actual <= estimate (the estimate is the expected worst case)")
    ratio: float | None = Field(description="actual / estimate")


def estimate_vs_actual(journal: Mapping[str, Any], window_s: float | None = None) -> dict[str, Any]:
    """The author's estimate beside what the run measured, metric by metric."""
    est = journal.get("estimate") or (journal.get("experiment") or {}).get("estimate") or {}
    act = actuals(journal, window_s)
    rows = []
    for metric in ("error_rate", "latency_p99_ms", "recovery_seconds"):
        e, a = est.get(metric), act[metric]
        rows.append(
            EstimateComparison(
                metric=metric,
                estimate=e,
                actual=a,
                within=None if e is None or a is None else a <= e,
                ratio=None if e in (None, 0) or a is None else round(a / e, 6),
            )
        )
    return {"impact": est.get("impact"), "comparisons": rows}


def passed(status: str | None) -> bool:
    return status == "completed"


def run_score(
    status: str | None,
    recovery_met: bool | None,
    time_to_recover_s: float | None,
    est_recovery_s: float | None,
) -> float:
    """0-100: 70 for a run whose hypothesis held (status completed), 30 for recovery (15 when slower than the
    estimate, 0 when the steady state did not return; a run without recovery measurement earns it by passing)."""
    p = 1.0 if passed(status) else 0.0
    if recovery_met is None:
        r = p
    elif not recovery_met:
        r = 0.0
    elif est_recovery_s is not None and time_to_recover_s is not None and time_to_recover_s > est_recovery_s:
        r = 0.5
    else:
        r = 1.0
    return round(100.0 * (0.7 * p + 0.3 * r), 6)


def _dt(value: Any) -> dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        d = value
    elif isinstance(value, int | float):
        d = dt.datetime.fromtimestamp(value, dt.UTC)
    else:
        d = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return d.replace(tzinfo=dt.UTC) if d.tzinfo is None else d.astimezone(dt.UTC)


def run_metrics_row(journal: Mapping[str, Any], window_s: float | None = None) -> dict[str, Any]:
    """The `run_metrics` row of one journal (JSON dict form)."""
    experiment = journal.get("experiment") or {}
    est = journal.get("estimate") or experiment.get("estimate") or {}
    rec = recovery_of(journal, window_s)
    act = actuals(journal, window_s)
    status = journal.get("status")
    est_rec = est.get("recovery_seconds")
    return {
        "run_id": journal["run_id"],
        "experiment_key": journal.get("family") or experiment.get("title"),
        "experiment_title": experiment.get("title"),
        "status": status,
        "passed": passed(status),
        "dry_run": bool(journal.get("dry_run")),
        "started_at": _dt(journal.get("start")),
        "duration_s": journal.get("duration"),
        "recovery_met": rec.met,
        "time_to_recover_s": rec.time_to_recover_s,
        "recovery_window_s": rec.window_s if rec.measured else None,
        "est_recovery_s": est_rec,
        "est_error_rate": est.get("error_rate"),
        "est_latency_p99_ms": est.get("latency_p99_ms"),
        "actual_error_rate": act["error_rate"],
        "actual_latency_p99_ms": act["latency_p99_ms"],
        "gate_breached": bool((journal.get("gates") or {}).get("breach")),
        "fault_types": fault_types(journal),
        "blast_stage": (journal.get("policy") or {}).get("stage"),
        "run_score": run_score(status, rec.met, rec.time_to_recover_s, est_rec),
    }
