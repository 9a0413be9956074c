"""The fault recipes of a design: which faults a target of each kind gets, in escalation order.

Decides, per kind of target, the faults a design proposes (gentle latency first, then latency near the SLO,
then errors, then timeouts), the driver action that injects each, the configuration variables that set its
severity (derived from the SLO, so `--var` or `faultplane search` can refine them) and its rollbacks; and the
recipes whose fault type (resource exhaustion, network partition) is held back for a human approval. Only
actions the driver catalog offers are used; the policy, not this list, has the last word on what needs a person.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from faultplane.services.design_request import DesignRequest

__all__ = ["Fault", "driver_activity", "fault_recipes"]


@dataclass
class Fault:
    slug: str
    title: str
    fault_type: str
    driver: str
    action: str
    arguments: dict[str, Any]
    variables: dict[str, Any]
    impact: str
    rollbacks: list[dict[str, Any]] = field(default_factory=list)


def driver_activity(
    kind: Literal["action", "probe"], name: str, driver: str, action: str, arguments: dict[str, Any]
) -> dict[str, Any]:
    return {
        "type": kind,
        "name": name,
        "provider": {"type": "driver", "driver": driver, "name": action, "arguments": arguments},
    }


def _ms(value: float) -> int:
    return max(1, round(value))


def fault_recipes(req: DesignRequest) -> tuple[list[Fault], list[Fault]]:
    """(runnable faults in escalation order, faults that need approval) for the request's kind."""
    lat = req.slo.latency_p99_ms
    err = req.slo.error_rate
    hold = req.hold_seconds
    out: list[Fault] = []
    held: list[Fault] = []
    if req.kind == "http" and req.fault_point:
        fp = req.fault_point
        remove = [driver_activity("action", f"remove-{fp}", "faults", "remove", {"name": fp})]

        def register(fault_type: str, **severity: str) -> dict[str, Any]:
            # the registration at the fault point; its severity is left to configuration variables
            return {"name": fp, "fault_type": fault_type, **severity}

        out += [
            Fault(
                "latency-half-slo",
                f"latency of {_ms(lat / 2)} ms at {fp}",
                "latency",
                "faults",
                "register",
                register("latency", probability="${probability}", duration_seconds="${latency_s}"),
                {"latency_s": round(lat / 2000, 3), "probability": 1.0},
                f"every call through {fp} takes {_ms(lat / 2)} ms longer; latency stays under the SLO",
                remove,
            ),
            Fault(
                "latency-near-slo",
                f"latency of {_ms(lat * 0.8)} ms at {fp} on half the calls",
                "latency",
                "faults",
                "register",
                register("latency", probability="${probability}", duration_seconds="${latency_s}"),
                {"latency_s": round(lat * 0.8 / 1000, 3), "probability": 0.5},
                "half the calls come close to the latency bound; the SLO should still hold",
                remove,
            ),
            Fault(
                "errors-within-budget",
                f"errors at {fp} within the error budget",
                "error",
                "faults",
                "register",
                register("error", probability="${error_probability}"),
                {"error_probability": round(err / 2, 6)},
                "a share of calls fails; retries or fallbacks should keep the error rate within budget",
                remove,
            ),
            Fault(
                "timeouts",
                f"timeouts at {fp}",
                "timeout",
                "faults",
                "register",
                register("timeout", probability="${timeout_probability}", duration_seconds="${timeout_s}"),
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
                driver_activity(
                    "action", f"remove-{toxic}", "netproxy", "remove_toxic", {**where, "toxic": toxic}
                )
            ]

        out += [
            Fault(
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
            Fault(
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
            Fault(
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
            Fault(
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
                Fault(
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
            Fault(
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
                Fault(
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
            Fault(
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
            Fault(
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
            Fault(
                "pause-half-slo",
                f"redis pauses clients for {_ms(lat / 2)} ms",
                "timeout",
                "redis",
                "client_pause",
                {**url, "timeout_ms": "${pause_ms}"},
                {"pause_ms": _ms(lat / 2)},
                "cache calls stall briefly; the service stays under its latency bound",
            ),
            Fault(
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
                Fault(
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
            Fault(
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
