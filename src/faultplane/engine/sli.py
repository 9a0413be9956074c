"""Where a gate's SLI comes from: a probe's output, the load generator's figures, or a Prometheus query.

`SliSources.sample(gate)` returns one number (or raises `SliError` saying why there is none). The engine builds
one `SliSources` per run: `run_probe` is its own activity runner, `load` is the built-in load generator when the
experiment declares `load:`.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import httpx

from faultplane.core.gates import LOAD_SLIS, GateSpec

__all__ = ["LOAD_SLIS", "LoadFigures", "SliError", "SliSources", "missing_sources", "to_number"]


class SliError(RuntimeError):
    """No value could be read for a gate this time (source down, output not a number, empty query result)."""


@runtime_checkable
class LoadFigures(Protocol):
    """What the built-in load generator exposes to gates.

    `snapshot(window_s)` covers the trailing `window_s` seconds and returns at least `error_rate` (0..1),
    `latency_p50`, `latency_p95`, `latency_p99` (milliseconds), `availability` (0..1) and `throughput`
    (requests/s). A figure with no requests in the window is None.
    """

    def snapshot(self, window_s: float) -> Mapping[str, float | None]: ...


def to_number(value: Any, path: str | None = None) -> float:
    """The numeric reading in a probe's output: a number, a numeric string, or `path` (dotted) into a mapping."""
    if path:
        for part in path.split("."):
            if isinstance(value, Mapping) and part in value:
                value = value[part]
            elif isinstance(value, Sequence) and not isinstance(value, str) and part.isdigit():
                idx = int(part)
                if idx >= len(value):
                    raise SliError(f"value_path {path!r}: index {idx} is out of range")
                value = value[idx]
            else:
                raise SliError(f"value_path {path!r}: no {part!r} in the probe output")
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise SliError(
                f"probe output {value[:60]!r} is not a number; set `value_path` on the gate"
            ) from None
    elif isinstance(value, Mapping) and "value" in value:
        return to_number(value["value"])
    else:
        raise SliError(
            f"probe output of type {type(value).__name__} is not a number; set `value_path` on the gate "
            "(e.g. `value_path: body.latency_ms`)"
        )
    if math.isnan(number):
        raise SliError("the reading is NaN")
    return number


@dataclass
class SliSources:
    """The live measurements a run can offer its gates."""

    run_probe: Callable[[dict[str, Any]], Awaitable[Any]] | None = None
    load: LoadFigures | None = None
    prometheus_url: str | None = None  # used when a gate's `prometheus:` block has no url
    http: httpx.AsyncClient | None = None

    def missing(self, gate: GateSpec) -> str | None:
        """Why this gate cannot be sampled with these sources, or None when it can."""
        if gate.sli in LOAD_SLIS:
            if self.load is None:
                return (
                    f"gate {gate.name!r} reads {gate.sli} from the load generator, but the run has no load; "
                    "declare `load:` in the experiment or measure it with `sli: probe` / `sli: prometheus`"
                )
        elif gate.sli == "probe":
            if self.run_probe is None:
                return f"gate {gate.name!r} needs a probe runner; the engine supplies one"
        elif gate.sli == "prometheus" and not ((gate.prometheus or {}).get("url") or self.prometheus_url):
            return f"gate {gate.name!r}: `prometheus:` needs `url:` (e.g. http://127.0.0.1:9090)"
        return None

    async def sample(self, gate: GateSpec) -> float:
        if gate.sli in LOAD_SLIS:
            return self._from_load(gate)
        if gate.sli == "probe":
            return await self._from_probe(gate)
        if gate.sli == "prometheus":
            return await self._from_prometheus(gate)
        raise SliError(f"unknown sli {gate.sli!r}")

    def _from_load(self, gate: GateSpec) -> float:
        if self.load is None:
            raise SliError(self.missing(gate) or "no load generator")
        figures = self.load.snapshot(gate.lookback)
        value = figures.get(gate.sli)
        if value is None:
            raise SliError(
                f"the load generator has no {gate.sli} for the last {gate.lookback:g}s (no requests)"
            )
        return to_number(value)

    async def _from_probe(self, gate: GateSpec) -> float:
        if self.run_probe is None or gate.probe is None:
            raise SliError(self.missing(gate) or "no probe")
        output = await self.run_probe(dict(gate.probe))
        return to_number(output, gate.value_path)

    async def _from_prometheus(self, gate: GateSpec) -> float:
        conf = gate.prometheus or {}
        base = str(conf.get("url") or self.prometheus_url or "").rstrip("/")
        if not base:
            raise SliError(self.missing(gate) or "no prometheus url")
        params = {"query": str(conf["query"])}
        headers = {str(k): str(v) for k, v in (conf.get("headers") or {}).items()}
        timeout = float(conf.get("timeout", max(gate.interval_s, 1.0)))
        client = self.http or httpx.AsyncClient()
        try:
            resp = await client.get(f"{base}/api/v1/query", params=params, headers=headers, timeout=timeout)
        except httpx.HTTPError as exc:
            raise SliError(f"prometheus at {base} unreachable: {exc.__class__.__name__}: {exc}") from None
        finally:
            if self.http is None:
                await client.aclose()
        try:
            body = resp.json()
        except ValueError:
            raise SliError(f"prometheus answered {resp.status_code} with a non-JSON body") from None
        if resp.status_code != 200 or body.get("status") != "success":
            raise SliError(f"prometheus query failed ({resp.status_code}): {body.get('error', body)}")
        return _prometheus_value(body.get("data") or {}, gate)


def _prometheus_value(data: Mapping[str, Any], gate: GateSpec) -> float:
    kind = data.get("resultType")
    result = data.get("result")
    if kind in ("scalar", "string"):
        values = [result[1]] if isinstance(result, list) and len(result) == 2 else []
    elif kind == "vector":
        values = [s["value"][1] for s in result or [] if isinstance(s, Mapping) and "value" in s]
    elif kind == "matrix":
        values = [s["values"][-1][1] for s in result or [] if isinstance(s, Mapping) and s.get("values")]
    else:
        raise SliError(f"prometheus returned an unknown result type {kind!r}")
    numbers = [float(v) for v in values if not math.isnan(float(v))]
    if not numbers:
        raise SliError("prometheus query returned no series (empty result)")
    how = (gate.prometheus or {}).get("aggregate")
    if how is None:
        # several series: judge by the worst one in the direction the gate cares about
        how = "max" if gate.predicate.op in (">", ">=", "==") else "min"
    reducers: dict[str, Callable[[list[float]], float]] = {
        "max": max,
        "min": min,
        "sum": lambda xs: float(sum(xs)),
        "avg": lambda xs: sum(xs) / len(xs),
    }
    if how not in reducers:
        raise SliError(f"prometheus.aggregate must be one of max, min, sum, avg (got {how!r})")
    return reducers[how](numbers)


def missing_sources(gates: Sequence[GateSpec], sources: SliSources) -> list[str]:
    """Every gate that these sources cannot feed, explained; empty when all can be sampled."""
    return [m for g in gates if (m := sources.missing(g))]
