"""Phase 0, the policy: may this planned experiment run? The one policy evaluation every surface uses (the
engine, `guard check`, the agent hook), the document it reads (variables substituted), the hash an approval
binds to, and what the driver catalog says each action injects and whether it picks targets, so that none of
them guesses differently."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from faultplane.core.formats import ExperimentError
from faultplane.core.store import Store
from faultplane.drivers.base import get_activity
from faultplane.engine.plan import Plan
from faultplane.engine.providers import jsonable

__all__ = [
    "approval_hash",
    "evaluate_document",
    "evaluate_plan",
    "evaluate_policy",
    "policy_document",
]


def _load_policy(policy_path: str | Path | None) -> Any | None:
    try:
        from faultplane.core.policy import PolicyError, load_policy
    except ImportError:
        return None
    try:
        return load_policy(policy_path)
    except PolicyError as exc:
        raise ExperimentError.one(
            field="policy", message=str(exc), fix="correct the policy file or pass --policy"
        ) from None


def policy_document(p: Plan) -> dict[str, Any]:
    """The experiment as it will run (variables substituted), as the policy reads it and approvals bind it."""
    doc = dict(p.dump())
    # activities may read configuration without `${}`: the policy must see the final values
    doc["configuration"] = {**(doc.get("configuration") or {}), **p.configuration}
    return doc


def approval_hash(p: Plan) -> str:
    """The hash an approval of this plan is bound to: resolved content, secrets digested (never in clear).

    A plan with nothing to resolve (no `${}`, no configuration, no secrets) runs exactly what was written, so
    its content hash binds it as tightly, and costs no second serialisation of the experiment."""
    if not (p.substituted or p.configuration or p.secrets):
        return hashlib.sha256(f"approval of experiment as written:{p.content_hash}".encode()).hexdigest()
    from faultplane.core.policy import approval_hash as _hash

    return _hash(policy_document(p), p.secret_values)


def evaluate_document(
    doc: Mapping[str, Any],
    policy: Any,
    store: Store | None,
    approval_token: str | None,
    *,
    content_hash: str | None = None,
    family: str | None = None,
    secret_values: list[str] | None = None,
    approval_hash: str | None = None,
) -> Any:
    """The one policy evaluation every surface uses (engine, `guard check`, the agent hook): the driver
    catalog tells what each action injects and whether it selects targets, so none guesses differently.
    A planned experiment passes its `approval_hash(plan)`; without one the document's own is used."""
    from faultplane.core.policy import evaluate

    return evaluate(
        doc,
        policy=policy,
        store=store,
        approval_token=approval_token,
        content_hash=content_hash,
        family=family,
        approval_hash=approval_hash,
        fault_type_of=_fault_type_of,
        targets_of=_targets_of,
        secret_values=secret_values or (),
    )


def evaluate_plan(p: Plan, policy: Any, store: Store | None, approval_token: str | None) -> Any:
    return evaluate_document(
        policy_document(p),
        policy,
        store,
        approval_token,
        content_hash=p.content_hash,
        family=p.family,
        secret_values=p.secret_values,
        approval_hash=approval_hash(p),
    )


def evaluate_policy(
    p: Plan, store: Store | None, policy_path: str | Path | None, approval_token: str | None
) -> Any | None:
    """The policy's decision on a planned experiment (None while no policy module is installed)."""
    policy = _load_policy(policy_path)
    return None if policy is None else evaluate_plan(p, policy, store, approval_token)


def _fault_type_of(driver: str, name: str) -> str | None:
    try:
        return get_activity(driver, name).fault_type
    except Exception:  # an unknown activity is reported when it runs, not here
        return None


def _targets_of(driver: str, name: str) -> bool:
    """Does this driver action pick targets out of the matches (count/percentage, held to the blast radius)?"""
    from faultplane.drivers.blast import BlastRadius as DriverRadius

    try:
        spec = get_activity(driver, name)
    except Exception:
        return False
    return spec.kind == "action" and (
        issubclass(spec.params, DriverRadius) or "percentage" in spec.params.model_fields
    )


def _decision_dict(decision: Any) -> dict[str, Any]:
    if hasattr(decision, "model_dump"):
        return decision.model_dump(mode="json")
    if hasattr(decision, "to_dict"):
        return jsonable(decision.to_dict())
    if dataclasses.is_dataclass(decision) and not isinstance(decision, type):
        return jsonable(dataclasses.asdict(decision))
    return {"decision": str(decision)}
