"""Compliance evidence: which framework requirements have chaos-experiment evidence, and which are gaps.

Requirements come from `faultplane/data/compliance.yaml` (DORA, NIS2, PCI DSS, ISO 22301, ISO 27001, SOC 2,
Basel III), each with its article reference, the longest gap between tests, and whether recovery time matters.
An experiment is evidence for a requirement when its tags name the requirement (`DORA-25` or
`compliance:DORA-25`); the runs table keeps each run's tags, so the report is read from the store alone.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from faultplane.core.store import Store, open_store

__all__ = [
    "DATA_FILE",
    "Catalog",
    "ComplianceError",
    "CoverageReport",
    "Framework",
    "Requirement",
    "RequirementCoverage",
    "coverage_report",
    "load_catalog",
    "render_html",
    "render_markdown",
    "requirement_tags",
    "split_known",
    "write_report",
]

DATA_FILE = Path(__file__).resolve().parent.parent / "data" / "compliance.yaml"
TAG_PREFIX = "COMPLIANCE:"


class ComplianceError(ValueError):
    """Bad compliance input; the message names the field and the fix."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Requirement(_Strict):
    id: str
    reference: str
    title: str
    url: str = Field(pattern=r"^https://", description="the official text of the requirement")
    evidence: str
    frequency_days: int = Field(gt=0)
    frequency_basis: str = ""
    rto: bool = False


class Framework(_Strict):
    id: str
    name: str
    source: str
    requirements: list[Requirement]


class Catalog(_Strict):
    version: int = 1
    frameworks: list[Framework]

    def requirement(self, req_id: str) -> tuple[Framework, Requirement] | None:
        key = normalise_tag(req_id)
        for fw in self.frameworks:
            for req in fw.requirements:
                if req.id == key:
                    return fw, req
        return None

    def framework(self, fw_id: str) -> Framework | None:
        key = fw_id.strip().upper().replace("_", "-")
        aliases = {f.id.replace("-", ""): f for f in self.frameworks}
        for fw in self.frameworks:
            if fw.id == key:
                return fw
        return aliases.get(key.replace("-", "").replace(" ", ""))

    def all_ids(self) -> list[str]:
        return [r.id for f in self.frameworks for r in f.requirements]


@lru_cache(maxsize=4)
def _load_cached(path: str, mtime: float) -> Catalog:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        return Catalog.model_validate(data)
    except (yaml.YAMLError, ValidationError) as exc:
        raise ComplianceError(f"{path}: not a valid compliance catalog: {exc}") from None


def load_catalog(path: str | Path | None = None) -> Catalog:
    """The requirement catalog (the bundled data file unless `path` is given)."""
    p = Path(path) if path else DATA_FILE
    if not p.is_file():
        raise ComplianceError(f"compliance catalog {p} does not exist; fix: pass an existing YAML file")
    return _load_cached(str(p), p.stat().st_mtime)


def normalise_tag(tag: str) -> str:
    t = tag.strip().upper()
    return t[len(TAG_PREFIX) :] if t.startswith(TAG_PREFIX) else t


def requirement_tags(tags: Iterable[str], catalog: Catalog | None = None) -> list[str]:
    """The requirement ids among an experiment's tags (other tags are ignored)."""
    cat = catalog or load_catalog()
    known = set(cat.all_ids())
    out: list[str] = []
    for t in tags:
        if isinstance(t, str) and (n := normalise_tag(t)) in known and n not in out:
            out.append(n)
    return out


def split_known(ids: Iterable[str], catalog: Catalog | None = None) -> tuple[list[str], list[str]]:
    """(known requirement ids, unknown ones) — used to reject a typo in a GameDay's `compliance:` list."""
    cat = catalog or load_catalog()
    known = set(cat.all_ids())
    good: list[str] = []
    bad: list[str] = []
    for i in ids:
        n = normalise_tag(str(i))
        (good if n in known else bad).append(n)
    return good, bad


def unknown_compliance_tags(tags: Iterable[Any], catalog: Catalog | None = None) -> list[str]:
    """An experiment's tags that claim a requirement the catalog does not know: `compliance:<anything>`, or an id
    with a framework's prefix (`DORA-99`). Other tags (`team:core`) are not compliance tags."""
    cat = catalog or load_catalog()
    known = set(cat.all_ids())
    prefixes = {i.split("-", 1)[0] + "-" for i in known}
    out = []
    for t in tags:
        if not isinstance(t, str):
            continue
        n = normalise_tag(t)
        claims = t.strip().upper().startswith(TAG_PREFIX) or any(n.startswith(p) for p in prefixes)
        if claims and n not in known and n not in out:
            out.append(n)
    return out


# ---- the report ------------------------------------------------------------------------------------------

Status = Literal["covered", "overdue", "gap"]


class EvidenceRun(BaseModel):
    run_id: str
    title: str | None
    status: str
    passed: bool
    started_at: datetime | None
    time_to_recover_s: float | None = None
    recovered: bool | None = None
    rto_target_s: float | None = None


class RequirementCoverage(BaseModel):
    id: str
    framework: str
    reference: str
    title: str
    url: str = ""
    evidence_hint: str
    frequency_days: int
    frequency_basis: str
    rto_required: bool
    status: Status
    runs: int = 0
    passed: int = 0
    runs_in_period: int = Field(0, description="runs within the last frequency_days")
    last_tested: datetime | None = None
    next_due: datetime | None = None
    rto_target_s: float | None = None
    worst_recovery_s: float | None = None
    rto_met: bool | None = Field(None, description="None: no recovery was measured or no target is known")
    evidence: list[EvidenceRun] = Field(default_factory=list, description="newest first, at most 20")


class FrameworkSummary(BaseModel):
    id: str
    name: str
    source: str
    requirements: int
    covered: int
    overdue: int
    gaps: int
    coverage: float = Field(description="share of requirements with current evidence (covered)")


class CoverageReport(BaseModel):
    generated_at: datetime
    scope: str
    frameworks: list[FrameworkSummary]
    requirements: list[RequirementCoverage]
    gaps: list[str]
    overdue: list[str]
    coverage: float
    rto_failures: list[str]


def _evidence_rows(store: Store, run_ids: Sequence[str] | None) -> list[dict[str, Any]]:
    """Tagged, finished, non-dry runs with their journal bodies, in SQL DuckDB and ClickHouse (18.16 on) read
    alike: no boolean literals or casts, FINAL where a re-written run is a newer row, bodies by a second query
    instead of a join (old ClickHouse joins neither aliases nor USING the same way)."""
    final = " FINAL" if getattr(store, "dialect", "duckdb") == "clickhouse" else ""
    sql = (
        "SELECT run_id, experiment_title, status, steady_state_after, started_at, tags "
        f"FROM runs{final} WHERE (dry_run IS NULL OR NOT dry_run) AND status NOT IN ('running', 'refused') "
        "AND length(tags) > 0"
    )
    params: list[Any] = []
    if run_ids is not None:
        if not run_ids:
            return []
        sql += f" AND run_id IN ({', '.join('?' for _ in run_ids)})"
        params += list(run_ids)
    rows = store.query(sql + " ORDER BY started_at DESC, run_id", params or None)
    ids = [r["run_id"] for r in rows]
    bodies: dict[str, Any] = {}
    for i in range(0, len(ids), 1000):
        chunk = ids[i : i + 1000]
        for b in store.query(
            f"SELECT run_id, body FROM journals{final} WHERE run_id IN ({', '.join('?' for _ in chunk)})",
            chunk,
        ):
            bodies[b["run_id"]] = b["body"]
    for r in rows:
        r["body"] = bodies.get(r["run_id"])
    return rows


def _recovery(body: str | None) -> tuple[float | None, bool | None, float | None]:
    """(time to recover, recovered, the run's own recovery target) from a stored journal."""
    if not body:
        return None, None, None
    try:
        j = json.loads(body)
    except json.JSONDecodeError:
        return None, None, None
    rec = (j.get("steady_states") or {}).get("recovery") or {}
    target = (j.get("estimate") or {}).get("recovery_seconds")
    if target is None:
        target = ((j.get("experiment") or {}).get("estimate") or {}).get("recovery_seconds")
    met = rec.get("steady_state_met")
    return rec.get("time_to_recover_s"), met, float(target) if isinstance(target, int | float) else None


def _as_utc(ts: datetime | None) -> datetime | None:
    if ts is None:
        return None
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def coverage_report(
    store: Store | None = None,
    *,
    frameworks: Sequence[str] | None = None,
    run_ids: Sequence[str] | None = None,
    rto_seconds: float | None = None,
    now: datetime | None = None,
    catalog: Catalog | None = None,
) -> CoverageReport:
    """Evidence per requirement: runs, last tested, due date, RTO met; gaps and overdue requirements.

    `frameworks` limits the scope (ids such as DORA, PCI-DSS); `run_ids` limits the evidence (a GameDay's own
    runs); `rto_seconds` is the organisation's recovery time objective, else each run's own
    `estimate.recovery_seconds` is its target.
    """
    cat = catalog or load_catalog()
    chosen: list[Framework] = []
    for fid in frameworks or [f.id for f in cat.frameworks]:
        fw = cat.framework(fid)
        if fw is None:
            raise ComplianceError(
                f"frameworks: unknown framework {fid!r}; fix: use one of "
                f"{', '.join(f.id for f in cat.frameworks)}"
            )
        if fw not in chosen:
            chosen.append(fw)
    if rto_seconds is not None and not 0 < rto_seconds < float("inf"):  # NaN fails this too
        raise ComplianceError(
            f"rto_seconds: {rto_seconds!r} is not a positive number of seconds; fix: give the recovery time "
            "objective in seconds, e.g. 300"
        )
    now = _as_utc(now) or datetime.now(UTC)
    store = store or open_store()

    by_req: dict[str, list[EvidenceRun]] = {}
    for row in _evidence_rows(store, run_ids):
        ids = requirement_tags(row.get("tags") or [], cat)
        started = _as_utc(row.get("started_at"))
        if not ids or (started is not None and started > now):
            continue  # not compliance evidence, or not yet evidence at the report's instant
        ttr, recovered, own_target = _recovery(row.get("body"))
        ev = EvidenceRun(
            run_id=row["run_id"],
            title=row.get("experiment_title"),
            status=row["status"],
            passed=row["status"] == "completed" and row.get("steady_state_after") is not False,
            started_at=started,
            time_to_recover_s=ttr,
            recovered=recovered,
            rto_target_s=rto_seconds if rto_seconds is not None else own_target,
        )
        for rid in ids:
            by_req.setdefault(rid, []).append(ev)

    reqs: list[RequirementCoverage] = []
    summaries: list[FrameworkSummary] = []
    for fw in chosen:
        counts = {"covered": 0, "overdue": 0, "gap": 0}
        for req in fw.requirements:
            evs = by_req.get(req.id, [])
            last = max((e.started_at for e in evs if e.started_at), default=None)
            period_start = now - timedelta(days=req.frequency_days)
            status: Status = (
                "gap" if not evs else ("overdue" if last is None or last < period_start else "covered")
            )
            counts[status] += 1
            item = RequirementCoverage(
                id=req.id,
                framework=fw.id,
                reference=req.reference,
                title=req.title,
                url=req.url,
                evidence_hint=req.evidence,
                frequency_days=req.frequency_days,
                frequency_basis=req.frequency_basis,
                rto_required=req.rto,
                status=status,
                runs=len(evs),
                passed=sum(e.passed for e in evs),
                runs_in_period=sum(1 for e in evs if e.started_at and e.started_at >= period_start),
                last_tested=last,
                next_due=last + timedelta(days=req.frequency_days) if last else None,
                evidence=evs[:20],
            )
            if req.rto and evs:
                _judge_rto(item, evs)
            reqs.append(item)
        n = len(fw.requirements)
        summaries.append(
            FrameworkSummary(
                id=fw.id,
                name=fw.name,
                source=fw.source,
                requirements=n,
                covered=counts["covered"],
                overdue=counts["overdue"],
                gaps=counts["gap"],
                coverage=round(counts["covered"] / n, 4) if n else 0.0,
            )
        )
    total = len(reqs)
    return CoverageReport(
        generated_at=now,
        scope=(f"{len(run_ids)} run(s)" if run_ids is not None else "all recorded runs")
        + f"; frameworks: {', '.join(f.id for f in chosen)}",
        frameworks=summaries,
        requirements=reqs,
        gaps=[r.id for r in reqs if r.status == "gap"],
        overdue=[r.id for r in reqs if r.status == "overdue"],
        coverage=round(sum(r.status == "covered" for r in reqs) / total, 4) if total else 0.0,
        rto_failures=[r.id for r in reqs if r.rto_met is False],
    )


def _judge_rto(item: RequirementCoverage, evs: list[EvidenceRun]) -> None:
    """RTO met when every run that measured its recovery recovered within its target."""
    measured = [e for e in evs if e.recovered is not None]
    targets = [e.rto_target_s for e in measured if e.rto_target_s is not None]
    item.rto_target_s = min(targets) if targets else None
    times = [e.time_to_recover_s for e in measured if e.time_to_recover_s is not None]
    item.worst_recovery_s = max(times) if times else None
    judged = [e for e in measured if e.rto_target_s is not None]
    if not judged:
        item.rto_met = None
        return
    item.rto_met = all(
        e.recovered and e.time_to_recover_s is not None and e.time_to_recover_s <= (e.rto_target_s or 0)
        for e in judged
    )


# ---- rendering -------------------------------------------------------------------------------------------


def _fmt_ts(ts: datetime | None) -> str:
    return ts.strftime("%Y-%m-%d %H:%M UTC") if ts else "—"


def _rto_text(r: RequirementCoverage) -> str:
    if not r.rto_required:
        return "n/a"
    if r.rto_met is None:
        return "not measured" if r.runs else "—"
    worst = f"{r.worst_recovery_s:.2f}s" if r.worst_recovery_s is not None else "not recovered"
    target = f"{r.rto_target_s:g}s" if r.rto_target_s is not None else "?"
    return f"{'met' if r.rto_met else 'MISSED'} (worst {worst} / target {target})"


_STATUS_MD = {"covered": "✅ covered", "overdue": "⚠️ overdue", "gap": "❌ gap"}


def render_markdown(report: CoverageReport) -> str:
    lines = [
        "# Compliance coverage",
        "",
        f"Generated {_fmt_ts(report.generated_at)} from {report.scope}.",
        f"Overall coverage: **{report.coverage:.0%}** "
        f"({len(report.requirements) - len(report.gaps) - len(report.overdue)} covered, "
        f"{len(report.overdue)} overdue, {len(report.gaps)} gaps).",
        "",
        "| framework | source | requirements | covered | overdue | gaps | coverage |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for f in report.frameworks:
        lines.append(
            f"| {f.name} ({f.id}) | {f.source} | {f.requirements} | {f.covered} | {f.overdue} | {f.gaps} "
            f"| {f.coverage:.0%} |"
        )
    lines += [
        "",
        "## Requirements",
        "",
        "| requirement | reference | title | status | runs (passed) | in period | last tested | next due | RTO |",
        "| --- | --- | --- | --- | ---: | ---: | --- | --- | --- |",
    ]
    for r in report.requirements:
        lines.append(
            f"| {r.id} | {r.reference} | {r.title} | {_STATUS_MD[r.status]} | {r.runs} ({r.passed}) "
            f"| {r.runs_in_period} / {r.frequency_days}d | {_fmt_ts(r.last_tested)} | {_fmt_ts(r.next_due)} "
            f"| {_rto_text(r)} |"
        )
    reqs = report.requirements
    lines += _md_section(
        "Gaps",
        [
            f"- **{r.id}** ({r.reference}): no evidence yet. Evidence needed: {r.evidence_hint}."
            for r in reqs
            if r.status == "gap"
        ],
    )
    lines += _md_section(
        "Overdue",
        [
            f"- **{r.id}**: last tested {_fmt_ts(r.last_tested)}, due every {r.frequency_days} days "
            f"({r.frequency_basis})."
            for r in reqs
            if r.status == "overdue"
        ],
    )
    lines += _md_section("Recovery time objective missed", [f"- **{i}**" for i in report.rto_failures])
    evidence = [
        f"- {r.id}: " + ", ".join(f"`{e.run_id}` {e.status}" for e in r.evidence[:5])
        for r in reqs
        if r.evidence
    ]
    lines += _md_section("Evidence", evidence, always=True)
    lines.append("")
    return "\n".join(lines)


def _md_section(title: str, items: list[str], *, always: bool = False) -> list[str]:
    """A `## title` section of bullet lines; a section with nothing to list is left out unless `always`."""
    return ["", f"## {title}", "", *items] if items or always else []


_CSS = """
body{font-family:system-ui,sans-serif;margin:2rem;color:#222}table{border-collapse:collapse;margin:1rem 0}
th,td{border:1px solid #ccc;padding:.3rem .6rem;text-align:left;vertical-align:top}th{background:#f3f3f3}
.covered{color:#176d2c}.overdue{color:#9a6700}.gap{color:#b3261e;font-weight:600}.num{text-align:right}
code{font-size:.9em}
"""


def render_html(report: CoverageReport) -> str:
    e = html.escape
    rows_fw = "".join(
        f"<tr><td>{e(f.name)} ({e(f.id)})</td><td>{e(f.source)}</td><td class=num>{f.requirements}</td>"
        f"<td class=num>{f.covered}</td><td class=num>{f.overdue}</td><td class=num>{f.gaps}</td>"
        f"<td class=num>{f.coverage:.0%}</td></tr>"
        for f in report.frameworks
    )
    rows_req = "".join(
        f"<tr><td>{e(r.id)}</td><td>{e(r.reference)}</td><td>{e(r.title)}</td>"
        f"<td class={r.status}>{r.status}</td><td class=num>{r.runs} ({r.passed})</td>"
        f"<td class=num>{r.runs_in_period} / {r.frequency_days}d</td><td>{e(_fmt_ts(r.last_tested))}</td>"
        f"<td>{e(_fmt_ts(r.next_due))}</td><td>{e(_rto_text(r))}</td>"
        f"<td>{' '.join(f'<code>{e(x.run_id)}</code>' for x in r.evidence[:5]) or e(r.evidence_hint)}</td></tr>"
        for r in report.requirements
    )
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>Compliance coverage</title>"
        f"<style>{_CSS}</style></head><body><h1>Compliance coverage</h1>"
        f"<p>Generated {e(_fmt_ts(report.generated_at))} from {e(report.scope)}. Overall coverage: "
        f"<strong>{report.coverage:.0%}</strong>; gaps: {len(report.gaps)}; overdue: {len(report.overdue)}; "
        f"RTO missed: {len(report.rto_failures)}.</p>"
        "<table><tr><th>framework</th><th>source</th><th>requirements</th><th>covered</th><th>overdue</th>"
        f"<th>gaps</th><th>coverage</th></tr>{rows_fw}</table>"
        "<h2>Requirements</h2><table><tr><th>requirement</th><th>reference</th><th>title</th><th>status</th>"
        "<th>runs (passed)</th><th>in period</th><th>last tested</th><th>next due</th><th>RTO</th>"
        f"<th>evidence</th></tr>{rows_req}</table></body></html>\n"
    )


def write_report(
    report: CoverageReport, path: str | Path, fmt: Literal["html", "markdown", "json"] | None = None
) -> Path:
    """Write the report; the format follows `fmt`, else the suffix (.html, .md, .json)."""
    p = Path(path)
    kind = fmt or {".html": "html", ".htm": "html", ".md": "markdown", ".json": "json"}.get(p.suffix.lower())
    if kind is None:
        raise ComplianceError(
            f"output: cannot tell the format of {p.name!r}; fix: end it in .html, .md or .json"
        )
    text = {
        "html": render_html,
        "markdown": render_markdown,
        "json": lambda r: r.model_dump_json(indent=2),
    }[kind](report)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p


def tags_for(doc: Mapping[str, Any], extra: Iterable[str]) -> list[str]:
    """The experiment's tags plus the compliance ids `extra`, without duplicates (used by GameDays)."""
    tags = [t for t in (doc.get("tags") or []) if isinstance(t, str)]
    for t in extra:
        if normalise_tag(t) not in {normalise_tag(x) for x in tags}:
            tags.append(normalise_tag(t))
    return tags
