"""GameDays: a campaign of experiments in lanes, under one shared load, scored by one documented model.

A GameDay file names its lanes; a lane runs its experiments in order (stopping at the first that does not
pass, unless told otherwise: later stages of an escalation make no sense after a breach) or all at once. The
lanes run one after another. When the file declares `load:`, one load generator runs for the whole campaign:
first alone for `baseline_s` (the baseline), then under every experiment, so each run's load impact is
measured against the same traffic. Every run goes through `run_experiment`, so the policy, gates and rollbacks
apply as always; the GameDay's compliance ids are added to each run's tags, which makes the runs evidence.

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
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from faultplane.core.formats import ExperimentError, ValidationIssue, issues_from_pydantic, load_document
from faultplane.core.store import Store, open_store

__all__ = [
    "GameDay",
    "GameDayAnalysis",
    "GameDayRun",
    "Lane",
    "analyze_gameday",
    "list_gamedays",
    "load_gameday",
    "run_gameday",
    "score_components",
]

_MIGRATIONS = [
    (
        "gameday-001",
        [
            """CREATE TABLE IF NOT EXISTS gamedays (
                gameday_id VARCHAR PRIMARY KEY,
                name VARCHAR,
                source VARCHAR,
                started_at TIMESTAMPTZ,
                ended_at TIMESTAMPTZ,
                dry_run BOOLEAN,
                spec VARCHAR,
                baseline VARCHAR,
                load_summary VARCHAR,
                score DOUBLE,
                grade VARCHAR
            )""",
            """CREATE TABLE IF NOT EXISTS gameday_runs (
                gameday_id VARCHAR,
                lane VARCHAR,
                lane_mode VARCHAR,
                position INTEGER,
                experiment VARCHAR,
                run_id VARCHAR,
                status VARCHAR,
                success BOOLEAN,
                started_offset_s DOUBLE,
                ended_offset_s DOUBLE,
                load_error_rate DOUBLE,
                load_p99_ms DOUBLE,
                compliance VARCHAR[],
                error VARCHAR
            )""",
        ],
    )
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Entry(_Strict):
    experiment: str = Field(
        min_length=1, description="a path (relative to the GameDay file) or a listed name"
    )
    variables: dict[str, Any] = Field(default_factory=dict)
    compliance: list[str] = Field(default_factory=list)


class Lane(_Strict):
    name: str = Field(min_length=1)
    mode: Literal["ordered", "parallel"] = "ordered"
    experiments: list[str | Entry] = Field(min_length=1)
    variables: dict[str, Any] = Field(default_factory=dict)
    compliance: list[str] = Field(default_factory=list)
    stop_on_failure: bool = Field(
        True, description="ordered lanes: skip the rest after a run that does not pass (an escalation)"
    )

    def entries(self) -> list[Entry]:
        return [Entry(experiment=e) if isinstance(e, str) else e for e in self.experiments]


class Slo(_Strict):
    error_rate: float = Field(0.01, gt=0, le=1)
    latency_p99_ms: float = Field(1000, gt=0)
    recovery_seconds: float = Field(30, gt=0, description="recovery target when a run has no estimate")


class Compliance(_Strict):
    frameworks: list[str] = Field(default_factory=list, description="the scope of compliance coverage")
    requirements: list[str] = Field(default_factory=list, description="ids tagged on every run")


class Weights(_Strict):
    pass_rate: float = Field(0.4, ge=0)
    recovery: float = Field(0.25, ge=0)
    load_impact: float = Field(0.2, ge=0)
    compliance: float = Field(0.15, ge=0)


class GameDay(_Strict):
    name: str = Field(min_length=1)
    description: str = ""
    variables: dict[str, Any] = Field(default_factory=dict)
    load: dict[str, Any] | None = Field(None, description="one load generator for the whole GameDay")
    baseline_s: float = Field(3.0, ge=0, le=600, description="load alone before the first lane")
    slo: Slo = Field(default_factory=Slo)
    compliance: Compliance = Field(default_factory=Compliance)
    weights: Weights = Field(default_factory=Weights)
    lanes: list[Lane] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_lanes(self) -> GameDay:
        names = [lane.name for lane in self.lanes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"lane names must be unique; repeated: {', '.join(dupes)}")
        return self


class GameDayRun(BaseModel):
    lane: str
    lane_mode: str
    position: int
    experiment: str
    run_id: str | None
    status: str = Field(description="the run's status, or `skipped`")
    success: bool
    started_offset_s: float | None = None
    ended_offset_s: float | None = None
    load_error_rate: float | None = None
    load_p99_ms: float | None = None
    compliance: list[str] = Field(default_factory=list)
    error: str | None = None
    time_to_recover_s: float | None = None
    recovered: bool | None = None
    recovery_target_s: float | None = None


class GameDayAnalysis(BaseModel):
    gameday_id: str
    name: str
    started_at: datetime | None
    ended_at: datetime | None
    dry_run: bool
    score: float | None
    grade: str
    components: dict[str, float | None] = Field(
        description="pass_rate, recovery, load_impact, compliance in 0..1"
    )
    weights: dict[str, float]
    planned: int
    passed: int
    lanes: list[dict[str, Any]]
    runs: list[GameDayRun]
    baseline: dict[str, float | None] | None
    compliance: dict[str, Any] | None = Field(description="coverage from this GameDay's runs")
    findings: list[str]


# ---- loading ---------------------------------------------------------------------------------------------


def load_gameday(source: str | Path | Mapping[str, Any]) -> tuple[GameDay, Path | None]:
    """(the GameDay, its file's folder) from a path, YAML/JSON text or a mapping; raises ExperimentError."""
    base: Path | None = None
    if isinstance(source, Mapping):
        data = dict(source)
    else:
        if isinstance(source, Path) or (
            isinstance(source, str) and "\n" not in source and len(source) < 4096 and Path(source).is_file()
        ):
            base = Path(source).resolve().parent
        data = load_document(source)
    try:
        gd = GameDay.model_validate(data)
    except ValidationError as exc:
        raise ExperimentError(issues_from_pydantic(exc)) from None
    from faultplane.services.compliance import load_catalog, split_known

    cat = load_catalog()
    ids = list(gd.compliance.requirements)
    for lane in gd.lanes:
        ids += lane.compliance
        for e in lane.entries():
            ids += e.compliance
    _, unknown = split_known(ids, cat)
    issues = []
    if unknown:
        issues.append(
            ValidationIssue(
                field="compliance",
                message=f"unknown requirement id(s): {', '.join(sorted(set(unknown)))}",
                fix="use ids from `faultplane compliance requirements`, e.g. DORA-25, SOC2-A1.3",
            )
        )
    bad_fw = [f for f in gd.compliance.frameworks if cat.framework(f) is None]
    if bad_fw:
        issues.append(
            ValidationIssue(
                field="compliance.frameworks",
                message=f"unknown framework(s): {', '.join(bad_fw)}",
                fix=f"use {', '.join(f.id for f in cat.frameworks)}",
            )
        )
    if issues:
        raise ExperimentError(issues)
    return gd, base


def _experiment_doc(ref: str, base: Path | None) -> tuple[dict[str, Any], str]:
    from faultplane.services.experiments import _load

    if base is not None and (base / ref).is_file():
        path = base / ref
        return load_document(path), str(path)
    if Path(ref).is_file():
        return load_document(Path(ref)), ref
    return _load(ref), ref


# ---- running ---------------------------------------------------------------------------------------------


async def run_gameday(
    source: str | Path | Mapping[str, Any],
    *,
    variables: Mapping[str, Any] | None = None,
    store: Store | None = None,
    policy_path: str | Path | None = None,
    dry_run: bool = False,
    on_run: Callable[[GameDayRun], None] | None = None,
    journal_dir: Path | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    stop: Callable[[], str | None] | None = None,
) -> GameDayAnalysis:
    """Run every lane, store the GameDay and its runs, and return its analysis (score, findings, coverage).

    Everything is checked before the first run: the file, every experiment (found, valid, variables known).
    `on_event` hears each run's engine events, plus a `gameday_run` event as each run starts (MCP progress);
    once `stop()` returns a reason, no further run starts (each is stored as skipped with that reason) —
    aborting the runs under way is the caller's part (engine.lifecycle.abort_run).
    """
    from faultplane.core.policy import PolicyError, load_policy
    from faultplane.engine.lifecycle import plan
    from faultplane.services.compliance import normalise_tag, tags_for
    from faultplane.services.experiments import run_experiment

    gd, base = load_gameday(source)
    try:
        # a broken or missing policy file stops the GameDay before anything runs, not inside a lane
        load_policy(policy_path)
    except PolicyError as exc:
        raise ExperimentError(
            [
                ValidationIssue(
                    field="policy", message=str(exc), fix="correct the policy file or pass --policy"
                )
            ]
        ) from None
    overrides = dict(variables or {})
    store = store or open_store()
    store.ensure_schema("gameday", _MIGRATIONS)

    # Resolve and plan everything first: a typo in lane 3 must not surface after lanes 1 and 2 have run.
    prepared: list[list[tuple[Entry, dict[str, Any], str, dict[str, Any], list[str]]]] = []
    issues: list[ValidationIssue] = []
    for li, lane in enumerate(gd.lanes):
        items = []
        for ei, entry in enumerate(lane.entries()):
            where = f"lanes[{li}].experiments[{ei}]"
            try:
                doc, label = _experiment_doc(entry.experiment, base)
            except ExperimentError as exc:
                issues += [ValidationIssue(field=where, message=i.message, fix=i.fix) for i in exc.issues]
                continue
            vars_ = {**gd.variables, **lane.variables, **entry.variables, **overrides}
            ids = [
                normalise_tag(t) for t in [*gd.compliance.requirements, *lane.compliance, *entry.compliance]
            ]
            doc = {**doc, "tags": tags_for(doc, ids)}
            try:
                plan(doc, vars_)
            except ExperimentError as exc:
                issues += [
                    ValidationIssue(field=f"{where} ({label}): {i.field}", message=i.message, fix=i.fix)
                    for i in exc.issues
                ]
                continue
            items.append((entry, doc, label, vars_, sorted(set(ids))))
        prepared.append(items)
    if issues:
        raise ExperimentError(issues)

    gameday_id = uuid.uuid4().hex[:12]
    started = datetime.now(UTC)
    runs: list[GameDayRun] = []
    generator = None
    if gd.load is not None and not dry_run:
        from faultplane.core.config import resolve
        from faultplane.engine.load import make_load, parse_load_spec

        load_doc = resolve({"load": gd.load}, {**gd.variables, **overrides}).document["load"]
        generator = make_load(parse_load_spec(load_doc, where="load"))

    def offset() -> float | None:
        return round(generator.elapsed(), 3) if generator is not None else None

    async def one(
        lane: Lane, position: int, item: tuple[Entry, dict[str, Any], str, dict[str, Any], list[str]]
    ) -> GameDayRun:
        _, doc, label, vars_, ids = item
        reason = stop() if stop is not None else None
        if reason is not None:
            skipped = GameDayRun(
                lane=lane.name,
                lane_mode=lane.mode,
                position=position,
                experiment=label,
                run_id=None,
                status="skipped",
                success=False,
                compliance=ids,
                error=f"skipped: {reason}",
            )
            runs.append(skipped)
            if on_run is not None:
                on_run(skipped)
            return skipped
        if on_event is not None:
            on_event({"event": "gameday_run", "lane": lane.name, "experiment": label, "position": position})
        t_start = offset()
        result = await run_experiment(
            doc,
            variables=vars_,
            store=store,
            policy_path=policy_path,
            dry_run=dry_run,
            journal_dir=journal_dir,
            on_event=on_event,
        )
        run = GameDayRun(
            lane=lane.name,
            lane_mode=lane.mode,
            position=position,
            experiment=label,
            run_id=result.run_id,
            status=result.status,
            success=result.success,
            started_offset_s=t_start,
            ended_offset_s=offset(),
            compliance=ids,
            error=result.error,
        )
        runs.append(run)
        if on_run is not None:
            on_run(run)
        return run

    async def lanes() -> None:
        for lane, items in zip(gd.lanes, prepared, strict=True):
            if lane.mode == "parallel":
                async with anyio.create_task_group() as tg:
                    for pos, item in enumerate(items):
                        tg.start_soon(one, lane, pos, item)
                continue
            stopped: str | None = None
            for pos, item in enumerate(items):
                if stopped is not None:
                    skipped = GameDayRun(
                        lane=lane.name,
                        lane_mode=lane.mode,
                        position=pos,
                        experiment=item[2],
                        run_id=None,
                        status="skipped",
                        success=False,
                        compliance=item[4],
                        error=f"skipped: {stopped} did not pass",
                    )
                    runs.append(skipped)
                    if on_run is not None:
                        on_run(skipped)
                    continue
                run = await one(lane, pos, item)
                if lane.stop_on_failure and not run.success:
                    stopped = item[2]

    baseline: dict[str, float | None] | None = None
    load_summary: dict[str, Any] | None = None
    if generator is not None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(generator.run)
            await generator.wait_started()  # the load's worker processes take a moment to start
            await anyio.sleep(gd.baseline_s)
            snap = generator.snapshot(max(0.1, gd.baseline_s))
            baseline = {k: snap.get(k) for k in ("error_rate", "latency_p99", "throughput")}
            try:
                await lanes()
            finally:
                # stopping waits for the requests in flight (each bounded by its timeout): every request
                # scheduled in a run's window then has its outcome, counted in that window
                tg.cancel_scope.cancel()
        for run in runs:
            if run.started_offset_s is not None and run.ended_offset_s is not None:
                fig = generator.window(run.started_offset_s, run.ended_offset_s)
                run.load_error_rate, run.load_p99_ms = fig.get("error_rate"), fig.get("latency_p99")
        load_summary = generator.summary()
        load_summary.pop("series", None)  # per-second rows live in the experiments' own journals
    else:
        await lanes()

    runs.sort(key=lambda r: ([lane.name for lane in gd.lanes].index(r.lane), r.position))
    await anyio.to_thread.run_sync(
        _persist, store, gameday_id, gd, source, started, dry_run, baseline, load_summary, runs
    )
    analysis = await anyio.to_thread.run_sync(analyze_gameday, gameday_id, store)
    await anyio.to_thread.run_sync(
        lambda: store.execute(
            "UPDATE gamedays SET score = ?, grade = ? WHERE gameday_id = ?",
            [analysis.score, analysis.grade, gameday_id],
        )
    )
    return analysis


def _persist(
    store: Store,
    gameday_id: str,
    gd: GameDay,
    source: Any,
    started: datetime,
    dry_run: bool,
    baseline: dict[str, float | None] | None,
    load_summary: dict[str, Any] | None,
    runs: list[GameDayRun],
) -> None:
    store.insert(
        "gamedays",
        [
            {
                "gameday_id": gameday_id,
                "name": gd.name,
                "source": str(source)
                if isinstance(source, str | Path) and "\n" not in str(source)
                else "(inline)",
                "started_at": started,
                "ended_at": datetime.now(UTC),
                "dry_run": dry_run,
                "spec": gd.model_dump_json(),
                "baseline": json.dumps(baseline) if baseline is not None else None,
                "load_summary": json.dumps(load_summary) if load_summary is not None else None,
            }
        ],
    )
    store.insert(
        "gameday_runs",
        [
            {
                "gameday_id": gameday_id,
                **r.model_dump(
                    include={
                        "lane",
                        "lane_mode",
                        "position",
                        "experiment",
                        "run_id",
                        "status",
                        "success",
                        "started_offset_s",
                        "ended_offset_s",
                        "load_error_rate",
                        "load_p99_ms",
                        "compliance",
                        "error",
                    }
                ),
            }
            for r in runs
        ],
    )


# ---- analysis and scoring --------------------------------------------------------------------------------


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


def _resolve_id(store: Store, ref: str | None) -> str:
    if ref:
        rows = store.query(
            "SELECT gameday_id FROM gamedays WHERE gameday_id = ? OR gameday_id LIKE ? || '%' OR name = ? "
            "ORDER BY started_at DESC",
            [ref, ref, ref],
        )
        ids = list(dict.fromkeys(r["gameday_id"] for r in rows))
        exact = [i for i in ids if i == ref]
        if exact:
            return exact[0]
        by_prefix = [i for i in ids if i.startswith(ref)]
        if len(by_prefix) == 1:
            return by_prefix[0]
        if ids and not by_prefix:
            return ids[0]  # a name: its newest GameDay
        if len(by_prefix) > 1:
            raise LookupError(f"gameday {ref!r} is ambiguous: {', '.join(by_prefix[:5])}")
        raise LookupError(f"no GameDay {ref!r}: list them with `faultplane gameday list`")
    rows = store.query("SELECT gameday_id FROM gamedays ORDER BY started_at DESC LIMIT 1")
    if not rows:
        raise LookupError("no GameDay has run yet: run one with `faultplane gameday run <file>`")
    return str(rows[0]["gameday_id"])


def analyze_gameday(gameday: str | None = None, store: Store | None = None) -> GameDayAnalysis:
    """Score a stored GameDay (by id, id prefix or name; default: the newest) and list its findings."""
    from faultplane.services.compliance import coverage_report

    store = store or open_store()
    store.ensure_schema("gameday", _MIGRATIONS)
    gid = _resolve_id(store, gameday)
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


def list_gamedays(store: Store | None = None, limit: int = 20) -> list[dict[str, Any]]:
    store = store or open_store()
    store.ensure_schema("gameday", _MIGRATIONS)
    return store.query(
        "SELECT gameday_id, name, started_at, ended_at, dry_run, score, grade FROM gamedays "
        "ORDER BY started_at DESC LIMIT ?",
        [limit],
    )
