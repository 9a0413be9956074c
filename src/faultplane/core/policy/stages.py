"""Blast-radius stages: which stage an experiment runs at, which it has earned, and how far it may reach.

A run declares its radius (`blast_radius: {percent|count|stage}`); the policy's stages say which stage that
size is. A stage is earned per target and fault kind by green runs that really injected that kind there at
the stage before (`core.exposure`), never by the experiment's title or family. Every target-selecting action
is capped at the run's radius. After green runs, the three-greens advice says what this does and does not show.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from faultplane.core.history import family_runs, query_family_runs
from faultplane.core.policy.model import KNOWN_FAULT_TYPES, Policy
from faultplane.core.policy.verdict import Violation

if TYPE_CHECKING:
    from faultplane.core.store import Store

__all__ = ["advice_after_run", "effective_radius", "forget_runs", "green_streak", "three_greens_advice"]


def _is_green(row: Mapping[str, Any]) -> bool:
    return (
        row.get("status") == "completed"
        and row.get("steady_state_before") is True
        and row.get("steady_state_after") is True
    )


# A DuckDB store answers from its history index (core.history: a file read, no database open). Other stores
# (ClickHouse) are queried, and one decision reads the history up to three times, so that answer is cached
# briefly; persisting a journal clears the cache (`forget_runs`).
_RUNS_CACHE: dict[tuple[str, str, int], tuple[float, list[dict[str, Any]]]] = {}
_RUNS_CACHE_TTL_S = 2.0


def forget_runs() -> None:
    """Drop cached run history: a run was just recorded."""
    _RUNS_CACHE.clear()


def _family_runs(
    store: Store | None, family: str, limit: int = 500, *, fresh: bool = False
) -> list[dict[str, Any]]:
    """`fresh`: the decision rests on it (a stage past 0), so a DuckDB store answers from the database."""
    if store is None:
        return []
    if getattr(store, "dialect", None) == "duckdb":
        return family_runs(store, family, limit, fresh=fresh)
    key = (str(getattr(store, "url", id(store))), family, limit)
    hit = _RUNS_CACHE.get(key)
    if hit is not None and time.monotonic() - hit[0] < _RUNS_CACHE_TTL_S:
        return hit[1]
    rows = _query_family_runs(store, family, limit)
    _RUNS_CACHE[key] = (time.monotonic(), rows)
    return rows


def _query_family_runs(store: Any, family: str, limit: int) -> list[dict[str, Any]]:
    return query_family_runs(store, family, limit)


def green_streak(store: Store | None, family: str) -> tuple[int | None, int]:
    """(stage, n): the newest runs of the family were n consecutive greens at that stage."""
    rows = _family_runs(store, family)
    if not rows or not _is_green(rows[0]):
        return (rows[0].get("blast_stage") if rows else None), 0
    stage = rows[0].get("blast_stage")
    n = 0
    for row in rows:
        if not _is_green(row) or row.get("blast_stage") != stage:
            break
        n += 1
    return stage, n


def three_greens_advice(
    stage: int | None, count: int, policy: Policy, *, fault_types: Sequence[str] = ()
) -> str:
    stages = policy.blast_radius.stages
    at = (
        f"stage {stage} ({stages[stage].describe()})"
        if stage is not None and 0 <= stage < len(stages)
        else (f"stage {stage}")
    )
    nxt = ""
    if stage is not None and stage + 1 < len(stages):
        s = stages[stage + 1]
        shape = f"percent: {s.percent:g}" if s.percent is not None else f"count: {s.count}"
        nxt = f"widen the blast radius to stage {stage + 1} (`blast_radius: {{{shape}}}`), or "
    others = [f for f in KNOWN_FAULT_TYPES if f not in fault_types]
    return (
        f"{count} consecutive green runs at {at}: this shows the system tolerates this fault at this radius, "
        f"not that it is resilient. Next: {nxt}try a new fault type ({', '.join(others[:3])})."
    )


def advice_after_run(
    store: Store | None,
    family: str,
    policy: Policy,
    *,
    green: bool,
    stage: int | None,
    fault_types: Sequence[str] = (),
) -> list[str]:
    """The three-greens advice for the result of the run that just ended (not yet counted in `runs`)."""
    if not green:
        return []
    streak_stage, n = green_streak(store, family)
    n = n + 1 if streak_stage == stage else 1
    if n < policy.blast_radius.greens_before_advice:
        return []
    return [three_greens_advice(stage, n, policy, fault_types=fault_types)]


def _exposures(store: Store | None, targets: Sequence[str]) -> list[dict[str, Any]]:
    """Exposure rows of these targets, newest first, from the database itself (a guardrail never rests on a
    cache). A store that cannot answer shows no exposure: the stage is then not earned."""
    if store is None or not targets:
        return []
    if getattr(store, "dialect", "duckdb") == "duckdb":
        if store.has_pending():
            store.flush()
        if not store.path.exists():
            return []
    final = " FINAL" if getattr(store, "dialect", "duckdb") == "clickhouse" else ""
    marks = ", ".join("?" for _ in targets)
    try:
        return store.query(
            f"SELECT target, fault_kind, stage, green, started_at FROM exposures{final} "
            f"WHERE target IN ({marks}) ORDER BY started_at DESC NULLS LAST, run_id DESC LIMIT 5000",
            list(targets),
        )
    except Exception:
        return []


def _earned_stage(
    raw: Mapping[str, Any],
    stage: int | None,
    policy: Policy,
    store: Store | None,
    fault_type_of: Callable[[str, str], str | None] | None,
    *,
    report_next_stage: bool = False,
) -> tuple[int, list[str]]:
    """(the highest stage this experiment has earned, why each of its faults lacks the requested stage).

    The lowest over the faults its method injects: each (target, kind) climbs on its own exposures. A method
    that injects no fault the journal could show (a no-op, a shell command) earns nothing past stage 0."""
    from faultplane.core.exposure import earned, planned_exposures

    if not report_next_stage and (stage is None or stage <= 0):
        return 0, []  # stage 0 needs no history: a run at stage 0 does not open the database for it
    planned = planned_exposures(raw, fault_type_of)
    if not planned:
        return 0, [
            "the method injects no fault a journal can show (a driver action that applies a fault), so no "
            "run of it earns a stage"
        ]
    need = policy.blast_radius.greens_to_advance
    rows = _exposures(store, sorted({t for t, _k, _n in planned if t != "opaque"}))
    allowed: int | None = None
    why: list[str] = []
    for target, kind, name in dict.fromkeys(planned):
        if target == "opaque":
            allowed = 0
            why.append(
                f"activity {name!r} looks like a {kind} fault but is not a driver action, so no run can show it "
                "applied: it earns no stage past 0"
            )
            continue
        mine = [r for r in rows if r.get("target") == target and r.get("fault_kind") == kind]
        ok, last, n = earned(mine, need)
        allowed = ok if allowed is None else min(allowed, ok)
        if stage is not None and stage > ok:
            # the missing step is the stage it has earned: that is where the green runs must come from
            have = n if last == ok else 0
            history = (
                "no green run has injected it yet"
                if last is None
                else f"its newest green exposure is at stage {last}"
            )
            why.append(
                f"target {target!r} / fault kind {kind!r} lacks {need - have} green run(s) that really "
                f"injected it at stage {ok} ({history}; {have} of {need} needed)"
            )
    return (allowed or 0), why


def _stage_of(raw: Mapping[str, Any], policy: Policy) -> tuple[int | None, list[Violation]]:
    stages = policy.blast_radius.stages
    br = raw.get("blast_radius")
    has_targets = bool(raw.get("targets"))
    if br is None:
        if has_targets and policy.blast_radius.require_declared:
            first = stages[0]
            shape = f"percent: {first.percent:g}" if first.percent is not None else f"count: {first.count}"
            return None, [
                Violation(
                    "blast_radius.required",
                    "blast_radius",
                    "the experiment has targets but no blast radius, so every matching target would be hit",
                    f"declare the first stage: `blast_radius: {{{shape}}}`",
                )
            ]
        return 0, []
    if not isinstance(br, Mapping):
        return None, [
            Violation("blast_radius.shape", "blast_radius", "must be a mapping", "use {percent: 10}")
        ]
    declared_stage = br.get("stage")
    pct, cnt = br.get("percent"), br.get("count")
    size_stage: int | None = None
    if pct is not None or cnt is not None:
        unit = "percent" if pct is not None else "count"
        amount = pct if pct is not None else cnt
        if not isinstance(amount, int | float) or isinstance(amount, bool) or amount <= 0:
            return None, [
                Violation(
                    "blast_radius.shape",
                    f"blast_radius.{unit}",
                    f"must be a positive number, got {amount!r}",
                    "use e.g. `percent: 10` or `count: 1`",
                )
            ]
        sizes = [getattr(s, unit) for s in stages]
        if all(s is None for s in sizes):
            other = "count" if unit == "percent" else "percent"
            return None, [
                Violation(
                    "blast_radius.unit",
                    f"blast_radius.{unit}",
                    f"the policy's stages are given as {other}, not {unit}",
                    f"declare `blast_radius: {{{other}: ...}}` or add `{unit}` to the policy's stages",
                )
            ]
        size_stage = len(stages)  # beyond the last stage unless a stage is at least this big
        for i, s in enumerate(sizes):
            if s is not None and amount <= s:
                size_stage = i
                break
    if declared_stage is not None:
        if not isinstance(declared_stage, int) or isinstance(declared_stage, bool) or declared_stage < 0:
            return None, [
                Violation(
                    "blast_radius.shape",
                    "blast_radius.stage",
                    "must be a stage index >= 0",
                    f"use 0..{len(stages) - 1}",
                )
            ]
        if size_stage is not None and size_stage > declared_stage:
            return None, [
                Violation(
                    "blast_radius.stage",
                    "blast_radius",
                    f"declares stage {declared_stage} but its size belongs to stage {size_stage}",
                    f"shrink the radius to {stages[min(declared_stage, len(stages) - 1)].describe()} "
                    "or drop `stage:`",
                )
            ]
        return declared_stage, []
    return size_stage if size_stage is not None else 0, []


def effective_radius(
    raw: Mapping[str, Any], stage: int | None, policy: Policy
) -> dict[str, float | int] | None:
    """The most any target-selecting action of this experiment may touch: the declared `blast_radius` size,
    else the size of its stage (an undeclared radius is stage 0: the first stage's size)."""
    br = raw.get("blast_radius")
    if isinstance(br, Mapping):
        for unit in ("percent", "count"):
            amount = br.get(unit)
            if isinstance(amount, int | float) and not isinstance(amount, bool) and amount > 0:
                return {unit: amount}
    stages = policy.blast_radius.stages
    if stage is None or not 0 <= stage < len(stages):
        return None
    s = stages[stage]
    return {k: v for k, v in (("percent", s.percent), ("count", s.count)) if v is not None}


# an action's own size fields, and the radius unit each is compared with
_ACTION_SIZE_FIELDS = (("percentage", "percent"), ("percent", "percent"), ("count", "count"))


def _radius_violations(
    raw: Mapping[str, Any],
    stage: int | None,
    radius: Mapping[str, float | int] | None,
    targets_of: Callable[[str, str], bool] | None,
) -> list[Violation]:
    """Driver actions asking for more targets than the experiment's blast radius allows."""
    if not radius:
        return []
    shown = " / ".join(f"{v:g}%" if k == "percent" else f"{v} target(s)" for k, v in radius.items())
    where_stage = f"stage {stage}" if stage is not None else "its stage"
    out: list[Violation] = []
    for section in ("method", "rollbacks"):
        for i, item in enumerate(raw.get(section) or []):
            if not isinstance(item, Mapping) or not isinstance(item.get("provider"), Mapping):
                continue
            prov = item["provider"]
            if prov.get("type") != "driver" or not isinstance(prov.get("arguments"), Mapping):
                continue
            driver, action = str(prov.get("driver")), str(prov.get("name"))
            if targets_of is not None:
                try:
                    if not targets_of(driver, action):
                        continue
                except Exception:  # an unknown activity is the validator's business
                    continue
            args = prov["arguments"]
            for arg, unit in _ACTION_SIZE_FIELDS:
                amount, limit = args.get(arg), radius.get(unit)
                if limit is None or not isinstance(amount, int | float) or isinstance(amount, bool):
                    continue
                if amount > limit:
                    out.append(
                        Violation(
                            "blast_radius.action",
                            f"{section}[{i}].provider.arguments.{arg}",
                            f"activity {item.get('name')!r} ({driver}.{action}) asks for {arg} {amount:g}, "
                            f"more than the experiment's blast radius ({shown}, {where_stage})",
                            f"lower `{arg}` to at most {limit:g}, or widen `blast_radius` to the next stage "
                            "once this one has run green",
                        )
                    )
    return out
