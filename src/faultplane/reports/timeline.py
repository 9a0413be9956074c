"""The run's timeline as an inline SVG: latency percentiles, error rate, the fault window and the gate thresholds.

Hand-built so a report needs nothing at render time: no script, no font, no network. Left axis: latency in
milliseconds (p50, p95, p99 per second of load); right axis: error rate (0..100%). The inject -> recover window is
shaded, each gate's threshold is a dashed line on its axis, a gate breach is a vertical marker, and the method's
and rollbacks' actions are ticks along the bottom.
"""

from __future__ import annotations

import math
from html import escape

from faultplane.reports.evidence import Evidence

__all__ = ["timeline_svg"]

W, H = 1100, 440
ML, MR, MT, MB = 70, 70, 30, 70  # margins: room for axes, labels and the action ticks
COLORS = {"p50": "#4c78a8", "p95": "#f58518", "p99": "#b279a2", "error": "#e45756", "gate": "#54a24b"}


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for m in (1, 2, 2.5, 5, 10):
        if value <= m * exp:
            return m * exp
    return 10 * exp


def _path(points: list[tuple[float, float]]) -> str:
    """A polyline path; None gaps split it so a second without data is not drawn as a line."""
    if not points:
        return ""
    return "M" + " L".join(f"{x:.1f},{y:.1f}" for x, y in points)


def timeline_svg(ev: Evidence) -> str:
    xs = [r["x"] for r in ev.series] + [v for v in ev.phases.values()] + [s["x"] for s in ev.samples]
    xs += [a[0] for a in ev.actions]
    x_max = max([*xs, 1.0]) + 0.5
    x_min = min([0.0, *xs])
    lat_gates = [g for g in ev.gates if g.sli.startswith("latency_")]
    err_gates = [g for g in ev.gates if g.sli == "error_rate"]
    lat_values = [r[k] for r in ev.series for k in ("p50", "p95", "p99") if r.get(k) is not None]
    y_lat = _nice_max(max([*lat_values, *(g.threshold for g in lat_gates), 1.0]) * 1.08)
    err_values = [
        (r.get("errors") or 0) / ((r.get("ok") or 0) + (r.get("errors") or 0))
        for r in ev.series
        if (r.get("ok") or 0) + (r.get("errors") or 0)
    ]
    y_err = min(1.0, _nice_max(max([*err_values, *(g.threshold for g in err_gates), 0.01]) * 1.1))
    pw, ph = W - ML - MR, H - MT - MB

    def X(x: float) -> float:
        return ML + (x - x_min) / (x_max - x_min) * pw

    def YL(v: float) -> float:
        return MT + ph - min(v, y_lat) / y_lat * ph

    def YE(v: float) -> float:
        return MT + ph - min(v, y_err) / y_err * ph

    out: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="timeline" viewBox="0 0 {W} {H}" width="{W}" height="{H}" '
        'role="img" aria-label="run timeline: latency percentiles and error rate over time" '
        'font-family="sans-serif" font-size="12">',
        f'<rect x="0" y="0" width="{W}" height="{H}" fill="#ffffff"/>',
    ]
    if ev.fault_start is not None:
        x0 = X(ev.fault_start)
        x1 = X(ev.fault_end if ev.fault_end is not None else x_max)
        out.append(
            f'<rect class="fault-window" x="{x0:.1f}" y="{MT}" width="{max(1.0, x1 - x0):.1f}" height="{ph}" '
            'fill="#fdd9a0" fill-opacity="0.45"><title>fault window: inject to recover</title></rect>'
        )
        out.append(
            f'<text x="{x0 + 4:.1f}" y="{MT + 14}" fill="#a05a00">fault window (inject \u2192 recover)</text>'
        )
    # grid and axes
    for i in range(6):
        v = y_lat * i / 5
        y = YL(v)
        out.append(f'<line x1="{ML}" y1="{y:.1f}" x2="{ML + pw}" y2="{y:.1f}" stroke="#e6e6e6"/>')
        out.append(f'<text x="{ML - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#333">{v:g}</text>')
        e = y_err * i / 5
        out.append(
            f'<text x="{ML + pw + 6}" y="{YE(e) + 4:.1f}" fill="{COLORS["error"]}">{e * 100:.3g}%</text>'
        )
    step = _nice_max((x_max - x_min) / 10)
    t = math.ceil(x_min / step) * step
    while t <= x_max:
        out.append(
            f'<line x1="{X(t):.1f}" y1="{MT + ph}" x2="{X(t):.1f}" y2="{MT + ph + 5}" stroke="#333"/>'
            f'<text x="{X(t):.1f}" y="{MT + ph + 18}" text-anchor="middle" fill="#333">{t:g}</text>'
        )
        t += step
    out.append(
        f'<rect x="{ML}" y="{MT}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>'
        f'<text x="{ML + pw / 2}" y="{H - 8}" text-anchor="middle" fill="#333">seconds since the load started'
        "</text>"
        f'<text transform="translate(16,{MT + ph / 2}) rotate(-90)" text-anchor="middle" fill="#333">'
        "latency (ms)</text>"
        f'<text transform="translate({W - 12},{MT + ph / 2}) rotate(90)" text-anchor="middle" '
        f'fill="{COLORS["error"]}">error rate</text>'
    )
    # gate thresholds
    for g in lat_gates:
        y = YL(g.threshold)
        out.append(
            f'<line class="gate-threshold" x1="{ML}" y1="{y:.1f}" x2="{ML + pw}" y2="{y:.1f}" '
            f'stroke="{COLORS["gate"]}" stroke-width="1.5" stroke-dasharray="8 4"><title>gate {escape(g.name)}: '
            f"{escape(g.predicate)}</title></line>"
            f'<text x="{ML + pw - 4}" y="{y - 4:.1f}" text-anchor="end" fill="{COLORS["gate"]}">'
            f"gate {escape(g.name)}: {g.sli} {g.op} {g.threshold:g} ms</text>"
        )
    for g in err_gates:
        y = YE(g.threshold)
        out.append(
            f'<line class="gate-threshold" x1="{ML}" y1="{y:.1f}" x2="{ML + pw}" y2="{y:.1f}" '
            f'stroke="{COLORS["error"]}" stroke-width="1.5" stroke-dasharray="3 3"><title>gate '
            f"{escape(g.name)}: {escape(g.predicate)}</title></line>"
            f'<text x="{ML + 4}" y="{y - 4:.1f}" fill="{COLORS["error"]}">gate {escape(g.name)}: '
            f"error_rate {g.op} {g.threshold * 100:g}%</text>"
        )
    # series
    for key in ("p50", "p95", "p99"):
        pts = [(X(r["x"]), YL(r[key])) for r in ev.series if r.get(key) is not None]
        if pts:
            out.append(
                f'<path class="series-{key}" d="{_path(pts)}" fill="none" stroke="{COLORS[key]}" '
                'stroke-width="2"/>'
            )
    err_pts = []
    for r in ev.series:
        done = (r.get("ok") or 0) + (r.get("errors") or 0)
        if done:
            err_pts.append((X(r["x"]), YE((r.get("errors") or 0) / done)))
    if err_pts:
        out.append(
            f'<path class="series-error-rate" d="{_path(err_pts)}" fill="none" stroke="{COLORS["error"]}" '
            'stroke-width="2" stroke-dasharray="6 3"/>'
        )
    # the breach and the actions
    if ev.breach_x is not None:
        bx = X(ev.breach_x)
        out.append(
            f'<line class="gate-breach" x1="{bx:.1f}" y1="{MT}" x2="{bx:.1f}" y2="{MT + ph}" stroke="#d62728" '
            f'stroke-width="2"><title>gate breach: {escape(str((ev.breach or {}).get("reason", "")))}</title>'
            f'</line><text x="{bx + 4:.1f}" y="{MT + 30}" fill="#d62728" font-weight="bold">gate breach</text>'
        )
    for x, section, name in ev.actions:
        ax = X(x)
        color = "#555" if section == "run" else "#2a7f2a"
        out.append(
            f'<line x1="{ax:.1f}" y1="{MT + ph + 22}" x2="{ax:.1f}" y2="{MT + ph + 32}" stroke="{color}" '
            f'stroke-width="2"><title>{escape(section)}: {escape(name)}</title></line>'
        )
    # legend
    items = [("p50", "latency p50"), ("p95", "latency p95"), ("p99", "latency p99"), ("error", "error rate")]
    lx = ML + 10
    for key, label in items:
        dash = ' stroke-dasharray="6 3"' if key == "error" else ""
        out.append(
            f'<line x1="{lx}" y1="{MT + ph + 50}" x2="{lx + 24}" y2="{MT + ph + 50}" stroke="{COLORS[key]}" '
            f'stroke-width="2"{dash}/><text x="{lx + 30}" y="{MT + ph + 54}" fill="#333">{label}</text>'
        )
        lx += 130
    out.append(
        f'<text x="{lx}" y="{MT + ph + 54}" fill="#555">ticks: method actions (grey), rollbacks (green)</text>'
    )
    if not ev.series:
        out.append(
            f'<text x="{ML + pw / 2}" y="{MT + ph / 2}" text-anchor="middle" fill="#888">'
            "no load figures in this journal (the experiment declared no `load:`)</text>"
        )
    out.append("</svg>")
    return "".join(out)
