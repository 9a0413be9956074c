"""Service: what the installed drivers can do — their actions and probes with parameter JSON schemas."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

__all__ = ["ActivityInfo", "DiscoverResult", "DriverInfo", "ProviderInfo", "discover"]


class ActivityInfo(BaseModel):
    name: str
    qualified_name: str = Field(description="driver.name, as used in an experiment's provider")
    description: str
    fault_type: str | None = None
    parameters: dict[str, Any] = Field(description="JSON schema of the activity's arguments")


class DriverInfo(BaseModel):
    driver: str
    actions: list[ActivityInfo]
    probes: list[ActivityInfo]


class ProviderInfo(BaseModel):
    type: str = Field(description="the `provider.type` of an activity")
    description: str
    parameters: dict[str, Any] = Field(description="JSON schema of the provider block")


class DiscoverResult(BaseModel):
    drivers: list[DriverInfo]
    providers: list[ProviderInfo] = Field(description="how an experiment's activities call them")
    action_count: int
    probe_count: int


_PROVIDER_DOCS = {
    "python": "call a function: module + func + arguments",
    "process": "run a program: path + arguments (+ timeout, env)",
    "http": "send a request: url + method + headers + arguments (+ expected_status)",
    "driver": "a driver's action or probe: driver + name + arguments (listed in `drivers`)",
}


def _providers() -> list[ProviderInfo]:
    from faultplane.core.model import DriverProvider, HttpProvider, ProcessProvider, PythonProvider

    models: dict[str, type[BaseModel]] = {
        "python": PythonProvider,
        "process": ProcessProvider,
        "http": HttpProvider,
        "driver": DriverProvider,
    }
    return [
        ProviderInfo(type=name, description=_PROVIDER_DOCS[name], parameters=model.model_json_schema())
        for name, model in models.items()
    ]


def discover(driver: str | None = None) -> DiscoverResult:
    """Every loaded driver (or only `driver`) with its actions and probes.

    Raises LookupError naming the available drivers when `driver` is not one of them.
    """
    from faultplane.drivers.base import list_activities

    specs = list_activities()
    names = sorted({s.driver for s in specs})
    if driver is not None and driver not in names:
        raise LookupError(f"driver: {driver!r} is not loaded; fix: use one of {', '.join(names) or '(none)'}")
    drivers: list[DriverInfo] = []
    for name in names:
        if driver is not None and name != driver:
            continue
        mine = [s for s in specs if s.driver == name]
        infos = {
            kind: [
                ActivityInfo(
                    name=s.name,
                    qualified_name=s.qualified_name,
                    description=s.description,
                    fault_type=s.fault_type,
                    parameters=s.parameters_schema(),
                )
                for s in mine
                if s.kind == kind
            ]
            for kind in ("action", "probe")
        }
        drivers.append(DriverInfo(driver=name, actions=infos["action"], probes=infos["probe"]))
    return DiscoverResult(
        drivers=drivers,
        providers=_providers(),
        action_count=sum(len(d.actions) for d in drivers),
        probe_count=sum(len(d.probes) for d in drivers),
    )
