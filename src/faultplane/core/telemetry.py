"""OpenTelemetry for finished runs: spans run -> phase -> activity with `resilience.*` attributes, and metrics
(histograms of gate samples, load latency per second and run duration).

Both are made after the run from its journal, with the journal's own times, so telemetry never slows or breaks a
run and a crashed run's rebuilt journal can be traced too. What is exported, and where, follows the standard
`OTEL_*` variables (`core.otlp`): `OTEL_TRACES_EXPORTER` / `OTEL_METRICS_EXPORTER` = `otlp` (OTLP/HTTP protobuf,
sent in the background), `console` (JSON lines on stderr) or `none`; `OTEL_SDK_DISABLED=true` turns all off.
With no exporter chosen and no OTLP endpoint set, nothing is created at all.

The trace id is derived from the run id (`trace_id_for(run_id)`), so a run's trace can be found from its journal.
The attribute namespace is documented in docs/evidence.md.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import hashlib
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["emit_journal_spans", "journal_metrics", "otlp_configured", "shutdown", "trace_id_for"]

log = logging.getLogger(__name__)

_FAULT_TYPES = ("latency", "error", "timeout", "resource_exhaustion", "network_partition")
_FAILED_RUN = ("failed", "aborted", "interrupted")
_pending_trace_id: contextvars.ContextVar[int | None] = contextvars.ContextVar("fp_trace_id", default=None)


def otlp_configured() -> bool:
    """Some telemetry is to be exported (OTLP or console), per the standard variables."""
    from faultplane.core import otlp

    return otlp.configured()


def trace_id_for(run_id: str) -> int:
    """The 128-bit trace id of a run: the first 16 bytes of sha256(run_id)."""
    return int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:16], "big") or 1


def _id_generator() -> Any:
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class _RunIdGenerator(RandomIdGenerator):
        def generate_trace_id(self) -> int:
            pending = _pending_trace_id.get()
            return pending if pending is not None else int(super().generate_trace_id())

    return _RunIdGenerator()


def _resource() -> Any:
    from opentelemetry.sdk.resources import Resource

    import faultplane

    # Resource.create also reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME
    attrs: dict[str, Any] = {"service.version": faultplane.__version__}
    if not os.environ.get("OTEL_SERVICE_NAME"):
        attrs["service.name"] = "faultplane"
    return Resource.create(attrs)


def _collect_spans(j: Mapping[str, Any]) -> list[Any]:
    """The finished spans of one journal, built in memory (no exporter thread of the SDK's)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=_resource(), id_generator=_id_generator())
    provider.add_span_processor(SimpleSpanProcessor(memory))
    token = _pending_trace_id.set(trace_id_for(str(j.get("run_id"))))
    try:
        _emit(j, provider)
    finally:
        _pending_trace_id.reset(token)
    return list(memory.get_finished_spans())


def journal_metrics(j: Mapping[str, Any]) -> Any:
    """The run's metrics as OpenTelemetry `MetricsData`: histograms `faultplane.gate.sample` (each gate sample's
    value, by gate and SLI), `faultplane.load.latency` (ms; each second's p50/p95/p99 of the background load, by
    `resilience.load.quantile`) and `faultplane.run.duration` (s, by status)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    import faultplane

    reader = InMemoryMetricReader()
    provider = MeterProvider(resource=_resource(), metric_readers=[reader])
    meter = provider.get_meter("faultplane", faultplane.__version__)
    family = j.get("family") or (j.get("experiment") or {}).get("title") or ""
    gate = meter.create_histogram("faultplane.gate.sample", description="gate SLI samples during the method")
    for sample in (j.get("gates") or {}).get("samples") or []:
        value = sample.get("value")
        if isinstance(value, int | float) and not isinstance(value, bool):
            gate.record(
                float(value),
                _attrs(
                    {
                        "resilience.experiment.family": family,
                        "resilience.gate.name": sample.get("gate"),
                        "resilience.gate.sli": sample.get("sli"),
                    }
                ),
            )
    load = j.get("load") or {}
    latency = meter.create_histogram(
        "faultplane.load.latency",
        unit="ms",
        description="per-second latency quantiles of the background load",
    )
    for row in (load.get("series") if isinstance(load, Mapping) else None) or []:
        for q in ("p50", "p95", "p99"):
            v = row.get(q)
            if isinstance(v, int | float) and not isinstance(v, bool):
                latency.record(
                    float(v), {"resilience.experiment.family": family, "resilience.load.quantile": q}
                )
    if isinstance(j.get("duration"), int | float):
        meter.create_histogram("faultplane.run.duration", unit="s").record(
            float(j["duration"]),
            {"resilience.experiment.family": family, "resilience.run.status": str(j.get("status"))},
        )
    data = reader.get_metrics_data()
    provider.shutdown()
    return data


def _points(data: Any) -> int:
    return sum(
        len(m.data.data_points) for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    )


def shutdown(timeout_s: float | None = None) -> None:
    """Wait (bounded) for queued exports; also done at interpreter exit."""
    from faultplane.core import otlp

    otlp.drain(timeout_s)


def _ns(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        d = value
    else:
        d = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if d.tzinfo is None:
        d = d.replace(tzinfo=dt.UTC)
    return int(d.timestamp() * 1_000_000) * 1000


def _attrs(pairs: Mapping[str, Any]) -> dict[str, Any]:
    """Keep values OpenTelemetry accepts: scalars and homogeneous lists of them; drop None."""
    out: dict[str, Any] = {}
    for key, value in pairs.items():
        if value is None:
            continue
        if isinstance(value, bool | int | float | str):
            out[key] = value
        elif isinstance(value, Sequence) and not isinstance(value, str):
            items = [v for v in value if isinstance(v, bool | int | float | str)]
            if items and len({type(v) for v in items}) == 1:
                out[key] = list(items)
            elif not items and not value:
                out[key] = []
        else:
            out[key] = str(value)
    return out


def _activity_fault_type(run: Mapping[str, Any]) -> str | None:
    activity = run.get("activity") or {}
    provider = activity.get("provider") or {}
    raw_args = provider.get("arguments")
    args: Mapping[str, Any] = raw_args if isinstance(raw_args, Mapping) else {}
    raw_output = run.get("output")
    output: Mapping[str, Any] = raw_output if isinstance(raw_output, Mapping) else {}
    for candidate in (args.get("fault_type"), output.get("fault_type"), output.get("fault")):
        if candidate in _FAULT_TYPES:
            return str(candidate)
    name = f"{provider.get('driver') or ''}.{provider.get('name') or ''}".lower()
    for t in _FAULT_TYPES:
        if t in name or t.replace("_", "-") in name:
            return t
    return None


def _activities(journal: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    states = journal.get("steady_states") or {}
    acts: list[tuple[str, Mapping[str, Any]]] = []
    acts += [("hypothesis_before", p) for p in (states.get("before") or {}).get("probes", [])]
    acts += [("method", r) for r in journal.get("run") or []]
    acts += [("hypothesis_after", p) for p in (states.get("after") or {}).get("probes", [])]
    acts += [("rollbacks", r) for r in journal.get("rollbacks") or []]
    return sorted(acts, key=lambda a: _ns(a[1].get("start")) or 0)


def run_attributes(journal: Mapping[str, Any]) -> dict[str, Any]:
    """The `resilience.*` attributes of a run span."""
    experiment = journal.get("experiment") or {}
    states = journal.get("steady_states") or {}
    recovery = states.get("recovery") or {}
    breach = (journal.get("gates") or {}).get("breach") or {}
    policy = journal.get("policy") or {}
    estimate = journal.get("estimate") or experiment.get("estimate") or {}
    faults: list[str] = []
    for run in journal.get("run") or []:
        t = _activity_fault_type(run)
        if t and t not in faults:
            faults.append(t)
    return _attrs(
        {
            "resilience.run.id": journal.get("run_id"),
            "resilience.experiment.title": experiment.get("title"),
            "resilience.experiment.family": journal.get("family"),
            "resilience.experiment.content_hash": journal.get("content_hash"),
            "resilience.run.status": journal.get("status"),
            "resilience.run.deviated": bool(journal.get("deviated")),
            "resilience.run.dry_run": bool(journal.get("dry_run")),
            "resilience.run.seed": journal.get("seed"),
            "resilience.run.verdict": journal.get("verdict"),
            "resilience.steady_state.before": (states.get("before") or {}).get("steady_state_met"),
            "resilience.steady_state.after": (states.get("after") or {}).get("steady_state_met"),
            "resilience.fault.types": faults,
            "resilience.gate.breached": bool(breach),
            "resilience.gate.name": breach.get("gate"),
            "resilience.gate.predicate": breach.get("predicate"),
            "resilience.recovery.met": recovery.get("steady_state_met") if recovery else None,
            "resilience.recovery.time_to_recover_s": recovery.get("time_to_recover_s"),
            "resilience.blast.stage": policy.get("stage"),
            "resilience.estimate.recovery_s": estimate.get("recovery_seconds"),
            "resilience.estimate.error_rate": estimate.get("error_rate"),
            "resilience.estimate.latency_p99_ms": estimate.get("latency_p99_ms"),
        }
    )


def emit_journal_spans(journal: Any, *, tracer_provider: Any = None) -> None:
    """Spans (`faultplane.run` -> `faultplane.phase <name>` -> `faultplane.activity <name>`) and metrics of one
    finished run.

    With `tracer_provider` the spans go there (tests, or an application that owns its SDK setup). Otherwise the
    `OTEL_*` variables decide; OTLP batches are queued for a background thread and this returns at once. Never
    raises: a broken exporter must not turn a finished run into a failed one.
    """
    try:
        if tracer_provider is not None:
            j = journal.model_dump(mode="json") if hasattr(journal, "model_dump") else journal
            token = _pending_trace_id.set(trace_id_for(str(j.get("run_id"))))
            try:
                _emit(j, tracer_provider)
            finally:
                _pending_trace_id.reset(token)
            return
        if not any(name.startswith("OTEL_") for name in os.environ):
            return  # nothing asked for telemetry: not even the exporter module is loaded
        from faultplane.core import otlp

        traces, metrics = otlp.exporter("TRACES"), otlp.exporter("METRICS")
        if traces == "none" and metrics == "none":
            return
        j = journal.model_dump(mode="json") if hasattr(journal, "model_dump") else journal
        if traces != "none":
            spans = _collect_spans(j)
            if traces == "console":
                for span in spans:
                    sys.stderr.write(span.to_json(indent=None) + "\n")
            elif (target := otlp.target("TRACES")) is not None:
                from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

                otlp.send(target, encode_spans(spans).SerializeToString(), len(spans), "spans")
        if metrics != "none":
            data = journal_metrics(j)
            if metrics == "console":
                sys.stderr.write(data.to_json(indent=None) + "\n")
            elif (target := otlp.target("METRICS")) is not None:
                from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics

                otlp.send(target, encode_metrics(data).SerializeToString(), _points(data), "metric points")
    except Exception as exc:  # telemetry is best effort by design
        log.warning("could not emit OpenTelemetry data for run %s: %s", _run_id(journal), exc)


def _run_id(journal: Any) -> Any:
    return getattr(journal, "run_id", None) or (
        journal.get("run_id") if isinstance(journal, Mapping) else None
    )


def _emit(j: Mapping[str, Any], provider: Any) -> None:
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, Status, StatusCode

    import faultplane

    tracer = provider.get_tracer("faultplane", faultplane.__version__)
    start = _ns(j.get("start"))
    end = _ns(j.get("end")) or start
    status = j.get("status")
    run_span = tracer.start_span(
        "faultplane.run",
        kind=SpanKind.INTERNAL,
        start_time=start,
        attributes=run_attributes(j),
    )
    if status in _FAILED_RUN:
        run_span.set_status(Status(StatusCode.ERROR, str(j.get("error") or j.get("verdict") or status)))
    run_ctx = trace.set_span_in_context(run_span)

    phases = [p for p in j.get("phases") or [] if p.get("at")]
    bounds = []
    for i, p in enumerate(phases):
        p_start = _ns(p["at"])
        p_end = _ns(phases[i + 1]["at"]) if i + 1 < len(phases) else end
        bounds.append((p["phase"], p_start, max(p_end or 0, p_start or 0)))
    states = j.get("steady_states") or {}
    recovery = states.get("recovery") or {}
    breach = (j.get("gates") or {}).get("breach") or None
    phase_spans = []
    for name, p_start, p_end in bounds:
        attrs: dict[str, Any] = {"resilience.phase.name": name}
        if name == "recover" and recovery:
            attrs["resilience.recovery.met"] = recovery.get("steady_state_met")
            attrs["resilience.recovery.time_to_recover_s"] = recovery.get("time_to_recover_s")
        span = tracer.start_span(
            f"faultplane.phase {name}", context=run_ctx, start_time=p_start, attributes=_attrs(attrs)
        )
        if name == "inject" and breach:
            ts = breach.get("ts")
            span.add_event(
                "resilience.gate.breach",
                attributes=_attrs(
                    {
                        "resilience.gate.name": breach.get("gate"),
                        "resilience.gate.predicate": breach.get("predicate"),
                        "resilience.gate.value": breach.get("value"),
                        "resilience.gate.reason": breach.get("reason"),
                    }
                ),
                timestamp=int(ts * 1e9) if isinstance(ts, int | float) else None,
            )
        phase_spans.append((name, p_start, p_end, span))

    for section, run in _activities(j):
        a_start, a_end = _ns(run.get("start")), _ns(run.get("end"))
        parent = run_span
        for _, p_start, _p_end, span in phase_spans:
            if a_start is not None and p_start is not None and p_start <= a_start:
                parent = span
        activity = run.get("activity") or {}
        provider_spec = activity.get("provider") or {}
        span = tracer.start_span(
            f"faultplane.activity {activity.get('name')}",
            context=trace.set_span_in_context(parent),
            start_time=a_start,
            attributes=_attrs(
                {
                    "resilience.activity.name": activity.get("name"),
                    "resilience.activity.type": activity.get("type"),
                    "resilience.activity.section": section,
                    "resilience.activity.status": run.get("status"),
                    "resilience.activity.provider": provider_spec.get("type"),
                    "resilience.activity.driver": provider_spec.get("driver"),
                    "resilience.activity.tolerance_met": run.get("tolerance_met"),
                    "resilience.fault.type": _activity_fault_type(run)
                    if activity.get("type") == "action"
                    else None,
                }
            ),
        )
        if run.get("status") in ("failed", "timeout"):
            span.set_status(Status(StatusCode.ERROR, str(run.get("exception") or run.get("status"))))
        span.end(end_time=a_end)
    for _, _, p_end, span in phase_spans:
        span.end(end_time=p_end)
    run_span.end(end_time=end)
