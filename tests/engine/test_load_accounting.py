"""Every scheduled request is accounted for, against a real server with a known stall (a subprocess).

The bounds asserted are the ones the schedule guarantees, never the machine's speed: a constant-rate run of
D seconds at R/s schedules exactly R*D arrivals; a request due while the server holds every answer cannot be
answered before the stall ends, so its latency from the schedule is at least the rest of the stall.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import pytest

from faultplane.engine.load import LoadGenerator

pytestmark = pytest.mark.anyio


@contextmanager
def stall_server(stall_after: float, stall: float, mode: str = "hold") -> Iterator[str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "faultplane.examples.stall_server",
            "--stall-after",
            str(stall_after),
            "--stall",
            str(stall),
            "--mode",
            mode,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"(http://\S+)", line)
        assert m, line
        yield m.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def assert_accounted(s: dict) -> None:
    """scheduled = sent + not sent; sent = ok + failed by status + failed by network (+ in flight: 0 at the end)."""
    not_sent = s["not_sent"]["behind"] + s["not_sent"]["in_flight_limit"]
    assert s["scheduled"] == s["sent"] + not_sent, s
    assert s["in_flight"] == 0, s
    assert s["sent"] == s["ok"] + s["failed_status"] + s["failed_network"], s
    assert (
        sum(s["errors_by"].values())
        == s["errors"]
        == s["failed_status"] + s["failed_network"] + s["overflow"]
    )
    series = s["series"]
    for key in ("scheduled", "sent", "ok", "failed_status", "failed_network"):
        assert sum(r[key] for r in series) == s[key], key
    assert sum(r["not_sent"] for r in series) == not_sent
    # ... and every second on its own: a request counts in the second it was scheduled in, whenever answered
    for r in series:
        assert r["scheduled"] == r["sent"] + r["not_sent"], r
        assert r["sent"] == r["ok"] + r["failed_status"] + r["failed_network"], r


async def accounted_run(
    stall_after: float, stall: float, spec: dict, mode: str = "hold"
) -> tuple[LoadGenerator, dict]:
    """The load `spec` run to its end against a stall server; the generator and its summary, which must account
    for every request it scheduled."""
    with stall_server(stall_after, stall, mode) as url:
        gen = LoadGenerator({"url": url, **spec})
        await gen.run()
    s = gen.summary()
    assert_accounted(s)
    return gen, s


@pytest.mark.parametrize("connections", [100, 4])
async def test_a_one_second_stall_every_request_accounted_and_corrected(connections: int) -> None:
    """200/s for 3 s, the server holding every answer for 1 s from 1 s after the first request. With 4
    connections most requests of the stall wait in the generator, not on the wire: their latency must still
    count from their schedule."""
    _, s = await accounted_run(
        1.0, 1.0, {"rate": 200, "duration_s": 3, "timeout_s": 5, "connections": connections}
    )
    assert s["scheduled"] == 600  # 200/s x 3 s, constant arrivals: the schedule fixes the count
    assert s["failed_network"] == 0 and s["failed_status"] == 0 and s["ok"] == s["sent"]
    # no second lost a request to the stall, nor got another second's late answers: 200 due, 200 answered
    assert [(r["scheduled"], r["ok"]) for r in s["series"]] == [(200, 200)] * 3, s["series"]
    # the stalled second carries its own slow answers (a request due in its first half waited >= 500 ms)
    assert s["series"][1]["p99"] >= 400, s["series"]
    lat = s["latency_ms"]
    # the first arrival after the stall began (due within 5 ms of it) waited out the rest of the stall
    assert lat["max"] >= 990 - 5 - 50, lat  # 50 ms: the server's clock starts at the first arrival, not t0
    # arrivals due in the stall's first half (100 of 600 ≈ 16.7 %) waited ≥ 500 ms: p80 can't be under ~450
    assert lat["p90"] >= 400, lat
    assert lat["max"] < 5000  # bounded by the timeout: nothing waited forever


async def test_a_stall_longer_than_the_timeout_fails_by_network_without_latency() -> None:
    _, s = await accounted_run(0.5, 3.0, {"rate": 100, "duration_s": 1.5, "timeout_s": 0.5})
    assert s["scheduled"] == 150
    # every request due in the stall's window [0.5 s, 1.5 s) (≈ 100) outlived its 0.5 s timeout
    assert s["errors_by"].get("timeout", 0) >= 90, s["errors_by"]
    assert s["failed_network"] >= 90 and s["failed_status"] == 0
    # the timeouts are not in the latency histogram: it holds the answered requests only
    assert s["latency_ms"]["max"] < 1500


async def test_connections_reset_in_a_stall_are_network_failures() -> None:
    _, s = await accounted_run(0.5, 0.5, {"rate": 100, "duration_s": 1.5, "timeout_s": 2}, mode="reset")
    assert s["scheduled"] == 150
    assert s["errors_by"].get("ConnectionLost", 0) >= 30, s["errors_by"]
    assert s["ok"] >= 60  # before and after the stall, answers come back


async def test_a_stopped_generator_counts_what_it_was_too_late_to_send() -> None:
    """The worker is frozen (SIGSTOP) for 0.8 s: the arrivals due then are reached late; those later than
    max_lag_s are not sent, counted as `behind`, and the summary says the generator saturated."""
    with stall_server(60, 1) as url:
        gen = LoadGenerator({"url": url, "rate": 100, "duration_s": 2, "max_lag_s": 0.2, "workers": 1})
        async with anyio.create_task_group() as tg:
            tg.start_soon(gen.run)
            await gen.wait_started()
            await anyio.sleep(0.3)
            os.kill(gen.pids[0], signal.SIGSTOP)
            await anyio.sleep(0.8)
            os.kill(gen.pids[0], signal.SIGCONT)
    s = gen.summary()
    assert s["scheduled"] == 200
    assert_accounted(s)
    # arrivals due more than 0.2 s before the resume: at least 0.8 - 0.2 - slack s at 100/s
    assert s["not_sent"]["behind"] >= 50, s["not_sent"]
    assert s["saturated"] and "generator saturated at" in s["saturated"]["message"]
    assert s["failed_network"] == 0


async def test_stopped_early_every_request_still_accounted() -> None:
    """Cancelled mid-stall (as an experiment's end does): the requests in flight are waited for, not lost."""
    with stall_server(0.5, 1.0) as url:
        gen = LoadGenerator({"url": url, "rate": 100, "timeout_s": 3})
        async with anyio.create_task_group() as tg:
            tg.start_soon(gen.run)
            await gen.wait_started()
            await anyio.sleep(1.0)
            tg.cancel_scope.cancel()
    s = gen.summary()
    # at least 1.2 s of arrivals (wait_started returns 0.2 s in), at most the run's own length of them
    assert 110 <= s["scheduled"] <= 100 * s["duration_s"] + 1, s["scheduled"]
    assert_accounted(s)
    assert s["ok"] == s["sent"]  # those held by the stall were answered when it ended


def test_workers_stop_when_their_parent_is_killed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A controller killed with SIGKILL leaves no load behind: its workers see their stdin close and stop."""
    import time

    import psutil

    with stall_server(60, 1) as url:
        code = (
            "import anyio, sys\n"
            "from faultplane.engine.load import LoadGenerator\n"
            "async def main():\n"
            f"    g = LoadGenerator({{'url': {url!r}, 'rate': 50}})\n"
            "    async with anyio.create_task_group() as tg:\n"
            "        tg.start_soon(g.run)\n"
            "        await g.wait_started()\n"
            "        print(*g.pids, flush=True)\n"
            "        await anyio.sleep(60)\n"
            "anyio.run(main)\n"
        )
        parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert parent.stdout is not None
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert pids and all(psutil.pid_exists(p) for p in pids)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        alive = pids
        while alive and time.monotonic() < deadline:
            alive = [
                p
                for p in alive
                if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
            ]
            time.sleep(0.05)
        assert not alive, f"workers still running after their parent died: {alive}"


@pytest.mark.parametrize("duration", [1.5, 2.0])
async def test_only_the_second_the_load_stopped_in_is_partial(duration: float) -> None:
    """A whole second is a rate; the second the schedule ended in is not, and says so. A load of whole
    seconds has no partial row: answers drained after its end count in the seconds they were due in."""
    _, s = await accounted_run(60, 1, {"rate": 50, "duration_s": duration, "timeout_s": 2})
    series = s["series"]
    assert len(series) == 2, series
    assert series[-1].get("partial") is (True if duration % 1 else None), series
    assert not series[0].get("partial"), series
    # every second holds exactly the arrivals due in it, the last one its half second's
    assert [r["scheduled"] for r in series] == [50, 50 if duration == 2.0 else 25], series


async def test_gates_see_a_stall_while_it_lasts() -> None:
    """Mid-stall no answer has come back for the trailing window's requests; they count in its percentiles
    with the time they have waited so far, so the gate sees the stall now, not when it ends."""
    with stall_server(0.3, 3.0) as url:
        gen = LoadGenerator({"url": url, "rate": 100, "timeout_s": 5})
        async with anyio.create_task_group() as tg:
            tg.start_soon(gen.run)
            await gen.wait_started()
            while gen.elapsed() < 1.6:
                await anyio.sleep(0.05)
            live = gen.snapshot(1.0)
            tg.cancel_scope.cancel()
    # the window [>= 0.6 s, now] lies inside the stall (0.3 s .. 3.3 s): its oldest requests have waited
    # >= 0.5 s, whatever the machine's speed, and none is answered yet
    assert live["ok"] == 0, live
    assert live["latency_p99"] is not None and live["latency_p99"] >= 500, live
    assert_accounted(gen.summary())


async def test_adjacent_windows_do_not_blame_each_other() -> None:
    """GameDay lanes: run A holds a 1 s stall that ends where run B starts; A's requests answered during B's
    window are A's, and B (which never saw the stall) is not charged for them."""
    gen, s = await accounted_run(1.0, 1.0, {"rate": 100, "duration_s": 3.5, "timeout_s": 5})
    # the stall runs from ~1.0 s to ~2.0 s after the first request; B starts a little after, at 2.2 s
    a, b = gen.window(0.0, 2.2), gen.window(2.2, 3.5)
    assert a["scheduled"] == 220 and b["scheduled"] == 130  # 100/s: the schedule fixes the counts
    assert a["scheduled"] + b["scheduled"] == s["scheduled"]  # adjacent windows share no request
    for fig in (a, b):  # each window's requests, each with its own outcome
        assert fig["ok"] + fig["errors"] == fig["sent"] == fig["scheduled"], fig
    # A carries its stall: ~50 of its 220 requests waited >= 500 ms
    assert a["latency_p99"] >= 500, a
    # B's requests were all due after the stall ended; none of A's ~100 late answers is in it
    assert b["latency_p99"] < 500, b
    # a boundary inside a slot (2.25 s): that slot holds requests due on both sides of it, so it counts in
    # neither window; neither holds a request due outside it
    early, late = gen.window(0.0, 2.25), gen.window(2.25, 3.5)
    assert (early["scheduled"], late["scheduled"]) == (220, 120), (early, late)
    assert early["window_s"] == pytest.approx(2.2) and late["window_s"] == pytest.approx(1.2)
    # a span shorter than a whole slot has no figures rather than a neighbour's
    none = gen.window(1.05, 1.12)
    assert none["scheduled"] == 0 and none["latency_p99"] is None and none["error_rate"] is None, none
    assert none["throughput"] is None, none
