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

from faultplane.core.policy import decide, forbidden, gate_checks, identity, model, normalize, stages, verdict
from faultplane.core.policy.approvals import _fault_types
from faultplane.core.policy.decide import *  # noqa: F403
from faultplane.core.policy.forbidden import *  # noqa: F403
from faultplane.core.policy.gate_checks import *  # noqa: F403
from faultplane.core.policy.identity import *  # noqa: F403
from faultplane.core.policy.inventory import Inventory, undeclared
from faultplane.core.policy.layers import also_from, load_policy, load_policy_file
from faultplane.core.policy.model import *  # noqa: F403
from faultplane.core.policy.normalize import *  # noqa: F403
from faultplane.core.policy.normalize import _compiled_globs
from faultplane.core.policy.stages import *  # noqa: F403
from faultplane.core.policy.verdict import *  # noqa: F403

# Every public name of these modules is the package's face, so their own `__all__` is the one list of those
# names; of the other modules, only the names other code imports from the package.
__all__ = [
    *decide.__all__,
    *forbidden.__all__,
    *gate_checks.__all__,
    *identity.__all__,
    *model.__all__,
    *normalize.__all__,
    *stages.__all__,
    *verdict.__all__,
    "Inventory",
    "_compiled_globs",
    "_fault_types",
    "also_from",
    "load_policy",
    "load_policy_file",
    "undeclared",
]
