"""The policy in force: the strictest combination of the built-in floor, the user's policy and the project's.

Layers, all of which apply at once (none replaces another):
- the built-in floor: the production-name rules and the approval-class fault types, which no file removes;
- the user's policy: `$XDG_CONFIG_HOME/faultplane/policy.yaml` (default `~/.config/faultplane/policy.yaml`);
- every `faultplane.policy.yaml` from the starting folder up to the filesystem root: a nested folder with its
  own `.git` is still inside the project above it, so it cannot shed that project's policy;
- `--policy` or `$FAULTPLANE_POLICY`: one more layer, which only tightens what would be in force without it
  (with no other file, the strict built-in default), so swapping it in loosens nothing.

Combining takes the stricter value of every field, so any file can tighten and none can loosen. A project file
or an explicit file *may* loosen when it carries a signed approval: a sidecar `<file>.sig` holding an `fpa2`
token for purpose `policy` over the sha256 of the file's exact bytes, signed by a key the **user's** policy
lists in `approval.trusted_keys` (a file cannot vouch for itself, and an MCP session's in-memory key never
counts). A signed file then stands in for the user's policy and the layers it would be combined with; the floor
still applies to it, and unsigned files still tighten it. A signature that does not verify (another key, other
bytes, expired) approves nothing: the strict combination holds and the policy's source says why.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
from collections.abc import Iterable, Iterator, Sequence
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

__all__ = [
    "SIGNATURE_SUFFIX",
    "also_from",
    "combine",
    "loosening_approved",
    "policy_file_hash",
    "policy_in_force",
    "project_policy_files",
    "signature_path",
    "user_policy_path",
]

SIGNATURE_SUFFIX = ".sig"
_MAX_SIGNATURE_BYTES = 16_384

# folders whose project policies apply as well as the starting folder's: the folder of the experiment file
# being judged, so running it from outside its project (`cd /tmp && faultplane run /proj/x.yaml`) does not
# shed that project's policy. A context variable: it reaches only the call made inside `also_from(...)`.
_ALSO_FROM: contextvars.ContextVar[tuple[Path, ...]] = contextvars.ContextVar(
    "faultplane_policy_also", default=()
)


@contextlib.contextmanager
def also_from(source: object) -> Iterator[None]:
    """Within this block the policy in force also holds the project policies of `source`'s folder (when
    `source` is an existing file path; anything else adds nothing)."""
    folder: Path | None = None
    if isinstance(source, str | Path) and len(str(source)) < 4096 and "\n" not in str(source):
        with contextlib.suppress(OSError, ValueError):
            path = Path(source).expanduser()
            if path.is_file():
                folder = path.resolve().parent
    token = _ALSO_FROM.set((*_ALSO_FROM.get(), folder) if folder is not None else _ALSO_FROM.get())
    try:
        yield
    finally:
        _ALSO_FROM.reset(token)


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


def policy_file_hash(data: bytes) -> str:
    """What a loosening approval signs: the sha256 of the policy file's exact bytes."""
    return hashlib.sha256(data).hexdigest()


def signature_path(policy_file: Path) -> Path:
    return policy_file.with_name(policy_file.name + SIGNATURE_SUFFIX)


def loosening_approved(
    policy_file: Path, trusted_keys: Sequence[str], data: bytes | None = None
) -> tuple[str | None, str | None]:
    """(approver, None) when `policy_file` carries a signed approval (its `.sig` sidecar: a purpose-`policy`
    token over the sha256 of `data`, the file's bytes) by one of `trusted_keys`; (None, why) when a signature
    is there but does not verify; (None, None) when there is none."""
    from faultplane.core import approval as approvals

    sig = signature_path(policy_file)
    if not sig.is_file():
        return None, None
    try:
        if sig.stat().st_size > _MAX_SIGNATURE_BYTES:
            return None, f"{sig.name} is larger than a signature"
        token = sig.read_text(encoding="utf-8").strip()
        if data is None:
            data = policy_file.read_bytes()
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"{sig.name} cannot be read: {exc}"
    if not trusted_keys:
        return None, "the user's policy trusts no approver key, and only it can approve a loosening"
    # an MCP session lends its in-memory key to experiment approvals only: never to a policy
    lent = approvals._SESSION_KEYS.set(())
    try:
        return approvals.verify_signed(policy_file_hash(data), token, trusted_keys, purpose="policy"), None
    except approvals.ApprovalError as exc:
        return None, str(exc)
    finally:
        approvals._SESSION_KEYS.reset(lent)


def _read_layer(path: Path, trusted: Sequence[str]) -> tuple[Policy, str | None, str | None]:
    """(the file's policy, its approver if a signed loosening, why a signature there did not verify). The
    policy is parsed from the very bytes whose hash was verified."""
    from faultplane.core.hostile import HostileInput, read_text_limited

    try:
        text = read_text_limited(path, "policy file")
    except HostileInput as exc:
        raise PolicyError(str(exc)) from None
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read: {exc.strerror or exc}") from None
    approver, why = loosening_approved(path, trusted, text.encode("utf-8"))
    return load_policy_file(path, text), approver, why


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
    user = user_policy_path()
    inside, above = project_policy_files(Path(start or Path.cwd()).resolve())
    for folder in _ALSO_FROM.get():
        more_inside, more_above = project_policy_files(folder)
        inside, above = [*inside, *more_inside], [*above, *more_above]
    seen: list[Path] = []

    def fresh(files: Iterable[Path]) -> list[Path]:
        out = []
        for f in files:
            if all(not _same(f, u) for u in seen):
                seen.append(f)
                out.append(f)
        return out

    user_files = fresh([user] if user is not None else [])
    project = fresh(inside)
    explicit_files = fresh([explicit] if explicit is not None else [])
    outer_files = fresh(above)
    if not seen:
        return Policy.strict_default()
    user_layer = load_policy_file(user_files[0]) if user_files else None
    # only the person's own policy may name who approves a loosening: never the file being approved
    trusted = list(user_layer.approval.trusted_keys) if user_layer is not None else []
    notes: list[str] = []
    labels = {str(f): str(f) for f in seen}
    signed: list[Policy] = []
    plain: list[Policy] = []
    for f in [*project, *explicit_files]:
        layer, approver, why = _read_layer(f, trusted)
        if approver is not None:
            labels[str(f)] = f"{f} (loosening signed by {approver})"
            signed.append(layer)
        else:
            plain.append(layer)
            if why:
                notes.append(f"signature on {f.name} not accepted: {why}")
    outer = [load_policy_file(f) for f in outer_files]
    if signed:
        # the signed files stand in for the user's policy; unsigned files still only tighten them
        layers = [*signed, *plain]
    else:
        layers = [*([user_layer] if user_layer is not None else []), *plain]
        if explicit_files and not user_files and not project:
            # an explicit file alone is judged against what holds without it: the strict built-in default
            layers.append(Policy.strict_default())
    if outer:
        layers += [*outer, Policy.strict_default()]
    needs_floor = len(layers) > 1 or _below_floor(layers[0])
    combined = combine([*layers, _floor()]) if needs_floor else layers[0]
    combined.source = " + ".join(labels.values()) + (f" ({'; '.join(notes)})" if notes else "")
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
    # the floor has no opinion on stages (its one huge stage would otherwise cut every list to one stage)
    bs = [p.blast_radius for p in policies if p.source != _FLOOR_SOURCE] or [p.blast_radius for p in policies]
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
        # a key is trusted only when every layer that names keys names it: a file cannot add an approver
        trusted_keys=_intersection([a.trusted_keys for a in aps if a.trusted_keys]),
        elicitation=_intersection([a.elicitation for a in aps]),
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
