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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from faultplane.core.formats import load_yaml
from faultplane.core.paths import faultplane_dir
from faultplane.core.policy.combine import _below_floor, _floor, combine
from faultplane.core.policy.model import POLICY_FILENAMES, ForbiddenRules, Policy, PolicyError

__all__ = [
    "SIGNATURE_SUFFIX",
    "also_from",
    "load_policy",
    "load_policy_file",
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


def user_policy_path() -> Path | None:
    base = faultplane_dir("config")
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


def _merge_forbidden(user: Mapping[str, Any]) -> dict[str, Any]:
    """With extend_defaults (the default) a policy file adds to the built-in rules instead of dropping them."""
    if not isinstance(user, Mapping) or user.get("extend_defaults") is False:
        return dict(user) if isinstance(user, Mapping) else user
    base = ForbiddenRules()
    merged: dict[str, Any] = dict(user)
    for key in ("words", "negations", "allow"):
        if key in user and isinstance(user[key], list):
            merged[key] = [*getattr(base, key), *[x for x in user[key] if x not in getattr(base, key)]]
    if isinstance(user.get("labels"), Mapping):
        labels = {k: v.model_dump() for k, v in base.labels.items()}
        for name, rule in user["labels"].items():
            if not isinstance(rule, Mapping):
                labels[name] = rule
                continue
            cur = labels.setdefault(name, {"keys": [], "values": [], "unless": []})
            for part in ("keys", "values", "unless"):
                extra = rule.get(part) or []
                cur[part] = (
                    [*cur[part], *[x for x in extra if x not in cur[part]]]
                    if isinstance(extra, list)
                    else extra
                )
            for k in rule:
                if k not in ("keys", "values", "unless"):
                    cur[k] = rule[k]  # unknown keys reach the validator and get a clear error
        merged["labels"] = labels
    return merged


def load_policy(
    path: str | os.PathLike[str] | None = None, *, start: str | os.PathLike[str] | None = None
) -> Policy:
    """The policy in force: the strictest combination of the built-in floor, the user's policy, every
    faultplane.policy.yaml from `start` (default: cwd) up to the root, and `path` or $FAULTPLANE_POLICY
    (see the module's docstring); the strict built-in default when there is no file at all."""
    return policy_in_force(path, start=start)


def load_policy_file(chosen: Path, text: str | None = None) -> Policy:
    """One policy file, validated (with `extend_defaults`, its forbidden rules add to the built-in ones).
    `text`: the file's content already read (a signed file is parsed from the very bytes that were verified)."""
    from faultplane.core.hostile import HostileInput, parse_guarded, read_text_limited

    try:
        if text is None:
            text = read_text_limited(chosen, "policy file")
        data = parse_guarded(load_yaml, text, f"policy file {chosen}") or {}
    except HostileInput as exc:
        raise PolicyError(str(exc)) from None
    except OSError as exc:
        raise PolicyError(f"{chosen}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise PolicyError(f"{chosen}: not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(data, Mapping):
        raise PolicyError(f"{chosen}: must be a mapping with forbidden/gates/blast_radius/approval sections")
    data = dict(data)
    if "forbidden" in data:
        data["forbidden"] = _merge_forbidden(data["forbidden"])
    data.pop("source", None)
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}" for e in exc.errors()
        )
        raise PolicyError(
            f"{chosen}: {problems} (see faultplane.policy.example.yaml for every field)"
        ) from None
    policy.source = str(chosen)
    return policy
