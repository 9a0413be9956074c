"""Service: register, inject and remove named faults, with every call written to the store's audit log.

The CLI, the MCP tool `chaos_inject_fault` and any other surface call `manage_fault`; the registry itself
lives in `faultplane.core.faults`. Injection is reproducible: each inject rolls a fresh generator seeded
with a per-call seed (given by the caller or drawn here) and the seed is recorded in the audit entry.
"""

from __future__ import annotations

import hashlib
import json
import random
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from faultplane.core.faults import (
    FAULT_TYPES,
    FaultRegistry,
    FaultSpec,
    FaultSpecError,
    UnknownFaultError,
)

__all__ = [
    "ActiveFault",
    "FaultInputError",
    "FaultResult",
    "FaultSummary",
    "fault_approval_hash",
    "list_faults",
    "manage_fault",
    "record_refused_call",
]

FaultAction = Literal["register", "inject", "remove"]
_ACTIONS = ("register", "inject", "remove")
_AUDITED = (
    "action",
    "fault_name",
    "fault_type",
    "probability",
    "duration_seconds",
    "error_message",
    "target",
)

FaultInputError = FaultSpecError  # bad input: message is "field: problem; fix: ..."


class FaultResult(BaseModel):
    """The outcome of one register/inject/remove call."""

    status: Literal["registered", "injected", "removed", "error"]
    fault_name: str
    fault_type: str | None = Field(default=None, description="the fault's type (None when it is unknown)")
    probability: float | None = None
    was_triggered: bool | None = Field(default=None, description="inject only: the roll armed one occurrence")
    existed: bool | None = Field(default=None, description="remove only: the fault was registered")
    seed: int | None = Field(default=None, description="inject only: replays this roll")
    error: str | None = Field(default=None, description="status=error: the field at fault and the fix")


class FaultSummary(BaseModel):
    """A registered fault as chaos_status publishes it: everything but the message it raises."""

    name: str
    fault_type: str
    probability: float
    duration_seconds: float | None = None
    target: str | None = None
    armed: int = 0  # injected occurrences not yet applied


class ActiveFault(FaultSummary):
    error_message: str | None = None


def list_faults(registry: FaultRegistry | None = None) -> list[ActiveFault]:
    """The registered faults, by name."""
    reg = registry or FaultRegistry()
    state = reg.load()
    return [
        ActiveFault(**spec.to_dict(), armed=state.armed.get(name, 0))
        for name, spec in sorted(state.faults.items())
    ]


def _audit(store: Any, actor: str, action: str, subject: str, details: dict[str, Any]) -> None:
    if store is None:
        from faultplane.core.store import open_store

        store = open_store()
    store.insert(
        "audit",
        [
            {
                "ts": datetime.now(UTC),
                "actor": actor,
                "action": f"fault.{action}",
                "subject": subject,
                "details": json.dumps(details, sort_keys=True, default=str),
            }
        ],
    )


def _check_probability(probability: Any) -> None:
    if probability is None:
        return
    if isinstance(probability, bool) or not isinstance(probability, int | float) or not 0 <= probability <= 1:
        raise FaultInputError(
            "probability", f"{probability!r} is outside 0.0-1.0", "pass a number from 0.0 to 1.0"
        )


def _apply(
    reg: FaultRegistry,
    fault_name: str,
    action: str,
    fault_type: str | None,
    probability: float | None,
    duration_seconds: float | None,
    error_message: str | None,
    target: str | None,
    seed: int | None,
) -> FaultResult:
    if not isinstance(fault_name, str) or not fault_name.strip():
        raise FaultInputError("fault_name", "is required and must be a non-empty string", "name the fault")
    if action not in _ACTIONS:
        raise FaultInputError("action", f"{action!r} is not an action", "use one of register, inject, remove")
    _check_probability(probability)
    if action == "register":
        if not fault_type:
            raise FaultInputError(
                "fault_type", "is required for action=register", f"pass one of {', '.join(FAULT_TYPES)}"
            )
        spec = reg.register(
            FaultSpec(
                fault_name,
                fault_type,
                0.1 if probability is None else probability,
                duration_seconds,
                error_message,
                target,
            )
        )
        return FaultResult(
            status="registered",
            fault_name=fault_name,
            fault_type=spec.fault_type,
            probability=spec.probability,
        )
    if action == "inject":
        existing = reg.get(fault_name)
        if existing is None:
            raise UnknownFaultError(fault_name, [s.name for s in reg.active()])
        seed = secrets.randbits(63) if seed is None else seed
        triggered = reg.inject(fault_name, random.Random(seed))
        return FaultResult(
            status="injected",
            fault_name=fault_name,
            fault_type=existing.fault_type,
            probability=existing.probability,
            was_triggered=triggered,
            seed=seed,
        )
    existing = reg.get(fault_name)
    existed = reg.remove(fault_name)
    return FaultResult(
        status="removed",
        fault_name=fault_name,
        fault_type=existing.fault_type if existing else None,
        probability=existing.probability if existing else None,
        existed=existed,
    )


def manage_fault(
    fault_name: str,
    action: str,
    *,
    fault_type: str | None = None,
    probability: float | None = None,
    duration_seconds: float | None = None,
    error_message: str | None = None,
    target: str | None = None,
    seed: int | None = None,
    actor: str = "api",
    registry: FaultRegistry | None = None,
    store: Any = None,
    approval_token: str | None = None,
) -> FaultResult:
    """Register (overwrites), inject (rolls the probability once, seeded) or remove (idempotent) a fault.

    Registering or arming a fault of a type in the policy's `approval.fault_types` (partition, resource
    exhaustion) needs an approval of exactly this call (`fault_approval_hash`): `approval_token`, or one a
    person stored. Raises `FaultInputError` (field, problem, fix) for bad input or a refusal and
    `UnknownFaultError` when injecting a fault that is not registered. Every call, failed or not, is written
    to the store's audit table.
    """
    reg = registry or FaultRegistry()
    details: dict[str, Any] = {
        "fault_type": fault_type,
        "probability": probability,
        "duration_seconds": duration_seconds,
        "error_message": error_message,
        "target": target,
        "registry": str(reg.path),
    }
    try:
        if action in ("register", "inject"):
            policy = _judge_registration(fault_name, target, error_message)
            _require_approval(
                policy,
                reg,
                fault_name,
                action,
                fault_type,
                probability,
                duration_seconds,
                approval_token,
                target if isinstance(target, str) else None,
            )
        result = _apply(
            reg, fault_name, action, fault_type, probability, duration_seconds, error_message, target, seed
        )
    except (FaultSpecError, UnknownFaultError) as exc:
        _audit(store, actor, str(action), str(fault_name), {**details, "status": "error", "error": str(exc)})
        raise
    _audit(store, actor, action, fault_name, {**details, **result.model_dump(exclude_none=True)})
    return result


def _judge_registration(fault_name: Any, target: Any, error_message: Any) -> Any:
    """A fault registered by any surface (CLI, MCP, load) is judged by the same policy as an experiment:
    a production name or a target outside the declared inventory is refused before the registry changes."""
    from faultplane.core.policy import PolicyError, find_forbidden, load_policy

    try:
        policy = load_policy()
    except PolicyError as exc:
        raise FaultInputError("policy", str(exc), "correct the policy file") from None
    fields = {k: v for k, v in (("fault_name", fault_name), ("target", target)) if isinstance(v, str)}
    found = find_forbidden({"faults": [fields]}, policy.forbidden)
    if policy.inventory is not None and isinstance(target, str):
        from faultplane.core.policy import undeclared

        found += undeclared({"faults": [{"host": target}]}, policy.inventory)
    if found:
        v = found[0]
        raise FaultInputError(v.field.rsplit(".", 1)[-1], f"refused by policy [{v.rule}]: {v.message}", v.fix)
    return policy


def fault_approval_hash(spec: Mapping[str, Any]) -> str:
    """What an approval of a fault registration binds: the call as made (name, action, the fault's type,
    probability, duration), so an approval of a 10% partition does not cover a 100% one."""
    canon = json.dumps(
        {"approval_of": "fault registration", "fault": dict(spec)}, sort_keys=True, default=str
    )
    return hashlib.sha256(canon.encode()).hexdigest()


def approval_spec(
    fault_name: str,
    action: str,
    fault_type: str,
    probability: Any,
    duration_seconds: Any,
    target: str | None = None,
) -> dict[str, Any]:
    """The registration an approval is bound to; the MCP server asks the person about this same dict. A
    target, when the call names one, is bound too: an approval for one target covers no other."""
    spec = {
        "fault_name": fault_name,
        "action": action,
        "fault_type": fault_type,
        "probability": probability,
        "duration_seconds": duration_seconds,
    }
    if target is not None:
        spec["target"] = target
    return spec


def _require_approval(
    policy: Any,
    reg: FaultRegistry,
    fault_name: Any,
    action: str,
    fault_type: Any,
    probability: Any,
    duration_seconds: Any,
    approval_token: str | None,
    target: str | None = None,
) -> None:
    """Refuse to register or arm an approval-class fault (by its type, whatever surface calls) unless a
    person approved exactly this call. `inject` without a type arms the registered fault: its type counts."""
    from faultplane.core import approval as approvals
    from faultplane.core.policy import normalize_text

    kind = fault_type
    if not kind and action == "inject" and isinstance(fault_name, str):
        existing = reg.get(fault_name)
        kind = existing.fault_type if existing is not None else None
    if not isinstance(kind, str) or not kind:
        return
    reserved = {normalize_text(f) for f in policy.approval.fault_types}
    if normalize_text(kind) not in reserved:
        return
    ahash = fault_approval_hash(
        approval_spec(fault_name, action, kind, probability, duration_seconds, target)
    )
    trusted = policy.approval.trusted_keys
    why = ""
    if approval_token:
        try:
            approvals.verify_token(approval_token, ahash, trusted_keys=trusted)
            return
        except approvals.ApprovalError as exc:
            why = f" The token given does not verify: {exc}."
    found, stored_why = approvals.stored_approval(ahash, trusted_keys=trusted)
    if found is not None:
        return
    why = why or (f" {stored_why}." if stored_why else "")
    raise FaultInputError(
        "fault_type",
        f"{action} of a {kind} fault needs a human approval by policy (approval.fault_types); nothing was "
        f"registered (approval hash {ahash[:16]}…).{why}",
        "register it from an experiment (a `faults.register` action) that a person approved with "
        "`faultplane guard approve`, or call from an MCP client that can ask its user (URL elicitation)",
    )


def record_refused_call(
    arguments: Mapping[str, Any], error: str, *, actor: str = "api", store: Any = None
) -> None:
    """Audit a call refused before `manage_fault` could run (its arguments broke the published schema).

    The audit log holds every call, accepted or not; a refused call may lack its action or fault name, or carry
    them with the wrong type, so both are recorded as sent and the action falls back to `invalid`.
    """
    action = arguments.get("action")
    name = arguments.get("fault_name")
    details = {k: arguments.get(k) for k in _AUDITED} | {"status": "error", "error": error, "refused": True}
    if extra := {k: v for k, v in arguments.items() if k not in _AUDITED}:
        details["arguments"] = extra
    _audit(
        store,
        actor,
        action if isinstance(action, str) and action in _ACTIONS else "invalid",
        name if isinstance(name, str) else "" if name is None else json.dumps(name, default=str),
        details,
    )
