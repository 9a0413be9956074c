"""How a designed experiment watches its target: configuration, steady-state probes and SLO gates.

Decides, per kind of target, the probes that state the steady state (the target answers, within its latency
bound) and the gates that abort a run while the fault is held (latency, errors, instances; the load
generator's figures too when the request asks for load), each with the request's SLO and breach window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from faultplane.services.design_recipes import driver_activity

if TYPE_CHECKING:
    from faultplane.services.design_request import DesignRequest

__all__ = ["observation"]


def observation(req: DesignRequest) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
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
            driver_activity(
                "probe",
                f"{req.service}-answers",
                "http",
                "status",
                {"url": "${health_url}", "timeout_seconds": timeout},
            )
            | {"tolerance": 200},
            driver_activity("probe", f"{req.service}-latency-within-slo", "http", "latency", latency_args)
            | {"tolerance": {"type": "range", "range": [0, lat], "target": "p50_ms"}},
        ]
        gate_args = {"url": "${service_url}", "samples": 1, "timeout_seconds": timeout}
        gates += [
            gate(
                f"{req.service}-latency",
                driver_activity("probe", f"{req.service}-latency-gate", "http", "latency", gate_args),
                "max_ms",
                f"probe > {lat:g} for {win:g}s",
            ),
            gate(
                f"{req.service}-errors",
                driver_activity(
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
            driver_activity("probe", "database-available", "postgres", "is_available", {"dsn": "${dsn}"})
            | {"tolerance": True},
            driver_activity("probe", "query-latency-within-slo", "postgres", "query_latency", args)
            | {"tolerance": {"type": "range", "range": [0, lat], "target": "p50_ms"}},
        ]
        gates.append(
            gate(
                f"{req.service}-query-latency",
                driver_activity(
                    "probe", "query-latency-gate", "postgres", "query_latency", {**args, "samples": 1}
                ),
                "max_ms",
                f"probe > {lat:g} for {win:g}s",
            )
        )
    if req.kind == "redis":
        config["redis_url"] = req.url
        probes += [
            driver_activity("probe", "redis-available", "redis", "is_available", {"url": "${redis_url}"})
            | {"tolerance": True},
            driver_activity(
                "probe", "ping-within-slo", "redis", "ping_latency", {"url": "${redis_url}", "samples": 3}
            )
            | {"tolerance": {"type": "range", "range": [0, lat], "target": "p50_ms"}},
        ]
        gates.append(
            gate(
                f"{req.service}-ping-latency",
                driver_activity(
                    "probe", "ping-gate", "redis", "ping_latency", {"url": "${redis_url}", "samples": 1}
                ),
                "max_ms",
                f"probe > {lat:g} for {win:g}s",
            )
        )
    if req.kind == "process" and req.process is not None:
        sel = {k: v for k, v in req.process.model_dump(exclude={"restart_command"}).items() if v}
        probes.append(
            driver_activity("probe", f"{req.service}-running", "process", "count", sel)
            | {"tolerance": {"type": "range", "range": [1, 1_000_000]}}
        )
        gates.append(
            gate(
                f"{req.service}-instances",
                driver_activity("probe", f"{req.service}-instances-gate", "process", "count", sel),
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
