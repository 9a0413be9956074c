"""Driver `faults`: the fault registry as experiment actions, each paired with its revert.

`faults.register` puts a named fault in the registry, so fault points of that name (in-process points in
Python services, proxy routes) start applying it; rollback restores whatever was registered under the name
before. `faults.inject` arms one occurrence (rolled with the run's seeded RNG); rollback drops occurrences
not yet used.
`faults.remove` takes a fault out and registers no revert: removing a fault is itself the undo (experiments
use it in `rollbacks`), so putting the fault back afterwards would re-inject it. The reverts are leased, so a
fault registered by a controller that dies is reverted by the lease watchdog instead of staying in force.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from faultplane.core.faults import FaultRegistry, FaultSpec, FaultSpecError, UnknownFaultError
from faultplane.drivers.base import ActivityContext, DriverError, action, probe
from faultplane.drivers.leases import leased_revert, revert_recipe

__all__ = ["InjectParams", "RegisterParams", "RemoveParams"]

FaultType = Literal["latency", "error", "timeout", "resource_exhaustion", "network_partition"]


class _RegistryParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    registry: str | None = Field(
        default=None,
        description="registry file; default $FAULTPLANE_FAULTS or $XDG_STATE_HOME/faultplane/faults.json",
    )


class RegisterParams(_RegistryParams):
    name: str = Field(min_length=1, description="fault name; fault points of this name apply it")
    fault_type: FaultType
    probability: float = Field(default=0.1, ge=0.0, le=1.0, description="chance each call triggers it")
    duration_seconds: float | None = Field(
        default=None, ge=0.0, le=3600.0, description="latency/timeout length (default 1 s)"
    )
    error_message: str | None = Field(default=None, description="message of the raised error (error/timeout)")
    target: str | None = Field(default=None, description="where it applies, e.g. 'netproxy:<route>'")


class InjectParams(_RegistryParams):
    name: str = Field(min_length=1, description="a registered fault")


class RemoveParams(_RegistryParams):
    name: str = Field(min_length=1, description="the fault to remove (removing an absent one is fine)")


def _registry(p: _RegistryParams) -> FaultRegistry:
    return FaultRegistry(p.registry)


@revert_recipe("faults", "restore")
def _restore(args: dict[str, Any]) -> None:
    reg = FaultRegistry(args["registry"])
    previous = args.get("previous")
    if previous is None:
        reg.remove(args["name"])
    else:
        reg.register(FaultSpec.from_dict(previous))


@revert_recipe("faults", "disarm")
def _disarm(args: dict[str, Any]) -> None:
    FaultRegistry(args["registry"]).disarm(args["name"])


def _spec_dict(spec: FaultSpec | None) -> dict[str, Any] | None:
    return None if spec is None else spec.to_dict()


@action("faults", "register", RegisterParams, fault_type=None)
def register(ctx: ActivityContext, p: RegisterParams) -> dict[str, Any]:
    """Register (or replace) a named fault; rollback restores what was registered under the name before."""
    try:
        spec = FaultSpec(p.name, p.fault_type, p.probability, p.duration_seconds, p.error_message, p.target)
    except FaultSpecError as exc:
        raise DriverError(f"faults.register: arguments.{exc}") from None
    reg = _registry(p)
    if ctx.dry_run:
        return {"status": "registered", "dry_run": True, **spec.to_dict()}
    previous = reg.get(p.name)
    leased_revert(
        ctx,
        label=f"faults: restore {p.name!r}",
        driver="faults",
        revert="restore",
        args={"registry": str(reg.path.absolute()), "name": p.name, "previous": _spec_dict(previous)},
    )
    reg.register(spec)
    return {"status": "registered", **spec.to_dict()}


@action("faults", "inject", InjectParams)
def inject(ctx: ActivityContext, p: InjectParams) -> dict[str, Any]:
    """Roll the fault's probability once (seeded); when it triggers, the next call through its point fails."""
    reg = _registry(p)
    if ctx.dry_run:
        if reg.get(p.name) is None:
            raise DriverError(str(UnknownFaultError(p.name, [s.name for s in reg.active()])))
        return {"status": "injected", "name": p.name, "was_triggered": False, "dry_run": True}
    leased_revert(
        ctx,
        label=f"faults: disarm {p.name!r}",
        driver="faults",
        revert="disarm",
        args={"registry": str(reg.path.absolute()), "name": p.name},
    )
    try:
        triggered = reg.inject(p.name, ctx.rng)
    except UnknownFaultError as exc:
        raise DriverError(str(exc)) from None
    return {"status": "injected", "name": p.name, "was_triggered": triggered}


@action("faults", "remove", RemoveParams)
def remove(ctx: ActivityContext, p: RemoveParams) -> dict[str, Any]:
    """Remove a fault (idempotent). It is the undo of `register`, so it has no revert of its own."""
    reg = _registry(p)
    if ctx.dry_run:
        existed = reg.get(p.name) is not None
        return {"status": "removed", "name": p.name, "existed": existed, "dry_run": True}
    existed = reg.remove(p.name)
    return {"status": "removed", "name": p.name, "existed": existed}


@probe("faults", "active", _RegistryParams)
def active(ctx: ActivityContext, p: _RegistryParams) -> list[dict[str, Any]]:
    """The registered faults: name, fault_type, probability, duration, message, target."""
    return [s.to_dict() for s in _registry(p).active()]
