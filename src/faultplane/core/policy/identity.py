"""Which experiment and which version of it a decision is about.

`experiment_family` is the stable id of "the same experiment" across edits (history and stages are kept per
family); `content_hash` identifies one exact version; `approval_hash` is what a person's approval is bound to:
the experiment as it will run, variables substituted, with secrets replaced by digests.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["approval_hash", "content_hash", "experiment_family"]


def _content_hash(raw: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of the experiment: same content, same hash, whatever the file format."""
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


content_hash = _content_hash


def _approval_hash(document: Mapping[str, Any], secret_values: Sequence[str] = ()) -> str:
    """What an approval is bound to: the experiment as it will run (variables substituted, configuration at its
    final values), with every secret value replaced by a digest of it.

    Hashing the file as written would let one approval cover any `--var` values; hashing secrets in clear
    would put them into a stored hash. A changed variable or a changed secret both change this hash."""
    ordered = sorted({str(v) for v in secret_values if str(v)}, key=len, reverse=True)

    def digest(value: str) -> str:
        return "secret:" + hashlib.sha256(value.encode()).hexdigest()[:16]

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            for sv in ordered:
                if sv in node:
                    node = node.replace(sv, digest(sv))
            return node
        if isinstance(node, Mapping):
            return {str(k): walk(v) for k, v in node.items()}
        if isinstance(node, list | tuple):
            return [walk(v) for v in node]
        if isinstance(node, int | float) and not isinstance(node, bool) and str(node) in ordered:
            return digest(str(node))  # a lone `${secret}` keeps the secret's type
        return node

    if not ordered:
        try:  # nothing to digest: the document hashes as it is (unless a key is not a string)
            return _content_hash({"approval_of": "resolved experiment", "experiment": document})
        except TypeError:
            pass
    return _content_hash({"approval_of": "resolved experiment", "experiment": walk(document)})


approval_hash = _approval_hash


def _slug(text: str) -> str:
    # the same slug the engine records in `runs.experiment_family`, so history lookups match
    return "-".join("".join(c.lower() if c.isalnum() else " " for c in text).split()) or "experiment"


def experiment_family(raw: Mapping[str, Any]) -> str:
    """The stable id of "the same experiment" across edits: explicit `family:`, else the title's slug."""
    fam = raw.get("family")
    if isinstance(fam, str) and fam.strip():
        return _slug(fam)
    title = raw.get("title")
    return _slug(title) if isinstance(title, str) else "experiment"
