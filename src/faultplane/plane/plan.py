"""The fault plan: which faults the plane injects, where, and how often, all drawn from one seed.

A plan is a small document (YAML, JSON or TOON) with a `seed` and a `faults:` list. Each fault has a `type`,
a tool-name scope (`tools:` glob patterns) and a `probability`. The same plan drives the simulator and both
proxies, so validation lives here, once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

__all__ = [
    "ColdToolFault",
    "DuplicateResponseFault",
    "ErrorInjectionFault",
    "Fault",
    "FaultPlan",
    "HeadOfLineFault",
    "LatencyFault",
    "PartialResultFault",
    "PlanError",
    "RegistryInconsistencyFault",
    "ReorderFault",
    "SchemaDriftFault",
    "TimeoutFault",
    "load_plan",
    "parse_plan",
]


class PlanError(ValueError):
    """A plan that cannot be used; the message names the offending field and how to fix it."""


Probability = Annotated[float, Field(ge=0.0, le=1.0)]


class _FaultBase(BaseModel):
    # no infinite or NaN number: a latency of .inf would hold the call forever
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str | None = Field(default=None, description="label used in records; defaults to the type")
    tools: list[str] = Field(default_factory=lambda: ["*"], description="tool-name glob patterns")
    probability: Probability = 1.0
    methods: list[str] = Field(
        default_factory=lambda: ["tools/call"],
        description="JSON-RPC methods the fault applies to (glob patterns)",
    )

    @field_validator("tools", "methods")
    @classmethod
    def _non_empty(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("must list at least one pattern (use ['*'] for all)")
        return v

    @property
    def label(self) -> str:
        return self.name or str(getattr(self, "type", "fault"))

    def matches(self, method: str, tool: str | None) -> bool:
        if not any(fnmatchcase(method, m) for m in self.methods):
            return False
        if tool is None:
            # Methods without a tool name (tools/list, ping, ...) match only an unscoped fault.
            return self.tools == ["*"]
        return any(fnmatchcase(tool, t) for t in self.tools)


class LatencyFault(_FaultBase):
    """Delay the request by `added_ms` plus a uniform draw in [0, jitter_ms)."""

    type: Literal["latency"]
    added_ms: float = Field(ge=0)
    jitter_ms: float = Field(default=0.0, ge=0)


class ErrorInjectionFault(_FaultBase):
    """Answer instead of the server: a JSON-RPC error, or (`as_tool_error`) an isError tool result."""

    type: Literal["error_injection"]
    rate: Probability | None = Field(default=None, description="alias of probability")
    code: int = -32603
    message: str = "Injected fault"
    as_tool_error: bool = False

    @model_validator(mode="before")
    @classmethod
    def _rate_is_probability(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and data.get("rate") is not None:
            if "probability" in data and data["probability"] != data["rate"]:
                raise ValueError("give either rate or probability, not both")
            data = {**data, "probability": data["rate"]}
        return data


class TimeoutFault(_FaultBase):
    """The server does the work, the client never gets the answer."""

    type: Literal["timeout"]


class SchemaDriftFault(_FaultBase):
    """Rename, remove or retype fields of a tool result (structuredContent and JSON text blocks). With none of
    the three given, the drift is the commonest one in the wild: every top-level field is renamed with a
    `_v2` suffix (`temp_c` -> `temp_c_v2`), so a client reading the old names finds none of them."""

    type: Literal["schema_drift"]
    rename: dict[str, str] = Field(default_factory=dict)
    remove: list[str] = Field(default_factory=list)
    retype: dict[str, Literal["string", "number", "integer", "boolean", "null", "list", "object"]] = Field(
        default_factory=dict
    )

    @property
    def default_drift(self) -> bool:
        return not (self.rename or self.remove or self.retype)


class PartialResultFault(_FaultBase):
    """Truncate lists and text in a tool result, leaving no marker that anything is missing."""

    type: Literal["partial_result"]
    keep_fraction: float = Field(default=0.5, ge=0.0, lt=1.0)
    max_items: int | None = Field(default=None, ge=0)
    max_chars: int | None = Field(default=None, ge=0)


class RegistryInconsistencyFault(_FaultBase):
    """`listed_but_broken`: the tool is advertised but calls fail. `missing_from_list`: it is hidden.
    `stale_route`: the call succeeds against the wrong thing, a route the registry should have dropped (an old
    version of the tool, another tenant's server): the answer is well formed and wrong, an earlier answer of
    the same tool to a different call. Availability stays green; only a correctness check notices."""

    type: Literal["registry_inconsistency"]
    mode: Literal["listed_but_broken", "missing_from_list", "stale_route"] = "listed_but_broken"
    methods: list[str] = Field(default_factory=lambda: ["tools/call", "tools/list"])


class ColdToolFault(_FaultBase):
    """The first call to a tool, or the first after `idle_ms` without calls, is slowed by `added_ms`."""

    type: Literal["cold_tool"]
    added_ms: float = Field(ge=0)
    idle_ms: float = Field(default=60_000.0, ge=0)


class DuplicateResponseFault(_FaultBase):
    """Deliver the same response twice."""

    type: Literal["duplicate_response"]


class HeadOfLineFault(_FaultBase):
    """Gateway head-of-line blocking: one call stalls for `added_ms` and holds its session's connection, so
    every call queued behind it on the same session waits until the stall ends as well."""

    type: Literal["head_of_line"]
    added_ms: float = Field(gt=0)


class ReorderFault(_FaultBase):
    """Hold a response back until the next response has been delivered (or `max_hold_ms` passes)."""

    type: Literal["reorder"]
    max_hold_ms: float = Field(default=200.0, ge=0)


Fault = Annotated[
    LatencyFault
    | ErrorInjectionFault
    | TimeoutFault
    | SchemaDriftFault
    | PartialResultFault
    | RegistryInconsistencyFault
    | ColdToolFault
    | DuplicateResponseFault
    | ReorderFault
    | HeadOfLineFault,
    Field(discriminator="type"),
]

FAULT_TYPES = (
    "latency",
    "error_injection",
    "timeout",
    "schema_drift",
    "partial_result",
    "registry_inconsistency",
    "cold_tool",
    "duplicate_response",
    "reorder",
    "head_of_line",
)


class FaultPlan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    seed: int = 0
    faults: list[Fault] = Field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.faults

    def digest(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]


_PLAN_ADAPTER = TypeAdapter(FaultPlan)


def _field_path(loc: tuple[Any, ...], data: Any) -> str:
    """`faults[2].added_ms` rather than pydantic's `faults.2.latency.added_ms`."""
    parts: list[str] = []
    node = data
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
            node = node[item] if isinstance(node, list) and item < len(node) else None
            continue
        if isinstance(node, Mapping) and item not in node and item in FAULT_TYPES:
            continue  # the discriminator tag pydantic inserts into the location
        parts.append(("." if parts else "") + str(item))
        node = node.get(item) if isinstance(node, Mapping) else None
    return "".join(parts) or "(plan)"


def parse_plan(data: Any) -> FaultPlan:
    """Validate a decoded plan document, raising PlanError that names every bad field."""
    if data is None:
        return FaultPlan()
    if not isinstance(data, Mapping):
        raise PlanError(f"plan must be a mapping with 'seed' and 'faults', got {type(data).__name__}")
    try:
        return _PLAN_ADAPTER.validate_python(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            where = _field_path(tuple(err["loc"]), data)
            msg = err["msg"]
            if err["type"] == "union_tag_invalid" or err["type"] == "union_tag_not_found":
                msg = f"unknown or missing fault type; use one of: {', '.join(FAULT_TYPES)}"
            elif err["type"] == "extra_forbidden":
                msg = "unknown field; remove it or check its spelling"
            elif err["type"] == "value_error":
                msg = str(err.get("ctx", {}).get("error", msg))  # without pydantic's "Value error, " prefix
            lines.append(f"{where}: {msg}")
        raise PlanError("invalid fault plan:\n  " + "\n  ".join(lines)) from None


def _decode(text: str, fmt: str) -> Any:
    if fmt == "json":
        return json.loads(text)
    if fmt in ("yaml", "yml"):
        import yaml

        return yaml.safe_load(text)
    if fmt == "toon":
        import toon_format

        return toon_format.decode(text)
    raise PlanError(f"plan format {fmt!r} is not supported; use .yaml, .json or .toon")


def load_plan(source: str | Path | Mapping[str, Any] | None) -> FaultPlan:
    """A plan from a path (format from the suffix), a decoded mapping, or None for the empty plan."""
    if source is None:
        return FaultPlan()
    if isinstance(source, Mapping):
        return parse_plan(source)
    path = Path(source)
    if not path.is_file():
        raise PlanError(f"plan file {str(path)!r} does not exist")
    fmt = path.suffix.lstrip(".").lower() or "yaml"
    from faultplane.core.hostile import HostileInput, parse_guarded, read_text_limited

    what = f"plan file {str(path)!r}"
    try:
        # size, encoding, nesting and alias expansion first: a plan file may come from anyone
        data = parse_guarded(lambda t: _decode(t, fmt), read_text_limited(path, "plan file"), what)
    except (PlanError, HostileInput) as exc:
        raise PlanError(str(exc)) from None
    except Exception as exc:
        raise PlanError(f"{what} is not valid {fmt.upper()}: {' '.join(str(exc).split())}") from None
    return parse_plan(data)
