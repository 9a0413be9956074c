"""The policy in force: the strictest combination of the built-in floor, the user's policy and the project's.

Layers, all of which apply at once (none replaces another):
- the built-in floor: the production-name rules and the approval-class fault types, which no file removes;
- the user's policy: `$XDG_CONFIG_HOME/faultplane/policy.yaml` (default `~/.config/faultplane/policy.yaml`);
- every `faultplane.policy.yaml` from the starting folder up to the filesystem root: a nested folder with its
  own `.git` is still inside the project above it, so it cannot shed that project's policy;
- `--policy` or `$FAULTPLANE_POLICY`: one more layer.

Combining takes the stricter value of every field, so any file can tighten and none can loosen. Loosening
(dropping the floor, or relaxing a rule another layer sets) needs a signed approval: `loosening_approved` is
the hook point where such an approval will be verified; until then it refuses, and the stricter value holds.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from faultplane.core.policy import (
    POLICY_FILENAMES,
    ApprovalRules,
    BlastRadiusRules,
    ForbiddenRules,
    GateRules,
    LabelRule,
    Policy,
    PolicyError,
    Stage,
    load_policy_file,
)

__all__ = ["combine", "loosening_approved", "policy_in_force", "project_policy_files", "user_policy_path"]

_USER_POLICY_NAMES = ("policy.yaml", "policy.yml")
_FLOOR_SOURCE = "built-in floor"


def user_policy_path() -> Path | None:
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "faultplane"
    for name in _USER_POLICY_NAMES:
        if (base / name).is_file():
            return base / name
    return None


def project_policy_files(start: Path) -> tuple[list[Path], list[Path]]:
    """(inside, above): policy files from `start` up to the nearest `.git`, then those above it up to the root.

    A nested `.git` does not stop the walk: the files above it still apply, but only to tighten (they are
    combined with the strict default, so a lax file outside the project loosens nothing)."""
    inside: list[Path] = []
    above: list[Path] = []
    bucket = inside
    for folder in [start, *start.parents]:
        for name in POLICY_FILENAMES:
            candidate = folder / name
            if candidate.is_file():
                bucket.append(candidate)
        if (folder / ".git").exists():
            bucket = above
    return inside, above


def loosening_approved(policy_file: Path, what: str) -> bool:
    """Hook point for a signed approval of a policy that loosens another layer (core/approval.py will verify
    an Ed25519 signature over the file here). Until then no loosening is approved: the stricter value holds."""
    return False


def policy_in_force(
    path: str | os.PathLike[str] | None = None, *, start: str | os.PathLike[str] | None = None
) -> Policy:
    explicit: Path | None = None
    if path:
        explicit = Path(path).expanduser()
    elif os.environ.get("FAULTPLANE_POLICY"):
        explicit = Path(os.environ["FAULTPLANE_POLICY"]).expanduser()
    if explicit is not None and not explicit.is_file():
        raise PolicyError(f"policy file {explicit} does not exist (set by --policy or FAULTPLANE_POLICY)")
    files: list[Path] = []
    user = user_policy_path()
    if user is not None:
        files.append(user)
    inside, above = project_policy_files(Path(start or Path.cwd()).resolve())
    files += inside
    if explicit is not None:
        files.append(explicit)
    unique: list[Path] = []
    for f in [*files, *above]:
        if all(not _same(f, u) for u in unique):
            unique.append(f)
    if not unique:
        return Policy.strict_default()
    layers = [load_policy_file(f) for f in unique if f not in above]
    outer = [load_policy_file(f) for f in unique if f in above]
    if outer:
        layers += [*outer, Policy.strict_default()]
    needs_floor = len(layers) > 1 or _below_floor(layers[0])
    combined = combine([*layers, _floor()]) if needs_floor else layers[0]
    combined.source = " + ".join(str(f) for f in unique)
    return combined


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return a == b


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
    bs = [p.blast_radius for p in policies]
    n = min(len(b.stages) for b in bs)
    stages = []
    for i in range(n):
        pcts = [b.stages[i].percent for b in bs if b.stages[i].percent is not None]
        cnts = [b.stages[i].count for b in bs if b.stages[i].count is not None]
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
    )
    extra = {}
    inventories = [getattr(p, "inventory", None) for p in policies]
    if any(inv is not None for inv in inventories) and "inventory" in Policy.model_fields:
        from faultplane.core.inventory import combine_inventories

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
