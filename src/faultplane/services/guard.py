"""Guardrail capabilities shared by every surface: check an experiment, approve it, show the policy in force.
Judging an agent's tool call before it happens is the PreToolUse hook's (`faultplane.hook.judge`, which asks
the same engine evaluation through `services.prepared`).

The hook is a seatbelt in front of the engine, not a replacement for it: the engine evaluates the same policy
again in phase 0. So when the hook cannot resolve something an experiment needs (an unset environment
variable), it judges the document as written and lets the engine have the final word; when it cannot read the
experiment at all, it blocks, because then it cannot know.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from faultplane.core import approval as approvals
from faultplane.core.policy import (
    Policy,
    PolicyDecision,
    load_policy,
)
from faultplane.core.store import Store
from faultplane.services.prepared import PreparedExperiment, decide, prepare

__all__ = [
    "PreparedExperiment",
    "approve_experiment",
    "check_experiment",
    "prepare",
    "show_policy",
]


# Loading an experiment the way the engine sees it, and the engine's decision on it, live in
# services.prepared (the hook uses them too, and must not import this module for them).
_decide = decide


def check_experiment(
    source: str | Path | Mapping[str, Any],
    *,
    variables: Mapping[str, Any] | None = None,
    policy: Policy | None = None,
    policy_path: str | Path | None = None,
    store: Store | None = None,
    approval_token: str | None = None,
) -> PolicyDecision:
    """The policy's decision on an experiment, as the engine would make it now."""
    from faultplane.core.policy import also_from

    prepared = prepare(source, variables)
    with also_from(source):  # the experiment's own project policy holds wherever it is run from
        pol = policy or load_policy(policy_path)
    return _decide(prepared, pol, store, approval_token)


def approve_experiment(
    source: str | Path | Mapping[str, Any],
    *,
    variables: Mapping[str, Any] | None = None,
    reason: str = "",
    ttl_hours: float | None = None,
    policy_path: str | Path | None = None,
    store: Store | None = None,
    key_path: str | Path | None = None,
    passphrase: str | None = None,
) -> approvals.Approval:
    """Sign an approval bound to this exact experiment with these variables (the resolved content: another
    `--var` value is another experiment) with the approver's key; recorded in the audit table when a store is
    given. The key is unlocked with `passphrase`, else $FAULTPLANE_APPROVER_PASSPHRASE, else a terminal prompt;
    with none of them it refuses (ApprovalError), so a process without the person's secret cannot approve."""
    from faultplane.core.formats import ExperimentError, ValidationIssue, load_document
    from faultplane.engine.lifecycle import plan

    prepared = prepare(source, variables)
    if not prepared.resolved:
        try:
            plan(load_document(source), variables)  # re-plan only to report what is missing
        except ExperimentError as exc:
            raise ExperimentError(
                [
                    *exc.issues,
                    ValidationIssue(
                        field="approve",
                        message="an approval binds the experiment as it will run, so every variable must resolve",
                        fix="pass the same --var/--var-file values the run will use",
                    ),
                ]
            ) from None
    pol = load_policy(policy_path)
    ttl_s = approvals.approval_ttl_s(ttl_hours, pol.approval.ttl_hours)
    if not pol.approval.trusted_keys:
        raise approvals.ApprovalError(
            f"the policy in force ({pol.source}) trusts no approver key: a person runs `faultplane approvals "
            "keygen` and adds the printed line to approval.trusted_keys first"
        )
    path = Path(key_path).expanduser() if key_path else approvals.default_key_path()
    if not path.is_file():  # say so before asking a passphrase for nothing
        approvals.load_signing_key(path, "")
    secret = passphrase if passphrase is not None else approvals.read_passphrase()
    granted = approvals.sign_approval(
        prepared.approval_hash,
        key=approvals.load_signing_key(path, secret),
        trusted_keys=pol.approval.trusted_keys,
        family=prepared.family,
        reason=reason,
        ttl_s=ttl_s,
    )
    if store is not None:
        import datetime as dt
        import json

        store.insert(
            "audit",
            [
                {
                    "ts": dt.datetime.now(dt.UTC),
                    "actor": granted.approver,
                    "action": "approve",
                    "subject": prepared.family,
                    "details": json.dumps(
                        {
                            "content_hash": prepared.content_hash,
                            "approval_hash": prepared.approval_hash,
                            "variables": sorted(variables or {}),
                            "expires_at": granted.expires_at,
                            "reason": reason,
                        }
                    ),
                }
            ],
        )
    return granted


def show_policy(policy_path: str | Path | None = None, *, start: str | Path | None = None) -> dict[str, Any]:
    pol = load_policy(policy_path, start=start)
    return {"source": pol.source, **pol.model_dump(mode="json")}
