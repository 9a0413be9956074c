"""The Four Keys as an HTML page: per service, real incidents' time to restore beside the recovery time its
chaos experiments measured (a log scale, seconds to days), and the four keys in a table."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

__all__ = ["dora_html", "write_dora_report"]

_ROW_H = 34
_LEFT = 170
_WIDTH = 760


def _x(seconds: float, lo: float, hi: float) -> float:
    span = math.log10(hi) - math.log10(lo)
    return _LEFT + (math.log10(max(seconds, lo)) - math.log10(lo)) / span * (_WIDTH - _LEFT - 20)


def _recovery_svg(keys: Sequence[Any]) -> str:
    values = [
        v
        for k in keys
        for v in ((k.time_to_restore_hours or 0) * 3600.0, k.experiment_recovery_s or 0)
        if v and v > 0
    ]
    if not values:
        return "<p>No restore or recovery times yet.</p>"
    lo = 10 ** math.floor(math.log10(min(values)))
    hi = 10 ** math.ceil(math.log10(max(values)) + 1e-9)
    height = 40 + _ROW_H * len(keys)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height + 30}" role="img">']
    decade = lo
    while decade <= hi:
        x = _x(decade, lo, hi)
        parts.append(f'<line x1="{x:.1f}" y1="20" x2="{x:.1f}" y2="{height}" stroke="#ddd"/>')
        parts.append(
            f'<text x="{x:.1f}" y="{height + 16}" font-size="11" text-anchor="middle">{decade:g}s</text>'
        )
        decade *= 10
    for i, k in enumerate(keys):
        y = 28 + i * _ROW_H
        parts.append(
            f'<text x="{_LEFT - 8}" y="{y + 14}" font-size="12" text-anchor="end">{escape(k.service)}</text>'
        )
        restore = (k.time_to_restore_hours or 0) * 3600.0
        for j, (value, colour, label) in enumerate(
            ((restore, "#d9534f", "incidents"), (k.experiment_recovery_s or 0, "#2b7bb9", "experiments"))
        ):
            if value > 0:
                w = _x(value, lo, hi) - _LEFT
                parts.append(
                    f'<rect x="{_LEFT}" y="{y + j * 12}" width="{max(w, 1):.1f}" height="10" fill="{colour}">'
                    f"<title>{label}: {value:.3g} s</title></rect>"
                )
    parts.append(
        f'<text x="{_LEFT}" y="12" font-size="11"><tspan fill="#d9534f">■ incidents: median time to restore'
        '</tspan>   <tspan fill="#2b7bb9">■ experiments: median time to recover</tspan></text>'
    )
    parts.append("</svg>")
    return "".join(parts)


def _cell(value: Any, fmt: str = "{:.3g}") -> str:
    return "-" if value is None else escape(fmt.format(value))


def dora_html(keys: Sequence[Any]) -> str:
    rows = "".join(
        "<tr>"
        f"<td>{escape(k.service)}</td><td>{k.deployments}</td><td>{_cell(k.deployments_per_day)}</td>"
        f"<td>{_cell(k.lead_time_hours)}</td><td>{_cell(k.change_failure_rate, '{:.0%}')}</td>"
        f"<td>{k.incidents}</td><td>{_cell(k.time_to_restore_hours)}</td>"
        f"<td>{k.experiments_passed}/{k.experiments}</td><td>{_cell(k.experiment_recovery_s)}</td>"
        f"<td>{escape(', '.join(k.faults_exercised) or 'none')}</td>"
        f"<td>{_cell(k.restore_vs_experiments, '{:.3g}x')}</td>"
        "</tr>"
        for k in keys
    )
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>DORA Four Keys and chaos evidence</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}
td:first-child,th:first-child,td:nth-child(10){{text-align:left}}</style></head><body>
<h1>DORA Four Keys and chaos evidence</h1>
<p>Per service: deployment frequency, lead time for changes, change failure rate and time to restore from
CI/CD, beside the faults its chaos experiments exercised and how fast it recovered in them. A service that
takes far longer to restore from real incidents than from its experiments is exercising the wrong faults.</p>
<h2>Time to restore (incidents) against time to recover (experiments)</h2>
{_recovery_svg(keys)}
<h2>The Four Keys</h2>
<table><tr><th>service</th><th>deployments</th><th>per day</th><th>lead time (h)</th><th>change failure</th>
<th>incidents</th><th>restore (h)</th><th>experiments passed</th><th>recovery (s)</th><th>faults exercised</th>
<th>restore / recovery</th></tr>{rows}</table>
</body></html>
"""


def write_dora_report(keys: Sequence[Any], path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(dora_html(keys), encoding="utf-8")
    return p
