"""Whether a probe's output is within its tolerance (Chaos Toolkit semantics, plus `probe` tolerances)."""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Awaitable, Callable
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = ["within_tolerance"]

RunProbe = Callable[[dict[str, Any], Any], Awaitable[Any]]


@functools.lru_cache(maxsize=256)
def _jsonpath(path: str) -> Any:
    """Parsed once per path: a probe checked in a loop must not re-parse it every time. jsonpath2, the
    dialect Chaos Toolkit evaluates tolerances with (`=` in filters, filters apply to the node they follow,
    so `$.items[*][?(@.up = true)]` filters items), so the same path gives the same verdict."""
    from jsonpath2.path import Path  # imported on first use: most runs have no jsonpath tolerance

    return Path.parse_str(path.strip())


def jsonpath_error(path: str) -> str | None:
    """Why a jsonpath tolerance's path cannot be parsed, or None."""
    try:
        _jsonpath(path)
    except Exception as exc:  # jsonpath2 raises ValueError or its parser's own errors
        return f"{type(exc).__name__}: {exc}"
    return None


def jsonpath_values(path: str, value: Any) -> list[Any]:
    return [m.current_value for m in _jsonpath(path).match(value)]


def _target(value: Any, target: str | None) -> Any:
    if target and isinstance(value, dict):
        return value.get(target, value)
    return value


async def within_tolerance(
    tolerance: Any, value: Any, run_probe: RunProbe | None = None, *, ctk_compat: bool = False
) -> bool:
    if tolerance is None:
        return True
    if ctk_compat and isinstance(tolerance, str):
        return bool(value == tolerance)  # Chaos Toolkit compares the whole output, a process's dict included
    if ctk_compat and isinstance(tolerance, list) and not (isinstance(value, dict) and "status" in value):
        if len(tolerance) == 2:
            try:
                return bool(tolerance[0] <= value <= tolerance[1])
            except TypeError:
                return False
        return value in tolerance
    if isinstance(tolerance, bool):
        if isinstance(value, dict) and "status" in value and not isinstance(value.get("status"), bool):
            return False
        return value is tolerance or value == tolerance
    if isinstance(tolerance, int | float):
        if isinstance(value, dict) and "status" in value:
            return bool(value["status"] == tolerance)
        return bool(value == tolerance)
    if isinstance(tolerance, str):
        if isinstance(value, dict):
            for key in ("stdout", "body"):
                if key in value and isinstance(value[key], str):
                    return value[key].strip() == tolerance
        return bool(value == tolerance)
    if isinstance(tolerance, list):
        if isinstance(value, dict) and "status" in value:
            return value["status"] in tolerance
        if (
            len(tolerance) == 2
            and all(isinstance(t, int | float) and not isinstance(t, bool) for t in tolerance)
            and isinstance(value, int | float)
        ):
            return bool(tolerance[0] <= value <= tolerance[1])
        return value in tolerance
    kind = tolerance.get("type")
    if kind == "range":
        v = _target(value, tolerance.get("target"))
        try:
            num = Decimal(str(v))
        except InvalidOperation:
            return False
        lo, hi = tolerance["range"]
        return Decimal(str(lo)) <= num <= Decimal(str(hi))
    if kind == "regex":
        v = _target(value, tolerance.get("target"))
        if not isinstance(v, str):
            v = json.dumps(v) if isinstance(v, dict | list) else str(v)
        return re.search(tolerance["pattern"], v) is not None
    if kind == "jsonpath":
        v = _target(value, tolerance.get("target"))
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        if isinstance(v, str):
            with contextlib.suppress(json.JSONDecodeError):
                v = json.loads(v)
        values = jsonpath_values(tolerance["path"], v)
        result = len(values) > 0
        if tolerance.get("count") is not None:
            result = len(values) == tolerance["count"]
        if "expect" in tolerance:
            expect = tolerance["expect"]
            result = values == (expect if isinstance(expect, list) else [expect])
        return result
    if kind == "probe":
        if run_probe is None:
            return False
        try:
            return bool(await run_probe(tolerance, value))
        except Exception:
            return False
    return False
