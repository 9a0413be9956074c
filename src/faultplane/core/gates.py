"""SLO gates: a numeric bound on an SLI over a window, e.g. `error_rate > 0.01 for 30s`."""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["LOAD_SLIS", "GatePredicate", "GateSpec", "parse_predicate"]

SliName = Literal[
    "error_rate",
    "latency_p50",
    "latency_p95",
    "latency_p99",
    "availability",
    "throughput",
    "probe",
    "prometheus",
]

# the SLIs read from the built-in load generator's figures: a gate on one needs the experiment's `load:`
LOAD_SLIS = ("error_rate", "latency_p50", "latency_p95", "latency_p99", "availability", "throughput")

_PREDICATE = re.compile(
    r"^\s*(?P<metric>[a-z_][a-z0-9_]*)\s*(?P<op>>=|<=|>|<|==)\s*(?P<value>-?\d+(?:\.\d+)?)\s*(?P<unit>ms|s|%)?"
    r"(?:\s+for\s+(?P<window>\d+(?:\.\d+)?)\s*(?P<wunit>ms|s|m))?\s*$"
)


class GatePredicate(BaseModel):
    metric: str
    op: Literal[">", ">=", "<", "<=", "=="]
    threshold: float
    window_s: float = 0.0

    def breached_by(self, value: float) -> bool:
        return {
            ">": value > self.threshold,
            ">=": value >= self.threshold,
            "<": value < self.threshold,
            "<=": value <= self.threshold,
            "==": value == self.threshold,
        }[self.op]


def parse_predicate(text: str) -> GatePredicate:
    """Parse `metric op number [unit] [for N s|ms|m]`; raises ValueError naming the expected form."""
    m = _PREDICATE.match(text)
    if not m:
        raise ValueError(
            f"cannot read gate predicate {text!r}: expected `<sli> <op> <number> [for <N>s]`, "
            "e.g. `error_rate > 0.01 for 30s` or `latency_p99 > 800ms for 10s`"
        )
    value = float(m["value"])
    if m["unit"] == "s":
        value *= 1000.0  # latencies are compared in milliseconds
    elif m["unit"] == "%":
        value /= 100.0
    window = float(m["window"] or 0.0)
    if m["wunit"] == "ms":
        window /= 1000.0
    elif m["wunit"] == "m":
        window *= 60.0
    if not (math.isfinite(value) and math.isfinite(window)):  # 400 digits read as float are inf
        raise ValueError(f"gate predicate {text!r}: its number or window is too large to be a figure")
    return GatePredicate(metric=m["metric"], op=m["op"], threshold=value, window_s=window)


class GateSpec(BaseModel):
    """One SLO gate of an experiment. Breaching `rollback_on` aborts the method and rolls back."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str
    sli: SliName
    rollback_on: str = Field(description="predicate such as `error_rate > 0.01 for 30s`")
    interval_s: float = Field(default=1.0, gt=0, le=3600)
    probe: dict[str, Any] | None = Field(
        default=None, description="activity whose numeric output is the SLI (sli: probe)"
    )
    prometheus: dict[str, Any] | None = Field(
        default=None, description="{url, query, headers?, aggregate?: max|min|sum|avg} (sli: prometheus)"
    )
    value_path: str | None = Field(
        default=None, description="dotted path to the number in the probe's output, e.g. `body.latency_ms`"
    )
    lookback_s: float | None = Field(
        default=None,
        gt=0,
        le=3600,
        description="trailing window of load figures per sample (default: interval, >=1s)",
    )
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        le=3600,
        description="longest one sample may take (default: 2 x interval, at least 1s)",
    )
    on_missing: Literal["breach", "ignore"] = Field(
        default="breach",
        description="a sample with no value (source down, probe failed) counts as breaching unless `ignore`",
    )

    @field_validator("rollback_on")
    @classmethod
    def _predicate_parses(cls, v: str) -> str:
        parse_predicate(v)
        return v

    @field_validator("prometheus")
    @classmethod
    def _prometheus_usable(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        """Found here, not by the first sample: a sample with no value breaches, and the run aborts at once."""
        from faultplane.core.urls import http_url_problem

        url, how = (v or {}).get("url"), (v or {}).get("aggregate")
        if url is not None and not isinstance(url, str):
            raise ValueError(f"url {url!r} is not a string; e.g. http://127.0.0.1:9090")
        problem = http_url_problem(url) if url is not None and "${" not in url else None
        if problem:
            raise ValueError(f"url {url!r} {problem}; e.g. http://127.0.0.1:9090")
        if how is not None and how not in ("max", "min", "sum", "avg"):
            raise ValueError(f"aggregate must be one of max, min, sum, avg (got {how!r})")
        return v

    @model_validator(mode="after")
    def _source_present(self) -> GateSpec:
        if self.sli == "probe" and not self.probe:
            raise ValueError("sli 'probe' needs a `probe:` activity whose output is the measured number")
        if self.sli == "prometheus" and not (self.prometheus and self.prometheus.get("query")):
            raise ValueError("sli 'prometheus' needs `prometheus: {url: ..., query: ...}`")
        return self

    @property
    def predicate(self) -> GatePredicate:
        return parse_predicate(self.rollback_on)

    @property
    def lookback(self) -> float:
        return self.lookback_s or max(self.interval_s, 1.0)

    @property
    def sample_timeout(self) -> float:
        return self.timeout_s or max(2 * self.interval_s, 1.0)
