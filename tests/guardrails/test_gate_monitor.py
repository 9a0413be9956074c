"""The live gate monitor against real services on loopback: a service degraded at run time, a real probe,
a real (small) load generator, and an HTTP endpoint speaking the Prometheus query API."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlparse

import anyio
import httpx
import pytest
from guard_helpers import DegradableService

from faultplane.core.gates import GateSpec
from faultplane.engine.gates import GateMonitor
from faultplane.engine.sli import LoadFigures, SliError, SliSources, missing_sources, to_number
from servers import http_server, send_json

pytestmark = pytest.mark.anyio


def latency_probe(url: str) -> Any:
    """A real probe: one GET, returns its latency in milliseconds."""

    async def run_probe(spec: dict[str, Any]) -> float:
        async with httpx.AsyncClient() as client:
            t0 = time.perf_counter()
            await client.get(spec["provider"]["url"], timeout=5)
            return (time.perf_counter() - t0) * 1000.0

    return run_probe


def error_probe(n: int = 10) -> Any:
    """A real probe: n GETs, returns the share that failed."""

    async def run_probe(spec: dict[str, Any]) -> float:
        failed = 0
        async with httpx.AsyncClient() as client:
            for _ in range(n):
                r = await client.get(spec["provider"]["url"], timeout=5)
                failed += r.status_code >= 500
        return failed / n

    return run_probe


class Recorder:
    def __init__(self) -> None:
        self.samples: list[dict[str, Any]] = []
        self.aborts: list[tuple[float, str]] = []
        self.abort_walls: list[float] = []

    def on_sample(self, sample: dict[str, Any]) -> None:
        self.samples.append(sample)

    def abort(self, reason: str) -> None:
        self.aborts.append((time.monotonic(), reason))
        self.abort_walls.append(time.time())


async def run_fault(
    monitor: GateMonitor,
    rec: Recorder,
    *,
    inject: Any,
    rollback: Any,
    healthy_s: float,
    method_s: float,
) -> dict[str, float]:
    """Engine-shaped: gates watch while the method holds a fault; a breach cancels the method; rollback always."""
    marks: dict[str, float] = {}
    method_scope = anyio.CancelScope()

    def abort(reason: str) -> None:
        rec.abort(reason)
        method_scope.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(monitor.run, abort)
        await anyio.sleep(healthy_s)
        with method_scope:
            inject()
            marks["injected"] = time.monotonic()
            await anyio.sleep(method_s)
        rollback()
        marks["rolled_back"] = time.monotonic()
        tg.cancel_scope.cancel()
    return marks


async def degrade_during_method(
    monitor: GateMonitor,
    rec: Recorder,
    service: DegradableService,
    *,
    healthy_s: float,
    method_s: float,
    **how: float,
) -> dict[str, float]:
    """`run_fault` whose fault is `service` degraded as `how` says (latency_s, error_rate), restored by rollback."""
    return await run_fault(
        monitor,
        rec,
        inject=lambda: service.degrade(**how),
        rollback=service.restore,
        healthy_s=healthy_s,
        method_s=method_s,
    )


def http_probe_gate(name: str, url: str, rollback_on: str, interval_s: float) -> GateSpec:
    """A gate on a probe that GETs `url` (the sources under test decide what it measures)."""
    probe = {"type": "probe", "name": "p", "provider": {"type": "http", "url": url}}
    return GateSpec(name=name, sli="probe", rollback_on=rollback_on, interval_s=interval_s, probe=probe)


async def test_latency_gate_aborts_and_rolls_back_within_one_interval(service: DegradableService) -> None:
    url = service.url + "/checkout"
    interval, window, slow = 0.2, 1.0, 0.45
    gate = http_probe_gate("checkout-latency", url, "probe > 300 for 1s", interval)
    rec = Recorder()
    monitor = GateMonitor([gate], SliSources(run_probe=latency_probe(url)), rec.on_sample)
    with anyio.fail_after(20):
        marks = await degrade_during_method(monitor, rec, service, healthy_s=0.8, method_s=15, latency_s=slow)
    # healthy samples before the fault did not breach
    before = [s for s in rec.samples if s["ts"] < rec.samples[0]["ts"] + 0.6]
    assert before and not any(s["breaching"] for s in before)
    assert len(rec.aborts) == 1
    breach = monitor.breach
    assert breach is not None and breach["gate"] == "checkout-latency" and breach["value"] > 300
    assert breach["held_s"] >= window
    # the window filled at first breach + window; the abort came within one sample of that
    delay = rec.abort_walls[0] - (breach["first_breach_ts"] + window)
    assert 0 <= delay <= interval + slow + 0.25, delay
    # the method was cut short and rolled back well inside its 15 s
    assert marks["rolled_back"] - marks["injected"] < window + interval + 2 * slow + 0.5
    async with httpx.AsyncClient() as client:
        t0 = time.perf_counter()
        assert (await client.get(url)).status_code == 200
        assert time.perf_counter() - t0 < 0.2
    # every sample reached the journal, each with its verdict
    assert all({"gate", "sli", "value", "ts", "breaching"} <= s.keys() for s in rec.samples)
    assert sum(s["breaching"] for s in rec.samples) >= 2


class TimedProbe:
    """Wraps a probe and keeps the wall-clock start and end of every call, in order: with one gate, call i is
    sample i, so a sample's own duration is known exactly."""

    def __init__(self, probe: Any) -> None:
        self.probe = probe
        self.calls: list[tuple[float, float]] = []

    async def __call__(self, spec: dict[str, Any]) -> Any:
        start = time.time()
        try:
            return await self.probe(spec)
        finally:
            self.calls.append((start, time.time()))


async def test_error_gate_aborts_within_one_interval_of_the_window(service: DegradableService) -> None:
    """ "Within one sampling interval" means: the gate decides on the first sample that STARTS once the window
    has filled, and that sample starts at most one interval (plus scheduling slack) after the window filled,
    or after the previous sample ended when that one overran the schedule. The abort then follows as soon as
    that sample's own reading completes. Each part is measured on its own, so the probe's duration (ten HTTP
    requests, slower on a busy machine) is accounted for rather than squeezed into the interval."""
    url = service.url + "/pay"
    interval, window, slack = 0.1, 0.6, 0.05
    gate = http_probe_gate("errors", url, "probe > 0.2 for 600ms", interval)
    rec = Recorder()
    probe = TimedProbe(error_probe())
    monitor = GateMonitor([gate], SliSources(run_probe=probe), rec.on_sample)
    with anyio.fail_after(20):
        marks = await degrade_during_method(monitor, rec, service, healthy_s=0.5, method_s=15, error_rate=0.5)
    assert len(rec.aborts) == 1 and "errors" in rec.aborts[0][1]
    breach = monitor.breach
    assert breach is not None and breach["value"] >= 0.4
    filled = breach["first_breach_ts"] + window
    # the deciding sample is the one the abort came from: the last one judged before it
    decisive = max(i for i, s in enumerate(rec.samples) if s["ts"] <= rec.abort_walls[0])
    d_start, d_end = probe.calls[decisive]
    assert rec.samples[decisive]["held_s"] >= window and d_start >= filled - 0.001
    # every earlier sample started before the window filled: the gate did not wait a sample longer than it had
    # to. (The sample starting right AT the fill may measure 0.5999 s and leave the decision to the next one;
    # that is still within one interval. 2 ms covers the wall and monotonic clocks' disagreement.)
    timeline = [(round(a - filled, 3), round(b - filled, 3)) for a, b in probe.calls]
    assert all(a < filled + 0.002 for a, _ in probe.calls[:decisive]), (decisive, timeline)
    prev_end = probe.calls[decisive - 1][1]
    assert d_start - max(filled, prev_end) <= interval + slack, (decisive, timeline)
    # the abort follows the deciding reading at once (no extra tick)
    assert 0 <= rec.abort_walls[0] - d_end <= slack, rec.abort_walls[0] - d_end
    # the method was rolled back right after: the first breaching sample (<= one interval after the fault),
    # the window, one interval, and the deciding probe's own duration
    assert marks["rolled_back"] - marks["injected"] <= window + 2 * interval + (d_end - d_start) + 0.3


class TinyLoad:
    """A real (minimal) load generator: steady GETs, outcomes kept with timestamps; implements LoadFigures."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.results: deque[tuple[float, bool, float]] = deque(maxlen=10_000)

    async def run(self) -> None:
        async with httpx.AsyncClient() as client:
            while True:
                t0 = time.monotonic()
                try:
                    ok = (await client.get(self.url, timeout=2)).status_code < 500
                except httpx.HTTPError:
                    ok = False
                self.results.append((t0, ok, (time.monotonic() - t0) * 1000))
                await anyio.sleep(0.01)

    def snapshot(self, window_s: float) -> Mapping[str, float | None]:
        cutoff = time.monotonic() - window_s
        recent = [r for r in self.results if r[0] >= cutoff]
        if not recent:
            return dict.fromkeys(
                ("error_rate", "availability", "throughput", "latency_p50", "latency_p95", "latency_p99")
            )
        lat = sorted(r[2] for r in recent)
        errors = sum(not r[1] for r in recent) / len(recent)

        def pct(p: float) -> float:
            return lat[min(len(lat) - 1, int(p * len(lat)))]

        return {
            "error_rate": errors,
            "availability": 1 - errors,
            "throughput": len(recent) / window_s,
            "latency_p50": pct(0.5),
            "latency_p95": pct(0.95),
            "latency_p99": pct(0.99),
        }


async def test_load_generator_figures_feed_error_rate_gate(service: DegradableService) -> None:
    load = TinyLoad(service.url + "/shop")
    assert isinstance(load, LoadFigures)
    gate = GateSpec(
        name="errors",
        sli="error_rate",
        rollback_on="error_rate > 0.1 for 500ms",
        interval_s=0.1,
        lookback_s=0.3,
    )
    rec = Recorder()
    monitor = GateMonitor([gate], SliSources(load=load), rec.on_sample)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(load.run)
            await anyio.sleep(0.4)  # let figures exist before gates look
            await degrade_during_method(monitor, rec, service, healthy_s=0.5, method_s=10, error_rate=0.5)
            tg.cancel_scope.cancel()
    assert len(rec.aborts) == 1
    assert monitor.breach is not None and monitor.breach["sli"] == "error_rate"
    healthy = [s for s in rec.samples if s["value"] is not None and not s["breaching"]]
    assert healthy, "the healthy period was sampled too"


class FakePrometheusState:
    def __init__(self) -> None:
        self.body: dict[str, Any] = {"status": "success", "data": {"resultType": "vector", "result": []}}
        self.status = 200
        self.queries: list[str] = []


@pytest.fixture
def prometheus() -> Iterator[tuple[str, FakePrometheusState]]:
    """An HTTP endpoint on loopback that answers /api/v1/query in Prometheus's format (Prometheus itself is not
    installable here); the test sets what it answers."""
    state = FakePrometheusState()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            parsed = urlparse(self.path)
            if parsed.path != "/api/v1/query":
                self.send_response(404)
                self.end_headers()
                return
            state.queries.append(parse_qs(parsed.query)["query"][0])
            send_json(self, state.status, state.body)

    with http_server(Handler) as url:
        yield url, state


def _vector(*values: float) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {"instance": f"i{i}"}, "value": [time.time(), str(v)]}
                for i, v in enumerate(values)
            ],
        },
    }


async def test_prometheus_gate_aborts(prometheus: tuple[str, FakePrometheusState]) -> None:
    url, state = prometheus
    state.body = _vector(0.001, 0.002)
    gate = GateSpec(
        name="5xx",
        sli="prometheus",
        rollback_on="ratio > 0.05 for 300ms",
        interval_s=0.1,
        prometheus={"url": url, "query": 'sum(rate(http_requests_total{code=~"5.."}[1m]))'},
    )
    rec = Recorder()
    monitor = GateMonitor([gate], SliSources(), rec.on_sample)

    def breach_now() -> None:
        state.body = _vector(0.01, 0.2)  # the worst series decides for a `>` gate

    with anyio.fail_after(10):
        await run_fault(monitor, rec, inject=breach_now, rollback=lambda: None, healthy_s=0.3, method_s=5)
    assert (
        len(rec.aborts) == 1 and monitor.breach is not None and monitor.breach["value"] == pytest.approx(0.2)
    )
    assert state.queries[0].startswith("sum(rate(http_requests_total")


@pytest.mark.parametrize(
    ("body", "status", "expected"),
    [
        (_vector(3.0), 200, 3.0),
        ({"status": "success", "data": {"resultType": "scalar", "result": [0, "7.5"]}}, 200, 7.5),
        ({"status": "success", "data": {"resultType": "vector", "result": []}}, 200, "no series"),
        ({"status": "error", "errorType": "bad_data", "error": "parse error at char 3"}, 400, "parse error"),
        (
            {
                "status": "success",
                "data": {"resultType": "vector", "result": [{"metric": {}, "value": [0, "NaN"]}]},
            },
            200,
            "no series",
        ),
    ],
)
async def test_prometheus_answers(
    prometheus: tuple[str, FakePrometheusState], body: Any, status: int, expected: Any
) -> None:
    url, state = prometheus
    state.body, state.status = body, status
    gate = GateSpec(
        name="g", sli="prometheus", rollback_on="x > 1 for 1s", prometheus={"url": url, "query": "up"}
    )
    with anyio.fail_after(5):
        if isinstance(expected, float):
            assert await SliSources().sample(gate) == expected
        else:
            with pytest.raises(SliError, match=expected):
                await SliSources().sample(gate)


async def test_prometheus_unreachable_is_a_missing_reading(port: int) -> None:
    gate = GateSpec(
        name="g",
        sli="prometheus",
        rollback_on="x > 1 for 1s",
        prometheus={"url": f"http://127.0.0.1:{port}", "query": "up"},
    )
    with anyio.fail_after(5), pytest.raises(SliError, match="unreachable"):
        await SliSources().sample(gate)


@pytest.mark.parametrize(
    ("prometheus", "words"),
    [
        ({"url": "prom:9090", "query": "up"}, "must start with http://"),
        ({"url": "http://[::1", "query": "up"}, "not a valid URL"),
        ({"url": 9090, "query": "up"}, "not a string"),
        ({"url": "http://127.0.0.1:9090", "query": "up", "aggregate": "median"}, "max, min, sum, avg"),
    ],
)
def test_a_prometheus_source_no_sample_could_read_is_refused_by_the_gate_spec(
    prometheus: dict[str, Any], words: str
) -> None:
    """Found at validate: at run time every sample would be missing, a breach, and the run aborted at once."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=words) as info:
        GateSpec(name="g", sli="prometheus", rollback_on="x > 1 for 1s", prometheus=prometheus)
    assert info.value.errors()[0]["loc"] == ("prometheus",)
    ok = GateSpec(
        name="g", sli="prometheus", rollback_on="x > 1", prometheus={"url": "${prom}", "query": "up"}
    )
    assert ok.prometheus == {"url": "${prom}", "query": "up"}  # a variable is checked once resolved


# ---- monitor semantics with in-process sources (timing logic only) --------------------------------------------


def _scripted(values: list[Any]) -> Any:
    it = iter(values)

    async def run_probe(spec: dict[str, Any]) -> Any:
        v = next(it, values[-1])
        if isinstance(v, Exception):
            raise v
        return v

    return run_probe


def _probe_gate(rollback_on: str, **kw: Any) -> GateSpec:
    return GateSpec(
        name="g",
        sli="probe",
        rollback_on=rollback_on,
        probe={"type": "probe", "name": "p", "provider": {"type": "python", "module": "m", "func": "f"}},
        **kw,
    )


def _scripted_monitor(rollback_on: str, values: list[Any], **gate_kw: Any) -> GateMonitor:
    """One probe gate sampled every 50 ms, its probe answering `values` in turn."""
    gate = _probe_gate(rollback_on, interval_s=0.05, **gate_kw)
    return GateMonitor([gate], SliSources(run_probe=_scripted(values)), lambda s: None)


async def _watch(monitor: GateMonitor, seconds: float) -> Recorder:
    rec = Recorder()
    monitor.on_sample = rec.on_sample
    with anyio.move_on_after(seconds):
        await monitor.run(rec.abort)
    return rec


async def test_window_zero_aborts_on_first_breaching_sample() -> None:
    m = _scripted_monitor("probe > 10", [1, 2, 50, 1])
    with anyio.fail_after(5):
        rec = await _watch(m, 0.5)
    assert len(rec.aborts) == 1
    assert [s["breaching"] for s in rec.samples][:3] == [False, False, True]
    assert m.breach is not None and m.breach["held_s"] == 0


async def test_flapping_resets_the_window() -> None:
    values = [50, 50, 1] * 20
    m = _scripted_monitor("probe > 10 for 200ms", values)
    with anyio.fail_after(5):
        rec = await _watch(m, 1.0)
    assert rec.aborts == [] and m.breach is None
    assert len(rec.samples) >= 10


async def test_abort_is_called_once_and_sampling_goes_on_until_cancelled() -> None:
    m = _scripted_monitor("probe > 10 for 100ms", [50])
    with anyio.fail_after(5):
        rec = await _watch(m, 0.8)
    assert len(rec.aborts) == 1
    assert len(rec.samples) > 6  # sampling continued during the rollback window


async def test_stop_after_abort_returns() -> None:
    m = GateMonitor(
        [_probe_gate("probe > 10", interval_s=0.05)],
        SliSources(run_probe=_scripted([50])),
        lambda s: None,
        stop_after_abort=True,
    )
    rec = Recorder()
    with anyio.fail_after(5):
        await m.run(rec.abort)
    assert len(rec.aborts) == 1


async def test_failing_probe_counts_as_breaching_unless_ignored() -> None:
    boom = [RuntimeError("connection refused")]
    m = _scripted_monitor("probe > 10 for 100ms", boom)
    with anyio.fail_after(5):
        rec = await _watch(m, 1.0)
    assert len(rec.aborts) == 1 and "connection refused" in rec.aborts[0][1]
    assert rec.samples[0]["value"] is None and rec.samples[0]["error"].startswith("RuntimeError")

    m = _scripted_monitor("probe > 10 for 100ms", boom, on_missing="ignore")
    with anyio.fail_after(5):
        rec = await _watch(m, 0.4)
    assert rec.aborts == [] and rec.samples and not any(s["breaching"] for s in rec.samples)


async def test_a_hung_probe_times_out_as_a_missing_reading() -> None:
    async def hang(spec: dict[str, Any]) -> float:
        await anyio.sleep(60)
        return 0.0

    m = GateMonitor(
        [_probe_gate("probe > 10", interval_s=0.1, timeout_s=0.2)], SliSources(run_probe=hang), lambda s: None
    )
    with anyio.fail_after(5):
        rec = await _watch(m, 1.0)
    assert len(rec.aborts) == 1 and "no reading within 0.2s" in rec.aborts[0][1]


async def test_gate_without_a_source_aborts_at_once_with_the_reason() -> None:
    gate = GateSpec(name="errors", sli="error_rate", rollback_on="error_rate > 0.01 for 30s")
    assert missing_sources([gate], SliSources())
    m = GateMonitor([gate], SliSources(), lambda s: None)
    assert "errors" in m.problems
    with anyio.fail_after(5):
        rec = await _watch(m, 0.3)
    assert len(rec.aborts) == 1 and "declare `load:`" in rec.aborts[0][1]


async def test_broken_sample_listener_does_not_blind_the_gate() -> None:
    def broken(sample: dict[str, Any]) -> None:
        raise ValueError("journal full")

    m = GateMonitor(
        [_probe_gate("probe > 10", interval_s=0.05)], SliSources(run_probe=_scripted([50])), broken
    )
    rec = Recorder()
    with anyio.fail_after(5), anyio.move_on_after(0.3):
        await m.run(rec.abort)
    assert len(rec.aborts) == 1


async def test_several_gates_first_breach_wins() -> None:
    fast = _probe_gate("probe > 10 for 100ms", interval_s=0.05)
    slow = GateSpec(
        name="slow",
        sli="probe",
        rollback_on="probe > 10 for 10s",
        interval_s=0.05,
        probe={"type": "probe", "name": "q", "provider": {"type": "python", "module": "m", "func": "f"}},
    )
    m = GateMonitor([slow, fast], SliSources(run_probe=_scripted([50])), lambda s: None)
    with anyio.fail_after(5):
        rec = await _watch(m, 0.6)
    assert len(rec.aborts) == 1 and m.breach is not None and m.breach["gate"] == "g"
    assert {s["gate"] for s in rec.samples} == {"g", "slow"}


@pytest.mark.parametrize(
    ("output", "path", "expected"),
    [
        (12, None, 12.0),
        ("3.5", None, 3.5),
        (True, None, 1.0),
        ({"value": 4}, None, 4.0),
        ({"body": {"latency_ms": 250}}, "body.latency_ms", 250.0),
        ({"xs": [1, 2]}, "xs.1", 2.0),
    ],
)
def test_probe_outputs_become_numbers(output: Any, path: str | None, expected: float) -> None:
    assert to_number(output, path) == expected


@pytest.mark.parametrize(("output", "path"), [("fast", None), ({"a": 1}, None), ({"a": 1}, "b"), ([1], "3")])
def test_non_numeric_probe_output_is_explained(output: Any, path: str | None) -> None:
    with pytest.raises(SliError):
        to_number(output, path)
