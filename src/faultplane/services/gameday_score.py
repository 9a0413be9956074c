"""A stored GameDay's score, grade and findings, by one documented model.

Score (0-100), documented in docs/gamedays.md:

    P  pass rate      = passed runs / planned runs (a skipped or refused run does not pass)
    R  recovery       = mean over runs that measured recovery of r, where r = 1 if recovered within the
                        target, target / t if recovered later, 0 if not recovered
                        (target: the run's estimate.recovery_seconds, else slo.recovery_seconds)
    L  load impact    = mean over runs of 1 - min(1, max(de / slo.error_rate, dp / slo.latency_p99_ms)),
                        de, dp = rise of error rate and worst one-second p99 over the baseline (>= 0)
    C  compliance     = requirements in scope with evidence from this GameDay / requirements in scope
    score = 100 * sum(w_k * S_k) / sum(w_k) over the components that could be measured
            (weights default P 0.4, R 0.25, L 0.2, C 0.15); grade A >= 90, B >= 80, C >= 70, D >= 60, else F

A dry run earns no score (nothing was injected); findings name each run that did not pass, did not recover,
or moved the shared load's error rate or p99 past the SLO over the baseline.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from faultplane.core.store import Store, open_store
from faultplane.services.gameday_model import GameDay, GameDayAnalysis, GameDayRun, Slo
from faultplane.services.gameday_store import GAMEDAY_MIGRATIONS, resolve_gameday_id

__all__ = ["analyze_gameday", "score_components"]


def _grade(score: float | None) -> str:
    if score is None:
        return "n/a"
    for bound, letter in ((90, "A"), (80, "B"), (70, "C"), (60, "D")):
        if score >= bound:
            return letter
    return "F"


def score_components(
    runs: Sequence[GameDayRun],
    slo: Slo,
    baseline: Mapping[str, float | None] | None,
    compliance_coverage: float | None,
) -> dict[str, float | None]:
    """The four components in 0..1 (None when nothing could be measured); the formulas are in the module doc."""
    planned = len(runs)
    pass_rate = sum(r.success for r in runs) / planned if planned else None

    rs = []
    for r in runs:
        if r.recovered is None:
            continue
        target = r.recovery_target_s or slo.recovery_seconds
        t = r.time_to_recover_s
        if not r.recovered or t is None:
            rs.append(0.0)
        else:
            rs.append(1.0 if t <= target else target / t)
    recovery = sum(rs) / len(rs) if rs else None

    ls = []
    if baseline is not None:
        e0 = baseline.get("error_rate") or 0.0
        p0 = baseline.get("latency_p99") or 0.0
        for r in runs:
            if r.load_error_rate is None and r.load_p99_ms is None:
                continue
            de = max(0.0, (r.load_error_rate or 0.0) - e0) / slo.error_rate
            dp = max(0.0, (r.load_p99_ms or 0.0) - p0) / slo.latency_p99_ms
            ls.append(1.0 - min(1.0, max(de, dp)))
    load_impact = sum(ls) / len(ls) if ls else None

    def r4(x: float | None) -> float | None:
        return round(x, 4) if x is not None else None

    return {
        "pass_rate": r4(pass_rate),
        "recovery": r4(recovery),
        "load_impact": r4(load_impact),
        "compliance": r4(compliance_coverage),
    }


def analyze_gameday(gameday: str | None = None, store: Store | None = None) -> GameDayAnalysis:
    """Score a stored GameDay (by id, id prefix or name; default: the newest) and list its findings."""
    from faultplane.services.compliance import coverage_report

    store = store or open_store()
    store.ensure_schema("gameday", GAMEDAY_MIGRATIONS)
    gid = resolve_gameday_id(store, gameday)
    head = store.query("SELECT * FROM gamedays WHERE gameday_id = ?", [gid])[0]
    gd = GameDay.model_validate_json(head["spec"])
    rows = store.query(
        "SELECT g.*, j.body FROM gameday_runs g LEFT JOIN journals j USING (run_id) WHERE g.gameday_id = ? "
        "ORDER BY g.lane, g.position",
        [gid],
    )
    lane_order = [lane.name for lane in gd.lanes]
    runs: list[GameDayRun] = []
    for row in rows:
        body = json.loads(row["body"]) if row.get("body") else {}
        rec = (body.get("steady_states") or {}).get("recovery") or {}
        target = (body.get("estimate") or {}).get("recovery_seconds")
        run = GameDayRun(
            **{k: row[k] for k in GameDayRun.model_fields if k in row and k != "compliance"},
        )
        run.compliance = list(row.get("compliance") or [])
        run.time_to_recover_s = rec.get("time_to_recover_s")
        run.recovered = rec.get("steady_state_met")
        run.recovery_target_s = float(target) if isinstance(target, int | float) else None
        runs.append(run)
    runs.sort(key=lambda r: (lane_order.index(r.lane) if r.lane in lane_order else 99, r.position))
    baseline = json.loads(head["baseline"]) if head.get("baseline") else None

    frameworks = list(gd.compliance.frameworks)
    tagged = sorted({i for r in runs for i in r.compliance})
    cov: dict[str, Any] | None = None
    coverage_value: float | None = None
    if frameworks or tagged:
        from faultplane.services.compliance import load_catalog

        cat = load_catalog()
        if not frameworks:
            frameworks = sorted({hit[0].id for i in tagged if (hit := cat.requirement(i))})
        report = coverage_report(
            store, frameworks=frameworks, run_ids=[r.run_id for r in runs if r.run_id], catalog=cat
        )
        covered = [r.id for r in report.requirements if r.status == "covered"]
        cov = {
            "frameworks": frameworks,
            "coverage": report.coverage,
            "covered": covered,
            "gaps": report.gaps,
            "rto_failures": report.rto_failures,
        }
        coverage_value = report.coverage

    comps = score_components(runs, gd.slo, baseline, coverage_value)
    weights = gd.weights.model_dump()
    present = {k: v for k, v in comps.items() if v is not None and weights[k] > 0}
    wsum = sum(weights[k] for k in present)
    score = round(100 * sum(weights[k] * v for k, v in present.items()) / wsum, 1) if wsum else None
    if head.get("dry_run"):
        score = None  # nothing was injected: a dry run checks the plan, it earns no score

    lanes = []
    for lane in gd.lanes:
        mine = [r for r in runs if r.lane == lane.name]
        lanes.append(
            {
                "name": lane.name,
                "mode": lane.mode,
                "planned": len(mine),
                "passed": sum(r.success for r in mine),
                "statuses": [r.status for r in mine],
            }
        )
    findings = []
    for r in runs:
        if r.status == "skipped":
            continue
        if r.status == "refused":
            findings.append(f"{r.lane}/{r.experiment}: refused by the policy: {r.error}")
        elif not r.success:
            findings.append(
                f"{r.lane}/{r.experiment}: {r.status}: {r.error or 'the steady state did not hold'}"
            )
        if r.recovered is False:
            findings.append(f"{r.lane}/{r.experiment}: the steady state did not return after rollback")
        if baseline and r.load_error_rate is not None:
            de = r.load_error_rate - (baseline.get("error_rate") or 0.0)
            if de > gd.slo.error_rate:
                findings.append(
                    f"{r.lane}/{r.experiment}: error rate under load rose by {de:.2%} (budget {gd.slo.error_rate:.2%})"
                )
        if baseline and r.load_p99_ms is not None:
            dp = r.load_p99_ms - (baseline.get("latency_p99") or 0.0)
            if dp > gd.slo.latency_p99_ms:
                findings.append(f"{r.lane}/{r.experiment}: p99 under load rose by {dp:.0f} ms")
    skipped = [r for r in runs if r.status == "skipped"]
    if skipped:
        findings.append(f"{len(skipped)} run(s) skipped after a failure earlier in an ordered lane")
    if cov and cov["gaps"]:
        findings.append(f"compliance gaps in scope: {', '.join(cov['gaps'])}")
    return GameDayAnalysis(
        gameday_id=gid,
        name=gd.name,
        started_at=head.get("started_at"),
        ended_at=head.get("ended_at"),
        dry_run=bool(head.get("dry_run")),
        score=score,
        grade="dry run" if head.get("dry_run") else _grade(score),
        components=comps,
        weights=weights,
        planned=len(runs),
        passed=sum(r.success for r in runs),
        lanes=lanes,
        runs=runs,
        baseline=baseline,
        compliance=cov,
        findings=findings,
    )
