"""What a policy decision says: the verdict on one experiment and each rule it breaks.

Every concern of the policy (forbidden targets, the inventory, gates, stages, approvals) reports what it
refuses as `Violation`s, each naming the rule, the field and the fix; `evaluate()` gathers them into one
`PolicyDecision`. This module imports nothing of the policy, so every concern can speak this language without
importing another.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["PolicyDecision", "Violation"]


@dataclass
class Violation:
    rule: str
    field: str
    message: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "field": self.field, "message": self.message, "fix": self.fix}

    def __str__(self) -> str:
        return f"[{self.rule}] {self.field}: {self.message} — fix: {self.fix}"


@dataclass
class PolicyDecision:
    allowed: bool
    violations: list[Violation]
    stage: int | None
    advice: list[str]
    family: str
    content_hash: str
    policy_source: str = ""
    allowed_stage: int = 0
    stage_size: dict[str, float | int] | None = None
    approval_required: list[str] = field(default_factory=list)
    approved_by: str | None = None
    green_streak: int = 0
    approval_hash: str = ""  # what an approval of this run must be bound to (see approval_hash())
    radius: dict[str, float | int] | None = None  # the cap on every target-selecting action of the run

    def to_dict(self) -> dict[str, Any]:
        return {
            "allowed": self.allowed,
            "violations": [v.to_dict() for v in self.violations],
            "stage": self.stage,
            "allowed_stage": self.allowed_stage,
            "stage_size": self.stage_size,
            "advice": list(self.advice),
            "family": self.family,
            "content_hash": self.content_hash,
            "policy_source": self.policy_source,
            "approval_required": list(self.approval_required),
            "approved_by": self.approved_by,
            "green_streak": self.green_streak,
            "approval_hash": self.approval_hash,
            "radius": self.radius,
        }

    def summary(self) -> str:
        head = "allowed" if self.allowed else "REFUSED"
        lines = [f"policy: {head} (family {self.family}, stage {self.stage}, policy: {self.policy_source})"]
        lines += [f"  - {v}" for v in self.violations]
        lines += [f"  advice: {a}" for a in self.advice]
        return "\n".join(lines)
