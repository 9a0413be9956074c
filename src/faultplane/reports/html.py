"""A self-contained HTML report of one run: verdict, post-mortem, timeline, gates, load, activities.

No scripts, stylesheets, fonts or images from anywhere: the file opens offline and can be attached to a ticket.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from html import escape
from pathlib import Path
from typing import Any

from faultplane.reports.evidence import Evidence, evidence
from faultplane.reports.postmortem import postmortem
from faultplane.reports.timeline import timeline_svg

__all__ = ["render_html", "write_report"]

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1160px;color:#222}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #ddd}
.meta{color:#555;font-size:13px} .badge{display:inline-block;padding:2px 10px;border-radius:10px;color:#fff;
font-weight:600;font-size:13px} .completed{background:#2e8540} .aborted{background:#c0392b}
.failed,.deviated,.interrupted,.refused{background:#d35400} .running{background:#777}
.postmortem{background:#f7f7f9;border-left:4px solid #4c78a8;padding:10px 14px;line-height:1.5}
table{border-collapse:collapse;font-size:13px;margin:6px 0} td,th{border:1px solid #ddd;padding:4px 8px;
text-align:left;vertical-align:top} th{background:#f2f2f2} .num{text-align:right;font-variant-numeric:tabular-nums}
.err{color:#c0392b} figure{margin:0} svg{max-width:100%;height:auto}
"""


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _table(headers: list[str], rows: list[list[Any]], numeric: set[int] | None = None) -> str:
    numeric = numeric or set()
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{escape(_fmt(c))}</td>' if i in numeric else f"<td>{escape(_fmt(c))}</td>"
            for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _load_section(ev: Evidence) -> str:
    load = ev.load
    if not load:
        return "<p>No load generator ran in this experiment.</p>"
    lat = load.get("latency_ms") or {}
    spec = load.get("spec") or {}
    rows: list[list[Any]] = [
        ["target", f"{spec.get('method', '')} {spec.get('url', '')}"],
        ["rate (requests/s)", spec.get("rate")],
        ["duration (s)", load.get("duration_s")],
        ["sent / ok / errors", f"{load.get('sent')} / {load.get('ok')} / {load.get('errors')}"],
    ]
    if "scheduled" in load:  # every scheduled request in one place (journals from before have no such split)
        not_sent = load.get("not_sent") or {}
        rows += [
            ["scheduled", load.get("scheduled")],
            ["failed by status / by network", f"{load.get('failed_status')} / {load.get('failed_network')}"],
            [
                "not sent: generator behind / in-flight bound",
                f"{not_sent.get('behind', 0)} / {not_sent.get('in_flight_limit', 0)}",
            ],
        ]
        if load.get("saturated"):
            rows.append(["generator", load["saturated"].get("message")])
    rows += [
        ["error rate", load.get("error_rate")],
        ["throughput (ok/s)", load.get("throughput")],
        [
            "latency p50 / p95 / p99 / max (ms)",
            " / ".join(_fmt(lat.get(k)) for k in ("p50", "p95", "p99", "max")),
        ],
        ["errors by kind", json.dumps(load.get("errors_by") or {})],
    ]
    return _table(["figure", "value"], rows)


def _gates_section(journal: Mapping[str, Any], ev: Evidence) -> str:
    if not ev.gates:
        return "<p>No SLO gates.</p>"
    rows = []
    for g in ev.gates:
        samples = [s for s in ev.samples if s.get("gate") == g.name]
        values = [s["value"] for s in samples if s.get("value") is not None]
        breaching = sum(1 for s in samples if s.get("breaching"))
        worst = (max(values) if g.op in (">", ">=") else min(values)) if values else None
        rows.append([g.name, g.sli, g.predicate, len(samples), breaching, worst])
    html = _table(["gate", "sli", "rolls back on", "samples", "breaching", "worst"], rows, {3, 4, 5})
    breach = ev.breach
    if breach:
        html += f'<p class="err"><b>Breach:</b> {escape(str(breach.get("reason", "")))}</p>'
    return html


def _activities_section(journal: Mapping[str, Any]) -> str:
    rows = []
    for key in ("before", "after"):
        state = (journal.get("steady_states") or {}).get(key) or {}
        for r in state.get("probes") or []:
            act = r.get("activity") or {}
            rows.append(
                [
                    f"steady state {key}",
                    "probe",
                    act.get("name"),
                    r.get("status"),
                    r.get("duration"),
                    r.get("exception"),
                ]
            )
    for section, label in (("run", "method"), ("rollbacks", "rollbacks")):
        for r in journal.get(section) or []:
            act = r.get("activity") or {}
            rows.append(
                [
                    label,
                    act.get("type"),
                    act.get("name"),
                    r.get("status"),
                    r.get("duration"),
                    r.get("exception"),
                ]
            )
    if not rows:
        return "<p>No activities ran.</p>"
    return _table(["section", "type", "activity", "status", "seconds", "error"], rows, {4})


def _counters_section(ev: Evidence) -> str:
    parts = []
    c = ev.caller
    if c:
        rows = [
            [k, c.get(k)]
            for k in (
                "requests",
                "attempts",
                "retry_amplification",
                "limiter_rejections",
                "retries_suppressed",
                "breaker_opened",
                "ok",
                "failed",
            )
            if k in c
        ]
        rows.append(["failed by", json.dumps(c.get("failed_by") or {})])
        rows.append(["downstream failures", json.dumps(c.get("downstream_failures") or {})])
        parts.append("<h3>caller</h3>" + _table(["counter", "value"], rows))
    for i, p in enumerate(ev.pools):
        pool = p.get("pool") or {}
        rows = [
            ["pool size (base)", f"{pool.get('size')} ({pool.get('base_size')})"],
            ["requests / ok", f"{p.get('requests')} / {p.get('ok')}"],
            ["pool acquire timeouts", p.get("pool_timeouts")],
            [
                "pool wait p50 / p99 / max (ms)",
                " / ".join(_fmt(v) for v in (p.get("pool_wait_ms") or {}).values()),
            ],
            ["most waiting at once", p.get("max_waiting")],
        ]
        parts.append(f"<h3>pool of instance {i}</h3>" + _table(["counter", "value"], rows))
    return "".join(parts)


def render_html(journal: Mapping[str, Any], *, summary: str | None = None) -> str:
    """The report as one HTML document. `summary` overrides the generated post-mortem paragraph."""
    ev = evidence(journal)
    title = str((journal.get("experiment") or {}).get("title") or "experiment")
    status = str(journal.get("status") or "unknown")
    text = summary if summary is not None else postmortem(journal)
    counters = _counters_section(ev)
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>Faultplane report: {escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{escape(title)}</h1>"
        f'<div class="meta">run <code>{escape(str(journal.get("run_id", "")))}</code> · started '
        f"{escape(str(journal.get('start', '')))} · {_fmt(journal.get('duration'))} s · seed "
        f"{escape(str(journal.get('seed', '')))} · "
        f'<span class="badge {escape(status)}">{escape(status)}</span></div>'
        f"<p>{escape(str(journal.get('verdict') or ''))}</p>"
        f'<h2>Post-mortem</h2><p class="postmortem" id="postmortem">{escape(text)}</p>'
        f"<h2>Timeline</h2><figure>{timeline_svg(ev)}</figure>"
        f"<h2>SLO gates</h2>{_gates_section(journal, ev)}"
        f"<h2>Load</h2>{_load_section(ev)}"
        + (f"<h2>Service counters</h2>{counters}" if counters else "")
        + f"<h2>Activities</h2>{_activities_section(journal)}"
        "</body></html>"
    )


def write_report(journal: Mapping[str, Any], path: str | Path) -> Path:
    """Render and write the report; returns the path written."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(journal), encoding="utf-8")
    return out
