"""Combining policies: the strictest of several layers, field by field, above a floor no file removes.

Any layer can tighten and none can loosen: forbidden words, labels and approval-class faults are united,
exemptions (`allow`, negations, trusted keys) are kept only when every layer grants them, stages take the
smaller size, and gates, windows and approvals the stricter setting. The floor (`_floor`) keeps the
production-name rules and the approval-class fault types under every combination.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from faultplane.core.policy.inventory import combine_inventories
from faultplane.core.policy.model import (
    ApprovalRules,
    BlastRadiusRules,
    ForbiddenRules,
    GateRules,
    LabelRule,
    Policy,
    Stage,
)

__all__ = ["combine"]

_FLOOR_SOURCE = "built-in floor"


def _floor() -> Policy:
    """The rules every combination keeps: production names and approval-class faults. Gates, stages and
    approval stages are the strict default only when no policy file exists (a lab may relax those)."""
    floor = Policy.strict_default()
    lax_gates = GateRules(required=False, min_gates=0, require_window=False)
    big = [Stage(percent=100, count=10**9)]
    return floor.model_copy(
        update={
            "gates": lax_gates,
            "blast_radius": BlastRadiusRules(stages=big, require_declared=False, greens_before_advice=10**6),
            "approval": ApprovalRules(min_stage=None, actions=[], ttl_hours=10**6),
            "source": _FLOOR_SOURCE,
        }
    )


def _below_floor(policy: Policy) -> bool:
    floor = ForbiddenRules()
    approval = ApprovalRules()
    fr = policy.forbidden
    return (
        not set(floor.words) <= set(fr.words)
        or any(
            name not in fr.labels
            or not set(rule.keys) <= set(fr.labels[name].keys)
            or not set(rule.values) <= set(fr.labels[name].values)
            for name, rule in floor.labels.items()
        )
        or not set(approval.fault_types) <= set(policy.approval.fault_types)
        or not set(fr.negations) <= set(floor.negations)
    )


def _union(lists: Iterable[Sequence[str]]) -> list[str]:
    out: list[str] = []
    for items in lists:
        out += [x for x in items if x not in out]
    return out


def _intersection(lists: Sequence[Sequence[str]]) -> list[str]:
    return [x for x in lists[0] if all(x in other for other in lists[1:])] if lists else []


def combine(policies: Sequence[Policy]) -> Policy:
    """The strictest of `policies`, field by field."""
    if not policies:
        return Policy.strict_default()
    fs = [p.forbidden for p in policies]
    names = _union([list(f.labels) for f in fs])
    labels = {}
    for name in names:
        rules = [f.labels[name] for f in fs if name in f.labels]
        labels[name] = LabelRule(
            keys=_union(r.keys for r in rules),
            values=_union(r.values for r in rules),
            unless=_intersection([r.unless for r in rules]),
        )
    forbidden = ForbiddenRules(
        extend_defaults=True,
        words=_union(f.words for f in fs),
        negations=_intersection([f.negations for f in fs]),
        labels=labels,
        # an allow pattern exempts only words a policy added (never the floor), and only when every layer
        # that has an opinion agrees: the floor's empty list is no opinion
        allow=_intersection([p.forbidden.allow for p in policies if p.source != _FLOOR_SOURCE]),
    )
    gs = [p.gates for p in policies]
    gates = GateRules(
        required=any(g.required for g in gs),
        min_gates=max(g.min_gates for g in gs),
        require_window=any(g.require_window for g in gs),
    )
    # the floor has no opinion on stages (its one huge stage would otherwise cut every list to one stage)
    bs = [p.blast_radius for p in policies if p.source != _FLOOR_SOURCE] or [p.blast_radius for p in policies]
    n = min(len(b.stages) for b in bs)
    stages = []
    for i in range(n):
        pcts = [pct for b in bs if (pct := b.stages[i].percent) is not None]
        cnts = [cnt for b in bs if (cnt := b.stages[i].count) is not None]
        stages.append(Stage(percent=min(pcts) if pcts else None, count=min(cnts) if cnts else None))
    blast = BlastRadiusRules(
        stages=stages,
        require_declared=any(b.require_declared for b in bs),
        greens_before_advice=min(b.greens_before_advice for b in bs),
        greens_to_advance=max(b.greens_to_advance for b in bs),
    )
    aps = [p.approval for p in policies]
    min_stages = [a.min_stage for a in aps if a.min_stage is not None]
    approval = ApprovalRules(
        min_stage=min(min_stages) if min_stages else None,
        fault_types=_union(a.fault_types for a in aps),
        actions=_union(a.actions for a in aps),
        ttl_hours=min(a.ttl_hours for a in aps),
        # a key is trusted only when every layer that names keys names it: a file cannot add an approver
        trusted_keys=_intersection([a.trusted_keys for a in aps if a.trusted_keys]),
        elicitation=_intersection([a.elicitation for a in aps]),
    )
    extra: dict[str, Any] = {}
    inventories = [getattr(p, "inventory", None) for p in policies]
    if any(inv is not None for inv in inventories) and "inventory" in Policy.model_fields:
        extra["inventory"] = combine_inventories([i for i in inventories if i is not None])
    return Policy(
        version=max(p.version for p in policies),
        forbidden=forbidden,
        gates=gates,
        blast_radius=blast,
        approval=approval,
        source=" + ".join(p.source for p in policies),
        **extra,
    )
