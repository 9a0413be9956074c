"""The load generator against real loopback HTTP servers: rate, coordinated omission, overflow, windows, HDR."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer

import pytest

from faultplane.core.formats import ExperimentError
from faultplane.engine.load import LoadGenerator, parse_load_spec, percentile

pytestmark = pytest.mark.anyio


@contextmanager
def server(
    respond: Callable[[int], tuple[int, float]], *, threaded: bool = True
) -> Iterator[tuple[str, list[float]]]:
    """A loopback HTTP server; `respond(n)` gives the n-th request's (status, seconds to wait before answering).
    Yields the URL and the monotonic arrival time of every request."""
    arrivals: list[float] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        # a single-threaded server serves one connection at a time: one request per connection, or a kept-alive
        # connection would starve the others
        protocol_version = "HTTP/1.1" if threaded else "HTTP/1.0"
        # headers and body are two writes; with Nagle on, the second waits for a delayed ACK (40 ms)
        disable_nagle_algorithm = True

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            with lock:
                n = len(arrivals)
                arrivals.append(time.monotonic())
            status, wait = respond(n)
            if wait:
                time.sleep(wait)
            body = b"ok"
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    base = ThreadingHTTPServer if threaded else HTTPServer

    class Server(base):  # type: ignore[valid-type,misc]
        daemon_threads = True
        request_queue_size = 256  # a stalled single-threaded server must queue, not refuse

    srv = Server(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/", arrivals
    finally:
        srv.shutdown()
        srv.server_close()


async def test_arrival_rate_is_honoured() -> None:
    with server(lambda n: (200, 0.0)) as (url, arrivals):
        gen = LoadGenerator({"url": url, "rate": 50, "duration_s": 2})
        await gen.run()
    s = gen.summary()
    # constant arrivals at i/50 s for i/50 < 2 s: exactly 100 requests, all answered
    assert s["sent"] == 100 and s["ok"] == 100 and s["errors"] == 0
    assert len(arrivals) == 100
    # they arrived spread over the two seconds, not in a burst
    assert 1.8 <= arrivals[-1] - arrivals[0] <= 2.3
    assert 45 <= s["achieved_rate"] <= 55


async def test_poisson_arrivals_keep_the_mean_rate_and_are_reproducible() -> None:
    with server(lambda n: (200, 0.0)) as (url, _):
        a = LoadGenerator({"url": url, "rate": 100, "duration_s": 2, "arrival": "poisson", "seed": 7})
        await a.run()
    # 200 expected; a Poisson count's sd is ~14
    assert 150 <= a.summary()["sent"] <= 250


async def test_a_stall_shows_in_the_latency_of_every_request_queued_behind_it() -> None:
    """No coordinated omission: a single-threaded server stalls 300 ms once; the requests scheduled during the
    stall were still sent on time and their latency (from the schedule) includes the wait."""
    with server(lambda n: (200, 0.3 if n == 20 else 0.0), threaded=False) as (url, _):
        gen = LoadGenerator({"url": url, "rate": 100, "duration_s": 1.5, "timeout_s": 5})
        await gen.run()
    s = gen.summary()
    assert s["sent"] == 150 and s["ok"] == 150  # the stall did not slow the arrivals down
    lat = s["latency_ms"]
    assert lat["max"] >= 280
    # Every request scheduled in the stall's first 200 ms (20 of them at 100/s) waited until it ended, so its
    # latency from the schedule is >= 100 ms however fast the server drains the queue afterwards: at least the
    # slowest 15 of 150 (p90). A closed loop would have sent them late and reported one slow request.
    assert lat["p90"] >= 100, lat
    assert lat["min"] < 50, lat  # requests before the stall answered promptly: the slowness is the stall's


async def test_in_flight_overflow_counts_as_errors_without_slowing_the_rate() -> None:
    with server(lambda n: (200, 0.5)) as (url, _):
        gen = LoadGenerator({"url": url, "rate": 50, "duration_s": 1, "max_in_flight": 5, "timeout_s": 3})
        await gen.run()
    s = gen.summary()
    assert s["scheduled"] == 50  # every arrival counted, sent or not
    # 5 in flight, each 0.5 s: at most ~15 of 50 can be sent; the rest are refused by the bound, as the
    # service's overflow (an arrival refused while this busy machine made the generator late is `behind`)
    refused = s["overflow"] + s["not_sent"]["behind"]
    assert s["not_sent"]["in_flight_limit"] == s["overflow"] > 0 and refused > 30
    assert s["sent"] + refused == 50
    assert s["errors_by"]["overflow"] == s["overflow"]
    assert s["ok"] + s["errors"] + s["not_sent"]["behind"] == 50
    assert s["ok"] >= 5


async def test_snapshot_windows_see_only_their_trailing_seconds() -> None:
    # the first 50 requests succeed, every later one fails: a window over the end sees only failures
    with server(lambda n: (200, 0.0) if n < 50 else (500, 0.0)) as (url, _):
        gen = LoadGenerator({"url": url, "rate": 50, "duration_s": 2})
        await gen.run()
    last = gen.snapshot(0.8)
    # requests 50.. are due from 1 s on: the last 0.8 s holds failures (a busy machine may delay a frame)
    assert last["error_rate"] >= 0.9 and last["availability"] <= 0.1
    whole = gen.snapshot(5.0)
    assert whole["errors"] == 50 and whole["ok"] == 50 and whole["error_rate"] == pytest.approx(0.5)
    s = gen.summary()
    assert s["errors_by"] == {"status:500": 50}
    # the per-second series carries the same split exactly: a request counts in the second it was due in,
    # however late a busy machine reports its answer
    assert [(r["ok"], r["errors"]) for r in s["series"]] == [(50, 0), (0, 50)], s["series"]


async def test_hdr_summary_percentiles() -> None:
    # every tenth request waits 200 ms, the rest answer at once
    with server(lambda n: (200, 0.2 if n % 10 == 9 else 0.0)) as (url, _):
        gen = LoadGenerator({"url": url, "rate": 100, "duration_s": 2, "timeout_s": 3})
        await gen.run()
    lat = gen.summary()["latency_ms"]
    assert lat["p50"] < 30, lat
    assert lat["p95"] >= 195 and lat["p99"] >= 195, lat
    assert 195 <= lat["max"] < 400, lat
    assert lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p999"] <= lat["max"]


async def test_connection_refused_is_a_network_failure_per_request() -> None:
    with server(lambda n: (200, 0.0)) as (url, _):
        pass  # closed: nothing listens on the port any more
    gen = LoadGenerator({"url": url, "rate": 20, "duration_s": 0.5})
    await gen.run()
    s = gen.summary()
    assert s["scheduled"] == s["sent"] == 10 and s["errors"] == 10 and s["ok"] == 0
    assert s["failed_network"] == 10 and s["failed_status"] == 0
    assert s["errors_by"] == {"ConnectionRefusedError": 10}
    assert s["latency_ms"] is None  # a connection error has no latency: it is reported apart


def test_bad_specs_name_the_field() -> None:
    with pytest.raises(ExperimentError) as exc:
        parse_load_spec({"url": "ftp://x", "rate": 0})
    fields = {i.field for i in exc.value.issues}
    assert {"load.url", "load.rate"} <= fields


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50 and percentile(values, 99) == 99 and percentile(values, 100) == 100
    assert percentile([], 50) is None


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"headers": {"X-Evil": "a\r\nInjected: 1"}}, "load.headers"),
        ({"headers": {"Bad Name": "v"}}, "load.headers"),
        ({"headers": {"X-Name": "日本"}}, "load.headers"),
        ({"connections": 0}, "load.connections"),
        ({"workers": 0}, "load.workers"),
        ({"max_lag_s": -1}, "load.max_lag_s"),
    ],
)
def test_hostile_specs_are_refused_before_any_worker_starts(spec: dict, field: str) -> None:
    with pytest.raises(ExperimentError) as exc:
        parse_load_spec({"url": "http://127.0.0.1:1/", "rate": 1, **spec})
    assert field in {i.field for i in exc.value.issues}


async def test_post_json_head_and_odd_paths_are_real_requests() -> None:
    """The hand-written request line: a JSON body with its length, HEAD without a body to wait for, a query and
    percent-encoded Unicode in the path; the server sees each as sent."""
    seen: list[tuple[str, str, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _answer(self, body: bytes = b"ok") -> None:
            n = int(self.headers.get("Content-Length") or 0)
            seen.append((self.command, self.path, self.rfile.read(n) if n else b""))
            self.send_response(201)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_POST = do_HEAD = do_GET = _answer

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        post = LoadGenerator(
            {
                "url": base + "/pay?x=1",
                "method": "POST",
                "rate": 20,
                "duration_s": 0.5,
                "json": {"amount": 12.5, "who": "Zoë"},
            }
        )
        await post.run()
        head = LoadGenerator({"url": base + "/h%C3%A9", "method": "HEAD", "rate": 20, "duration_s": 0.5})
        await head.run()
    finally:
        srv.shutdown()
        srv.server_close()
    for gen in (post, head):
        s = gen.summary()
        assert s["scheduled"] == s["sent"] == s["ok"] == 10, s
    posts = [x for x in seen if x[0] == "POST"]
    assert len(posts) == 10 and all(
        p == ("POST", "/pay?x=1", b'{"amount":12.5,"who":"Zo\xc3\xab"}') for p in posts
    )
    assert [x[1] for x in seen if x[0] == "HEAD"] == ["/h%C3%A9"] * 10


def test_a_missing_url_or_rate_is_named() -> None:
    with pytest.raises(ExperimentError) as exc:
        parse_load_spec({})
    assert [i.field for i in exc.value.issues] == ["load.url", "load.rate"]
    assert all(i.fix for i in exc.value.issues)


async def test_latency_buckets_are_capped_counts_are_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """A long or fast run keeps bounded memory: past the cap the oldest seconds lose their latency buckets (the
    HDR totals and the per-second rows already have them) but keep their counts."""
    import faultplane.engine.load_generator as load_mod

    monkeypatch.setattr(load_mod, "RETAINED_BUCKETS", 40)
    with server(lambda n: (200, 0.0)) as (url, _):
        gen = LoadGenerator({"url": url, "rate": 100, "duration_s": 3})
        await gen.run()
    kept = sum(slot.buckets for slot in gen._slots.values())
    assert kept <= 40 + 100  # the cap, plus at most the second still open when it was applied
    s = gen.summary()
    assert s["latency_ms"]["p50"] is not None and s["ok"] == 300
    assert gen.snapshot(10.0)["ok"] == 300  # counts of the whole run are still there for gates
    assert all(r["p50"] is not None for r in s["series"][-1:])


async def test_gates_read_the_same_hdr_buckets_as_the_summary() -> None:
    """Gate percentiles come from bucketed histograms (3 significant digits, as hdrhistogram), not raw lists:
    over the whole run they equal the HDR summary's exactly, and a slot stores at most one entry per bucket."""
    with server(lambda n: (200, 0.05 if n % 10 == 9 else 0.0)) as (url, _):
        gen = LoadGenerator({"url": url, "rate": 100, "duration_s": 2, "timeout_s": 3})
        await gen.run()
    whole, lat = gen.snapshot(10.0), gen.summary()["latency_ms"]
    assert (whole["latency_p50"], whole["latency_p99"]) == (lat["p50"], lat["p99"]), (whole, lat)
    for slot in gen._slots.values():
        for keys, counts in slot.latencies:
            assert len(set(keys.tolist())) == len(keys) and int(counts.sum()) >= len(keys)


def test_the_run_histogram_is_hdrhistogram_to_the_bucket() -> None:
    """The run-total histogram is vectorised, but its buckets, percentiles, min, max and mean are exactly those
    of the `hdrhistogram` package (1 µs .. 1 h, 3 significant digits) on the same values."""
    import numpy as np
    from hdrh.histogram import HdrHistogram

    from faultplane.engine.load import _buckets_us, _Hdr

    rng = np.random.default_rng(7)
    # ms: sub-millisecond, a long tail to seconds, a flat block, and the extremes of the range
    values = np.concatenate(
        [rng.lognormal(0, 2, 20_000), rng.uniform(0, 3000, 5000), [0.0004, 2048.0, 3_500_000.0]]
    )
    keys, counts = _buckets_us(values)
    ref, ours = HdrHistogram(1, 3_600_000_000, 3), _Hdr()
    for v in np.maximum(1, np.rint(values * 1000)).astype(np.int64).tolist():
        ref.record_value(v)
    ours.record(keys, counts)
    assert ours.total == ref.get_total_count() == len(values)
    for q in (1, 25, 50, 90, 95, 99, 99.9, 99.99, 100):
        assert ours.percentile(q) == ref.get_value_at_percentile(q), q
    assert (ours.min(), ours.max()) == (ref.get_min_value(), ref.get_max_value())
    assert ours.mean() == pytest.approx(ref.get_mean_value(), rel=1e-12)


def test_default_workers_by_rate_and_cores() -> None:
    from faultplane.engine.load import default_workers

    assert default_workers(100, cores=2) == 1 and default_workers(10_000, cores=2) == 1
    assert default_workers(60_000, cores=2) == 2  # wrk2's -t2: both cores when the rate needs them
    assert default_workers(60_000, cores=8) == 4 and default_workers(500_000, cores=8) == 7  # one left free
    assert default_workers(60_000, cores=1) == 1
