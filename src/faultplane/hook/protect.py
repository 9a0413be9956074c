"""The files an agent must not change: the guardrail policy, approvals and the keys that sign them.

Which files those are is fixed here, without loading the policy module (the hook must stay cheap): policy
files by name (`faultplane.policy*.yaml`), anything under a project's `.faultplane/`, the user's Faultplane
configuration folder (user policy, approval key), the approvals state folder and `$FAULTPLANE_APPROVAL_KEY`.
Keys may not even be read: a key read is an approval minted.
"""

from __future__ import annotations

import contextlib
import fnmatch
import glob
import os
import re
from pathlib import Path

from faultplane.core.paths import faultplane_dir

POLICY_NAME = re.compile(r"faultplane\.policy[^/]*\.ya?ml", re.IGNORECASE)
_PROTECTED_BASENAMES = (
    "faultplane.policy.yaml",
    "faultplane.policy.yml",
    "faultplane.policy.local.yaml",
    ".faultplane",
)
_KEY_NAME = re.compile(r"(\.key|\.pem|\.priv|_ed25519|\.sk)$|private|secret", re.IGNORECASE)
_GLOB = re.compile(r"[*?\[]")
# Claude Code's settings hold the hook itself: an agent that edits them out has no hook
_AGENT_SETTINGS = re.compile(r"settings(\.local)?\.json", re.IGNORECASE)


def _key_file() -> Path | None:
    env = os.environ.get("FAULTPLANE_APPROVER_KEY") or os.environ.get("FAULTPLANE_APPROVAL_KEY")
    return Path(env).expanduser() if env else None


def guarded_dirs() -> list[Path]:
    # the XDG locations in force and the default ones: an agent may point XDG_* elsewhere for its own shell
    home = Path.home()
    dirs = [faultplane_dir("config"), faultplane_dir("state") / "approvals"]
    for default in (home / ".config" / "faultplane", home / ".local" / "state" / "faultplane" / "approvals"):
        if default not in dirs:
            dirs.append(default)
    return dirs


def _real(path: Path) -> Path:
    try:
        return path.resolve()  # a symlink to the policy is the policy
    except (OSError, RuntimeError):
        return path


def _under(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
        return True
    except ValueError:
        return False


def protected(path: Path) -> str | None:
    """Why `path` is a guardrail file, or None."""
    for p in {path, _real(path)}:
        if POLICY_NAME.fullmatch(p.name):
            return f"{p} is a guardrail policy file; only a person edits it"
        if ".faultplane" in p.parts:
            return f"{p} is under .faultplane/ (approvals and keys); only a person changes it"
        if p.parent.name == ".claude" and _AGENT_SETTINGS.fullmatch(p.name):
            return f"{p} configures the agent's hooks (this guardrail among them); only a person changes it"
        key = _key_file()
        if key is not None and (p == key or p == _real(key)):
            return f"{p} is the approval key; agents may not touch it"
        for folder in guarded_dirs():
            if _under(p, folder) or _under(p, _real(folder)):
                return f"{p} is in {folder} (user policy, approvals, keys); only a person changes it"
    return None


def secret(path: Path) -> str | None:
    """Why reading `path` would leak an approval secret, or None."""
    key = _key_file()
    for p in {path, _real(path)}:
        if key is not None and (p == key or p == _real(key)):
            return f"{p} is the approval key; reading it would let an agent mint approvals"
        inside = ".faultplane" in p.parts or any(_under(p, d) or _under(p, _real(d)) for d in guarded_dirs())
        if inside and (_KEY_NAME.search(p.name) or p.is_dir()):
            return f"{p} holds approval keys; reading it would let an agent mint approvals"
    return None


def covers(path: Path) -> str | None:
    """Why changing `path` recursively (rm -r, mv, chmod -R of a folder) reaches a guardrail file."""
    direct = protected(path)
    if direct:
        return direct
    real = _real(path)
    for folder in guarded_dirs():
        if _under(folder, real) and real != Path(real.anchor):
            return f"{path} contains {folder} (user policy, approvals, keys)"
        if real == Path(real.anchor) or real == Path.home():
            return f"{path} contains the Faultplane configuration"
    if real.is_dir():
        for name in _PROTECTED_BASENAMES:
            if (real / name).exists():
                return f"{path} contains {name}, a guardrail file"
    return None


def matches(word: str, cwd: Path | None) -> list[Path]:
    """The paths a glob word may name: what it matches on disk plus the guardrail names it could match."""
    if not _GLOB.search(word):
        return []
    out: list[Path] = []
    base = Path(word)
    folder = base.parent if base.is_absolute() else ((cwd or Path.cwd()) / base.parent)
    for name in _PROTECTED_BASENAMES:
        if fnmatch.fnmatch(name, base.name) or fnmatch.fnmatch(name.casefold(), base.name.casefold()):
            out.append(folder / name)
    pattern = word if base.is_absolute() else str((cwd or Path.cwd()) / word)
    with contextlib.suppress(OSError, ValueError):
        out += [Path(p) for p in glob.glob(pattern, include_hidden=True)[:200]]
    return out


def could_name_guardrail(pattern: str) -> bool:
    """Could a word of which only `pattern` is known (`*` = decided at run time) be a guardrail file?"""
    if (
        POLICY_NAME.search(pattern)
        or ".faultplane" in pattern
        or ".claude" in pattern
        or "faultplane" in pattern.split("/")[:-1]
    ):
        return True
    name = pattern.rsplit("/", 1)[-1]
    if "*" not in name:
        return False
    return any(fnmatch.fnmatchcase(n, name) for n in _PROTECTED_BASENAMES)


def mentions(text: str) -> str | None:
    """A guardrail file named inside code or free text (`python -c "open('faultplane.policy.yaml','w')"`)."""
    folded = text.casefold()
    if POLICY_NAME.search(text) or "faultplane.policy" in folded:
        return "the guardrail policy file"
    if ".faultplane" in folded:
        return "the .faultplane/ folder (approvals and keys)"
    if re.search(r"\.claude/settings(\.local)?\.json", folded):
        return "the agent's hook settings"
    for folder in guarded_dirs():
        if str(folder).casefold() in folded:
            return f"{folder} (user policy, approvals, keys)"
    if re.search(r"\.config/faultplane|faultplane/approvals|approval\.key|approver\.key", folded):
        return "Faultplane's approvals or keys"
    key = _key_file()
    if key is not None and str(key).casefold() in folded:
        return "the approval key"
    return None


# the files a patch changes, in the forms agents write patches: the apply_patch envelope (`*** Update File: x`)
# and unified diffs (`--- a/x`, `+++ b/x`, `diff --git a/x b/x`, renames and copies)
_PATCH_FILE = re.compile(
    r"^(?:\*\*\* (?:Add|Update|Delete) File:|\*\*\* Move to:|---|\+\+\+|rename (?:from|to)|copy (?:from|to))"
    r" +(.+?)[ \t]*$",
    re.MULTILINE,
)
_GIT_DIFF = re.compile(r"^diff --git +(\S+) +(\S+)", re.MULTILINE)


def patch_targets(text: str) -> list[str]:
    """The paths a patch adds, changes, deletes or moves. A path is given with and without its first folder,
    since how many to strip (`patch -p1`) is the patch tool's choice, not the text's."""
    found = [m.group(1).split("\t")[0].strip().strip('"') for m in _PATCH_FILE.finditer(text)]
    found += [p for m in _GIT_DIFF.finditer(text) for p in m.groups()]
    out: list[str] = []
    for path in found:
        if path == "/dev/null":  # the side of a file that is created or deleted
            continue
        for candidate in (path, path.split("/", 1)[1] if "/" in path.strip("/") else ""):
            if candidate and candidate not in out:
                out.append(candidate)
    return out


def names_key(text: str) -> bool:
    """Does a word name the approval key (inside an option, a URL, code) even when it is not a path?"""
    key = _key_file()
    folded = text.casefold()
    return "approval.key" in folded or "approver.key" in folded or (key is not None and str(key) in text)
