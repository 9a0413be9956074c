"""Experiment design: from a target description to a staged set of experiments that pass the policy.

Deterministic (no model, no randomness): the same description always yields the same experiments, built only
from actions and probes that the driver catalog (`list_activities()`) offers, each experiment with SLO gates
(with a window), a blast radius at the stage the policy allows now, and rollbacks. Fault severity is a
configuration variable (`${latency_ms}`, `${error_probability}`, ...), so an agent, a person or `faultplane
search` can refine it without editing the file.

Plan stages escalate the *fault* (gentle latency first, then latency near the SLO, then errors, then
timeouts); the *blast radius* stage is the policy's business and rises only after green runs. Experiments
whose fault type the policy reserves for a human approval (resource exhaustion, network partition) are
returned separately as `held_back`, never mixed into the runnable set.

This module assembles experiments and weighs them against the policy; the request and result shapes are in
`design_request`, the fault recipes in `design_recipes`, the probes and gates in `design_watch`. Every name
callers import from here stays importable from here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from faultplane.core.formats import ExperimentError, ValidationIssue, dumps, issues_from_pydantic
from faultplane.core.store import Store
from faultplane.services import design_request
from faultplane.services.design_recipes import Fault, driver_activity, fault_recipes

# The request and result shapes stay importable from here, where callers found them before the split.
from faultplane.services.design_request import *  # noqa: F403
from faultplane.services.design_request import (
    DesignedExperiment,
    DesignRequest,
    DesignResult,
    kind_problems,
)
from faultplane.services.design_watch import observation

__all__ = [*design_request.__all__, "design_experiments", "write_design"]


def _experiment(
    req: DesignRequest, stage: int, fault: Fault, blast: dict[str, Any], obs: tuple[Any, Any, Any]
) -> dict[str, Any]:
    config, probes, gates = obs
    family = f"{req.service}-{fault.slug}"
    method = [
        driver_activity("action", f"inject-{fault.slug}", fault.driver, fault.action, fault.arguments)
        | {"pauses": {"after": req.hold_seconds}},
    ]
    if probes:
        measure = dict(probes[-1])
        measure.pop("tolerance", None)
        measure["name"] = f"measure-under-{fault.slug}"
        method.append(measure)
    doc: dict[str, Any] = {
        "title": f"{req.service}: {fault.title} (stage {stage})",
        "description": (
            f"Designed by faultplane (stage {stage}). Hypothesis: {fault.impact}. Severity is set by the "
            f"configuration variables {', '.join(sorted(fault.variables)) or '(none)'}; refine them with --var "
            "or `faultplane search`."
        ),
        "family": family,
        "tags": ["designed", req.kind, fault.fault_type, *req.compliance],
        "configuration": {**config, **fault.variables},
        "targets": [
            {
                "name": req.service,
                "driver": fault.driver,
                "labels": {"env": req.env, "service": req.service},
            }
        ],
        "blast_radius": blast,
        "estimate": {
            "impact": fault.impact,
            "latency_p99_ms": req.slo.latency_p99_ms,
            "error_rate": req.slo.error_rate,
            "recovery_seconds": max(1.0, round(req.window_seconds, 3)),
        },
        "slo_gates": gates,
        "steady-state-hypothesis": {"title": f"{req.service} meets its SLO", "probes": probes},
        "method": method,
        "rollbacks": fault.rollbacks,
        "runtime": {"recovery_timeout": max(10.0, req.hold_seconds * 3)},
    }
    if req.load is not None:
        doc["load"] = dict(req.load)
    return doc


def _check_drivers(doc: dict[str, Any]) -> list[ValidationIssue]:
    """Plan the experiment (schema, variables) and validate every driver call's arguments."""
    from faultplane.core.model import Activity
    from faultplane.drivers.base import DriverError, get_activity
    from faultplane.engine.lifecycle import plan

    try:
        p = plan(doc)
    except ExperimentError as exc:
        return exc.issues
    issues: list[ValidationIssue] = []
    activities = list(p.experiment.all_declared_activities())
    activities += [Activity.model_validate(g.probe) for g in p.experiment.slo_gates if g.probe]
    for act in activities:
        prov = act.provider
        if prov.type != "driver":
            continue
        try:
            spec = get_activity(prov.driver, prov.name)
            spec.params.model_validate(prov.arguments)
        except DriverError as exc:
            issues.append(ValidationIssue(field=act.name, message=str(exc), fix="check the driver catalog"))
        except ValidationError as exc:
            issues.append(
                ValidationIssue(field=act.name, message=str(exc), fix="adjust the design request's values")
            )
    return issues


def _fault_type_of(driver: str, name: str) -> str | None:
    from faultplane.drivers.base import get_activity

    return get_activity(driver, name).fault_type


def design_experiments(
    request: DesignRequest | Mapping[str, Any],
    *,
    policy_path: str | Path | None = None,
    store: Store | None = None,
) -> DesignResult:
    """Design a staged set of experiments for `request`. Raises ExperimentError naming each bad field.

    With `store`, the blast radius starts at the stage the family's green runs allow (the policy's own
    history rule); without it, at the first stage.
    """
    from faultplane.core.policy import PolicyError, evaluate, load_policy

    if isinstance(request, DesignRequest):
        req = request
    else:
        try:
            req = DesignRequest.model_validate(dict(request))
        except ValidationError as exc:
            raise ExperimentError(issues_from_pydantic(exc)) from None
    if problems := kind_problems(req):
        raise ExperimentError(problems)
    try:
        policy = load_policy(policy_path)
    except PolicyError as exc:
        raise ExperimentError.one(
            field="policy", message=str(exc), fix="correct the policy file or pass --policy"
        ) from None

    from faultplane.services.compliance import split_known

    _, unknown = split_known(req.compliance)
    if unknown:
        raise ExperimentError.one(
            field="compliance",
            message=f"unknown requirement id(s): {', '.join(unknown)}",
            fix="use ids from `faultplane compliance requirements` (e.g. DORA-25, SOC2-A1.3)",
        )

    runnable, held = fault_recipes(req)
    obs = observation(req)
    stages = policy.blast_radius.stages
    ceiling = len(stages) - 1
    if policy.approval.min_stage is not None:
        ceiling = min(ceiling, policy.approval.min_stage - 1)
    ceiling = max(ceiling, 0)

    def blast_for(stage: int) -> dict[str, Any]:
        s = stages[stage]
        return {"percent": s.percent} if s.percent is not None else {"count": s.count}

    raw_violations: dict[str, list[Any]] = {}

    def build(index: int, fault: Fault) -> DesignedExperiment:
        doc = _experiment(req, index, fault, blast_for(0), obs)
        decision = evaluate(
            doc, policy=policy, store=store, fault_type_of=_fault_type_of, report_next_stage=True
        )
        bstage = min(max(decision.allowed_stage, 0), ceiling)
        if bstage:
            doc = _experiment(req, index, fault, blast_for(bstage), obs)
            decision = evaluate(doc, policy=policy, store=store, fault_type_of=_fault_type_of)
        raw_violations[fault.slug] = list(decision.violations)
        problems = _check_drivers(doc)
        if problems:
            raise ExperimentError(problems)
        return DesignedExperiment(
            stage=index,
            slug=fault.slug,
            title=doc["title"],
            fault_type=fault.fault_type,
            action=f"{fault.driver}.{fault.action}",
            parameters=dict(fault.variables),
            blast_stage=decision.stage,
            policy_allowed=decision.allowed,
            policy_violations=[str(v) for v in decision.violations],
            experiment=doc,
        )

    def approval_only(fault: Fault) -> bool:
        # the policy decides what needs a person (approval.fault_types, approval.actions, by effect), not the
        # recipe's label: a recipe it reserves joins held_back instead of refusing the whole design
        doc = _experiment(req, 0, fault, blast_for(0), obs)
        decision = evaluate(doc, policy=policy, store=store, fault_type_of=_fault_type_of)
        return bool(decision.violations) and all(v.rule == "approval.required" for v in decision.violations)

    reserved = [f for f in runnable if approval_only(f)]
    runnable = [f for f in runnable if f not in reserved]
    held = reserved + held
    designed = [build(i, f) for i, f in enumerate(runnable)]
    blocked = [d for d in designed if not d.policy_allowed]
    if blocked:
        # Every design shares its targets and gates, so one cause usually refuses them all: report it once.
        seen: dict[tuple[str, str, str], list[str]] = {}
        for d in blocked:
            for v in raw_violations[d.slug]:
                seen.setdefault((v.field, v.message, v.fix), []).append(d.slug)
        raise ExperimentError(
            [
                ValidationIssue(field=f, message=f"{m} (refuses: {', '.join(slugs)})", fix=fix)
                for (f, m, fix), slugs in seen.items()
            ]
        )
    held_back = [build(len(runnable) + i, f) for i, f in enumerate(held)]
    notes = [
        f"{len(designed)} experiment(s) in escalating order; run them one at a time, stage 0 first, and stop "
        "at the first one whose gate aborts: that is the weakness to fix.",
        f"blast radius: {stages[designed[0].blast_stage or 0].describe() if designed else '-'}; the policy "
        "widens it only after green runs (three greens at a stage are advised before the next).",
        "gates are probe-based and need no load generator"
        + ("; load gates read the experiment's `load:` figures" if req.load is not None else "")
        + ".",
    ]
    if held_back:
        notes.append(
            f"{len(held_back)} more experiment(s) ({', '.join(h.slug for h in held_back)}) inject fault types "
            "the policy reserves for a human approval: `faultplane approve <file>` first."
        )
    if not designed:
        notes.append("no fault recipe applies without approval; see held_back")
    return DesignResult(
        service=req.service, kind=req.kind, experiments=designed, held_back=held_back, notes=notes
    )


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def write_design(
    result: DesignResult, directory: str | Path, *, include_held_back: bool = False
) -> list[Path]:
    """Write each experiment as YAML (`NN-<service>-<slug>.yaml`), in stage order; returns the paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    items = list(result.experiments) + (list(result.held_back) if include_held_back else [])
    paths = []
    for d in items:
        path = out / f"{d.stage:02d}-{_slug(result.service)}-{d.slug}.yaml"
        # through formats.dumps: plain YAML, no anchors or aliases where two places share one value
        path.write_text(dumps(d.experiment, "yaml"), encoding="utf-8")
        paths.append(path)
    return paths
