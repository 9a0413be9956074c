"""The driver contract: named actions and probes with parameter schemas, and reverts paired with faults.

A driver module registers its activities with `@action(...)` / `@probe(...)`. Each activity takes an
`ActivityContext` and a validated pydantic parameters model. An action that changes the system calls
`ctx.on_revert(...)` *before* it applies the change, so the engine can undo it on every exit path.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = [
    "ActivityContext",
    "ActivitySpec",
    "ArgumentError",
    "DriverError",
    "NoParams",
    "RevertEntry",
    "action",
    "check_arguments",
    "get_activity",
    "list_activities",
    "load_builtin_drivers",
    "probe",
]

RevertFn = Callable[[], Awaitable[None] | None]

BUILTIN_DRIVERS = (
    "faultplane.drivers.process",
    "faultplane.drivers.netproxy",
    "faultplane.drivers.http",
    "faultplane.drivers.postgres",
    "faultplane.drivers.redis",
    "faultplane.drivers.script",
    "faultplane.drivers.kubernetes",
    "faultplane.drivers.ssh",
    "faultplane.drivers.hostnet",
    "faultplane.drivers.hostres",
    "faultplane.drivers.faults",
)


class DriverError(RuntimeError):
    """An activity failed in a way the user should read (bad target, refused connection, ...)."""


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass
class RevertEntry:
    label: str
    fn: RevertFn
    lease_id: str | None = None


@dataclass
class ActivityContext:
    """What an activity sees of the run: configuration, secrets, a seeded RNG and the revert stack."""

    run_id: str = "adhoc"
    configuration: dict[str, Any] = field(default_factory=dict)
    secrets: dict[str, Any] = field(default_factory=dict)
    rng: random.Random = field(default_factory=random.Random)
    dry_run: bool = False
    reverts: list[RevertEntry] = field(default_factory=list)
    # Set by the engine so drivers can record lease ids against the run's store.
    store_path: str | None = None
    # The run's secret values: leases seal any argument holding one and mask it in labels.
    secret_values: list[str] = field(default_factory=list)
    # Set by the engine while nothing else shares its loop: blocking python functions may then run inline.
    inline: bool = False
    # reverts registered and not withdrawn: the engine reads the change across one action as the evidence
    # that the action applied a fault (core.exposure)
    applied: int = 0
    # Set by the engine: told (label, seconds) when a fault is held for its duration, for the live countdown.
    on_hold: Callable[[str, float], None] | None = None

    def on_revert(self, fn: RevertFn, *, label: str, lease_id: str | None = None) -> RevertEntry:
        """Register how to undo a change. Call it before applying the change."""
        entry = RevertEntry(label=label, fn=fn, lease_id=lease_id)
        self.reverts.append(entry)
        self.applied += 1
        return entry

    async def revert_all(self) -> list[tuple[str, BaseException | None]]:
        """Run every pending revert, newest first, each shielded from cancellation; report outcomes."""
        outcomes: list[tuple[str, BaseException | None]] = []
        while self.reverts:
            entry = self.reverts.pop()
            try:
                with anyio.CancelScope(shield=True):
                    result = entry.fn()
                    if inspect.isawaitable(result):
                        await result
                outcomes.append((entry.label, None))
            except Exception as exc:  # a failed revert must not stop the others
                outcomes.append((entry.label, exc))
        return outcomes


@dataclass(frozen=True)
class ActivitySpec:
    driver: str
    name: str
    kind: Literal["action", "probe"]
    func: Callable[..., Any]
    params: type[BaseModel]
    description: str
    fault_type: str | None = None

    @property
    def qualified_name(self) -> str:
        return f"{self.driver}.{self.name}"

    def parameters_schema(self) -> dict[str, Any]:
        return self.params.model_json_schema()

    def describe(self) -> dict[str, Any]:
        return {
            "driver": self.driver,
            "name": self.name,
            "kind": self.kind,
            "description": self.description,
            "fault_type": self.fault_type,
            "parameters": self.parameters_schema(),
        }

    async def invoke(self, ctx: ActivityContext, arguments: dict[str, Any]) -> Any:
        """Validate the arguments and call the activity (sync ones in a worker thread)."""
        try:
            params = self.params.model_validate(arguments)
        except ValidationError as exc:
            raise DriverError(_format_param_errors(self.qualified_name, exc)) from None
        if inspect.iscoroutinefunction(self.func):
            return await self.func(ctx, params)
        return await anyio.to_thread.run_sync(self.func, ctx, params)


_REGISTRY: dict[tuple[str, str], ActivitySpec] = {}


def _register(
    kind: Literal["action", "probe"],
    driver: str,
    name: str,
    params: type[BaseModel],
    description: str | None,
    fault_type: str | None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def deco(func: Callable[..., Any]) -> Callable[..., Any]:
        doc = description or inspect.getdoc(func) or ""
        _REGISTRY[(driver, name)] = ActivitySpec(driver, name, kind, func, params, doc, fault_type)
        return func

    return deco


def action(
    driver: str,
    name: str,
    params: type[BaseModel] = NoParams,
    *,
    description: str | None = None,
    fault_type: str | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a function `(ctx, params) -> Any` as an action of `driver`."""
    return _register("action", driver, name, params, description, fault_type)


def probe(
    driver: str, name: str, params: type[BaseModel] = NoParams, *, description: str | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a function `(ctx, params) -> value` as a probe of `driver`."""
    return _register("probe", driver, name, params, description, None)


_loaded = False


def _plugin_modules() -> list[str]:
    """Third-party drivers: the `faultplane.drivers` entry-point group and $FAULTPLANE_DRIVERS (comma-separated)."""
    from importlib.metadata import entry_points

    mods = [ep.value.split(":")[0] for ep in entry_points(group="faultplane.drivers")]
    mods += [m.strip() for m in os.environ.get("FAULTPLANE_DRIVERS", "").split(",") if m.strip()]
    return mods


def load_builtin_drivers() -> None:
    """Import every built-in and plugin driver module so their activities register.

    A built-in whose optional client library is missing is skipped; a named plugin that fails to import is an
    error, since the user asked for it."""
    global _loaded
    if _loaded:
        return
    for mod in _plugin_modules():
        try:
            importlib.import_module(mod)
        except ImportError as exc:
            raise DriverError(
                f"driver plugin {mod!r} (FAULTPLANE_DRIVERS / entry point) cannot be imported: {exc}"
            ) from None
    for mod in BUILTIN_DRIVERS:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("faultplane"):
                continue  # driver not built (yet)
            continue  # optional client library not installed: its driver is simply absent
    _loaded = True


def get_activity(driver: str, name: str) -> ActivitySpec:
    load_builtin_drivers()
    try:
        return _REGISTRY[(driver, name)]
    except KeyError:
        known = sorted(n for d, n in _REGISTRY if d == driver)
        if not known:
            drivers = sorted({d for d, _ in _REGISTRY})
            raise DriverError(f"unknown driver {driver!r}; available drivers: {', '.join(drivers)}") from None
        raise DriverError(
            f"driver {driver!r} has no activity {name!r}; available: {', '.join(known)}"
        ) from None


def list_activities(driver: str | None = None) -> list[ActivitySpec]:
    load_builtin_drivers()
    return sorted(
        (s for s in _REGISTRY.values() if driver is None or s.driver == driver),
        key=lambda s: (s.driver, s.name),
    )


@dataclass(frozen=True)
class ArgumentError:
    """One problem with a driver activity's arguments, found before anything runs.

    ``field`` is relative to the provider (``driver``, ``name`` or ``arguments.<name>``); prefix it with the
    activity's place in the experiment (``method[1].provider.``)."""

    field: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message} (fix: {self.fix})"


def _spec_or_none(driver: str, name: str) -> ActivitySpec | None:
    spec = _REGISTRY.get((driver, name))
    if spec is None and not _loaded:
        # the named driver's own module first: importing every driver costs more than phase 0 should
        if driver.isidentifier():
            with contextlib.suppress(ImportError):
                importlib.import_module(f"faultplane.drivers.{driver}")
        spec = _REGISTRY.get((driver, name))
    if spec is None:
        load_builtin_drivers()
        spec = _REGISTRY.get((driver, name))
    return spec


def _unknown(field: str, message: str, given: str, known: list[str]) -> ArgumentError:
    """An unknown name, with the closest known one as the fix (else the list of known ones)."""
    import difflib

    close = difflib.get_close_matches(given, known, n=1)
    return ArgumentError(
        field, message, f"did you mean {close[0]!r}?" if close else f"one of: {', '.join(known)}"
    )


def check_arguments(driver: str, name: str, arguments: Any) -> list[ArgumentError]:
    """Check a driver activity's name and arguments against its declared parameters, without running it.

    Unknown driver or activity, unknown argument names (with the closest declared one), missing required
    arguments and wrong types are all reported at once. A string still holding a ``${...}`` placeholder is
    not type-checked (it is resolved later); phase 0 checks resolved arguments, so nothing escapes."""
    spec = _spec_or_none(driver, name)
    if spec is None:
        drivers = sorted({d for d, _ in _REGISTRY})
        if driver not in drivers:
            return [_unknown("driver", f"unknown driver {driver!r}", driver, drivers)]
        known = sorted(n for d, n in _REGISTRY if d == driver)
        return [_unknown("name", f"driver {driver!r} has no activity {name!r}", name, known)]
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return [
            ArgumentError("arguments", "must be a mapping of argument names to values", "write name: value")
        ]
    try:
        spec.params.model_validate(arguments)
    except ValidationError as exc:
        return _argument_errors(spec, arguments, exc)
    return []


def _declared(params: type[BaseModel]) -> dict[str, str]:
    """Declared argument names (aliases too) -> a short description of what each takes."""
    out = {}
    for fname, f in params.model_fields.items():
        ann = getattr(f.annotation, "__name__", None) or str(f.annotation).replace("typing.", "")
        out[f.alias or fname] = ann
    return out


def _model_at(params: type[BaseModel], path: list[str]) -> type[BaseModel] | None:
    """The pydantic model an error location points into (``hosts.0`` of ssh.stress -> SshTarget), or None."""
    import typing

    model: Any = params
    for part in path:
        if part.isdigit():
            continue  # an index into a list: the list's item model was taken with the field
        fields = getattr(model, "model_fields", None)
        if not fields or part not in fields:
            return None
        ann: Any = fields[part].annotation
        for _ in range(3):  # unwrap list[X], X | None
            args = [a for a in typing.get_args(ann) if a is not type(None)]
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                break
            if not args:
                break
            ann = args[0]
        model = ann
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _argument_errors(
    spec: ActivitySpec, arguments: dict[str, Any], exc: ValidationError
) -> list[ArgumentError]:
    import difflib

    declared = _declared(spec.params)
    errors: list[ArgumentError] = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        where = "arguments." + ".".join(loc) if loc else "arguments"
        value = err.get("input")
        if isinstance(value, str) and "${" in value:
            continue  # resolved later; phase 0 sees the value
        inner = _model_at(spec.params, loc[:-1]) if len(loc) > 1 else None
        if err["type"] == "extra_forbidden" and len(loc) == 1:
            close = difflib.get_close_matches(loc[0], list(declared), n=1)
            fix = (
                f"did you mean {close[0]!r}?"
                if close
                else f"{spec.qualified_name} takes: {', '.join(declared) or '(no arguments)'}"
            )
            errors.append(ArgumentError(where, f"{spec.qualified_name} has no argument {loc[0]!r}", fix))
        elif err["type"] == "extra_forbidden" and inner is not None:
            names = list(_declared(inner))
            close = difflib.get_close_matches(loc[-1], names, n=1)
            fix = (
                f"did you mean {close[0]!r}?" if close else f"{'.'.join(loc[:-1])} takes: {', '.join(names)}"
            )
            errors.append(ArgumentError(where, f"{'.'.join(loc[:-1])} has no field {loc[-1]!r}", fix))
        elif err["type"] == "missing":
            what = (
                (_declared(inner) if inner is not None else declared).get(loc[-1], "a value")
                if loc
                else "a value"
            )
            errors.append(
                ArgumentError(where, f"{spec.qualified_name} requires it", f"add {'.'.join(loc)} ({what})")
            )
        else:
            # a DSN or URL given back keeps its password hidden
            from faultplane.drivers.sealing import mask_text

            errors.append(
                ArgumentError(
                    where,
                    f"{err['msg'].removeprefix('Value error, ')} (got {mask_text(repr(value))})"[:300],
                    f"give {'.'.join(loc) or 'it'} a valid value",
                )
            )
    return errors


def _format_param_errors(where: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        parts.append(f"{where}: arguments.{loc}: {err['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)
