"""The single decision point: may this experiment run now, and at which stage?

`evaluate()` asks every concern of the policy in turn (forbidden targets, the inventory, gate sanity,
blast-radius stages, approvals) and gathers their refusals into one `PolicyDecision`. The engine calls it in
phase 0 (Plan) before anything runs, and the agent hook and the MCP server call the very same function, so no
surface can reach a production target or skip a stage that the engine would refuse.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from faultplane.core.policy.approvals import _fault_types, approval_reasons, consult_approvals
from faultplane.core.policy.forbidden import find_forbidden
from faultplane.core.policy.gate_checks import check_gates
from faultplane.core.policy.identity import _approval_hash, _content_hash, experiment_family
from faultplane.core.policy.inventory import undeclared
from faultplane.core.policy.model import Policy
from faultplane.core.policy.stages import (
    _earned_stage,
    _radius_violations,
    _stage_of,
    effective_radius,
    green_streak,
    three_greens_advice,
)
from faultplane.core.policy.verdict import PolicyDecision, Violation

if TYPE_CHECKING:
    from faultplane.core.store import Store

__all__ = ["evaluate"]


def evaluate(
    raw: Mapping[str, Any],
    *,
    policy: Policy,
    store: Store | None,
    approval_token: str | None = None,
    fault_type_of: Callable[[str, str], str | None] | None = None,
    targets_of: Callable[[str, str], bool] | None = None,
    content_hash: str | None = None,
    family: str | None = None,
    approval_hash: str | None = None,
    secret_values: Sequence[str] = (),
    report_next_stage: bool = False,
) -> PolicyDecision:
    """Decide whether this experiment may run now. Never raises on a malformed experiment: refuses it.

    `raw` is the experiment as it will run (variables substituted). `content_hash`/`family` default to those
    of `raw`; the engine passes its plan's own so the journal and the `runs` table agree. An approval must be
    bound to `approval_hash` (default: approval_hash(raw, secret_values)). `fault_type_of` and `targets_of`
    tell what a driver action injects and whether it selects targets; every surface gets them from the engine
    (`faultplane.engine.lifecycle.evaluate_document`), so all decide alike.
    """
    if not isinstance(raw, Mapping):
        v = Violation(
            "experiment.shape", "(experiment)", "is not a mapping", "load a YAML/JSON experiment object"
        )
        return PolicyDecision(False, [v], None, [], "experiment", "", policy.source)
    family = family or experiment_family(raw)
    chash = content_hash or _content_hash(raw)
    ahash = approval_hash or _approval_hash(raw, secret_values)
    violations: list[Violation] = []
    advice: list[str] = []

    violations += find_forbidden(raw, policy.forbidden, secret_values=secret_values)
    if policy.inventory is not None:
        violations += undeclared(raw, policy.inventory)
    violations += check_gates(raw, policy.gates)

    stage, stage_problems = _stage_of(raw, policy)
    violations += stage_problems
    stages = policy.blast_radius.stages
    radius = effective_radius(raw, stage, policy)
    violations += _radius_violations(raw, stage, radius, targets_of)

    # a stage is earned per target and fault kind by green runs that really injected that kind there at the
    # stage before (core.exposure), never by the experiment's title or family: both are the author's labels
    allowed_stage, unearned = _earned_stage(
        raw, stage, policy, store, fault_type_of, report_next_stage=report_next_stage
    )

    kinds, actions = _fault_types(raw, fault_type_of)
    reasons = approval_reasons(policy, stage, allowed_stage, unearned, kinds, actions)

    approved_by: str | None = None
    if reasons:
        approved_by, approved, refusal = consult_approvals(
            reasons,
            policy=policy,
            family=family,
            ahash=ahash,
            stage=stage,
            allowed_stage=allowed_stage,
            approval_token=approval_token,
        )
        if approved is not None:
            advice.append(approved)
        if refusal is not None:
            violations.append(refusal)

    streak_stage, streak = green_streak(store, family)
    if streak >= policy.blast_radius.greens_before_advice:
        advice.append(three_greens_advice(streak_stage, streak, policy, fault_types=sorted(kinds)))

    size: dict[str, float | int] | None = None
    if stage is not None and 0 <= stage < len(stages):
        s = stages[stage]
        size = {k: v for k, v in (("percent", s.percent), ("count", s.count)) if v is not None}

    return PolicyDecision(
        allowed=not violations,
        violations=violations,
        stage=stage,
        advice=advice,
        family=family,
        content_hash=chash,
        policy_source=policy.source,
        allowed_stage=allowed_stage,
        stage_size=size,
        approval_required=reasons,
        approved_by=approved_by,
        green_streak=streak,
        approval_hash=ahash,
        radius=radius,
    )
