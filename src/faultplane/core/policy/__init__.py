"""The guardrails in force: forbidden targets, the target inventory, required SLO gates, staged blast radius,
approvals. `evaluate()` (`decide`) is the single decision point every surface calls.

One module per concern, imported here so `faultplane.core.policy.X` keeps working for every name:
- `model`: the policy's schema and defaults; `verdict`: `Violation` and `PolicyDecision`;
- `layers`: finding, reading and signing policy files; `combine`: their strictest combination and the floor;
- `normalize`: how text is read; `matching`: is a token, key or label production under the rules;
  `forbidden`: the production-target scan of a whole experiment;
- `inventory`: the lab's declared targets; `gate_checks`: gate sanity; `stages`: blast-radius stages,
  earned stages and the three-greens advice; `identity`: family, content and approval hashes;
- `approvals`: which runs need a person's approval and whether one is on file (tokens: `core.approval`).
"""

from __future__ import annotations

from faultplane.core.policy.approvals import _fault_types
from faultplane.core.policy.decide import evaluate
from faultplane.core.policy.forbidden import ForbiddenJudge, find_forbidden
from faultplane.core.policy.gate_checks import check_gates
from faultplane.core.policy.identity import approval_hash, content_hash, experiment_family
from faultplane.core.policy.inventory import Inventory, undeclared
from faultplane.core.policy.layers import also_from, load_policy, load_policy_file
from faultplane.core.policy.model import (
    KNOWN_FAULT_TYPES,
    POLICY_FILENAMES,
    ApprovalRules,
    BlastRadiusRules,
    ForbiddenRules,
    GateRules,
    LabelRule,
    Policy,
    PolicyError,
    Stage,
)
from faultplane.core.policy.normalize import _compiled_globs, camel_forms, normalize_text
from faultplane.core.policy.stages import (
    advice_after_run,
    effective_radius,
    forget_runs,
    green_streak,
    three_greens_advice,
)
from faultplane.core.policy.verdict import PolicyDecision, Violation

__all__ = [
    "KNOWN_FAULT_TYPES",
    "POLICY_FILENAMES",
    "ApprovalRules",
    "BlastRadiusRules",
    "ForbiddenJudge",
    "ForbiddenRules",
    "GateRules",
    "Inventory",
    "LabelRule",
    "Policy",
    "PolicyDecision",
    "PolicyError",
    "Stage",
    "Violation",
    "_compiled_globs",
    "_fault_types",
    "advice_after_run",
    "also_from",
    "approval_hash",
    "camel_forms",
    "check_gates",
    "content_hash",
    "effective_radius",
    "evaluate",
    "experiment_family",
    "find_forbidden",
    "forget_runs",
    "green_streak",
    "load_policy",
    "load_policy_file",
    "normalize_text",
    "three_greens_advice",
    "undeclared",
]
