"""Chaos Toolkit's dynamic configuration: `configuration` entries of `type: probe`, whose value is what their
probe returns when the run starts (chaoslib's `load_dynamic_configuration`).

Entries are taken in the order written; a probe's `${}` sees the configuration before it (static values and
earlier probes' results) and the secrets. Python probes give their return value, process probes their
stripped stdout (a non-zero exit is a failure), http probes their body. A probe that fails leaves its key
unset, as in Chaos Toolkit; the run then says where the value was needed (`${key}` is undefined) unless it
runs with `ctk_compat`, where the reference stays as written. `validate` checks each probe like any activity
(module, function, arguments, executable) without running it."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from faultplane.core.config import substitute_like_ctk
from faultplane.core.formats import ValidationIssue
from faultplane.core.model import Activity, DriverProvider, HttpProvider, ProcessProvider, PythonProvider

__all__ = ["dynamic_activity", "evaluate"]


def dynamic_activity(key: str, entry: dict[str, Any]) -> Activity | ValidationIssue:
    """The probe of a dynamic configuration entry, or the issue that makes it unusable."""
    body = {k: v for k, v in entry.items() if k not in ("tolerance",)}
    body.setdefault("name", key)
    try:
        activity = Activity.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        return ValidationIssue(
            field=f"configuration.{key}" + (f".{loc}" if loc else ""),
            message=f"dynamic configuration probe: {first['msg']}",
            fix="write it as a probe: {type: probe, name, provider: {type: python|process|http, ...}}",
        )
    if isinstance(activity.provider, DriverProvider):
        return ValidationIssue(
            field=f"configuration.{key}.provider",
            message="a dynamic configuration value comes from a python, process or http probe",
            fix="use a python, process or http provider (Chaos Toolkit runs no other here)",
        )
    return activity


async def evaluate(
    raw_config: dict[str, Any],
    dynamic: list[str],
    configuration: dict[str, Any],
    secrets: dict[str, Any],
    secret_values: list[str],
) -> tuple[dict[str, Any], list[str]]:
    """(values by key, one message per probe that failed)."""
    from faultplane.drivers.base import ActivityContext
    from faultplane.engine.providers import execute_provider

    values: dict[str, Any] = {}
    failures: list[str] = []
    known: dict[str, Any] = {}
    for key, entry in raw_config.items():
        if key not in dynamic:
            if key in configuration:
                known[key] = configuration[key]
            continue
        probe = substitute_like_ctk(entry, known, secrets)
        found = dynamic_activity(key, probe)
        if isinstance(found, ValidationIssue):  # validate has reported it; a run never gets here with one
            failures.append(f"{found.field}: {found.message}")
            continue
        activity = found
        if isinstance(activity.provider, PythonProvider):
            # chaoslib hands a dynamic probe every secrets scope
            activity.provider.secrets = list(secrets)
        ctx = ActivityContext(
            run_id="dynamic-configuration",
            configuration=dict(known),
            secrets=secrets,
            secret_values=list(secret_values),
        )
        try:
            output = await execute_provider(activity, ctx)
        except Exception as exc:
            failures.append(f"configuration.{key}: its probe {activity.name!r} failed: {exc}")
            continue
        if isinstance(activity.provider, ProcessProvider):
            if output["status"] != 0:
                failures.append(
                    f"configuration.{key}: its probe {activity.name!r} exited with status "
                    f"{output['status']}: {output['stderr'][-300:].strip()}"
                )
                continue
            value: Any = output.get("stdout", "").strip()
        elif isinstance(activity.provider, HttpProvider):
            value = output.get("body")
        else:
            value = output
        known[key] = values[key] = value
    return values, failures
