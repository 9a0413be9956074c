"""What a design request must say, and what a design answers.

Decides which fields a target description has (closed schemas: an unknown field is an error naming it), what
each kind of target (http, postgres, redis, process) needs before it can be designed for, named by field with
the fix, and the shape of the result: the experiments runnable now and those held back for an approval.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from faultplane.core.formats import ValidationIssue

__all__ = [
    "DesignRequest",
    "DesignResult",
    "DesignSLO",
    "DesignedExperiment",
    "ProcessSpec",
    "ProxySpec",
    "kind_problems",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # .inf/.nan in YAML are no figures


class DesignSLO(_Strict):
    error_rate: float = Field(0.01, gt=0, le=1, description="largest acceptable share of failed requests")
    latency_p99_ms: float = Field(800, gt=0, le=600_000, description="latency bound in milliseconds")


class ProxySpec(_Strict):
    route: str = Field(min_length=1, description="netproxy route in front of the service")
    control_url: str | None = Field(None, description="standalone netproxy control API; omit = in-process")


class ProcessSpec(_Strict):
    name: str | None = None
    cmdline_pattern: str | None = None
    restart_command: list[str] | None = Field(None, description="how to start it again after a kill")

    @model_validator(mode="after")
    def _selector(self) -> ProcessSpec:
        if not (self.name or self.cmdline_pattern):
            raise ValueError("give `name` or `cmdline_pattern` to select the process")
        return self


class DesignRequest(_Strict):
    service: str = Field(min_length=1, max_length=80, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    kind: Literal["http", "postgres", "redis", "process"]
    url: str | None = Field(None, description="http: the endpoint to measure; redis: redis://host:port/0")
    health_url: str | None = Field(None, description="http: health endpoint (default: url)")
    dsn: str | None = Field(None, description="postgres: connection string")
    env: str = Field("staging", min_length=1)
    slo: DesignSLO = Field(default_factory=DesignSLO)
    fault_point: str | None = Field(None, description="http: name of the service's faultplane.fault_point")
    proxy: ProxySpec | None = Field(None, description="http: a netproxy route that fronts the service")
    process: ProcessSpec | None = Field(None, description="process (or http): the process to disturb")
    table: str | None = Field(None, description="postgres: a table to lock")
    key_pattern: str | None = Field(
        None, description="redis: keys that may be evicted (restored on rollback)"
    )
    hold_seconds: float = Field(10, gt=0, le=600, description="how long each fault is held")
    window_seconds: float = Field(5, gt=0, le=600, description="how long a breach must last to abort")
    load: dict[str, Any] | None = Field(
        None, description="background load settings copied into each experiment"
    )
    compliance: list[str] = Field(default_factory=list, description="requirement ids to tag, e.g. DORA-25")


def kind_problems(req: DesignRequest) -> list[ValidationIssue]:
    """What each kind needs to be designed for, named by field."""

    def need(field: str, message: str, fix: str) -> list[ValidationIssue]:
        return [ValidationIssue(field=field, message=message, fix=fix)]

    if req.kind == "http":
        if not req.url:
            return need(
                "url",
                "kind http needs the endpoint whose latency and errors define the SLO",
                "add url: http://host:port/path",
            )
        from faultplane.core.urls import http_url_problem

        for field, url in (("url", req.url), ("health_url", req.health_url)):
            problem = http_url_problem(url) if url else None
            if problem:  # the designed probes would fail on every run
                return need(field, f"{field} {url!r} {problem}", f"give {field} as http://host:port/path")
        if not (req.fault_point or req.proxy or req.process):
            return need(
                "fault_point",
                "kind http needs a way to inject faults",
                "give fault_point (an in-process faultplane.fault_point name), proxy: {route: ...} "
                "(a netproxy route in front) or process: {name: ...} (the server process)",
            )
    elif req.kind == "postgres" and not req.dsn:
        return need(
            "dsn", "kind postgres needs a connection string", "add dsn: postgresql://app@host:5432/app"
        )
    elif req.kind == "redis" and not (req.url and req.url.startswith(("redis://", "rediss://"))):
        return need("url", "kind redis needs the server's URL", "add url: redis://host:6379/0")
    elif req.kind == "process" and not req.process:
        return need(
            "process",
            "kind process needs the process to disturb",
            "add process: {name: ...} or {cmdline_pattern: ...}",
        )
    return []


class DesignedExperiment(BaseModel):
    stage: int = Field(description="position in the escalation, 0 = gentlest")
    slug: str
    title: str
    fault_type: str
    action: str = Field(description="driver.action that injects the fault")
    parameters: dict[str, Any] = Field(description="configuration variables that set the fault's severity")
    blast_stage: int | None
    policy_allowed: bool
    policy_violations: list[str] = Field(default_factory=list)
    experiment: dict[str, Any]


class DesignResult(BaseModel):
    service: str
    kind: str
    experiments: list[DesignedExperiment] = Field(description="runnable now, in stage order")
    held_back: list[DesignedExperiment] = Field(description="need a human approval under the policy")
    notes: list[str]
