"""Gates that cannot trip are refused: statically in phase 0 (a threshold the SLI cannot reach), and during the
baseline (a gate whose source gives no number stops the run before any fault is injected). Real runs against
local HTTP servers: the degradable service and a small Prometheus-shaped server."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from guard_helpers import DegradableService, base_experiment, runnable_experiment, write_experiment
from typer.testing import CliRunner

from faultplane.cli.main import app
from faultplane.core.model import Journal
from faultplane.core.policy import Policy, evaluate
from faultplane.core.store import Store
from faultplane.engine.lifecycle import execute
from servers import send_json

pytestmark = pytest.mark.anyio
runner = CliRunner()


# ---- phase 0: thresholds the SLI cannot reach ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sli", "predicate"),
    [
        ("error_rate", "error_rate > 1.5 for 10s"),
        ("error_rate", "error_rate > 150% for 10s"),
        ("error_rate", "error_rate >= 101% for 10s"),
        ("availability", "availability == 2 for 10s"),
        ("availability", "availability < 0 for 10s"),
        ("latency_p99", "latency_p99 < 0 for 10s"),
        ("latency_p99", "latency_p99 < -5ms for 10s"),
        ("latency_p50", "latency_p50 == -1 for 10s"),
        ("throughput", "throughput < 0 for 10s"),
        ("throughput", "throughput <= -0.5 for 10s"),
        ("probe", "probe > 150% for 10s"),
        ("probe", "probe < -1% for 10s"),
        ("prometheus", "cpu_share >= 200% for 10s"),
    ],
)
def test_a_threshold_the_sli_cannot_reach_is_refused(sli: str, predicate: str) -> None:
    gate: dict[str, Any] = {"name": "g", "sli": sli, "rollback_on": predicate}
    if sli == "probe":
        gate["probe"] = {
            "type": "probe",
            "name": "p",
            "provider": {"type": "http", "url": "http://127.0.0.1:1/"},
        }
    if sli == "prometheus":
        gate["prometheus"] = {"url": "http://127.0.0.1:9090", "query": "x"}
    decision = evaluate(base_experiment(slo_gates=[gate]), policy=Policy(), store=None)
    problems = [v for v in decision.violations if v.rule.startswith("gates.")]
    assert problems and problems[0].field == "slo_gates[0].rollback_on", decision.violations
    assert "never" in problems[0].message


@pytest.mark.parametrize(
    "predicate",
    [
        "error_rate > 0.01 for 10s",
        "error_rate > 1% for 10s",
        "error_rate >= 100% for 10s",
        "error_rate == 1 for 5s",
    ],
)
def test_reachable_thresholds_are_allowed(predicate: str) -> None:
    gate = {"name": "g", "sli": "error_rate", "rollback_on": predicate}
    decision = evaluate(base_experiment(slo_gates=[gate]), policy=Policy(), store=None)
    assert not [v for v in decision.violations if v.rule.startswith("gates.")], decision.violations


def test_validate_names_the_gate_and_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FAULTPLANE_POLICY", raising=False)
    monkeypatch.setenv("FAULTPLANE_STORE", str(tmp_path / "s.duckdb"))
    gate = {"name": "errors", "sli": "error_rate", "rollback_on": "error_rate > 150% for 10s"}
    write_experiment(tmp_path, base_experiment(slo_gates=[gate]), "exp.yaml")
    res = runner.invoke(app, ["validate", "exp.yaml"])
    assert res.exit_code == 2
    assert "slo_gates[0].rollback_on" in res.output and "never" in res.output


# ---- the baseline: a gate whose source gives no number ---------------------------------------------------------


class _Prometheus:
    """A local server answering /api/v1/query with a fixed body, as a Prometheus would."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                send_json(self, 200, outer.body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prometheus() -> Iterator[_Prometheus]:
    prom = _Prometheus({"status": "success", "data": {"resultType": "vector", "result": []}})
    yield prom
    prom.close()


def _marker_method(marker: Path) -> list[dict[str, Any]]:
    # the "fault": it leaves a file, so a test sees whether the method ran at all
    return [
        {
            "type": "action",
            "name": "inject",
            "provider": {"type": "process", "path": "touch", "arguments": [str(marker)]},
        }
    ]


def _probe_gate(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": "health",
        "sli": "probe",
        "rollback_on": "probe > 499 for 1s",
        "interval_s": 0.2,
        "probe": {"type": "probe", "name": "gate", "provider": {"type": "http", "url": url}},
        **extra,
    }


async def _run(url: str, gate: dict[str, Any], marker: Path, store: Store) -> Journal:
    doc = runnable_experiment(url, slo_gates=[gate], method=_marker_method(marker))
    return await execute(doc, store=store)


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"value_path": "body.latency_ms"}, "no 'latency_ms'"),  # a key the output does not have
        ({"value_path": "headers.content-type"}, "is not a number"),  # text, not a number
        ({"value_path": "body"}, "is not a number"),  # a whole object
        ({"value_path": "body.latency_ms", "on_missing": "ignore"}, "no 'latency_ms'"),  # would be blind
        ({"value_path": "status.0"}, "no '0'"),
    ],
)
async def test_a_probe_gate_with_no_number_stops_the_run_before_the_fault(
    service: DegradableService, store: Store, tmp_path: Path, extra: dict[str, Any], why: str
) -> None:
    marker = tmp_path / "injected"
    journal = await _run(service.url, _probe_gate(service.url, **extra), marker, store)
    assert journal.status == "failed", journal.error
    assert "gate 'health' cannot trip" in (journal.error or "") and why in (journal.error or "")
    assert "no fault was injected" in (journal.error or "")
    assert not marker.exists() and journal.run == []
    assert "inject" not in [p["phase"] for p in journal.phases]
    (sample,) = journal.gates["baseline"]
    assert sample["value"] is None and why in sample["error"]


async def test_a_gate_probe_that_cannot_reach_its_target_stops_the_run(
    service: DegradableService, store: Store, tmp_path: Path
) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/"
    marker = tmp_path / "injected"
    journal = await _run(service.url, _probe_gate(closed, value_path="status"), marker, store)
    assert journal.status == "failed" and "gate 'health' cannot trip" in (journal.error or "")
    assert not marker.exists()


async def test_a_prometheus_gate_whose_metric_is_missing_stops_the_run(
    service: DegradableService, store: Store, tmp_path: Path, prometheus: _Prometheus
) -> None:
    gate = {
        "name": "cpu",
        "sli": "prometheus",
        "rollback_on": "cpu > 0.9 for 1s",
        "interval_s": 0.2,
        "prometheus": {"url": prometheus.url, "query": "no_such_metric"},
        "on_missing": "ignore",
    }
    marker = tmp_path / "injected"
    journal = await _run(service.url, gate, marker, store)
    assert journal.status == "failed" and "no series" in (journal.error or ""), journal.error
    assert not marker.exists()
    # the same gate, once the metric exists, lets the run go on
    prometheus.body = {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": {}, "value": [0, "0.25"]}]},
    }
    journal = await _run(service.url, gate, marker, store)
    assert journal.status == "completed", journal.error
    assert marker.exists() and journal.gates["baseline"] == [
        {"gate": "cpu", "sli": "prometheus", "value": 0.25, "error": None}
    ]


async def test_a_gate_that_reads_a_number_runs_and_journals_its_baseline(
    service: DegradableService, store: Store, tmp_path: Path
) -> None:
    marker = tmp_path / "injected"
    journal = await _run(service.url, _probe_gate(service.url, value_path="status"), marker, store)
    assert journal.status == "completed", journal.error
    assert marker.exists()
    assert journal.gates["baseline"] == [{"gate": "health", "sli": "probe", "value": 200.0, "error": None}]


async def test_a_dry_run_reads_no_gate(service: DegradableService, store: Store, tmp_path: Path) -> None:
    doc = runnable_experiment(service.url, slo_gates=[_probe_gate(service.url, value_path="body.nope")])
    journal = await execute(doc, store=store, dry_run=True)
    assert journal.status == "completed" and "baseline" not in journal.gates
