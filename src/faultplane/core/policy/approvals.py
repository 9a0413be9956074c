"""Approvals by policy: which runs need a person's "yes", and whether a valid one is on file.

A run needs approval when it skips a stage it has not earned, runs at or past `approval.min_stage`, injects a
fault kind the policy lists (recognised by effect wherever it appears, not by the name an author gives it),
or uses a listed `driver.action`. The approval itself is a signed token (`core.approval`) bound to the run's
approval hash (`identity.approval_hash`) and signed by a key in `approval.trusted_keys`; a changed experiment
or changed variables invalidate it.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from faultplane.core import approval as tokens  # the signed tokens themselves
from faultplane.core.policy.model import KNOWN_FAULT_TYPES, Policy, Stage
from faultplane.core.policy.normalize import normalize_text
from faultplane.core.policy.verdict import Violation

__all__ = ["approval_reasons", "consult_approvals"]


_FAULT_HINTS = (
    ("partition", "network_partition"),
    ("blackhole", "network_partition"),
    ("exhaust", "resource_exhaustion"),
    ("stress", "resource_exhaustion"),
    ("hog", "resource_exhaustion"),
    ("fill_disk", "resource_exhaustion"),
    ("latency", "latency"),
    ("delay", "latency"),
    ("timeout", "timeout"),
    ("error", "error"),
)


def _fault_types(
    raw: Mapping[str, Any], fault_type_of: Callable[[str, str], str | None] | None
) -> tuple[set[str], set[str]]:
    """(fault types, `driver.action` names) the method injects, read from its providers."""
    from faultplane.core.effects import activities, effect_kinds

    kinds: set[str] = set()
    actions: set[str] = set()
    # by effect, in every place that executes (rollbacks, steady state and controls too), at any depth
    for _section, act in activities(raw):
        kinds |= effect_kinds(act["provider"])
    for _section, act in activities(raw):
        prov = act["provider"]
        args = prov.get("arguments") if isinstance(prov.get("arguments"), Mapping) else {}
        for key in ("fault_type", "fault", "kind"):
            val = args.get(key)
            if isinstance(val, Mapping):
                val = val.get("type")
            if isinstance(val, str):
                kinds.add(normalize_text(val))
        if isinstance(args.get("type"), str) and normalize_text(args["type"]) in KNOWN_FAULT_TYPES:
            kinds.add(normalize_text(args["type"]))
        if (
            prov.get("type") == "driver"
            and isinstance(prov.get("driver"), str)
            and isinstance(prov.get("name"), str)
        ):
            actions.add(f"{prov['driver']}.{prov['name']}")
            declared = None
            if fault_type_of is not None:
                try:
                    declared = fault_type_of(prov["driver"], prov["name"])
                except Exception:  # an unknown driver is the validator's business, not the policy's
                    declared = None
            if declared:
                kinds.add(declared)
            else:
                name = normalize_text(prov["name"])
                kinds.update(ft for hint, ft in _FAULT_HINTS if hint in name)
    return kinds, actions


def approval_reasons(
    policy: Policy,
    stage: int | None,
    allowed_stage: int,
    unearned: Sequence[str],
    kinds: set[str],
    actions: set[str],
) -> list[str]:
    """Why this run needs a person's approval (empty: it needs none)."""
    stages: list[Stage] = policy.blast_radius.stages
    reasons: list[str] = []
    if stage is not None:
        if stage > allowed_stage:
            reasons.append(
                f"skips a stage: runs at stage {stage} but only stage {allowed_stage} is earned: "
                + "; ".join(unearned)
            )
        if stage >= len(stages):
            reasons.append(f"runs beyond the last stage ({stages[-1].describe()})")
        elif policy.approval.min_stage is not None and stage >= policy.approval.min_stage:
            reasons.append(f"stage {stage} ({stages[stage].describe()}) needs approval by policy")
    risky = sorted(k for k in kinds if k in {normalize_text(f) for f in policy.approval.fault_types})
    if risky:
        reasons.append(f"injects {', '.join(risky)}, which needs approval by policy")
    risky_actions = sorted(
        a
        for a in actions
        if any(fnmatch.fnmatchcase(a.casefold(), g.casefold()) for g in policy.approval.actions)
    )
    if risky_actions:
        reasons.append(f"uses {', '.join(risky_actions)}, which needs approval by policy")
    return reasons


def consult_approvals(
    reasons: Sequence[str],
    *,
    policy: Policy,
    family: str,
    ahash: str,
    stage: int | None,
    allowed_stage: int,
    approval_token: str | None,
) -> tuple[str | None, str | None, Violation | None]:
    """(approver, advice, None) when a valid approval of `ahash` is given or on file; (None, None, the
    refusal) when none is, saying why the ones found do not count."""
    token_error = ""
    found: tokens.Approval | None = None
    trusted = policy.approval.trusted_keys
    if approval_token:
        try:
            found = tokens.verify_token(approval_token, ahash, trusted_keys=trusted)
        except tokens.ApprovalError as exc:
            token_error = f" The token given does not verify: {exc}."
    if found is None:
        found, why = tokens.stored_approval(ahash, trusted_keys=trusted)
        token_error = token_error or (f" {why}." if why else "")
    if found is None and not token_error and not trusted:
        token_error = (
            " No approver key is trusted yet (approval.trusted_keys is empty): a person runs "
            "`faultplane approvals keygen` and adds the printed line there."
        )
    if found is None and not token_error:
        stale = [a for a in tokens.list_approvals() if a.get("family") == family]
        if stale:
            token_error = (
                " An approval exists for another version of this experiment; the content or the variables "
                "changed since (a changed experiment invalidates its approval)."
            )
    if found is not None:
        return found.approver, f"approved by {found.approver} for approval hash {ahash[:12]}…", None
    return (
        None,
        None,
        Violation(
            "approval.required",
            "blast_radius" if stage is not None and stage > allowed_stage else "method",
            "needs a human approval: " + "; ".join(reasons) + "." + token_error,
            "a person reviews the experiment and runs `faultplane approve <experiment file>` "
            "(signed with a key in approval.trusted_keys), or approves it when an MCP client asks"
            + (
                f", or run at stage {allowed_stage} first"
                if stage is not None and stage > allowed_stage
                else ""
            ),
        ),
    )
