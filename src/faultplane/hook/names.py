"""Does a fault tool's command line name production? The one place the hook asks the production-name rules.

It is called only for commands that inject faults (kubectl delete, tc, stress-ng, chaos run ...), so loading
the policy module here costs nothing on ordinary commands. Swap the matcher in `production_finding` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from faultplane.core.policy import Policy


def production_finding(values: Mapping[str, Any], policy: Policy) -> str | None:
    """`[rule] field: message` for the first production name in `values`, or None."""
    from faultplane.core.policy import find_forbidden

    found = find_forbidden(dict(values), policy.forbidden)
    if not found:
        return None
    v = found[0]
    return f"[{v.rule}] {v.field}: {v.message}"
