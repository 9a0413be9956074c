"""Boundary search: the fault parameters that take an SLO *just* past its bound.

Each trial templates its parameters into the experiment as configuration variables (`${pool_size}`) and runs it
for real through `run_experiment`, so every trial is planned, checked by the policy, gated and rolled back like
any other run. The measured SLI comes from the trial's journal (a gate's samples, a probe's outputs, or the
load generator's figures). An optuna sampler proposes the next parameters: NSGA-II (a genetic algorithm) by
default, TPE or random on request, seeded so a search can be replayed.

The answer is the breaching trial with the lowest fitness, and next to it the most severe trial that still
held: together they bracket the boundary. Every trial and the search itself are stored (tables `searches`,
`search_trials`).

What a search spec may say is in `search_spec`, how a trial is measured and scored (the fitness formula) in
`search_fitness`, where a search is kept in `search_store`; this module runs one. Every name callers import
from here stays importable from here.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import anyio

from faultplane.core.formats import ExperimentError
from faultplane.core.store import Store, open_store
from faultplane.services import search_spec
from faultplane.services.search_fitness import breaches_bound, describe_objective, fitness, measure

# The spec's names stay importable from here, where callers found them before search_spec split off.
from faultplane.services.search_spec import *  # noqa: F403
from faultplane.services.search_spec import (
    ParamSpec,
    SearchResult,
    SearchSpec,
    TrialResult,
    load_search_spec,
)
from faultplane.services.search_store import SEARCH_MIGRATIONS, list_searches, persist_search

__all__ = [*search_spec.__all__, "list_searches", "measure", "run_search"]

_MIGRATIONS = SEARCH_MIGRATIONS  # the name this module gave the tables before they moved to search_store


def _sampler(spec: SearchSpec) -> Any:
    import optuna

    if spec.sampler == "tpe":
        return optuna.samplers.TPESampler(seed=spec.seed, n_startup_trials=max(2, min(5, spec.budget // 3)))
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=spec.seed)
    pop = spec.population or max(2, min(8, spec.budget // 3))
    return optuna.samplers.NSGAIISampler(population_size=pop, seed=spec.seed)


def _distributions(spec: SearchSpec) -> dict[str, Any]:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out: dict[str, Any] = {}
    for name, p in spec.parameters.items():
        if p.type == "categorical":
            out[name] = CategoricalDistribution(p.choices or [])
        elif p.type == "int":
            out[name] = IntDistribution(int(p.low or 0), int(p.high or 0), step=int(p.step or 1), log=p.log)
        else:
            out[name] = FloatDistribution(float(p.low or 0), float(p.high or 0), step=p.step, log=p.log)
    return out


async def run_search(
    spec: SearchSpec | Mapping[str, Any] | str | Path,
    *,
    store: Store | None = None,
    on_trial: Callable[[TrialResult], None] | None = None,
    journal_dir: Path | None = None,
    policy_path: str | Path | None = None,
    allow_spec_policy: bool = True,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    stop: Callable[[], str | None] | None = None,
) -> SearchResult:
    """Search for the barely-breaching fault parameters. Raises ExperimentError on invalid input.

    The policy: `policy_path` (the operator's choice, e.g. `--policy`), else the spec's `policy`, else the one
    in force. A caller that does not trust the spec's author (an MCP agent) passes `allow_spec_policy=False`:
    a spec naming its own policy file is then refused, so it cannot swap in a laxer one.

    `on_event` hears each trial's engine events plus `search_trial` / `search_trial_done` events (MCP
    progress); once `stop()` returns a reason no further trial starts and the search ends "interrupted"."""
    import optuna

    from faultplane.core.policy import PolicyError, load_policy
    from faultplane.engine.lifecycle import plan
    from faultplane.services.experiments import _load, run_experiment
    from faultplane.services.runs import load_journal

    if not isinstance(spec, SearchSpec):
        spec = load_search_spec(spec)
    if spec.policy and not allow_spec_policy:
        raise ExperimentError.one(
            field="policy",
            message=f"this search may not choose its policy file ({spec.policy!r}): a search started "
            "by an agent runs under the policy in force, so it cannot pick a laxer one",
            fix="remove `policy` from the spec; whoever runs the server sets the policy "
            "(faultplane.policy.yaml in its project directory, or $FAULTPLANE_POLICY)",
        )
    policy = policy_path if policy_path is not None else spec.policy
    try:
        # a broken or missing policy file stops the search before the first trial, named as such
        load_policy(policy)
    except PolicyError as exc:
        raise ExperimentError.one(
            field="policy",
            message=str(exc),
            fix="correct the policy file, or name an existing one (--policy, or `policy` in the spec)"
            if allow_spec_policy
            else "the server's policy file is broken: whoever runs the server must fix it",
        ) from None
    store = store or open_store()
    store.ensure_schema("search", SEARCH_MIGRATIONS)
    raw = _load(spec.experiment if isinstance(spec.experiment, str) else dict(spec.experiment))

    # Plan once with mid-range values: a typo in a parameter name or a gate name fails here, before any run.
    probe_vars = {**spec.variables, **{k: _midpoint(p) for k, p in spec.parameters.items()}}
    planned = plan(raw, probe_vars)
    unused = [k for k in spec.parameters if f"${{{k}}}" not in json.dumps(raw)]
    if unused:
        raise ExperimentError.one(
            field=f"parameters.{unused[0]}",
            message=f"the experiment never uses ${{{unused[0]}}}, so searching it changes nothing",
            fix="write ${" + unused[0] + "} where the fault's size is set (e.g. in the action's arguments)",
        )
    gate = None
    if spec.objective.source == "gate":
        gate = next((g for g in planned.experiment.slo_gates if g.name == spec.objective.name), None)
        if gate is None:
            names = ", ".join(g.name for g in planned.experiment.slo_gates) or "(none)"
            raise ExperimentError.one(
                field="objective.name",
                message=f"the experiment has no gate named {spec.objective.name!r}",
                fix=f"use one of its gates: {names}",
            )
    op, bound, text = describe_objective(spec.objective, gate)
    scale = abs(bound) if bound else 1.0

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", sampler=_sampler(spec))
    dists = _distributions(spec)
    search_id = uuid.uuid4().hex[:12]
    started = datetime.now(UTC)
    t0 = anyio.current_time()
    trials: list[TrialResult] = []
    status: Literal["completed", "refused", "stopped", "interrupted"] = "completed"
    message = ""
    breaches = 0
    for index in range(spec.budget):
        reason = stop() if stop is not None else None
        if reason is not None:
            status, message = "interrupted", f"interrupted before trial {index}: {reason}"
            break
        ot = study.ask(dists)
        params = dict(ot.params)
        if on_event is not None:
            on_event({"event": "search_trial", "trial": index, "budget": spec.budget, "params": params})
        tstart = anyio.current_time()
        try:
            result = await run_experiment(
                raw,
                variables={**spec.variables, **params},
                store=store,
                policy_path=policy,
                journal_dir=journal_dir,
                on_event=on_event,
            )
        except ExperimentError as exc:
            study.tell(ot, state=optuna.trial.TrialState.FAIL)
            raise ExperimentError.one(
                field=f"trial {index} {params}", message=str(exc), fix="narrow the parameter ranges"
            ) from None
        severity = sum(spec.parameters[k].severity_of(v) for k, v in params.items()) / len(params)
        trial = TrialResult(
            trial=index,
            params=params,
            run_id=result.run_id,
            run_status=result.status,
            measured=None,
            breached=False,
            margin=None,
            severity=round(severity, 6),
            fitness=None,
            duration_s=round(anyio.current_time() - tstart, 3),
        )
        if result.status in ("refused", "interrupted"):
            # a refused trial ran nothing and an aborted one measured nothing worth scoring: the search ends here
            study.tell(ot, state=optuna.trial.TrialState.FAIL)
            trial.note = result.error
            trials.append(trial)
            if result.status == "refused":
                status, message = "refused", f"the policy refused trial {index}: {result.error}"
            else:
                status, message = "interrupted", f"trial {index} was interrupted: {result.error}"
            break
        journal = await anyio.to_thread.run_sync(load_journal, result.run_id, store)
        value, tripped, note = measure(journal, spec.objective, op)
        trial.note = note
        if value is None and not tripped:
            study.tell(ot, state=optuna.trial.TrialState.FAIL)
        else:
            if value is None:  # a gate that lost sight of its SLI counts as a breach at the bound
                value = bound
            signed = (value - bound) if op in (">", ">=") else (bound - value)
            margin = signed / scale
            breached = tripped or breaches_bound(op, value, bound)
            fit = fitness(breached, margin, severity)
            study.tell(ot, fit)
            trial.measured = round(value, 6)
            trial.breached = breached
            trial.margin = round(margin, 6)
            trial.fitness = round(fit, 6)
            breaches += breached
        trials.append(trial)
        if on_event is not None:
            on_event(
                {
                    "event": "search_trial_done",
                    "trial": index,
                    "measured": trial.measured,
                    "breached": trial.breached,
                }
            )
        if on_trial is not None:
            on_trial(trial)
        if spec.stop_after_breaches and breaches >= spec.stop_after_breaches:
            status, message = "stopped", f"stopped after {breaches} breaching trial(s)"
            break
        if spec.cooldown_s and index + 1 < spec.budget:
            await anyio.sleep(spec.cooldown_s)

    scored = [t for t in trials if t.fitness is not None]
    breaching = sorted((t for t in scored if t.breached), key=lambda t: (t.fitness, t.trial))
    best = breaching[0] if breaching else None
    boundary = None
    if best is not None:
        held = [t for t in scored if not t.breached and t.severity <= best.severity]
        holds = max(held, key=lambda t: (t.severity, -t.trial), default=None)
        boundary = {
            "breaches": best.params,
            "breaches_measured": best.measured,
            "holds": holds.params if holds else None,
            "holds_measured": holds.measured if holds else None,
        }
    if not message:
        message = (
            f"trial {best.trial} breaches {text} by {best.margin:.2%} with {best.params}"
            if best
            else f"no trial breached {text} within {len(trials)} run(s); widen the parameter ranges"
        )
    out = SearchResult(
        search_id=search_id,
        status=status,
        experiment_title=planned.experiment.title,
        sampler=spec.sampler,
        seed=spec.seed,
        budget=spec.budget,
        objective=text,
        found_breach=best is not None,
        best=best,
        boundary=boundary,
        trials=trials,
        elapsed_s=round(anyio.current_time() - t0, 3),
        message=message,
    )
    await anyio.to_thread.run_sync(persist_search, store, out, spec, started)
    return out


def _midpoint(p: ParamSpec) -> Any:
    if p.type == "categorical":
        return (p.choices or [None])[0]
    mid = (float(p.low or 0) + float(p.high or 0)) / 2
    return int(mid) if p.type == "int" else mid
