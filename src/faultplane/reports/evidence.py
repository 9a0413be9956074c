"""Reading the evidence out of a journal: the time axis, the fault window, gates, load and service counters.

Everything here works on the journal as a plain mapping (`Journal.model_dump(mode="json")` or the stored JSON)
and tolerates missing parts: a dry run, a run without load or an interrupted run still yields what there is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from faultplane.core.gates import parse_predicate

__all__ = ["Evidence", "GateLine", "evidence", "to_epoch"]


def to_epoch(value: Any) -> float | None:
    """Seconds since the epoch from an ISO timestamp, a datetime or a number; None when unreadable."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, datetime):
        return value.timestamp()
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        return None


@dataclass
class GateLine:
    name: str
    sli: str
    predicate: str
    threshold: float
    op: str
    window_s: float


@dataclass
class Evidence:
    """The parts of one journal a report draws on; times are seconds relative to `origin` (epoch)."""

    origin: float
    phases: dict[str, float] = field(default_factory=dict)
    fault_start: float | None = None
    fault_end: float | None = None
    series: list[dict[str, Any]] = field(default_factory=list)  # load rows with `x` (relative seconds)
    gates: list[GateLine] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)  # gate samples with `x`
    breach: dict[str, Any] | None = None
    breach_x: float | None = None
    actions: list[tuple[float, str, str]] = field(default_factory=list)  # (x, section, name)
    load: dict[str, Any] | None = None
    caller: dict[str, Any] | None = None  # retry/limiter counters found in activity outputs
    pools: list[dict[str, Any]] = field(default_factory=list)  # connection pool counters found in outputs


def _outputs(journal: Mapping[str, Any]) -> Iterator[tuple[str, str, Any]]:
    for section in ("run", "rollbacks"):
        for r in journal.get(section) or []:
            yield section, str((r.get("activity") or {}).get("name", "")), r.get("output")


def _dicts(value: Any, depth: int = 0) -> Iterator[dict[str, Any]]:
    """Every mapping inside an activity output (an http provider's body, a stats block inside it, ...)."""
    if depth > 4:
        return
    if isinstance(value, dict):
        yield value
        for v in value.values():
            yield from _dicts(v, depth + 1)
    elif isinstance(value, list):
        for v in value[:50]:
            yield from _dicts(v, depth + 1)


def evidence(journal: Mapping[str, Any]) -> Evidence:
    load = journal.get("load") or None
    start = to_epoch(journal.get("start"))
    origin = to_epoch(load.get("t0")) if load else None
    origin = origin if origin is not None else (start if start is not None else 0.0)
    ev = Evidence(origin=origin, load=load)

    for p in journal.get("phases") or []:
        at = to_epoch(p.get("at"))
        if at is not None and p.get("phase") not in ev.phases:
            ev.phases[str(p.get("phase"))] = at - origin
    ev.fault_start = ev.phases.get("inject")
    ev.fault_end = ev.phases.get("recover")
    if ev.fault_start is not None and ev.fault_end is None:
        end = to_epoch(journal.get("end"))
        ev.fault_end = (end - origin) if end is not None else None

    if load:
        for row in load.get("series") or []:
            ev.series.append({**row, "x": float(row.get("t", 0)) + 0.5})  # a second's row sits mid-second

    for g in (journal.get("experiment") or {}).get("slo_gates") or []:
        try:
            pred = parse_predicate(str(g.get("rollback_on", "")))
        except ValueError:
            continue
        ev.gates.append(
            GateLine(
                name=str(g.get("name", "")),
                sli=str(g.get("sli", pred.metric)),
                predicate=str(g.get("rollback_on")),
                threshold=pred.threshold,
                op=pred.op,
                window_s=pred.window_s,
            )
        )
    gates = journal.get("gates") or {}
    for s in gates.get("samples") or []:
        ts = to_epoch(s.get("ts"))
        if ts is not None:
            ev.samples.append({**s, "x": ts - origin})
    ev.breach = gates.get("breach") or None
    if ev.breach:
        ts = to_epoch(ev.breach.get("ts"))
        ev.breach_x = ts - origin if ts is not None else None

    for section in ("run", "rollbacks"):
        for r in journal.get(section) or []:
            at = to_epoch(r.get("end"))
            if at is not None and (r.get("activity") or {}).get("type") == "action":
                ev.actions.append((at - origin, section, str(r["activity"].get("name", ""))))

    callers: dict[str, list[dict[str, Any]]] = {"run": [], "rollbacks": []}
    pools: dict[str, list[dict[str, Any]]] = {"run": [], "rollbacks": []}
    for section, _name, output in _outputs(journal):
        for d in _dicts(output):
            if "retry_amplification" in d and "attempts" in d:
                callers[section].append(d)
            elif isinstance(d.get("pool"), dict) and "size" in d["pool"] and "pool_timeouts" in d:
                pools[section].append(d)
    # Which reading covers this run's fault window is a matter of time, not of size: the method's first
    # reading may be the reply of the action that reset the counters, holding the *previous* period (another
    # run's storm). The counters restart in the method, so the last reading taken (a rollback's, else the
    # method's last probe) covers the whole fault window and nothing before it.
    readings = callers["rollbacks"] or callers["run"]
    ev.caller = readings[-1] if readings else None
    ev.pools = pools["rollbacks"] or pools["run"][-_instances(pools["run"]) :]
    return ev


def _instances(readings: list[dict[str, Any]]) -> int:
    """How many distinct pools the readings come from (one reading per instance per probe round)."""
    seen = {(p["pool"].get("kind"), p["pool"].get("base_size"), p.get("seed")) for p in readings}
    return max(1, len(seen))
