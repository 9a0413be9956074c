"""Boundary search: the fault parameters that take an SLO *just* past its bound.

Each trial templates its parameters into the experiment as configuration variables (`${pool_size}`) and runs it
for real through `run_experiment`, so every trial is planned, checked by the policy, gated and rolled back like
any other run. The measured SLI comes from the trial's journal (a gate's samples, a probe's outputs, or the
load generator's figures). An optuna sampler proposes the next parameters: NSGA-II (a genetic algorithm) by
default, TPE or random on request, seeded so a search can be replayed.

Fitness (minimised), with `margin` the signed distance of the measurement past the bound, relative to the bound
(positive = on the breaching side) and `severity` in [0, 1] how hard the fault pushes (0 = gentlest):

    breached:      f = min(ln(1 + margin), 10) + 0.1 * severity     (just past the bound, smallest fault first)
    not breached:  f = 11 + min(ln(1 + |margin|), 10)                (any breach beats any hold; nearer is better)

The logarithm keeps an error rate of 60% against a 1% budget (margin 59) distinguishable from one of 7%
(margin 6) without letting either swamp the severity term near the bound.

The answer is the breaching trial with the lowest f, and next to it the most severe trial that still held:
together they bracket the boundary. Every trial and the search itself are stored (tables `searches`,
`search_trials`).
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from faultplane.core.formats import ExperimentError, ValidationIssue, issues_from_pydantic, load_document
from faultplane.core.store import Store, open_store

__all__ = [
    "Objective",
    "ParamSpec",
    "SearchResult",
    "SearchSpec",
    "TrialResult",
    "list_searches",
    "load_search_spec",
    "run_search",
    "with_overrides",
]

_MIGRATIONS = [
    (
        "search-001",
        [
            """CREATE TABLE IF NOT EXISTS searches (
                search_id VARCHAR PRIMARY KEY,
                started_at TIMESTAMPTZ,
                ended_at TIMESTAMPTZ,
                experiment_title VARCHAR,
                sampler VARCHAR,
                seed BIGINT,
                budget INTEGER,
                trials INTEGER,
                status VARCHAR,
                found_breach BOOLEAN,
                objective VARCHAR,
                best_trial INTEGER,
                best_params VARCHAR,
                best_measured DOUBLE,
                boundary VARCHAR,
                spec VARCHAR
            )""",
            """CREATE TABLE IF NOT EXISTS search_trials (
                search_id VARCHAR,
                trial INTEGER,
                params VARCHAR,
                run_id VARCHAR,
                run_status VARCHAR,
                measured DOUBLE,
                breached BOOLEAN,
                margin DOUBLE,
                severity DOUBLE,
                fitness DOUBLE,
                duration_s DOUBLE,
                note VARCHAR
            )""",
        ],
    )
]

_MARGIN_CAP = 10.0
_SEVERITY_WEIGHT = 0.1
_HOLD_OFFSET = _MARGIN_CAP + 1.0


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ParamSpec(_Strict):
    """One searched parameter: a number range (int or float) or a list of choices."""

    type: Literal["int", "float", "categorical"] = "float"
    low: float | None = None
    high: float | None = None
    step: float | None = Field(None, gt=0)
    log: bool = False
    choices: list[Any] | None = None
    severity: Literal["increasing", "decreasing"] = Field(
        "increasing",
        description="which way the fault gets worse: increasing (more latency) or decreasing (a smaller pool)",
    )

    @model_validator(mode="after")
    def _shape(self) -> ParamSpec:
        if self.type == "categorical":
            if not self.choices:
                raise ValueError("a categorical parameter needs `choices: [...]` (at least one)")
            return self
        if self.low is None or self.high is None:
            raise ValueError(f"a {self.type} parameter needs `low` and `high`")
        if not self.low < self.high:
            raise ValueError(f"`low` ({self.low:g}) must be below `high` ({self.high:g})")
        if self.log and self.low <= 0:
            raise ValueError("`log: true` needs `low` > 0")
        if self.type == "int" and (self.low != int(self.low) or self.high != int(self.high)):
            raise ValueError("an int parameter needs whole-number `low` and `high`")
        return self

    def severity_of(self, value: Any) -> float:
        if self.type == "categorical":
            assert self.choices is not None
            pos = self.choices.index(value) / max(1, len(self.choices) - 1) if value in self.choices else 0.5
        else:
            assert self.low is not None and self.high is not None
            pos = (float(value) - self.low) / (self.high - self.low)
        pos = min(1.0, max(0.0, pos))
        return pos if self.severity == "increasing" else 1.0 - pos


class Objective(_Strict):
    """What is measured, and the bound it is measured against."""

    source: Literal["gate", "probe", "load"] = Field(
        description="gate: an SLO gate's samples; probe: a named probe's outputs; load: the load figures"
    )
    name: str = Field(
        min_length=1, description="the gate name, the probe's activity name, or the load figure"
    )
    value_path: str | None = Field(None, description="dotted path to the number in a probe's output")
    op: Literal[">", ">=", "<", "<="] | None = Field(
        None, description="the breaching side (default: the gate's own operator, else `>`)"
    )
    bound: float | None = Field(None, description="the SLO bound (default: the gate's threshold)")

    @model_validator(mode="after")
    def _bound(self) -> Objective:
        if self.source != "gate" and self.bound is None:
            raise ValueError(f"objective.bound is needed for source {self.source!r} (e.g. bound: 1000)")
        return self


class SearchSpec(_Strict):
    experiment: str | dict[str, Any] = Field(
        description="a file path, a listed name, or the experiment itself"
    )
    parameters: dict[str, ParamSpec] = Field(min_length=1)
    objective: Objective
    budget: int = Field(12, ge=1, le=200, description="most trials (each one a real experiment run)")
    seed: int = 0
    sampler: Literal["nsga2", "tpe", "random"] = "nsga2"
    population: int | None = Field(None, ge=2, le=100, description="NSGA-II population (default from budget)")
    variables: dict[str, Any] = Field(default_factory=dict, description="fixed values for other variables")
    stop_after_breaches: int | None = Field(
        None, ge=1, description="end early after this many breaching trials"
    )
    cooldown_s: float = Field(0.0, ge=0, le=300, description="pause between trials so the system settles")
    policy: str | None = Field(
        None,
        description="policy file (default: the one in force); refused when the search comes from an agent "
        "(MCP), which always runs under the server's policy",
    )


class TrialResult(BaseModel):
    trial: int
    params: dict[str, Any]
    run_id: str | None
    run_status: str
    measured: float | None
    breached: bool
    margin: float | None
    severity: float
    fitness: float | None
    duration_s: float
    note: str | None = None


class SearchResult(BaseModel):
    search_id: str
    status: Literal["completed", "refused", "stopped", "interrupted"] = Field(
        description="completed: the budget was spent; stopped: the breach limit was reached; refused: the "
        "policy stopped it; interrupted: cancelled or aborted before its budget was spent"
    )
    experiment_title: str
    sampler: str
    seed: int
    budget: int
    objective: str
    found_breach: bool
    best: TrialResult | None = Field(description="the breaching trial closest to the bound")
    boundary: dict[str, Any] | None = Field(
        description="{holds: params of the most severe trial that held, breaches: params of `best`}"
    )
    trials: list[TrialResult]
    elapsed_s: float
    message: str


def load_search_spec(source: str | Path | Mapping[str, Any]) -> SearchSpec:
    """A search spec from a YAML/JSON file, text, mapping or the name of a bundled spec (`search-payment`);
    relative experiment and policy paths follow the file."""
    base: Path | None = None
    if isinstance(source, Mapping):
        data = dict(source)
    else:
        if isinstance(source, str) and _looks_like_name(source):
            source = _find_spec(source)
        elif isinstance(source, str) and "\n" not in source and source.lstrip().startswith("{"):
            source += "\n"  # one-line JSON text, not a path that happens to contain a dot
        if isinstance(source, Path) or (
            isinstance(source, str) and "\n" not in source and len(source) < 4096 and Path(source).is_file()
        ):
            base = Path(source).resolve().parent
        try:
            data = load_document(source)
        except ExperimentError as exc:
            # load_document speaks of experiments; here the document is the search spec
            raise ExperimentError(
                [
                    ValidationIssue(
                        field="spec" if i.field == "experiment" else i.field,
                        message=i.message,
                        fix="pass a search spec file (.yaml/.json), its YAML/JSON text, or a bundled spec "
                        "name such as search-payment",
                    )
                    for i in exc.issues
                ]
            ) from None
    if "method" in data and "parameters" not in data:
        raise ExperimentError(
            [
                ValidationIssue(
                    field="spec",
                    message="this is an experiment, not a search spec",
                    fix="write a search spec that names it: experiment: <its path>, parameters: {...}, "
                    "objective: {...} (docs/gamedays.md, 'Boundary search')",
                )
            ]
        )
    try:
        spec = SearchSpec.model_validate(data)
    except ValidationError as exc:
        raise ExperimentError(issues_from_pydantic(exc)) from None
    if base is not None and isinstance(spec.experiment, str):
        candidate = base / spec.experiment
        if candidate.is_file():
            spec.experiment = str(candidate)
    if base is not None and spec.policy and not Path(spec.policy).expanduser().is_absolute():
        spec.policy = str(base / spec.policy)
    return spec


def with_overrides(spec: SearchSpec, **changes: Any) -> SearchSpec:
    """`spec` with some fields replaced (None leaves a field as it is) and `variables` merged over its own;
    raises ExperimentError naming the field when a value is out of range."""
    data = spec.model_dump()
    extra = changes.pop("variables", None) or {}
    data.update({k: v for k, v in changes.items() if v is not None})
    data["variables"] = {**spec.variables, **extra}
    try:
        return SearchSpec.model_validate(data)
    except ValidationError as exc:
        raise ExperimentError(issues_from_pydantic(exc)) from None


def _looks_like_name(text: str) -> bool:
    return (
        "\n" not in text
        and "{" not in text
        and ":" not in text
        and not Path(text).suffix
        and (not Path(text).exists())
    )


def _find_spec(name: str) -> Path:
    """A spec by name, in the directories experiments are listed from (the bundled examples last)."""
    from faultplane.services.experiments import experiment_dirs

    for d in experiment_dirs():
        for suffix in (".yaml", ".yml", ".json"):
            if (d / f"{name}{suffix}").is_file():
                return d / f"{name}{suffix}"
    raise ExperimentError(
        [
            ValidationIssue(
                field="spec",
                message=f"no search spec file or bundled spec named {name!r}",
                fix="pass a search spec file path, or a bundled spec name such as search-payment",
            )
        ]
    )


def _describe(obj: Objective, gate: Any | None) -> tuple[str, float, str]:
    """(op, bound, text) with gate defaults filled in."""
    op = obj.op
    bound = obj.bound
    if gate is not None:
        pred = gate.predicate
        op = op or (pred.op if pred.op in (">", ">=", "<", "<=") else ">")
        bound = bound if bound is not None else pred.threshold
    op = op or ">"
    assert bound is not None
    return (
        op,
        bound,
        f"{obj.source} {obj.name}{'.' + obj.value_path if obj.value_path else ''} {op} {bound:g}",
    )


def _breaches(op: str, value: float, bound: float) -> bool:
    return {">": value > bound, ">=": value >= bound, "<": value < bound, "<=": value <= bound}[op]


def _worst(values: list[float], op: str) -> float | None:
    if not values:
        return None
    return max(values) if op in (">", ">=") else min(values)


def measure(journal: Mapping[str, Any], obj: Objective, op: str) -> tuple[float | None, bool, str | None]:
    """(worst measured value, whether a gate recorded its breach, note) from one trial's journal."""
    from faultplane.engine.sli import SliError, to_number

    if obj.source == "gate":
        gates = journal.get("gates") or {}
        vals = [
            float(s["value"])
            for s in gates.get("samples") or []
            if s.get("gate") == obj.name and isinstance(s.get("value"), int | float)
        ]
        breach = gates.get("breach") or {}
        tripped = breach.get("gate") == obj.name
        note = None
        if tripped and breach.get("value") is None:
            note = f"gate tripped without a reading: {breach.get('reason') or breach.get('error')}"
        return _worst(vals, op), tripped, note
    if obj.source == "probe":
        runs: list[Mapping[str, Any]] = list(journal.get("run") or [])
        for key in ("before", "after"):
            runs += ((journal.get("steady_states") or {}).get(key) or {}).get("probes") or []
        vals = []
        errors = []
        for r in runs:
            if (r.get("activity") or {}).get("name") != obj.name:
                continue
            if r.get("status") != "succeeded":
                errors.append(r.get("exception") or r.get("status"))
                continue
            try:
                vals.append(to_number(r.get("output"), obj.value_path))
            except SliError as exc:
                errors.append(str(exc))
        note = f"probe {obj.name!r} had no reading: {errors[0]}" if errors and not vals else None
        if not vals and not errors:
            note = f"no probe named {obj.name!r} ran in this trial"
        return _worst(vals, op), False, note
    load = dict(journal.get("load") or {})
    # the load summary keeps run-wide percentiles under latency_ms.{p50,p95,p99}: accept the gates' names
    for key, val in (load.get("latency_ms") or {}).items():
        load.setdefault(f"latency_{key}", val)
    for container in (load, load.get("summary") or {}, load.get("inject") or {}, load.get("during") or {}):
        if isinstance(container, Mapping) and obj.name in container:
            try:
                return to_number(container[obj.name], obj.value_path), False, None
            except SliError as exc:
                return None, False, str(exc)
    return None, False, f"the journal has no load figure {obj.name!r} (does the experiment declare `load:`?)"


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


def _fitness(breached: bool, margin: float, severity: float) -> float:
    if breached:
        return min(math.log1p(max(margin, 0.0)), _MARGIN_CAP) + _SEVERITY_WEIGHT * severity
    return _HOLD_OFFSET + min(math.log1p(abs(margin)), _MARGIN_CAP)


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
        raise ExperimentError(
            [
                ValidationIssue(
                    field="policy",
                    message=f"this search may not choose its policy file ({spec.policy!r}): a search started "
                    "by an agent runs under the policy in force, so it cannot pick a laxer one",
                    fix="remove `policy` from the spec; whoever runs the server sets the policy "
                    "(faultplane.policy.yaml in its project directory, or $FAULTPLANE_POLICY)",
                )
            ]
        )
    policy = policy_path if policy_path is not None else spec.policy
    try:
        # a broken or missing policy file stops the search before the first trial, named as such
        load_policy(policy)
    except PolicyError as exc:
        raise ExperimentError(
            [
                ValidationIssue(
                    field="policy",
                    message=str(exc),
                    fix="correct the policy file, or name an existing one (--policy, or `policy` in the spec)"
                    if allow_spec_policy
                    else "the server's policy file is broken: whoever runs the server must fix it",
                )
            ]
        ) from None
    store = store or open_store()
    store.ensure_schema("search", _MIGRATIONS)
    raw = _load(spec.experiment if isinstance(spec.experiment, str) else dict(spec.experiment))

    # Plan once with mid-range values: a typo in a parameter name or a gate name fails here, before any run.
    probe_vars = {**spec.variables, **{k: _midpoint(p) for k, p in spec.parameters.items()}}
    planned = plan(raw, probe_vars)
    unused = [k for k in spec.parameters if f"${{{k}}}" not in json.dumps(raw)]
    if unused:
        raise ExperimentError(
            [
                ValidationIssue(
                    field=f"parameters.{unused[0]}",
                    message=f"the experiment never uses ${{{unused[0]}}}, so searching it changes nothing",
                    fix="write ${"
                    + unused[0]
                    + "} where the fault's size is set (e.g. in the action's arguments)",
                )
            ]
        )
    gate = None
    if spec.objective.source == "gate":
        gate = next((g for g in planned.experiment.slo_gates if g.name == spec.objective.name), None)
        if gate is None:
            names = ", ".join(g.name for g in planned.experiment.slo_gates) or "(none)"
            raise ExperimentError(
                [
                    ValidationIssue(
                        field="objective.name",
                        message=f"the experiment has no gate named {spec.objective.name!r}",
                        fix=f"use one of its gates: {names}",
                    )
                ]
            )
    op, bound, text = _describe(spec.objective, gate)
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
            raise ExperimentError(
                [
                    ValidationIssue(
                        field=f"trial {index} {params}", message=str(exc), fix="narrow the parameter ranges"
                    )
                ]
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
        if result.status == "refused":
            study.tell(ot, state=optuna.trial.TrialState.FAIL)
            trial.note = result.error
            trials.append(trial)
            status, message = "refused", f"the policy refused trial {index}: {result.error}"
            break
        if result.status == "interrupted":
            # an aborted trial measured nothing worth scoring: the search ends here
            study.tell(ot, state=optuna.trial.TrialState.FAIL)
            trial.note = result.error
            trials.append(trial)
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
            breached = tripped or _breaches(op, value, bound)
            fit = _fitness(breached, margin, severity)
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
    await anyio.to_thread.run_sync(_persist, store, out, spec, started)
    return out


def _midpoint(p: ParamSpec) -> Any:
    if p.type == "categorical":
        return (p.choices or [None])[0]
    mid = (float(p.low or 0) + float(p.high or 0)) / 2
    return int(mid) if p.type == "int" else mid


def _persist(store: Store, r: SearchResult, spec: SearchSpec, started: datetime) -> None:
    store.insert(
        "searches",
        [
            {
                "search_id": r.search_id,
                "started_at": started,
                "ended_at": datetime.now(UTC),
                "experiment_title": r.experiment_title,
                "sampler": r.sampler,
                "seed": r.seed,
                "budget": r.budget,
                "trials": len(r.trials),
                "status": r.status,
                "found_breach": r.found_breach,
                "objective": r.objective,
                "best_trial": r.best.trial if r.best else None,
                "best_params": json.dumps(r.best.params) if r.best else None,
                "best_measured": r.best.measured if r.best else None,
                "boundary": json.dumps(r.boundary) if r.boundary else None,
                "spec": spec.model_dump_json(),
            }
        ],
    )
    store.insert(
        "search_trials",
        [
            {
                "search_id": r.search_id,
                "trial": t.trial,
                "params": json.dumps(t.params),
                "run_id": t.run_id,
                "run_status": t.run_status,
                "measured": t.measured,
                "breached": t.breached,
                "margin": t.margin,
                "severity": t.severity,
                "fitness": t.fitness,
                "duration_s": t.duration_s,
                "note": t.note,
            }
            for t in r.trials
        ],
    )


def list_searches(store: Store | None = None, limit: int = 20) -> list[dict[str, Any]]:
    store = store or open_store()
    store.ensure_schema("search", _MIGRATIONS)
    return store.query(
        "SELECT search_id, started_at, experiment_title, sampler, seed, trials, status, found_breach, objective, "
        "best_params, best_measured FROM searches ORDER BY started_at DESC LIMIT ?",
        [limit],
    )
