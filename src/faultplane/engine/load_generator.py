"""The built-in load generator: open-model constant arrival rate over HTTP, measured without coordinated omission.

Requests are issued at fixed arrival times (`start + i / rate`, or seeded exponential gaps) whatever the
responses do. Latency is measured from each request's *scheduled* time, as wrk2 does, so a stalled service — or
a late generator — shows in the latency of every request queued behind it instead of hiding in a lower rate.

The requests are sent by worker processes (faultplane.engine.load_worker: raw asyncio protocols, httptools,
uvloop), so neither the engine nor its gates ever compete with the generator for an event loop; this process
only gathers the 100 ms frames they stream back.

Every scheduled arrival is accounted for exactly once:
`scheduled = sent + not_sent.behind + not_sent.in_flight_limit` and
`sent = ok + failed_status + failed_network + in_flight`. `behind`: the generator reached the arrival more
than `max_lag_s` late (it, not the service, was the bottleneck; the summary then says "generator saturated at
N/s"). `in_flight_limit` (`overflow`): `max_in_flight` requests were outstanding, the service being too slow.
Latency (HDR histogram, µs resolution, 3 significant digits) covers the responses, whatever their status;
network failures (refused, reset, timeout) are counted apart and have no latency.

Every figure is attributed to the 100 ms slot the request was *scheduled* in, never to the one its answer came
back in: the requests due in a stalled second all stay in that second (answered late, failed or given up), and
the next second is not blamed for them. A second's row is written once every request due in it has an outcome
(at most `timeout_s` after it ends), so a row always adds up: `scheduled = sent + not_sent`,
`sent = ok + failed_status + failed_network`.

What is recorded: per 100 ms slot, the counts and a bucketed latency histogram (HDR buckets, 3 significant
digits: memory bounded by the number of distinct buckets, not by the request rate), so `snapshot(window_s)`
answers the SLI gates for any trailing window — a request still unanswered counts there with the time it had
waited at its worker's last frame, a lower bound, so a stall shows while it lasts; `window(start, end)` gives a finished run's own
requests; a per-second series for the journal and the report; run totals.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.abc
import numpy as np
from anyio.streams.buffered import BufferedByteReceiveStream

from faultplane.engine.load_hdr import _bucket_keys, _buckets_us, _Hdr, _merge, _pct
from faultplane.engine.load_spec import LoadSpec, parse_load_spec

__all__ = ["LoadGenerator", "default_workers"]

_SLOT_S = 0.1
_SLOTS_PER_S = 10
# a second whose requests a worker cannot vouch for (a frozen or dead worker) is written anyway this long after
# its requests' timeout: a frame later than that joins the first open second, so the series still adds up
_ROW_GRACE_S = 2.0
# Slot histograms older than this are dropped once their second is summarised: a long run keeps bounded memory.
# Gate windows (`lookback_s`) are at most an hour in the schema but in practice a few seconds.
RETENTION_S = 900.0
# ... and at most this many histogram buckets (8 bytes each: 32 MiB) are kept; past the cap the oldest seconds
# keep their counts, and a gate window reaching back that far reads its percentiles from the newer buckets
RETAINED_BUCKETS = 4_000_000


@dataclass
class _Slot:
    scheduled: int = 0
    sent: int = 0
    ok: int = 0
    failed_status: int = 0
    failed_network: int = 0
    behind: int = 0
    overflow: int = 0
    # (bucket lower bounds in µs, counts) pairs of the responses to the requests due in the slot
    latencies: list[tuple[Any, Any]] = field(default_factory=list)

    @property
    def errors(self) -> int:
        # an arrival refused by the in-flight bound is the service's doing (it is too slow): an error; one the
        # generator was too late to send is not, and is reported apart
        return self.failed_status + self.failed_network + self.overflow

    def add(self, frame: dict[str, Any], hist: tuple[Any, Any] | None) -> None:
        self.scheduled += frame["scheduled"]
        self.sent += frame["sent"]
        self.ok += frame["ok"]
        self.failed_status += sum(frame["status"].values())
        self.failed_network += sum(frame["net"].values())
        self.behind += frame["behind"]
        self.overflow += frame["overflow"]
        if hist is not None:
            self.latencies.append(hist)

    @property
    def buckets(self) -> int:
        return sum(len(k) for k, _ in self.latencies)


def _concat(slots: list[_Slot]) -> tuple[Any, Any] | None:
    return _merge([h for s in slots for h in s.latencies])


def default_workers(rate: float, cores: int | None = None) -> int:
    """Worker processes for `rate`: one keeps ~15,000 req/s on a loopback core. Above 2 cores one is left for
    the rest (the engine, a local service); on 2 that would halve the generator for a rate that needs both,
    and the kernel shares the cores among the processes anyway (wrk2's default is 2 threads)."""
    cores = cores or os.cpu_count() or 1
    usable = cores - 1 if cores > 2 else cores
    return max(1, min(usable, math.ceil(rate / 15_000)))


_FIGURES = ("scheduled", "sent", "ok", "failed_status", "failed_network", "behind", "overflow")


class LoadGenerator:
    """Drives `spec` with worker processes until cancelled (or for `spec.duration_s`); implements the gates'
    `LoadFigures` protocol.

    `on_second(row)` is called once per elapsed second with that second's row of the series (from the event
    loop: keep it quick). `snapshot()` and `summary()` may be called at any time, from any thread.
    """

    def __init__(
        self,
        spec: LoadSpec | Mapping[str, Any],
        *,
        on_second: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.spec = parse_load_spec(spec)
        self.on_second = on_second
        self.workers = self.spec.workers or default_workers(self.spec.rate)
        self._lock = threading.Lock()
        self._slots: dict[int, _Slot] = {}
        self._rows: list[dict[str, Any]] = []
        self._closed_until = 0  # seconds [0, _closed_until) have rows
        self._hist = _Hdr()
        self._status: Counter[int] = Counter()
        self._net: Counter[str] = Counter()
        self._totals: Counter[str] = Counter()
        self._in_flight: dict[int, int] = {}
        # per worker: the first scheduled slot that may still change, and its unanswered requests per slot
        self._settled: dict[int, int] = {}
        # (when, {slot: (count, newest due offset)}): known to be unanswered at `when`, not necessarily now
        self._pending: dict[int, tuple[float, dict[int, tuple[int, float]]]] = {}
        self._lag_max = 0.0
        self._t0: float | None = None  # monotonic start (one clock for every process on the machine)
        self._t0_wall: float | None = None
        self._t_end: float | None = None
        self._worker_errors: list[str] = []
        self._worker_totals: list[dict[str, int]] = []
        self.pids: list[int] = []  # the worker processes' ids

    @property
    def in_flight(self) -> int:
        return sum(self._in_flight.values())

    # ---- running ------------------------------------------------------------------------------------------
    async def wait_started(self, timeout_s: float = 30.0) -> None:
        """Return once the workers are sending and their first frames are in (gates then have figures to read)
        or the run is over; a run that has not been started yet is waited for as well."""
        with anyio.move_on_after(timeout_s):
            while self._t_end is None and (self._t0 in (None, math.inf) or self.elapsed() < 2 * _SLOT_S):
                await anyio.sleep(0.01)

    async def run(self) -> None:
        """Run the workers until cancelled or `duration_s` is over (then wait for the answers in flight)."""
        if self._t0 is not None:
            raise RuntimeError("a LoadGenerator runs once; create a new one for another run")
        self._t0 = math.inf  # running from now on, even while the workers start
        procs: list[_WorkerProc] = []
        try:
            try:
                for index in range(self.workers):
                    procs.append(await _WorkerProc.start(self._job(index)))
                    self.pids.append(procs[-1].proc.pid)
                with anyio.fail_after(30):
                    for proc in procs:
                        await proc.ready()
            except (OSError, RuntimeError, TimeoutError) as exc:
                # reported in the summary, never raised: a load that cannot start must not crash the run
                self._worker_errors.append(str(exc) or type(exc).__name__)
                return
            # a shared start a moment ahead, so that every worker's first arrival is on time
            self._t0 = time.monotonic() + 0.02
            self._t0_wall = time.time() + 0.02
            for proc in procs:
                await proc.begin(self._t0)
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._ticker)
                async with anyio.create_task_group() as readers:
                    for proc in procs:
                        readers.start_soon(self._read, proc, False)
                self._t_end = time.monotonic()  # the last answers are in: the run is over
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                # the schedule ends here, or at its duration when the workers ran it to the end (they stop
                # after their last arrival, a moment before the duration is over): nothing more is due
                sched_end = time.monotonic()
                if self._t_end is not None and self.spec.duration_s is not None:
                    sched_end = max(sched_end, self._t0 + self.spec.duration_s)
                await self._stop(procs)
                if self._t0 == math.inf:
                    self._t0 = time.monotonic()
                if self._t_end is None:
                    self._t_end = time.monotonic()
                with self._lock:
                    span = min(sched_end - self._t0, self.spec.duration_s or math.inf)
                    # a worker may have sent an arrival due just after the stop it had not read yet
                    last = max((k // _SLOTS_PER_S + 1 for k in self._slots), default=0)
                    rows = self._close_seconds(max(math.ceil(span - 1e-6), last))
                    if self._rows and self._rows[-1]["t"] + 1 > span + 1e-3:
                        # the schedule stopped inside this second: its figures cover less than a second
                        self._rows[-1]["partial"] = True
                self._emit(rows)

    def _job(self, index: int) -> dict[str, Any]:
        spec = self.spec
        n = self.workers
        return {
            **spec.model_dump(mode="json", by_alias=True, exclude={"workers"}),
            "workers": n,
            "index": index,
            # the bounds are the run's: each worker holds its share
            "max_in_flight": max(1, math.ceil(spec.max_in_flight / n)),
            "connections": max(1, math.ceil(min(spec.connections, spec.max_in_flight) / n)),
        }

    async def _read(self, proc: _WorkerProc, stopping: bool) -> None:
        while True:
            frame = await proc.frame()
            if frame is None:
                if not stopping:
                    self._worker_errors.append(await proc.failure())
                return
            if frame.get("end"):
                self._worker_totals.append(frame["totals"])
                self._in_flight[proc.index] = 0
                proc.ended = True
                return
            self._ingest(proc.index, frame)

    async def _stop(self, procs: list[_WorkerProc]) -> None:
        running = [p for p in procs if not p.ended]
        for proc in running:
            await proc.stop()
        # the answers in flight are each bounded by the timeout; past that a worker is stuck and is killed
        with anyio.move_on_after(self.spec.timeout_s + 5):
            async with anyio.create_task_group() as tg:
                for proc in running:
                    if proc.began:
                        tg.start_soon(self._read, proc, True)
        for proc in procs:
            await proc.close()

    def _ingest(self, index: int, frame: dict[str, Any]) -> None:
        with self._lock:
            for k, part in frame["slots"].items():
                lat = np.frombuffer(part["lat"], dtype=np.float32) if part["lat"] else None
                hist = _buckets_us(lat) if lat is not None and len(lat) else None
                # a slot whose second was written already (a worker frozen past the grace) joins the first
                # open second, so the series always adds up to the totals
                slot_id = max(k, self._closed_until * _SLOTS_PER_S)
                slot = self._slots.get(slot_id)
                if slot is None:
                    slot = self._slots[slot_id] = _Slot()
                slot.add(part, hist)
                for key in ("scheduled", "sent", "ok", "behind", "overflow"):
                    self._totals[key] += part[key]
                for code, n in part["status"].items():
                    self._status[int(code)] += n
                    self._totals["failed_status"] += n
                for kind, n in part["net"].items():
                    self._net[kind] += n
                    self._totals["failed_network"] += n
                if hist is not None:
                    self._hist.record(*hist)
            self._in_flight[index] = frame["in_flight"]
            self._settled[index] = frame["settled"]
            self._pending[index] = (float(frame.get("at", 0.0)), frame["pending"])
            self._lag_max = max(self._lag_max, frame["lag_max"])

    def _settled_until(self) -> int:
        """Seconds before this one have every request of theirs settled, by every worker's last frame."""
        if len(self._settled) < self.workers:
            return 0
        return min(self._settled.values()) // _SLOTS_PER_S

    async def _ticker(self) -> None:
        assert self._t0 is not None
        while True:
            await anyio.sleep(_SLOT_S)
            now = time.monotonic() - self._t0
            # a second is written once every worker vouches that each request due in it has its outcome; one
            # that cannot (frozen, dead) holds it back at most until the requests' timeout and a grace are over
            stale = int(now - self.spec.timeout_s - self.spec.max_lag_s - _ROW_GRACE_S)
            with self._lock:
                rows = self._close_seconds(min(int(now), max(self._settled_until(), stale)))
            self._emit(rows)

    def _emit(self, rows: list[dict[str, Any]]) -> None:
        if self.on_second is None:
            return
        for row in rows:
            try:
                self.on_second(dict(row))
            except Exception:  # a broken progress display must never stop the load
                self.on_second = None
                return

    # ---- recording ----------------------------------------------------------------------------------------
    def _row(self, sec: int, present: list[_Slot]) -> dict[str, Any]:
        lat = _concat(present)
        ok = sum(s.ok for s in present)
        return {
            "t": sec,
            "scheduled": sum(s.scheduled for s in present),
            "sent": sum(s.sent for s in present),
            "ok": ok,
            "errors": sum(s.errors for s in present),
            "failed_status": sum(s.failed_status for s in present),
            "failed_network": sum(s.failed_network for s in present),
            "not_sent": sum(s.behind + s.overflow for s in present),
            "p50": _pct(lat, 50),
            "p95": _pct(lat, 95),
            "p99": _pct(lat, 99),
            "throughput": float(ok),
            "in_flight": self.in_flight,
        }

    def _present(self, sec: int) -> list[_Slot]:
        return [s for k in range(_SLOTS_PER_S) if (s := self._slots.get(sec * _SLOTS_PER_S + k)) is not None]

    def _close_seconds(self, until: int) -> list[dict[str, Any]]:
        """Summarise every second before `until` not yet summarised; drop histograms past the retention."""
        if until <= self._closed_until:
            return []  # nothing to write, nor to drop (the ticker asks every 100 ms)
        rows = []
        for sec in range(self._closed_until, max(self._closed_until, until)):
            row = self._row(sec, self._present(sec))
            self._rows.append(row)
            rows.append(row)
        self._closed_until = max(self._closed_until, until)
        horizon = int((self._closed_until - RETENTION_S) / _SLOT_S)
        if horizon > 0:
            for slot_id in [s for s in self._slots if s < horizon]:
                del self._slots[slot_id]
        kept = sum(slot.buckets for slot in self._slots.values())
        for slot_id in sorted(self._slots):
            if kept <= RETAINED_BUCKETS or slot_id >= self._closed_until * _SLOTS_PER_S:
                break
            slot = self._slots[slot_id]
            kept -= slot.buckets
            slot.latencies.clear()
        return rows

    # ---- reading ------------------------------------------------------------------------------------------
    def elapsed(self) -> float:
        if self._t0 is None or self._t0 == math.inf:
            return 0.0
        end = self._t_end if self._t_end is not None else time.monotonic()
        return max(0.0, end - self._t0)

    def snapshot(self, window_s: float = 1.0) -> dict[str, float | None]:
        """Figures of the requests scheduled in the trailing `window_s` seconds (100 ms granularity); see the
        `LoadFigures` protocol. A request of the window not answered yet counts in the latency percentiles with
        the time it had waited at its worker's last frame (a lower bound), so a stall shows while it lasts."""
        elapsed = self.elapsed()
        window = min(max(window_s, _SLOT_S), RETENTION_S)
        return self._figures(
            int(max(0.0, elapsed - window) / _SLOT_S),
            int(elapsed / _SLOT_S),
            min(window, elapsed),
            live=self._t_end is None,
        )

    def window(self, start_s: float, end_s: float) -> dict[str, float | None]:
        """Figures of the requests scheduled between `start_s` and `end_s` seconds into the load, whenever they
        were answered: a run's own traffic, asked for once the load has stopped. Only the 100 ms slots lying
        wholly inside the span count: a slot that a boundary cuts holds requests scheduled on both sides of it
        (a run's last ones, sent before its rollback, and the next run's first), so it counts in neither window,
        and no window holds a request scheduled outside it. A span holding no whole slot has no figures."""
        # the offsets are rounded to the millisecond: a boundary on a slot's edge must not lose that slot
        first = max(0, math.ceil(start_s / _SLOT_S - 1e-6))
        last = math.floor(end_s / _SLOT_S + 1e-6) - 1
        return self._figures(first, last, max(0, last - first + 1) * _SLOT_S)

    def _figures(self, first: int, last: int, covered: float, live: bool = False) -> dict[str, float | None]:
        with self._lock:
            present = [s for k in range(first, last + 1) if (s := self._slots.get(k)) is not None]
            parts = [h for s in present for h in s.latencies]
            if live:
                # the wait as of the worker's last frame: the request may have been answered since, so its
                # wait up to now is no bound (a 100 ms old frame would add up to 100 ms to a quick answer)
                waits = [
                    (at - off, n)
                    for at, pending in self._pending.values()
                    for k, (n, off) in pending.items()
                    if first <= k <= last and at > off
                ]
                if waits:
                    keys, inverse = np.unique(
                        _bucket_keys(np.array([w for w, _ in waits]) * 1000.0), return_inverse=True
                    )
                    counts = np.bincount(inverse, weights=[n for _, n in waits]).astype(np.int64)
                    parts.append((keys, counts))
            lat = _merge(parts)
            figures = {key: sum(getattr(s, key) for s in present) for key in _FIGURES}
            errors = sum(s.errors for s in present)
        ok = figures["ok"]
        done = ok + errors
        return {
            "error_rate": errors / done if done else None,
            "availability": ok / done if done else None,
            "latency_p50": _pct(lat, 50),
            "latency_p95": _pct(lat, 95),
            "latency_p99": _pct(lat, 99),
            "throughput": ok / covered if covered > 0 else None,
            **{key: float(v) for key, v in figures.items()},
            "errors": float(errors),
            "in_flight": float(self.in_flight),
            "window_s": round(covered, 3),
        }

    def summary(self) -> dict[str, Any]:
        """Totals, the accounting of every scheduled request, HDR percentiles, the per-second series and the
        error breakdown (the journal's `load`)."""
        elapsed = self.elapsed()
        with self._lock:
            if self._t_end is None and self._t0 not in (None, math.inf):
                # a live summary includes the seconds not written yet (requests still out, or the second in
                # progress), marked partial, without closing them
                series = [dict(r) for r in self._rows] + [
                    {**self._row(sec, present), "partial": True}
                    for sec in range(self._closed_until, int(elapsed) + 1)
                    if (present := self._present(sec))
                ]
            else:
                series = [dict(r) for r in self._rows]
            hist = self._hist
            count = hist.total

            def ms(us: float) -> float:
                return round(us / 1000.0, 3)

            latency = (
                {
                    "min": ms(hist.min()),
                    "mean": ms(hist.mean()),
                    "p50": ms(hist.percentile(50)),
                    "p90": ms(hist.percentile(90)),
                    "p95": ms(hist.percentile(95)),
                    "p99": ms(hist.percentile(99)),
                    "p999": ms(hist.percentile(99.9)),
                    "max": ms(hist.max()),
                }
                if count
                else None
            )
            t = self._totals
            in_flight = self.in_flight
            overflow = t["overflow"]
            errors = t["failed_status"] + t["failed_network"] + overflow
            done = t["ok"] + errors
            errors_by: Counter[str] = Counter({f"status:{code}": n for code, n in self._status.items()})
            errors_by.update(self._net)
            if overflow:
                errors_by["overflow"] = overflow
            # the rate over the schedule's span (a finished run's drain of answers in flight is no sending)
            span = min(elapsed, self.spec.duration_s or math.inf)
            sent_rate = t["sent"] / span if span > 0 else None
            saturated = None
            if t["behind"]:
                saturated = {
                    "at": round(sent_rate or 0.0, 1),
                    "message": (
                        f"generator saturated at {sent_rate or 0:,.0f}/s (asked {self.spec.rate:g}/s): "
                        f"{t['behind']} requests not sent because the generator was behind"
                    ),
                }
            return {
                "spec": {
                    "url": self.spec.url,
                    "method": self.spec.method,
                    "rate": self.spec.rate,
                    "arrival": self.spec.arrival,
                    "timeout_s": self.spec.timeout_s,
                    "max_in_flight": self.spec.max_in_flight,
                    "connections": self.spec.connections,
                    "workers": self.workers,
                },
                "engine": "builtin",
                "started_at": (
                    datetime.fromtimestamp(self._t0_wall, UTC).isoformat() if self._t0_wall else None
                ),
                "t0": self._t0_wall,
                "duration_s": round(elapsed, 3),
                # every scheduled arrival is in exactly one place:
                # scheduled = sent + not_sent;  sent = ok + failed_status + failed_network + in_flight
                "scheduled": t["scheduled"],
                "sent": t["sent"],
                "ok": t["ok"],
                "failed_status": t["failed_status"],
                "failed_network": t["failed_network"],
                "not_sent": {"behind": t["behind"], "in_flight_limit": overflow},
                "in_flight": in_flight,
                "errors": errors,
                "overflow": overflow,
                "error_rate": round(errors / done, 6) if done else None,
                "achieved_rate": round(sent_rate, 3) if sent_rate is not None else None,
                "throughput": round(t["ok"] / elapsed, 3) if elapsed > 0 else None,
                "send_lag_max_ms": round(self._lag_max * 1000.0, 3),
                "saturated": saturated,
                "latency_ms": latency,
                "worker_errors": list(self._worker_errors),
                "errors_by": dict(errors_by.most_common()),
                "series": series,
            }


class _WorkerProc:
    """One worker process and the pipes to it (see faultplane.engine.load_worker for the protocol)."""

    def __init__(self, proc: anyio.abc.Process, index: int) -> None:
        self.proc = proc
        self.index = index
        assert proc.stdout is not None and proc.stdin is not None
        self.out = BufferedByteReceiveStream(proc.stdout)
        self.began = False
        self.ended = False
        self._stderr = bytearray()

    @classmethod
    async def start(cls, job: dict[str, Any]) -> _WorkerProc:
        proc = await anyio.open_process(
            [sys.executable, "-m", "faultplane.engine.load_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        w = cls(proc, job["index"])
        await w._send(json.dumps(job) + "\n")
        return w

    async def _send(self, line: str) -> None:
        assert self.proc.stdin is not None
        # a worker that is gone already is reported by its missing `end` frame
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await self.proc.stdin.send(line.encode())

    async def ready(self) -> None:
        frame = await self.frame()
        if frame is None or not frame.get("ready"):
            raise RuntimeError("load worker did not start: " + await self.failure())

    async def begin(self, t0: float) -> None:
        self.began = True
        await self._send(f"{t0!r}\n")

    async def stop(self) -> None:
        await self._send("stop\n")

    async def frame(self) -> dict[str, Any] | None:
        try:
            (size,) = struct.unpack(">I", await self.out.receive_exactly(4))
            return pickle.loads(await self.out.receive_exactly(size))  # our own child's frames
        except (
            anyio.EndOfStream,
            anyio.IncompleteRead,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
        ):
            return None

    async def failure(self) -> str:
        if self.proc.stderr is not None:
            with anyio.move_on_after(2):
                async for chunk in self.proc.stderr:
                    self._stderr += chunk
                    if len(self._stderr) > 20_000:
                        break
        text = self._stderr.decode(errors="replace").strip().splitlines()
        return text[-1] if text else f"worker exited ({self.proc.returncode})"

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            if self.proc.returncode is None:
                with anyio.move_on_after(1):
                    await self.proc.wait()
            if self.proc.returncode is None:
                self.proc.kill()
            await self.proc.aclose()
