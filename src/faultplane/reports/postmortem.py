"""A post-mortem paragraph written from a journal's measurements: what failed, which SLO, the most likely cause.

The cause is chosen from the data, in this order of evidence:
1. a self-inflicted denial of service: retries multiplied the caller's attempts (amplification = attempts /
   incoming requests) and the caller's own rate limiter refused them, so payments failed without reaching the
   service;
2. retry amplification without limiter refusals (the retries themselves loaded the service);
3. connection-pool exhaustion: attempts timed out or were refused waiting for a pool connection;
4. otherwise, whatever the load generator's error breakdown and latency say.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from faultplane.reports.evidence import Evidence, evidence

__all__ = ["postmortem", "window_figures"]


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.1f}%"


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0f} ms"


def window_figures(ev: Evidence) -> dict[str, Any]:
    """Load totals inside the fault window (inject -> recover), from the per-second series."""
    lo = ev.fault_start if ev.fault_start is not None else float("-inf")
    hi = ev.fault_end if ev.fault_end is not None else float("inf")
    rows = [r for r in ev.series if lo <= r["x"] <= hi + 0.5]
    ok = sum(int(r.get("ok") or 0) for r in rows)
    errors = sum(int(r.get("errors") or 0) for r in rows)
    p99s = [r["p99"] for r in rows if r.get("p99") is not None]
    done = ok + errors
    return {
        "ok": ok,
        "errors": errors,
        "error_rate": errors / done if done else None,
        "worst_p99": max(p99s) if p99s else None,
        "seconds": len(rows),
    }


def _pool_summary(ev: Evidence) -> dict[str, Any] | None:
    if not ev.pools:
        return None
    sizes = [p["pool"].get("size") for p in ev.pools]
    bases = [p["pool"].get("base_size") for p in ev.pools]
    waits = [w for p in ev.pools if (w := (p.get("pool_wait_ms") or {}).get("p99")) is not None]
    return {
        "instances": len(ev.pools),
        "sizes": sizes,
        "bases": bases,
        "pool_timeouts": sum(int(p.get("pool_timeouts") or 0) for p in ev.pools),
        "requests": sum(int(p.get("requests") or 0) for p in ev.pools),
        "wait_p99": max(waits) if waits else None,
        "max_waiting": max(int(p.get("max_waiting") or 0) for p in ev.pools),
    }


def _gate_sentence(ev: Evidence, journal: Mapping[str, Any]) -> str:
    b = ev.breach
    if not b:
        return ""
    after = ""
    first = b.get("first_breach_ts")
    if first is not None and ev.fault_start is not None:
        after = f" {float(first) - ev.origin - ev.fault_start:.1f} s into the fault window,"
    value = b.get("value")
    shown = (
        "no reading" if value is None else (f"{value:.3g}" if b.get("sli") != "error_rate" else _pct(value))
    )
    others = sorted({s["gate"] for s in ev.samples if s.get("breaching") and s.get("gate") != b.get("gate")})
    also = f" The {', '.join(others)} gate{'s' if len(others) > 1 else ''} breached too." if others else ""
    rolled = [r for r in journal.get("rollbacks") or []]
    ok = sum(1 for r in rolled if r.get("status") == "succeeded")
    rb = f" {ok} of {len(rolled)} rollbacks succeeded." if rolled else ""
    return (
        f"The SLO gate {b.get('gate')!r} ({b.get('predicate')}) breached{after} with {b.get('sli')} at "
        f"{shown}, and held for {float(b.get('held_s') or 0):.1f} s; the gate stopped the method and rolled "
        f"back.{also}{rb}"
    )


def _cause(ev: Evidence) -> str:
    c = ev.caller or {}
    amp = c.get("retry_amplification")
    rejections = int(c.get("limiter_rejections") or 0)
    attempts = int(c.get("attempts") or 0)
    failed_by: dict[str, int] = c.get("failed_by") or {}
    failed = int(c.get("failed") or 0)
    downstream: dict[str, int] = c.get("downstream_failures") or {}
    pool = _pool_summary(ev)
    limited = int(failed_by.get("rate_limited", 0))
    trigger = ""
    if pool:
        shrunk = [f"{s} of {b}" for s, b in zip(pool["sizes"], pool["bases"], strict=False) if s != b]
        trigger_bits = []
        if shrunk:
            trigger_bits.append(
                f"pool{'s' if len(shrunk) > 1 else ''} cut to {', '.join(shrunk)} connections"
            )
        if downstream:
            trigger_bits.append(
                "downstream failures " + ", ".join(f"{k} x{v}" for k, v in sorted(downstream.items()))
            )
        if pool["pool_timeouts"]:
            trigger_bits.append(f"{pool['pool_timeouts']} pool acquire timeouts")
        if pool["wait_p99"] is not None:
            trigger_bits.append(f"pool wait p99 {_ms(pool['wait_p99'])}")
        trigger = "; ".join(trigger_bits)
    if amp is not None and amp >= 2 and rejections > 0:
        share = rejections / attempts if attempts else 0.0
        text = (
            f"Most likely cause: a self-inflicted denial of service. Retries multiplied the caller's attempts "
            f"{amp:.1f}x ({attempts} attempts for {c.get('requests')} incoming payments) and the caller's own "
            f"outbound rate limiter refused {rejections} of them ({share * 100:.0f}%)"
        )
        if failed:
            text += (
                f"; {limited} of the {failed} failed payments were refused by the caller's limiter and never "
                f"reached payment-service"
            )
        text += "."
        if trigger:
            text += f" The trigger was connection-pool exhaustion ({trigger}): attempts that waited too long "
            text += (
                "for a connection timed out, and unbounded retries turned each into a stream of new attempts."
            )
        return text
    if amp is not None and amp >= 1.5:
        return (
            f"Most likely cause: retry amplification. The caller made {amp:.1f}x as many attempts as it received "
            f"payments ({attempts} for {c.get('requests')}), loading the already degraded service further"
            + (f" ({trigger})." if trigger else ".")
        )
    if pool and (pool["pool_timeouts"] or downstream):
        return f"Most likely cause: connection-pool exhaustion ({trigger}); retries stayed moderate" + (
            f" (amplification {amp:.2f}x)." if amp is not None else "."
        )
    load = ev.load or {}
    errors_by: dict[str, int] = load.get("errors_by") or {}
    if errors_by:
        top = ", ".join(f"{k} x{v}" for k, v in list(errors_by.items())[:3])
        return (
            f"Most likely cause: the service's own answers under the fault (errors seen by the load: {top})."
        )
    return "The journal holds no service counters that point to a cause beyond the measurements above."


def postmortem(journal: Mapping[str, Any]) -> str:
    """One paragraph: what failed, which SLO, the most likely cause — all from the journal's data."""
    ev = evidence(journal)
    title = (journal.get("experiment") or {}).get("title") or "the experiment"
    status = journal.get("status") or "unknown"
    win = window_figures(ev)
    parts: list[str] = []
    measured = ""
    if ev.series:
        measured = (
            f"During the fault window the load saw {win['errors']} errors in {win['ok'] + win['errors']} "
            f"requests ({_pct(win['error_rate'])}) and a worst per-second p99 of {_ms(win['worst_p99'])}."
        )
    if status == "aborted" and ev.breach:
        parts.append(f"{title}: the run was aborted by an SLO gate.")
        parts.append(_gate_sentence(ev, journal))
        if measured:
            parts.append(measured)
        parts.append(_cause(ev))
    elif status in ("completed",) and not ev.breach:
        parts.append(f"{title}: the steady state held and no SLO gate breached.")
        if measured:
            parts.append(measured)
        c = ev.caller or {}
        if c.get("retry_amplification") is not None:
            parts.append(
                f"Retries stayed contained: amplification {float(c['retry_amplification']):.2f}x, "
                f"{int(c.get('limiter_rejections') or 0)} limiter refusals, "
                f"{int(c.get('retries_suppressed') or 0)} retries held back by the breaker."
            )
        pool = _pool_summary(ev)
        if pool and pool["wait_p99"] is not None:
            parts.append(
                f"The pools queued (wait p99 {_ms(pool['wait_p99'])}, {pool['pool_timeouts']} acquire timeouts) "
                "but the callers' answers stayed within the SLOs."
            )
    else:
        parts.append(f"{title}: the run ended {status}. {journal.get('verdict') or ''}".strip())
        if journal.get("error"):
            parts.append(f"Reported: {journal['error']}.")
        if ev.breach:
            parts.append(_gate_sentence(ev, journal))
        if measured:
            parts.append(measured)
        if ev.caller or ev.pools:
            parts.append(_cause(ev))
    return " ".join(p.strip() for p in parts if p and p.strip())
