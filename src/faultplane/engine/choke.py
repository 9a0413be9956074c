"""The last check before an activity executes: the policy judges the activity exactly as it will run.

Phase 0 judges the whole plan; this judges each activity again at the moment it runs, resolved (variables,
configuration and secrets substituted), so nothing that changed between plan and execution, and nothing a
surface registered without going through phase 0, reaches a production target or an undeclared one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


def refusal(activity: Mapping[str, Any], policy: Any, secret_values: Sequence[str] = ()) -> str | None:
    """Why the policy refuses to execute `activity` now, or None. Findings never show a secret."""
    found = list(_judge(policy, secret_values)({"method": [dict(activity)]}))
    inventory = getattr(policy, "inventory", None)
    if inventory is not None:
        from faultplane.core.inventory import undeclared

        found += undeclared({"method": [dict(activity)]}, inventory)
    if not found:
        return None
    return "refused by the policy just before it ran: " + "; ".join(
        f"{v.field}: {v.message}" for v in found[:3]
    )
