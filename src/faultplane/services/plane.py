"""Plane services: what `faultplane plane report/simulate` (and any other surface) ask of the tool-call plane.

The surfaces render; the queries and the choices live here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from faultplane.plane.plan import FaultPlan

__all__ = [
    "PATTERN_NAMES",
    "NoSuchSessionError",
    "NoSuchStoreError",
    "list_sessions",
    "parse_patterns",
    "session_report",
    "simulate_plan",
]

PATTERN_NAMES = ("retry", "degradation", "breaker", "routing", "idempotency")


class NoSuchStoreError(LookupError):
    """The store file does not exist (a report never creates one)."""


class NoSuchSessionError(LookupError):
    """The store holds no such proxy session."""


def _existing_store(path: str | os.PathLike[str] | None) -> Any:
    from faultplane.core.store import default_store_path
    from faultplane.core.store_clickhouse import is_clickhouse_url
    from faultplane.plane.recorder import plane_store

    if is_clickhouse_url(path or os.environ.get("FAULTPLANE_STORE")):
        return plane_store(path)
    resolved = Path(path).expanduser() if path else default_store_path()
    if not resolved.is_file():
        hint = "check --store" if path else "set $FAULTPLANE_STORE or pass --store"
        raise NoSuchStoreError(f"no such store: {resolved} ({hint}; proxies create it when they record)")
    return plane_store(resolved)


def list_sessions(store_path: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Recorded proxy sessions, newest first, with their call and fault-event counts."""
    st = _existing_store(store_path)
    return st.query(
        "SELECT s.session_id, s.driver, s.target, s.seed, s.started_at, s.ended_at, "
        "(SELECT count(*) FROM plane_calls c WHERE c.session_id = s.session_id) AS calls, "
        "(SELECT count(*) FROM plane_fault_events f WHERE f.session_id = s.session_id) AS faults "
        "FROM plane_sessions s ORDER BY s.started_at DESC"
    )


def session_report(
    session_id: str | None = None, store_path: str | os.PathLike[str] | None = None
) -> dict[str, Any]:
    """`{"session": row, "metrics": PlaneMetrics dict + faults_by_name}` for a session (latest without id)."""
    from faultplane.plane.metrics import compute_metrics
    from faultplane.plane.recorder import load_session

    st = _existing_store(store_path)
    found = load_session(st, session_id)
    if found is None:
        if session_id:
            raise NoSuchSessionError(
                f"no proxy session {session_id!r} in {st.path}; list them with `faultplane plane report --list`"
            )
        raise NoSuchSessionError(f"no proxy sessions in {st.path}")
    sess, calls, n_events = found
    metrics = compute_metrics(calls, fault_events=n_events).as_dict()
    by_name = st.query(
        "SELECT fault_name, count(*) AS n FROM plane_fault_events WHERE session_id = ? "
        "GROUP BY fault_name ORDER BY n DESC, fault_name",
        [sess["session_id"]],
    )
    metrics["faults_by_name"] = {r["fault_name"]: int(r["n"]) for r in by_name}
    detections = sum(1 for c in calls if c.detected)
    notes = [
        "The proxy sees the wire only: an answer it changed counts as a silent failure unless the client "
        "reported noticing it (notifications/faultplane/detected, docs/plane.md)"
        + (f"; {detections} such report(s) received" if detections else "; no client sent any")
        + ". What the agent did next with an answer (used it, retried, escalated) is not observed.",
    ]
    advice: list[dict[str, Any]] = []
    if sess.get("plan"):
        from faultplane.plane.advice import advise, as_dicts
        from faultplane.plane.plan import parse_plan

        tools = [c.tool for c in calls if c.method == "tools/call" and c.tool]
        advice = as_dicts(advise(parse_plan(sess["plan"]), set(metrics["faults_by_name"]), tools=tools))
    return {
        "session": sess,
        "metrics": metrics,
        "client_detections": detections,
        "notes": notes,
        "advice": advice,
    }


def parse_patterns(text: str) -> Any:
    """`retry,degradation,...`, `all` or `none` -> simulator Patterns; ValueError names the bad value."""
    from faultplane.plane.simulator import Patterns

    names = {p.strip() for p in text.split(",") if p.strip()}
    if names == {"all"}:
        names = set(PATTERN_NAMES)
    elif names in ({"none"}, set()):
        names = set()
    elif not names <= set(PATTERN_NAMES):
        raise ValueError(
            f"--patterns: unknown {sorted(names - set(PATTERN_NAMES))}; use {', '.join(PATTERN_NAMES)}, all or none"
        )
    return Patterns(**{n: True for n in names})


def simulate_plan(
    plan: FaultPlan, *, tasks: int = 1000, fanout: int = 8, patterns: str = "none"
) -> dict[str, Any]:
    """Run a plan through the offline simulator: `{"patterns": label, "metrics": PlaneMetrics dict}`."""
    from faultplane.plane.simulator import Workload, simulate

    result = simulate(plan, Workload(tasks=tasks, fanout=fanout), parse_patterns(patterns))
    return {"patterns": result.patterns.label, "metrics": result.metrics.as_dict()}
