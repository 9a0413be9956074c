"""OpenTelemetry spans from real journals: structure, timestamps and resilience.* attributes; OTLP export to a
real HTTP receiver on loopback; nothing at all when no endpoint is configured."""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import gzip
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from evidence_helpers import LAB_POLICY, steady_probe
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from faultplane.core import otlp, telemetry
from policy_helpers import use_lab_policy
from proc_helpers import free_port
from servers import http_server


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


_OTEL_VARS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_SDK_DISABLED",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
)


@pytest.fixture(autouse=True)
def _clean_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in _OTEL_VARS:
        monkeypatch.delenv(var, raising=False)


def _export(
    monkeypatch: pytest.MonkeyPatch, journal: dict[str, Any], *, wait_s: float = 10, **env: str
) -> None:
    """Emit `journal`'s telemetry under the OTEL_* settings `env`, then flush it (waiting at most `wait_s`)."""
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    telemetry.emit_journal_spans(journal)
    telemetry.shutdown(wait_s)


def test_no_endpoint_means_nothing(
    real_runs: Any,
    collector: tuple[str, list[Any]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert not telemetry.otlp_configured()
    before = otlp.stats()
    _export(monkeypatch, real_runs.journals[0], wait_s=5)
    assert otlp.stats() == before
    assert capsys.readouterr().err == ""


class _Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, dict[str, str], bytes]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        type(self).received.append((self.path, dict(self.headers.items()), body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def collector() -> Iterator[tuple[str, list[Any]]]:
    """A real OTLP/HTTP receiver on loopback: it records each POST's path, headers and (decompressed) body."""
    _Collector.received = []
    with http_server(_Collector) as url:
        yield url, _Collector.received


def _with_load(journal: dict[str, Any]) -> dict[str, Any]:
    j = copy.deepcopy(journal)
    j["gates"] = {
        "samples": [
            {"gate": "errors", "sli": "error_rate", "value": v, "ts": 1.0 + i}
            for i, v in enumerate((0.0, 0.02, 0.5))
        ],
        "breach": None,
    }
    j["load"] = {"series": [{"t": t, "p50": 10.0 + t, "p95": 40.0, "p99": 90.0 + t} for t in range(4)]}
    return j


def _decode(received: list[Any]) -> tuple[list[Any], set[str], dict[str, Any]]:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    spans, services, metrics = [], set(), {}
    for path, _headers, body in received:
        if path == "/v1/traces":
            for rs in ExportTraceServiceRequest.FromString(body).resource_spans:
                services |= {a.value.string_value for a in rs.resource.attributes if a.key == "service.name"}
                for ss in rs.scope_spans:
                    spans += list(ss.spans)
        elif path == "/v1/metrics":
            for rm in ExportMetricsServiceRequest.FromString(body).resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        metrics[m.name] = m
        else:
            raise AssertionError(f"unexpected OTLP path {path}")
    return spans, services, metrics


def test_otlp_export_to_a_real_receiver(
    real_runs: Any, collector: tuple[str, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, received = collector
    journal = _with_load(real_runs.journals[3])
    _export(
        monkeypatch,
        journal,
        OTEL_EXPORTER_OTLP_ENDPOINT=url + "/",
        OTEL_SERVICE_NAME="faultplane-test",
        OTEL_EXPORTER_OTLP_HEADERS="x-tenant=blue%20team,authorization=Bearer t0k",
        OTEL_EXPORTER_OTLP_COMPRESSION="gzip",
    )
    assert received, "the OTLP receiver got nothing"
    spans, services, metrics = _decode(received)
    assert {h["x-tenant"] for _, h, _ in received} == {"blue team"}
    assert {h["authorization"] for _, h, _ in received} == {"Bearer t0k"}
    assert services == {"faultplane-test"}
    run = next(s for s in spans if s.name == "faultplane.run")
    attrs = {a.key: a.value for a in run.attributes}
    assert attrs["resilience.run.id"].string_value == journal["run_id"]
    # the trace id is derived from the run id, so a journal leads to its trace
    assert int.from_bytes(run.trace_id, "big") == telemetry.trace_id_for(journal["run_id"])
    assert len(spans) == 1 + 4 + 4  # run, four phases, four activities
    gate = metrics["faultplane.gate.sample"].histogram.data_points
    assert sum(p.count for p in gate) == 3 and abs(sum(p.sum for p in gate) - 0.52) < 1e-9
    lat = {
        next(a.value.string_value for a in p.attributes if a.key == "resilience.load.quantile"): p
        for p in metrics["faultplane.load.latency"].histogram.data_points
    }
    assert lat["p99"].count == 4 and lat["p99"].sum == 90 * 4 + 6 and lat["p99"].max == 93.0
    assert metrics["faultplane.load.latency"].unit == "ms"
    assert "faultplane.run.duration" in metrics


def test_signal_endpoints_and_exporter_choice(
    real_runs: Any, collector: tuple[str, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, received = collector
    # a signal's own endpoint is used as given; metrics off
    journal = real_runs.journals[0]
    _export(
        monkeypatch,
        journal,
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=url + "/custom/traces",
        OTEL_METRICS_EXPORTER="none",
    )
    assert [p for p, _, _ in received] == ["/custom/traces"]
    received.clear()
    _export(monkeypatch, journal, OTEL_SDK_DISABLED="true")
    assert received == []
    monkeypatch.delenv("OTEL_SDK_DISABLED")
    _export(monkeypatch, journal, OTEL_TRACES_EXPORTER="none")
    assert received == []


def test_console_exporter_writes_json_lines_to_stderr(
    real_runs: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "console")
    telemetry.emit_journal_spans(_with_load(real_runs.journals[0]))
    out = capsys.readouterr()
    assert out.out == ""  # stdout stays the command's (JSON output must stay parseable)
    docs = [json.loads(line) for line in out.err.splitlines()]
    names = {d.get("name") for d in docs}
    assert "faultplane.run" in names
    metric_names = {
        m["name"]
        for d in docs
        for rm in d.get("resource_metrics", [])
        for sm in rm["scope_metrics"]
        for m in sm["metrics"]
    }
    assert {"faultplane.gate.sample", "faultplane.load.latency"} <= metric_names


def test_unsupported_settings_warn_once_and_export_nothing(
    real_runs: Any, collector: tuple[str, list[Any]], monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    url, received = collector
    _export(
        monkeypatch,
        real_runs.journals[0],
        wait_s=5,
        OTEL_EXPORTER_OTLP_ENDPOINT=url,
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
    )
    assert received == []
    assert any("http/protobuf" in r.getMessage() for r in caplog.records)


def _tiny_experiment(tmp_path: Path) -> Path:
    """exp.json in `tmp_path`: the steady probe in the hypothesis and again as the method."""
    probe = steady_probe()
    exp = tmp_path / "exp.json"
    exp.write_text(
        json.dumps(
            {"title": "t", "steady-state-hypothesis": {"title": "h", "probes": [probe]}, "method": [probe]}
        ),
        encoding="utf-8",
    )
    return exp


def test_dead_collector_one_line_and_no_retry(real_runs: Any, tmp_path: Path) -> None:
    """A real CLI run with the collector's port closed: the run succeeds, one line says what was dropped."""
    from clihelp import cli

    use_lab_policy(LAB_POLICY)
    exp = _tiny_experiment(tmp_path)
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", dead)
        proc = cli("run", str(exp), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert dead in lines[0] and "dropped" in lines[0] and "spans" in lines[0]


def test_hung_collector_never_holds_the_run(tmp_path: Path) -> None:
    """A collector that accepts connections and never answers: the run exits without waiting out the export
    timeout, its unsent telemetry goes to a detached sender, which logs the drop and marks the collector dead, so
    the next run drops at once with one line."""
    import os
    import re
    import signal
    import socket
    import time

    from clihelp import cli

    exp = _tiny_experiment(tmp_path)
    hung = socket.socket()  # listening, never accepting: the kernel completes the handshake, nobody answers
    hung.bind(("127.0.0.1", 0))
    hung.listen(64)
    endpoint = f"http://127.0.0.1:{hung.getsockname()[1]}"
    state = tmp_path / "state"
    pids: list[int] = []
    try:
        with pytest.MonkeyPatch.context() as mp:
            use_lab_policy(LAB_POLICY)
            mp.setenv("XDG_STATE_HOME", str(state))
            mp.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            # an export timeout far above the CLI's own timeout: a run that waited for it could not pass
            mp.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "600000")
            first = cli("run", str(exp), "--format", "json", timeout=120)
            assert first.returncode == 0, first.stderr
            lines = [ln for ln in first.stderr.splitlines() if ln.strip()]
            assert len(lines) == 1, first.stderr
            assert endpoint in lines[0] and "background sender" in lines[0] and "spans" in lines[0]
            m = re.search(r"pid (\d+)", lines[0])
            assert m
            pids.append(int(m.group(1)))
            os.kill(pids[-1], 0)  # the sender still waits on the collector after the run has ended
            os.kill(pids.pop(), signal.SIGTERM)

            # a short timeout: whoever sees it (the detached sender, or the run's own thread on a loaded machine)
            # drops the telemetry and marks the collector dead for the next processes
            mp.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "500")
            second = cli("run", str(exp), "--format", "json", timeout=120)
            assert second.returncode == 0, second.stderr
            m = re.search(r"pid (\d+)", second.stderr)
            if m:
                pids.append(int(m.group(1)))
            dead_file = state / "faultplane" / "otlp-dead.json"
            log = state / "faultplane" / "otlp.log"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (
                dead_file.exists() and (not m or "dropped" in log.read_text(encoding="utf-8"))
            ):
                time.sleep(0.1)
            assert endpoint in dead_file.read_text(encoding="utf-8")
            if m:
                assert f"collector {endpoint} unreachable (timeout" in log.read_text(encoding="utf-8")

            mp.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "600000")
            third = cli("run", str(exp), "--format", "json", timeout=120)
            assert third.returncode == 0, third.stderr
            lines = [ln for ln in third.stderr.splitlines() if ln.strip()]
            assert len(lines) == 1, third.stderr
            assert "dropped" in lines[0] and "spans" in lines[0] and endpoint in lines[0]
            assert "timeout after 0.5 s" in lines[0] and "seen at" in lines[0]
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        hung.close()
