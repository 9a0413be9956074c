"""GameDays: a campaign of experiments in lanes, under one shared load, scored by one documented model.

A GameDay file names its lanes; a lane runs its experiments in order (stopping at the first that does not
pass, unless told otherwise: later stages of an escalation make no sense after a breach) or all at once. The
lanes run one after another. When the file declares `load:`, one load generator runs for the whole campaign:
first alone for `baseline_s` (the baseline), then under every experiment, so each run's load impact is
measured against the same traffic. Every run goes through `run_experiment`, so the policy, gates and rollbacks
apply as always; the GameDay's compliance ids are added to each run's tags, which makes the runs evidence.

The file's schema is in `gameday_model`, where a GameDay is kept in `gameday_store`, the score in
`gameday_score` (its formulas are documented there and in docs/gamedays.md); this module runs one. Every name
callers import from here stays importable from here.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from faultplane.core.formats import ExperimentError, ValidationIssue, load_document
from faultplane.core.store import Store, open_store
from faultplane.services import gameday_model

# The schema's names stay importable from here, where callers found them before gameday_model split off.
from faultplane.services.gameday_model import *  # noqa: F403
from faultplane.services.gameday_model import Entry, GameDayAnalysis, GameDayRun, Lane, load_gameday
from faultplane.services.gameday_score import analyze_gameday, score_components
from faultplane.services.gameday_store import GAMEDAY_MIGRATIONS, list_gamedays, persist_gameday

__all__ = [*gameday_model.__all__, "analyze_gameday", "list_gamedays", "run_gameday", "score_components"]

_MIGRATIONS = GAMEDAY_MIGRATIONS  # the name this module gave the tables before they moved to gameday_store


def _experiment_doc(ref: str, base: Path | None) -> tuple[dict[str, Any], str]:
    from faultplane.services.experiments import _load

    if base is not None and (base / ref).is_file():
        path = base / ref
        return load_document(path), str(path)
    if Path(ref).is_file():
        return load_document(Path(ref)), ref
    return _load(ref), ref


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
        raise ExperimentError.one(
            field="policy", message=str(exc), fix="correct the policy file or pass --policy"
        ) from None
    overrides = dict(variables or {})
    store = store or open_store()
    store.ensure_schema("gameday", GAMEDAY_MIGRATIONS)

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
        persist_gameday, store, gameday_id, gd, source, started, dry_run, baseline, load_summary, runs
    )
    analysis = await anyio.to_thread.run_sync(analyze_gameday, gameday_id, store)
    await anyio.to_thread.run_sync(
        lambda: store.execute(
            "UPDATE gamedays SET score = ?, grade = ? WHERE gameday_id = ?",
            [analysis.score, analysis.grade, gameday_id],
        )
    )
    return analysis
