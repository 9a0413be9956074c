"""The last check before an activity executes: the policy judges the activity exactly as it will run.

Phase 0 judges the whole plan; this judges each activity again at the moment it runs, resolved (variables,
configuration and secrets substituted), so nothing that changed between plan and execution, and nothing a
surface registered without going through phase 0, reaches a production target or an undeclared one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["refusal"]


# one judge per policy and secrets, so a run's activities share what was learnt about their strings
_JUDGES: dict[tuple[int, tuple[str, ...]], tuple[Any, Any]] = {}


def _judge(policy: Any, secret_values: Sequence[str]) -> Any:
    from faultplane.core.policy import ForbiddenJudge

    key = (id(policy.forbidden), tuple(str(v) for v in secret_values))
    held = _JUDGES.get(key)
    if held is not None and held[0] is policy.forbidden:
        return held[1]
    if len(_JUDGES) >= 8:
        _JUDGES.clear()
    judge = ForbiddenJudge(policy.forbidden, secret_values)
    _JUDGES[key] = (policy.forbidden, judge)
    return judge


def refusal(
    activity: Mapping[str, Any],
    policy: Any,
    secret_values: Sequence[str] = (),
    *,
    approved: bool = False,
    fault_type_of: Callable[[str, str], str | None] | None = None,
) -> str | None:
    """Why the policy refuses to execute `activity` now, or None. Findings never show a secret.

    `approved`: a person approved this run in phase 0. Without that, an activity whose effect the policy
    reserves for a person (approval.fault_types by effect, approval.actions) is refused here too: a plan
    that reached the engine without a phase-0 decision, or that changed since, cannot kill or partition."""
    doc = {"method": [dict(activity)]}
    found = list(_judge(policy, secret_values)(doc))
    inventory = getattr(policy, "inventory", None)
    if inventory is not None:
        from faultplane.core.policy import undeclared

        found += undeclared(doc, inventory)
    reasons = [f"{v.field}: {v.message}" for v in found[:3]]
    if not approved:
        reserved = _reserved(doc, policy, fault_type_of)
        if reserved:
            reasons.append(f"it {reserved}, which needs a person's approval, and this run has none")
    if not reasons:
        return None
    return "refused by the policy just before it ran: " + "; ".join(reasons)


def _reserved(
    doc: Mapping[str, Any], policy: Any, fault_type_of: Callable[[str, str], str | None] | None
) -> str:
    import fnmatch

    from faultplane.core.policy import _fault_types, normalize_text

    approval = getattr(policy, "approval", None)
    if approval is None:
        return ""
    kinds, actions = _fault_types(doc, fault_type_of)
    wanted = {normalize_text(f) for f in approval.fault_types}
    risky = sorted(k for k in kinds if k in wanted)
    if risky:
        return f"injects {', '.join(risky)}"
    globs = [g.casefold() for g in approval.actions]
    listed = sorted(a for a in actions if any(fnmatch.fnmatchcase(a.casefold(), g) for g in globs))
    return f"uses {', '.join(listed)}" if listed else ""
