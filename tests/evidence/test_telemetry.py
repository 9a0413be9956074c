"""OpenTelemetry spans from real journals: structure, timestamps and resilience.* attributes; OTLP export to a
real HTTP receiver on loopback; nothing at all when no endpoint is configured."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from faultplane.core import telemetry


def _ns(iso: str) -> int:
    return int(dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1_000_000) * 1000


def _spans(journal: dict[str, Any]) -> list[Any]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.emit_journal_spans(journal, tracer_provider=provider)
    return list(exporter.get_finished_spans())


def test_run_phase_activity_spans_from_a_real_journal(real_runs: Any) -> None:
    journal = real_runs.journals[0]
    spans = _spans(journal)
    by_name = {s.name: s for s in spans}
    run = by_name["faultplane.run"]
    assert run.parent is None
    assert run.start_time == _ns(journal["start"]) and run.end_time == _ns(journal["end"])
    a = run.attributes
    assert a["resilience.run.id"] == journal["run_id"]
    assert a["resilience.experiment.title"] == "svc latency" and a["resilience.experiment.family"] == "svc"
    assert a["resilience.run.status"] == "completed" and a["resilience.run.deviated"] is False
    assert tuple(a["resilience.fault.types"]) == ("latency",)
    assert a["resilience.gate.breached"] is False and a["resilience.blast.stage"] == 0
    assert (
        a["resilience.recovery.time_to_recover_s"]
        == journal["steady_states"]["recovery"]["time_to_recover_s"]
    )
    assert a["resilience.estimate.recovery_s"] == 0.3

    phases = [s for s in spans if s.name.startswith("faultplane.phase ")]
    assert [s.attributes["resilience.phase.name"] for s in sorted(phases, key=lambda s: s.start_time)] == [
        "baseline", "inject", "recover", "analyse",
    ]  # fmt: skip
    assert all(s.parent.span_id == run.context.span_id for s in phases)
    assert all(s.context.trace_id == run.context.trace_id for s in spans)
    phase_of = {s.context.span_id: s.attributes["resilience.phase.name"] for s in phases}

    acts = [s for s in spans if s.name.startswith("faultplane.activity ")]
    placed = {(s.attributes["resilience.activity.section"], phase_of[s.parent.span_id]) for s in acts}
    assert placed == {
        ("hypothesis_before", "baseline"),
        ("method", "inject"),
        ("hypothesis_after", "inject"),
        ("rollbacks", "recover"),
    }
    inject = next(s for s in acts if s.attributes["resilience.activity.section"] == "method")
    method_run = journal["run"][0]
    assert inject.start_time == _ns(method_run["start"]) and inject.end_time == _ns(method_run["end"])
    assert inject.attributes["resilience.fault.type"] == "latency"
    assert inject.attributes["resilience.activity.type"] == "action"
    for s in acts:
        parent = next(p for p in phases if p.context.span_id == s.parent.span_id)
        assert parent.start_time <= s.start_time and s.end_time <= parent.end_time


def test_failed_activities_and_runs_are_errors(real_runs: Any) -> None:
    journal = dict(real_runs.journals[0])
    journal["status"], journal["error"] = "aborted", "aborted: gate 'p99' held for 1.0s"
    journal["gates"] = {
        "samples": [],
        "breach": {"gate": "p99", "predicate": "latency_p99 > 50 for 1s", "value": 70.0,
                   "ts": dt.datetime.fromisoformat(journal["phases"][1]["at"]).timestamp(), "reason": "held"},
    }  # fmt: skip
    run0 = dict(journal["run"][0], status="failed", exception="boom")
    journal["run"] = [run0]
    spans = {s.name: s for s in _spans(journal)}
    run = spans["faultplane.run"]
    assert run.status.status_code == StatusCode.ERROR and "gate 'p99'" in run.status.description
    assert run.attributes["resilience.gate.breached"] is True
    assert run.attributes["resilience.gate.name"] == "p99"
    inject = spans["faultplane.phase inject"]
    assert [e.name for e in inject.events] == ["resilience.gate.breach"]
    assert spans["faultplane.activity inject-latency"].status.status_code == StatusCode.ERROR


def test_no_endpoint_means_no_spans(real_runs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    assert not telemetry.otlp_configured()
    telemetry.emit_journal_spans(real_runs.journals[0])
    assert telemetry._provider is None


class _Collector(BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        type(self).bodies.append(self.rfile.read(length))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def collector() -> Iterator[tuple[str, list[bytes]]]:
    _Collector.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _Collector.bodies
    finally:
        server.shutdown()
        server.server_close()


def test_otlp_export_to_a_real_receiver(
    real_runs: Any, collector: tuple[str, list[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    url, bodies = collector
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "faultplane-test")
    journal = real_runs.journals[3]
    try:
        telemetry.emit_journal_spans(journal)
    finally:
        telemetry.shutdown()
    assert bodies, "the OTLP receiver got nothing"
    spans, services = [], set()
    for body in bodies:
        req = ExportTraceServiceRequest.FromString(body)
        for rs in req.resource_spans:
            services |= {a.value.string_value for a in rs.resource.attributes if a.key == "service.name"}
            for ss in rs.scope_spans:
                spans += list(ss.spans)
    assert services == {"faultplane-test"}
    run = next(s for s in spans if s.name == "faultplane.run")
    attrs = {a.key: a.value for a in run.attributes}
    assert attrs["resilience.run.id"].string_value == journal["run_id"]
    # the trace id is derived from the run id, so a journal leads to its trace
    assert int.from_bytes(run.trace_id, "big") == telemetry.trace_id_for(journal["run_id"])
    assert len(spans) == 1 + 4 + 4  # run, four phases, four activities
