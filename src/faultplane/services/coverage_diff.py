"""Coverage over time, for a scheduled job: this period's compliance coverage report beside the previous
one, with the requirements that fell out of coverage (new gaps) and those brought into it (closed gaps).

The previous report is the newest earlier `coverage-*.json` the job wrote into its folder; on the first run
there is none, and the store's evidence as it stood one period ago stands in for it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from faultplane.services.compliance import (
    ComplianceError,
    CoverageReport,
    coverage_report,
    write_report,
)

__all__ = ["CoverageChange", "parse_period", "periodic_report", "render_change"]

_PERIOD = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(d|w|h)?\s*$")
_FILE = re.compile(r"^coverage-(\d{4}-\d{2}-\d{2}T\d{6}Z)\.json$")


class CoverageChange(BaseModel):
    """This period against the previous one. `fell` is true when a requirement covered then is not now."""

    generated_at: datetime
    period_days: float
    baseline: Literal["previous report", "store one period ago"]
    previous_generated_at: datetime
    previous_coverage: float
    coverage: float
    new_gaps: list[str] = Field(
        description="covered in the previous report, not covered now (gap or overdue)"
    )
    closed_gaps: list[str] = Field(description="not covered in the previous report, covered now")
    still_open: list[str]
    fell: bool
    files: dict[str, str] = Field(default_factory=dict, description="what this run wrote, by kind")


def parse_period(text: str) -> float:
    """`30d`, `4w`, `12h` or a number of days; raises ComplianceError naming the form."""
    m = _PERIOD.match(str(text))
    if not m or float(m[1]) <= 0:
        raise ComplianceError(
            f"--period: {text!r} is not a period; fix: a positive number of days, e.g. 30d, 4w, 12h"
        )
    value = float(m[1])
    return value * {"d": 1.0, None: 1.0, "w": 7.0, "h": 1 / 24}[m[2]]


def _covered(report: CoverageReport) -> set[str]:
    return {r.id for r in report.requirements if r.status == "covered"}


def _previous_file(folder: Path, before: datetime) -> Path | None:
    found = []
    for p in folder.glob("coverage-*.json") if folder.is_dir() else []:
        m = _FILE.match(p.name)
        if m and datetime.strptime(m[1], "%Y-%m-%dT%H%M%SZ").replace(tzinfo=UTC) < before:
            found.append((m[1], p))
    return max(found)[1] if found else None


def periodic_report(
    out_dir: str | Path,
    *,
    period_days: float,
    store: Any = None,
    frameworks: list[str] | None = None,
    rto_seconds: float | None = None,
    now: datetime | None = None,
) -> CoverageChange:
    """Write this period's report (HTML, Markdown, JSON) and the change from the previous one into `out_dir`."""
    now = (now or datetime.now(UTC)).astimezone(UTC)
    folder = Path(out_dir)
    current = coverage_report(store, frameworks=frameworks, rto_seconds=rto_seconds, now=now)
    previous_path = _previous_file(folder, now)
    if previous_path is not None:
        try:
            previous = CoverageReport.model_validate_json(previous_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ComplianceError(
                f"{previous_path}: not a coverage report this command wrote ({type(exc).__name__}); "
                "fix: move it out of the folder"
            ) from None
        baseline: Literal["previous report", "store one period ago"] = "previous report"
    else:
        previous = coverage_report(
            store, frameworks=frameworks, rto_seconds=rto_seconds, now=now - timedelta(days=period_days)
        )
        baseline = "store one period ago"
    in_scope = {r.id for r in current.requirements}
    before, after = _covered(previous) & in_scope, _covered(current)
    change = CoverageChange(
        generated_at=now,
        period_days=period_days,
        baseline=baseline,
        previous_generated_at=previous.generated_at,
        previous_coverage=previous.coverage,
        coverage=current.coverage,
        new_gaps=sorted(before - after),
        closed_gaps=sorted(after - before),
        still_open=sorted(in_scope - after - (before - after)),
        fell=bool(before - after),
    )
    stamp = now.strftime("%Y-%m-%dT%H%M%SZ")
    folder.mkdir(parents=True, exist_ok=True)
    for kind, suffix in (("json", "json"), ("markdown", "md"), ("html", "html")):
        change.files[kind] = str(write_report(current, folder / f"coverage-{stamp}.{suffix}", kind))  # type: ignore[arg-type]
    diff = folder / f"coverage-change-{stamp}.md"
    diff.write_text(render_change(change), encoding="utf-8")
    change.files["change"] = str(diff)
    (folder / f"coverage-change-{stamp}.json").write_text(change.model_dump_json(indent=2), encoding="utf-8")
    return change


def render_change(change: CoverageChange) -> str:
    def listed(ids: list[str]) -> str:
        return ", ".join(ids) if ids else "none"

    verdict = "coverage FELL" if change.fell else "coverage held"
    return "\n".join(
        [
            f"# Compliance coverage change, {change.generated_at:%Y-%m-%d %H:%M:%SZ}",
            "",
            f"{verdict}: {change.previous_coverage:.0%} -> {change.coverage:.0%} "
            f"(against the {change.baseline}, {change.previous_generated_at:%Y-%m-%d %H:%M:%SZ}; "
            f"period {change.period_days:g} days)",
            "",
            f"- new gaps (covered before, not now): {listed(change.new_gaps)}",
            f"- closed gaps (covered now, not before): {listed(change.closed_gaps)}",
            f"- still not covered: {listed(change.still_open)}",
            "",
            f"The full report: {Path(change.files.get('markdown', '')).name}",
            "",
        ]
    )
