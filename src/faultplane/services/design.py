"""Experiment design: from a target description to a staged set of experiments that pass the policy.

Deterministic (no model, no randomness): the same description always yields the same experiments, built only
from actions and probes that the driver catalog (`list_activities()`) offers, each experiment with SLO gates
(with a window), a blast radius at the stage the policy allows now, and rollbacks. Fault severity is a
configuration variable (`${latency_ms}`, `${error_probability}`, ...), so an agent, a person or `faultplane
search` can refine it without editing the file.

Plan stages escalate the *fault* (gentle latency first, then latency near the SLO, then errors, then
timeouts); the *blast radius* stage is the policy's business and rises only after green runs. Experiments
whose fault type the policy reserves for a human approval (resource exhaustion, network partition) are
returned separately as `held_back`, never mixed into the runnable set.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from faultplane.core.formats import ExperimentError, ValidationIssue, dumps, issues_from_pydantic
from faultplane.core.store import Store

__all__ = [
    "DesignRequest",
    "DesignResult",
    "DesignedExperiment",
    "design_experiments",
    "write_design",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


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


def _kind_problems(req: DesignRequest) -> list[ValidationIssue]:
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


# ---- fault recipes ---------------------------------------------------------------------------------------


@dataclass
class _Fault:
    slug: str
    title: str
    fault_type: str
    driver: str
    action: str
    arguments: dict[str, Any]
    variables: dict[str, Any]
    impact: str
    rollbacks: list[dict[str, Any]] = field(default_factory=list)


def _driver_activity(
    kind: Literal["action", "probe"], name: str, driver: str, action: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    return {
        "type": kind,
        "name": name,
        "provider": {"type": "driver", "driver": driver, "name": action, "arguments": arguments},
    }


def _ms(value: float) -> int:
    return max(1, round(value))


def _faults(req: DesignRequest) -> tuple[list[_Fault], list[_Fault]]:
    """(runnable faults in escalation order, faults that need approval) for the request's kind."""
    lat = req.slo.latency_p99_ms
    err = req.slo.error_rate
    hold = req.hold_seconds
    out: list[_Fault] = []
    held: list[_Fault] = []
    if req.kind == "http" and req.fault_point:
        fp = req.fault_point
        remove = [_driver_activity("action", f"remove-{fp}", "faults", "remove", {"name": fp})]
        out += [
            _Fault(
                "latency-half-slo",
                f"latency of {_ms(lat / 2)} ms at {fp}",
                "latency",
                "faults",
                "register",
                {
                    "name": fp,
                    "fault_type": "latency",
                    "probability": "${probability}",
                    "duration_seconds": "${latency_s}",
                },
                {"latency_s": round(lat / 2000, 3), "probability": 1.0},
                f"every call through {fp} takes {_ms(lat / 2)} ms longer; latency stays under the SLO",
                remove,
            ),
            _Fault(
                "latency-near-slo",
                f"latency of {_ms(lat * 0.8)} ms at {fp} on half the calls",
                "latency",
                "faults",
                "register",
                {
                    "name": fp,
                    "fault_type": "latency",
                    "probability": "${probability}",
                    "duration_seconds": "${latency_s}",
                },
                {"latency_s": round(lat * 0.8 / 1000, 3), "probability": 0.5},
                "half the calls come close to the latency bound; the SLO should still hold",
                remove,
            ),
            _Fault(
                "errors-within-budget",
                f"errors at {fp} within the error budget",
                "error",
                "faults",
                "register",
                {"name": fp, "fault_type": "error", "probability": "${error_probability}"},
                {"error_probability": round(err / 2, 6)},
                "a share of calls fails; retries or fallbacks should keep the error rate within budget",
                remove,
            ),
            _Fault(
                "timeouts",
                f"timeouts at {fp}",
                "timeout",
                "faults",
                "register",
                {
                    "name": fp,
                    "fault_type": "timeout",
                    "probability": "${timeout_probability}",
                    "duration_seconds": "${timeout_s}",
                },
                {"timeout_probability": round(err / 2, 6), "timeout_s": round(lat * 2 / 1000, 3)},
                "a few calls hang past the latency bound; timeouts should cut them short",
                remove,
            ),
        ]
    if req.kind == "http" and req.proxy:
        where: dict[str, Any] = {"route": req.proxy.route}
        if req.proxy.control_url:
            where["control_url"] = req.proxy.control_url

        def rm(toxic: str) -> list[dict[str, Any]]:
            return [
                _driver_activity(
                    "action", f"remove-{toxic}", "netproxy", "remove_toxic", {**where, "toxic": toxic}
                )
            ]

        out += [
            _Fault(
                "proxy-latency-half-slo",
                f"network latency of {_ms(lat / 2)} ms on route {req.proxy.route}",
                "latency",
                "netproxy",
                "latency",
                {**where, "latency_ms": "${latency_ms}", "jitter_ms": "${jitter_ms}"},
                {"latency_ms": _ms(lat / 2), "jitter_ms": _ms(lat / 20)},
                "responses arrive later through the proxy; latency stays under the SLO",
                rm("latency_downstream"),
            ),
            _Fault(
                "proxy-timeouts",
                f"a share of connections on route {req.proxy.route} hang",
                "timeout",
                "netproxy",
                "timeout",
                {**where, "timeout_ms": "${timeout_ms}", "toxicity": "${toxicity}"},
                {"timeout_ms": _ms(lat * 2), "toxicity": round(max(err, 0.05), 4)},
                "some connections hang; client timeouts and retries should absorb them",
                rm("timeout_upstream"),
            ),
        ]
        held.append(
            _Fault(
                "proxy-partition",
                f"partition of route {req.proxy.route}",
                "network_partition",
                "netproxy",
                "partition",
                {**where, "mode": "refuse", "duration_seconds": "${partition_s}"},
                {"partition_s": hold},
                "the service is unreachable; callers should fail fast and recover when it heals",
            )
        )
    if req.process is not None and req.kind in ("http", "process"):
        sel = {k: v for k, v in req.process.model_dump(exclude={"restart_command"}).items() if v}
        out.append(
            _Fault(
                "process-pause",
                f"the {req.service} process pauses",
                "timeout",
                "process",
                "suspend",
                {**sel, "count": 1, "duration_seconds": "${pause_s}"},
                {"pause_s": round(min(hold / 2, max(1.0, lat / 1000)), 3)},
                "the process stops answering briefly (a GC pause, a stalled host) and resumes",
            )
        )
        if req.process.restart_command:
            out.append(
                _Fault(
                    "process-restart",
                    f"the {req.service} process is killed and restarted",
                    "error",
                    "process",
                    "terminate",
                    {**sel, "count": 1, "restart_command": req.process.restart_command},
                    {},
                    "one instance dies and comes back; the SLO holds if the restart is quick",
                )
            )
        held.append(
            _Fault(
                "cpu-stress",
                f"CPU pressure next to {req.service}",
                "resource_exhaustion",
                "process",
                "stress_cpu",
                {"workers": "${cpu_workers}", "duration_seconds": "${stress_s}"},
                {"cpu_workers": 2, "stress_s": hold},
                "the host is busy; latency should rise gracefully",
            )
        )
    if req.kind == "postgres":
        dsn = {"dsn": "${dsn}"}
        if req.table:
            out.append(
                _Fault(
                    "table-lock",
                    f"table {req.table} locked",
                    "timeout",
                    "postgres",
                    "lock_table",
                    {**dsn, "table": req.table, "duration_seconds": "${lock_s}"},
                    {"lock_s": round(max(0.1, lat / 2000), 3)},
                    "queries on the table wait; statement timeouts should bound the damage",
                )
            )
        out.append(
            _Fault(
                "terminate-backend",
                "one database connection terminated",
                "error",
                "postgres",
                "terminate_backends",
                {**dsn, "count": 1, "state": "idle"},
                {},
                "an idle pooled connection dies; the pool should replace it without errors",
            )
        )
        held.append(
            _Fault(
                "connection-exhaustion",
                "database connections exhausted",
                "resource_exhaustion",
                "postgres",
                "exhaust_connections",
                {**dsn, "duration_seconds": "${exhaust_s}"},
                {"exhaust_s": hold},
                "no new connections can be opened; the service should shed load and recover",
            )
        )
    if req.kind == "redis":
        url = {"url": "${redis_url}"}
        out += [
            _Fault(
                "pause-half-slo",
                f"redis pauses clients for {_ms(lat / 2)} ms",
                "timeout",
                "redis",
                "client_pause",
                {**url, "timeout_ms": "${pause_ms}"},
                {"pause_ms": _ms(lat / 2)},
                "cache calls stall briefly; the service stays under its latency bound",
            ),
            _Fault(
                "server-stall",
                f"redis stalls for {_ms(lat * 0.9)} ms",
                "timeout",
                "redis",
                "debug_sleep",
                {**url, "seconds": "${stall_s}"},
                {"stall_s": round(lat * 0.9 / 1000, 3)},
                "the whole cache stops answering; callers should time out and fall back",
            ),
        ]
        if req.key_pattern:
            out.append(
                _Fault(
                    "key-eviction",
                    f"keys matching {req.key_pattern} evicted",
                    "error",
                    "redis",
                    "evict_keys",
                    {**url, "pattern": req.key_pattern, "percentage": "${evict_percent}"},
                    {"evict_percent": 10},
                    "cold cache for some keys; the service refills them from the source of truth",
                )
            )
        held.append(
            _Fault(
                "connection-exhaustion",
                "redis connections exhausted",
                "resource_exhaustion",
                "redis",
                "exhaust_connections",
                {**url, "duration_seconds": "${exhaust_s}"},
                {"exhaust_s": hold},
                "no new cache connections; the service should degrade, not fail",
            )
        )
    return out, held


# ---- observation: steady state and gates -----------------------------------------------------------------


def _observation(req: DesignRequest) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """(configuration, steady-state probes, SLO gates) for the request's kind."""
    lat, err, win = req.slo.latency_p99_ms, req.slo.error_rate, req.window_seconds
    timeout = round(max(2.0, lat * 3 / 1000), 3)
    interval = round(min(1.0, win / 2), 3)
    config: dict[str, Any] = {}
    probes: list[dict[str, Any]] = []
    gates: list[dict[str, Any]] = []

    def gate(name: str, probe: dict[str, Any], value_path: str | None, predicate: str) -> dict[str, Any]:
        g: dict[str, Any] = {
            "name": name,
            "sli": "probe",
            "rollback_on": predicate,
            "interval_s": interval,
            "probe": probe,
        }
        if value_path:
            g["value_path"] = value_path
        return g

    if req.url and req.kind in ("http", "process"):
        config["service_url"] = req.url.rstrip("/") if req.url.count("/") <= 2 else req.url
        config["health_url"] = req.health_url or config["service_url"]
        latency_args = {"url": "${service_url}", "samples": 3, "timeout_seconds": timeout}
        probes += [
            _driver_activity(
                "probe",
                f"{req.service}-answers",
                "http",
                "status",
                {"url": "${health_url}", "timeout_seconds": timeout},
            )
            | {"tolerance": 200},
            _driver_activity("probe", f"{req.service}-latency-within-slo", "http", "latency", latency_args)
            | {"tolerance": {"type": "range", "range": [0, lat], "target": "p50_ms"}},
        ]
        gate_args = {"url": "${service_url}", "samples": 1, "timeout_seconds": timeout}
        gates += [
            gate(
                f"{req.service}-latency",
                _driver_activity("probe", f"{req.service}-latency-gate", "http", "latency", gate_args),
                "max_ms",
                f"probe > {lat:g} for {win:g}s",
            ),
            gate(
                f"{req.service}-errors",
                _driver_activity(
                    "probe", f"{req.service}-errors-gate", "http", "latency", {**gate_args, "samples": 3}
                ),
                "error_rate",
                f"probe > {err:g} for {win:g}s",
            ),
        ]
    if req.kind == "postgres":
        config["dsn"] = req.dsn
        args = {"dsn": "${dsn}", "samples": 3, "timeout_seconds": timeout}
        probes += [
            _driver_activity("probe", "database-available", "postgres", "is_available", {"dsn": "${dsn}"})
            | {"tolerance": True},
            _driver_activity("probe", "query-latency-within-slo", "postgres", "query_latency", args)
            | {"tolerance": {"type": "range", "range": [0, lat], "target": "p50_ms"}},
        ]
        gates.append(
            gate(
                f"{req.service}-query-latency",
                _driver_activity(
                    "probe", "query-latency-gate", "postgres", "query_latency", {**args, "samples": 1}
                ),
                "max_ms",
                f"probe > {lat:g} for {win:g}s",
            )
        )
    if req.kind == "redis":
        config["redis_url"] = req.url
        probes += [
            _driver_activity("probe", "redis-available", "redis", "is_available", {"url": "${redis_url}"})
            | {"tolerance": True},
            _driver_activity(
                "probe", "ping-within-slo", "redis", "ping_latency", {"url": "${redis_url}", "samples": 3}
            )
            | {"tolerance": {"type": "range", "range": [0, lat], "target": "p50_ms"}},
        ]
        gates.append(
            gate(
                f"{req.service}-ping-latency",
                _driver_activity(
                    "probe", "ping-gate", "redis", "ping_latency", {"url": "${redis_url}", "samples": 1}
                ),
                "max_ms",
                f"probe > {lat:g} for {win:g}s",
            )
        )
    if req.kind == "process" and req.process is not None:
        sel = {k: v for k, v in req.process.model_dump(exclude={"restart_command"}).items() if v}
        probes.append(
            _driver_activity("probe", f"{req.service}-running", "process", "count", sel)
            | {"tolerance": {"type": "range", "range": [1, 1_000_000]}}
        )
        gates.append(
            gate(
                f"{req.service}-instances",
                _driver_activity("probe", f"{req.service}-instances-gate", "process", "count", sel),
                None,
                f"probe < 1 for {win:g}s",
            )
        )
    if req.load is not None:
        # The load generator measures what users see; its figures gate the run as well as the probes do.
        gates += [
            {
                "name": f"{req.service}-load-errors",
                "sli": "error_rate",
                "rollback_on": f"error_rate > {err:g} for {win:g}s",
                "interval_s": interval,
            },
            {
                "name": f"{req.service}-load-p99",
                "sli": "latency_p99",
                "rollback_on": f"latency_p99 > {lat:g} for {win:g}s",
                "interval_s": interval,
            },
        ]
    return config, probes, gates


# ---- assembly --------------------------------------------------------------------------------------------


def _experiment(
    req: DesignRequest, stage: int, fault: _Fault, blast: dict[str, Any], obs: tuple[Any, Any, Any]
) -> dict[str, Any]:
    config, probes, gates = obs
    family = f"{req.service}-{fault.slug}"
    method = [
        _driver_activity("action", f"inject-{fault.slug}", fault.driver, fault.action, fault.arguments)
        | {"pauses": {"after": req.hold_seconds}},
    ]
    if probes:
        measure = dict(probes[-1])
        measure.pop("tolerance", None)
        measure["name"] = f"measure-under-{fault.slug}"
        method.append(measure)
    doc: dict[str, Any] = {
        "title": f"{req.service}: {fault.title} (stage {stage})",
        "description": (
            f"Designed by faultplane (stage {stage}). Hypothesis: {fault.impact}. Severity is set by the "
            f"configuration variables {', '.join(sorted(fault.variables)) or '(none)'}; refine them with --var "
            "or `faultplane search`."
        ),
        "family": family,
        "tags": ["designed", req.kind, fault.fault_type, *req.compliance],
        "configuration": {**config, **fault.variables},
        "targets": [
            {
                "name": req.service,
                "driver": fault.driver,
                "labels": {"env": req.env, "service": req.service},
            }
        ],
        "blast_radius": blast,
        "estimate": {
            "impact": fault.impact,
            "latency_p99_ms": req.slo.latency_p99_ms,
            "error_rate": req.slo.error_rate,
            "recovery_seconds": max(1.0, round(req.window_seconds, 3)),
        },
        "slo_gates": gates,
        "steady-state-hypothesis": {"title": f"{req.service} meets its SLO", "probes": probes},
        "method": method,
        "rollbacks": fault.rollbacks,
        "runtime": {"recovery_timeout": max(10.0, req.hold_seconds * 3)},
    }
    if req.load is not None:
        doc["load"] = dict(req.load)
    return doc


def _check_drivers(doc: dict[str, Any]) -> list[ValidationIssue]:
    """Plan the experiment (schema, variables) and validate every driver call's arguments."""
    from faultplane.core.model import Activity
    from faultplane.drivers.base import DriverError, get_activity
    from faultplane.engine.lifecycle import plan

    try:
        p = plan(doc)
    except ExperimentError as exc:
        return exc.issues
    issues: list[ValidationIssue] = []
    activities = list(p.experiment.all_declared_activities())
    activities += [Activity.model_validate(g.probe) for g in p.experiment.slo_gates if g.probe]
    for act in activities:
        prov = act.provider
        if prov.type != "driver":
            continue
        try:
            spec = get_activity(prov.driver, prov.name)
            spec.params.model_validate(prov.arguments)
        except DriverError as exc:
            issues.append(ValidationIssue(field=act.name, message=str(exc), fix="check the driver catalog"))
        except ValidationError as exc:
            issues.append(
                ValidationIssue(field=act.name, message=str(exc), fix="adjust the design request's values")
            )
    return issues


def _fault_type_of(driver: str, name: str) -> str | None:
    from faultplane.drivers.base import get_activity

    return get_activity(driver, name).fault_type


def design_experiments(
    request: DesignRequest | Mapping[str, Any],
    *,
    policy_path: str | Path | None = None,
    store: Store | None = None,
) -> DesignResult:
    """Design a staged set of experiments for `request`. Raises ExperimentError naming each bad field.

    With `store`, the blast radius starts at the stage the family's green runs allow (the policy's own
    history rule); without it, at the first stage.
    """
    from faultplane.core.policy import PolicyError, evaluate, load_policy

    if isinstance(request, DesignRequest):
        req = request
    else:
        try:
            req = DesignRequest.model_validate(dict(request))
        except ValidationError as exc:
            raise ExperimentError(issues_from_pydantic(exc)) from None
    if problems := _kind_problems(req):
        raise ExperimentError(problems)
    try:
        policy = load_policy(policy_path)
    except PolicyError as exc:
        raise ExperimentError(
            [
                ValidationIssue(
                    field="policy", message=str(exc), fix="correct the policy file or pass --policy"
                )
            ]
        ) from None

    from faultplane.services.compliance import split_known

    _, unknown = split_known(req.compliance)
    if unknown:
        raise ExperimentError(
            [
                ValidationIssue(
                    field="compliance",
                    message=f"unknown requirement id(s): {', '.join(unknown)}",
                    fix="use ids from `faultplane compliance requirements` (e.g. DORA-25, SOC2-A1.3)",
                )
            ]
        )

    runnable, held = _faults(req)
    obs = _observation(req)
    stages = policy.blast_radius.stages
    ceiling = len(stages) - 1
    if policy.approval.min_stage is not None:
        ceiling = min(ceiling, policy.approval.min_stage - 1)
    ceiling = max(ceiling, 0)

    def blast_for(stage: int) -> dict[str, Any]:
        s = stages[stage]
        return {"percent": s.percent} if s.percent is not None else {"count": s.count}

    raw_violations: dict[str, list[Any]] = {}

    def build(index: int, fault: _Fault) -> DesignedExperiment:
        doc = _experiment(req, index, fault, blast_for(0), obs)
        decision = evaluate(
            doc, policy=policy, store=store, fault_type_of=_fault_type_of, report_next_stage=True
        )
        bstage = min(max(decision.allowed_stage, 0), ceiling)
        if bstage:
            doc = _experiment(req, index, fault, blast_for(bstage), obs)
            decision = evaluate(doc, policy=policy, store=store, fault_type_of=_fault_type_of)
        raw_violations[fault.slug] = list(decision.violations)
        problems = _check_drivers(doc)
        if problems:
            raise ExperimentError(problems)
        return DesignedExperiment(
            stage=index,
            slug=fault.slug,
            title=doc["title"],
            fault_type=fault.fault_type,
            action=f"{fault.driver}.{fault.action}",
            parameters=dict(fault.variables),
            blast_stage=decision.stage,
            policy_allowed=decision.allowed,
            policy_violations=[str(v) for v in decision.violations],
            experiment=doc,
        )

    def approval_only(fault: _Fault) -> bool:
        # the policy decides what needs a person (approval.fault_types, approval.actions, by effect), not the
        # recipe's label: a recipe it reserves joins held_back instead of refusing the whole design
        doc = _experiment(req, 0, fault, blast_for(0), obs)
        decision = evaluate(doc, policy=policy, store=store, fault_type_of=_fault_type_of)
        return bool(decision.violations) and all(v.rule == "approval.required" for v in decision.violations)

    reserved = [f for f in runnable if approval_only(f)]
    runnable = [f for f in runnable if f not in reserved]
    held = reserved + held
    designed = [build(i, f) for i, f in enumerate(runnable)]
    blocked = [d for d in designed if not d.policy_allowed]
    if blocked:
        # Every design shares its targets and gates, so one cause usually refuses them all: report it once.
        seen: dict[tuple[str, str, str], list[str]] = {}
        for d in blocked:
            for v in raw_violations[d.slug]:
                seen.setdefault((v.field, v.message, v.fix), []).append(d.slug)
        raise ExperimentError(
            [
                ValidationIssue(field=f, message=f"{m} (refuses: {', '.join(slugs)})", fix=fix)
                for (f, m, fix), slugs in seen.items()
            ]
        )
    held_back = [build(len(runnable) + i, f) for i, f in enumerate(held)]
    notes = [
        f"{len(designed)} experiment(s) in escalating order; run them one at a time, stage 0 first, and stop "
        "at the first one whose gate aborts: that is the weakness to fix.",
        f"blast radius: {stages[designed[0].blast_stage or 0].describe() if designed else '-'}; the policy "
        "widens it only after green runs (three greens at a stage are advised before the next).",
        "gates are probe-based and need no load generator"
        + ("; load gates read the experiment's `load:` figures" if req.load is not None else "")
        + ".",
    ]
    if held_back:
        notes.append(
            f"{len(held_back)} more experiment(s) ({', '.join(h.slug for h in held_back)}) inject fault types "
            "the policy reserves for a human approval: `faultplane approve <file>` first."
        )
    if not designed:
        notes.append("no fault recipe applies without approval; see held_back")
    return DesignResult(
        service=req.service, kind=req.kind, experiments=designed, held_back=held_back, notes=notes
    )


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def write_design(
    result: DesignResult, directory: str | Path, *, include_held_back: bool = False
) -> list[Path]:
    """Write each experiment as YAML (`NN-<service>-<slug>.yaml`), in stage order; returns the paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    items = list(result.experiments) + (list(result.held_back) if include_held_back else [])
    paths = []
    for d in items:
        path = out / f"{d.stage:02d}-{_slug(result.service)}-{d.slug}.yaml"
        # through formats.dumps: plain YAML, no anchors or aliases where two places share one value
        path.write_text(dumps(d.experiment, "yaml"), encoding="utf-8")
        paths.append(path)
    return paths
