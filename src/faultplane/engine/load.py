"""The load of an experiment (`load:`) and of `faultplane load`: which engine drives it, and the Python-provider
entry point `run_load`. The parts live where a reader looks for them: what a `load:` may say in `load_spec`,
the built-in generator (open model, latency from the scheduled time) in `load_generator` with its worker
processes in `load_worker`, the latency histogram in `load_hdr`, and k6 as the engine in `load_k6`. Every
name is importable from here as well."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from faultplane.engine.load_generator import (
    _SLOT_S,
    _SLOTS_PER_S,
    RETAINED_BUCKETS,
    RETENTION_S,
    LoadGenerator,
    default_workers,
)
from faultplane.engine.load_hdr import _buckets_us, _Hdr, _pct, percentile
from faultplane.engine.load_spec import LoadSpec, parse_load_spec

__all__ = [
    "RETAINED_BUCKETS",
    "RETENTION_S",
    "_SLOTS_PER_S",
    "_SLOT_S",
    "LoadGenerator",
    "LoadSpec",
    "_Hdr",
    "_buckets_us",
    "_pct",
    "default_workers",
    "make_load",
    "parse_load_spec",
    "percentile",
    "run_load",
]


def make_load(
    spec: LoadSpec | Mapping[str, Any], *, on_second: Callable[[dict[str, Any]], None] | None = None
) -> LoadGenerator:
    """The load of a `load:` mapping: the built-in generator, or k6 with `engine: k6`."""
    spec = parse_load_spec(spec)
    if spec.engine == "k6":
        from faultplane.engine.load_k6 import K6Load

        return K6Load(spec, on_second=on_second)
    return LoadGenerator(spec, on_second=on_second)


async def run_load(
    url: str,
    rate: float,
    duration_s: float,
    method: str = "GET",
    timeout_s: float = 2.0,
    headers: dict[str, str] | None = None,
    json: Any = None,
    max_in_flight: int = 500,
) -> dict[str, Any]:
    """Python-provider entry point: run load for `duration_s` and return the summary (a background activity)."""
    spec = parse_load_spec(
        {
            "url": url,
            "rate": rate,
            "duration_s": duration_s,
            "method": method,
            "timeout_s": timeout_s,
            "headers": headers or {},
            "json": json,
            "max_in_flight": max_in_flight,
        }
    )
    gen = LoadGenerator(spec)
    await gen.run()
    return gen.summary()
