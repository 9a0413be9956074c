"""Reports of runs: the post-mortem paragraph and the self-contained HTML report with its timeline."""

from __future__ import annotations

from faultplane.reports.html import render_html, write_report
from faultplane.reports.postmortem import postmortem

__all__ = ["postmortem", "render_html", "write_report"]
