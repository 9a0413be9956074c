"""The run's timeline as an inline SVG: latency percentiles, error rate, the fault window and the gate thresholds.

Hand-built so a report needs nothing at render time: no script, no font, no network. Left axis: latency in
milliseconds (p50, p95, p99 per second of load); right axis: error rate (0..100%). The inject -> recover window is
shaded, each gate's threshold is a dashed line on its axis, a gate breach is a vertical marker, and the method's
and rollbacks' actions are ticks along the bottom.

A run without `load:` has no per-second figures, but its gates were sampled the whole time: then each gate's
samples are drawn instead (error-rate gates on the right axis, every other gate on the left one, in its own
unit), with every gate's threshold.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from faultplane.reports.evidence import Evidence

__all__ = ["timeline_svg"]

W, H = 1100, 440
ML, MR, MT, MB = 70, 70, 30, 70  # margins: room for axes, labels and the action ticks
COLORS = {"p50": "#4c78a8", "p95": "#f58518", "p99": "#b279a2", "error": "#e45756", "gate": "#54a24b"}
SAMPLE_COLORS = ("#4c78a8", "#f58518", "#b279a2", "#72b7b2", "#9d755d")


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
    # without load figures, the gates' own samples are the plot (see the module doc)
    by_samples = not ev.series and bool(ev.samples)
    err_gates = [g for g in ev.gates if g.sli == "error_rate"]
    lat_gates = [
        g for g in ev.gates if g.sli.startswith("latency_") or (by_samples and g.sli != "error_rate")
    ]
    left_samples = _samples_by_gate(ev, error_rate=False) if by_samples else {}
    right_samples = _samples_by_gate(ev, error_rate=True) if by_samples else {}
    lat_values = [r[k] for r in ev.series for k in ("p50", "p95", "p99") if r.get(k) is not None]
    lat_values += [v for pts in left_samples.values() for _, v in pts]
    y_lat = _nice_max(max([*lat_values, *(g.threshold for g in lat_gates), 1.0]) * 1.08)
    err_values = [
        (r.get("errors") or 0) / ((r.get("ok") or 0) + (r.get("errors") or 0))
        for r in ev.series
        if (r.get("ok") or 0) + (r.get("errors") or 0)
    ]
    err_values += [v for pts in right_samples.values() for _, v in pts]
    right_axis = not by_samples or bool(right_samples or err_gates)  # no error rate to show: no axis for it
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
        if right_axis:
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
        f'<text x="{ML + pw / 2}" y="{H - 8}" text-anchor="middle" fill="#333">seconds since the '
        f"{'run' if by_samples else 'load'} started</text>"
        f'<text transform="translate(16,{MT + ph / 2}) rotate(-90)" text-anchor="middle" fill="#333">'
        f"{_left_label(lat_gates) if by_samples else 'latency (ms)'}</text>"
    )
    if right_axis:
        out.append(
            f'<text transform="translate({W - 12},{MT + ph / 2}) rotate(90)" text-anchor="middle" '
            f'fill="{COLORS["error"]}">error rate</text>'
        )
    # gate thresholds
    for g in lat_gates:
        y = YL(g.threshold)
        unit = " ms" if g.sli.startswith("latency_") else ""
        out.append(
            f'<line class="gate-threshold" x1="{ML}" y1="{y:.1f}" x2="{ML + pw}" y2="{y:.1f}" '
            f'stroke="{COLORS["gate"]}" stroke-width="1.5" stroke-dasharray="8 4"><title>gate {escape(g.name)}: '
            f"{escape(g.predicate)}</title></line>"
            f'<text x="{ML + pw - 4}" y="{y - 4:.1f}" text-anchor="end" fill="{COLORS["gate"]}">'
            f"gate {escape(g.name)}: {escape(g.sli)} {g.op} {g.threshold:g}{unit}</text>"
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
    # gate samples (runs without load): one line per gate, a dot per sample
    legend_samples: list[tuple[str, str, bool]] = []
    for i, (name, pts) in enumerate([*left_samples.items(), *right_samples.items()]):
        right = name in right_samples
        color = SAMPLE_COLORS[i % len(SAMPLE_COLORS)]
        y_of = YE if right else YL
        xy = [(X(x), y_of(v)) for x, v in pts]
        dash = ' stroke-dasharray="6 3"' if right else ""
        out.append(
            f'<path class="gate-samples" data-gate="{escape(name)}" d="{_path(xy)}" fill="none" '
            f'stroke="{color}" stroke-width="2"{dash}/>'
        )
        out.extend(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="2.5" fill="{color}"/>' for cx, cy in xy)
        legend_samples.append((color, f"gate {name}", right))
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
    items = [(COLORS["p50"], "latency p50", False), (COLORS["p95"], "latency p95", False)]
    items += [(COLORS["p99"], "latency p99", False), (COLORS["error"], "error rate", True)]
    lx = ML + 10
    for color, label, dashed in legend_samples or items:
        dash = ' stroke-dasharray="6 3"' if dashed else ""
        out.append(
            f'<line x1="{lx}" y1="{MT + ph + 50}" x2="{lx + 24}" y2="{MT + ph + 50}" stroke="{color}" '
            f'stroke-width="2"{dash}/><text x="{lx + 30}" y="{MT + ph + 54}" fill="#333">{escape(label)}</text>'
        )
        lx += max(130, 40 + 7 * len(label))  # ~7 px a character at 12 px sans-serif
    out.append(
        f'<text x="{lx}" y="{MT + ph + 54}" fill="#555">ticks: method actions (grey), rollbacks (green)</text>'
    )
    if not ev.series and not by_samples:
        out.append(
            f'<text x="{ML + pw / 2}" y="{MT + ph / 2}" text-anchor="middle" fill="#888">'
            "no load figures or gate samples in this journal (the experiment declared no `load:` and no gate)"
            "</text>"
        )
    out.append("</svg>")
    return "".join(out)


def _samples_by_gate(ev: Evidence, *, error_rate: bool) -> dict[str, list[tuple[float, float]]]:
    """(x, value) of each gate's samples, for the error-rate gates or for all the others."""
    out: dict[str, list[tuple[float, float]]] = {}
    for s in ev.samples:
        value = s.get("value")
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
            continue  # a sample with no reading (the source failed) leaves a gap
        if (s.get("sli") == "error_rate") is error_rate:
            out.setdefault(str(s.get("gate", "")), []).append((float(s["x"]), float(value)))
    return out


def _left_label(gates: list[Any]) -> str:
    slis = {g.sli for g in gates}
    if slis and all(sli.startswith("latency_") for sli in slis):
        return "latency (ms)"
    return "gate value (" + ", ".join(sorted(slis)) + ")" if slis else "gate value"
