"""An experiment as the policy reads it, and the engine's own decision on it.

Decides what every guardrail check looks at: the experiment loaded and planned exactly as the engine does
(so content hashes, families and approval hashes agree with a run), or, when its variables cannot be resolved
here, the document as written. The decision itself is always the engine's evaluation, never a look-alike.
Shared by `services.guard` (check, approve), the MCP server's approval page and the PreToolUse hook, which all
import it from here; it imports nothing of theirs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from faultplane.core.policy import Policy, PolicyDecision
    from faultplane.core.store import Store

__all__ = ["PreparedExperiment", "decide", "prepare"]


@dataclass
class PreparedExperiment:
    document: dict[str, Any]  # what the policy reads: resolved, with the configuration's final values
    content_hash: str
    family: str
    resolved: bool  # False: variables could not be resolved here; the document is the file as written
    approval_hash: str = ""  # what an approval is bound to: the resolved content, secrets digested
    secret_values: list[str] = field(default_factory=list)


def prepare(
    source: str | Path | Mapping[str, Any], variables: Mapping[str, Any] | None = None
) -> PreparedExperiment:
    """Load and plan the experiment exactly as the engine does, so hashes and families agree."""
    from faultplane.core.formats import ExperimentError, load_document
    from faultplane.engine.lifecycle import approval_hash, plan, policy_document
    from faultplane.services.experiments import find_experiment

    if isinstance(source, str) and "\n" not in source and not Path(source).suffix and "{" not in source:
        source = find_experiment(source)  # a listed experiment name (LookupError names the known ones)
    raw = load_document(source)
    try:
        p = plan(raw, variables)
    except ExperimentError:
        from faultplane.core.policy import approval_hash as raw_approval_hash
        from faultplane.core.policy import content_hash, experiment_family

        return PreparedExperiment(
            dict(raw), content_hash(raw), experiment_family(raw), False, raw_approval_hash(raw)
        )
    return PreparedExperiment(
        policy_document(p), p.content_hash, p.family, True, approval_hash(p), list(p.secret_values)
    )


def decide(
    prepared: PreparedExperiment, policy: Policy, store: Store | None, approval_token: str | None
) -> PolicyDecision:
    """The engine's own evaluation (same driver catalog, same hashes), never a look-alike of it."""
    from faultplane.engine.lifecycle import evaluate_document

    decision: PolicyDecision = evaluate_document(
        prepared.document,
        policy,
        store,
        approval_token,
        content_hash=prepared.content_hash,
        family=prepared.family,
        secret_values=prepared.secret_values,
        approval_hash=prepared.approval_hash,
    )
    return decision
