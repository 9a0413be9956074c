"""One load-generator worker process: a lean HTTP/1.1 client on raw asyncio protocols (uvloop when present).

Run by `faultplane.engine.load_generator.LoadGenerator` as `python -m faultplane.engine.load_worker`; nothing
else imports it. It imports only the standard library, httptools and uvloop, so a worker starts in a fraction of
a second and none of its CPU goes to the engine's machinery.

Protocol with the parent (stdin/stdout, the parent's pipes):
- stdin, line 1: the job as JSON (see `Job`); the worker answers with a `ready` frame;
- stdin, line 2: the shared start instant (`time.monotonic()` is one clock for every process on the machine);
- stdin, `stop` or end of file: stop scheduling, wait for the answers in flight (each bounded by the timeout),
  send the last frame and an `end` frame, exit. A parent that dies closes the pipe: no orphaned load.
- stdout: frames, a 4-byte big-endian length then a pickle (the parent started this process: trusted), one
  per 100 ms that saw anything: for every *scheduled* slot (the 100 ms its arrivals were due in) that changed,
  its counts and the latencies (ms, float32) of its responses; the requests still pending per slot; and
  `settled`, the first slot that may still change (every slot before it is final).

Accounting is by schedule, never by answer: a request due in slot k is counted in slot k whenever it is
answered, fails or is given up, so a stalled interval keeps every one of its requests and a later interval is
never blamed for an earlier one's slow answers.

Open model: arrival i of this worker is due at `t0 + (worker + i * workers) / rate` (or at seeded exponential
gaps), whatever the responses do. Latency counts from the due time, as wrk2 does, so a stalled server (or a
late generator) shows in every request queued behind it. An arrival the generator reaches more than
`max_lag_s` after its due time is not sent and is counted as `behind`: the generator, not the server, was the
bottleneck, and a saturated generator levels off at its own capacity instead of piling up work.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import os
import pickle
import random
import ssl
import struct
import sys
import time
from array import array
from collections import Counter, deque
from typing import Any
from urllib.parse import urlsplit

import httptools

SLOT_S = 0.1
# the generator counts itself as the bottleneck over a slot in which its process was busy this share of the
# time, or reached an arrival this late: a refused arrival is then `behind`, not the service's overflow
SATURATED_CPU = 0.85
SATURATED_LAG_S = 0.05
# an arrival refused by the in-flight bound while the generator is this late is the generator's: its answers
# are waiting unread as much as the service is slow
REFUSED_LAG_S = 0.01
_SWEEP_S = 0.02
# The shortest sleep before the next arrival. uvloop's timers count whole milliseconds and run a shorter delay
# at once (call_soon): waiting 0.1 ms for the next of 10,000 arrivals a second spun the worker's core at 100 %
# however little it sent, starving the service next to it. Arrivals are sent at most ~1 ms late instead, and
# their latency still counts from their scheduled time (wrk2's timers are milliseconds too).
_MIN_SLEEP_S = 0.001


def _cpu_demand() -> float:
    """Seconds this process ran or was ready to run (on Linux: CPU time plus run-queue wait, from schedstat).

    On a shared machine a generator starved of CPU is as much the bottleneck as one using a whole core: both
    mean it wanted the CPU all the time. Elsewhere, CPU time alone."""
    try:
        with open("/proc/self/schedstat", "rb") as fh:
            run_ns, wait_ns, _ = fh.read().split()
        return (int(run_ns) + int(wait_ns)) / 1e9
    except (OSError, ValueError):
        return time.process_time()


def _request_bytes(job: dict[str, Any]) -> tuple[bytes, str, int, bool]:
    u = urlsplit(job["url"])
    tls = u.scheme == "https"
    host = u.hostname or "127.0.0.1"
    port = u.port or (443 if tls else 80)
    target = (u.path or "/") + (f"?{u.query}" if u.query else "")
    headers = {k.lower(): (k, v) for k, v in (job.get("headers") or {}).items()}
    host_header = u.netloc.rpartition("@")[2]
    lines = [f"{job['method']} {target} HTTP/1.1"]
    if "host" not in headers:
        lines.append(f"Host: {host_header}")
    if "user-agent" not in headers:
        lines.append("User-Agent: faultplane-load")
    body = b""
    if job.get("json") is not None:
        body = json.dumps(job["json"], separators=(",", ":"), ensure_ascii=False).encode()
        if "content-type" not in headers:
            lines.append("Content-Type: application/json")
    elif job.get("body") is not None:
        body = job["body"].encode()
    lines += [f"{k}: {v}" for k, v in headers.values() if k.lower() != "content-length"]
    if body or job["method"] in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    raw = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    return raw, host, port, tls


class _Acc:
    """The outcomes so far of the arrivals due in one 100 ms slot, not yet reported."""

    __slots__ = ("behind", "lat", "net", "ok", "overflow", "sched", "sent", "status")

    def __init__(self) -> None:
        self.sched = self.sent = self.ok = self.behind = self.overflow = 0
        self.status: Counter[int] = Counter()
        self.net: Counter[str] = Counter()
        self.lat = array("f")

    def frame(self) -> dict[str, Any]:
        return {
            "scheduled": self.sched,
            "sent": self.sent,
            "ok": self.ok,
            "behind": self.behind,
            "overflow": self.overflow,
            "status": dict(self.status),
            "net": dict(self.net),
            "lat": self.lat.tobytes(),
        }


class _Conn(asyncio.Protocol):
    """One keep-alive connection carrying one request at a time (no pipelining, as wrk and wrk2)."""

    __slots__ = ("deadline", "due", "head", "parser", "transport", "w")

    def __init__(self, w: Worker) -> None:
        self.w = w
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.due = 0.0  # the scheduled time of the request in flight (0: idle)
        self.deadline = 0.0
        self.head = w.head

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.w.failed(self, "ProtocolError")
        except httptools.HttpParserError:
            self.w.failed(self, "ProtocolError")

    def on_headers_complete(self) -> None:
        if self.head:  # a HEAD answer has no body whatever its Content-Length says
            self.w.answered(self, self.parser.get_status_code(), self.parser.should_keep_alive())
            self.parser = httptools.HttpResponseParser(self)

    def on_message_complete(self) -> None:
        if not self.head:
            self.w.answered(self, self.parser.get_status_code(), self.parser.should_keep_alive())

    def connection_lost(self, exc: Exception | None) -> None:
        self.w.lost(self)


class Worker:
    def __init__(self, job: dict[str, Any], out: Any) -> None:
        self.job = job
        self.out = out
        self.req, self.host, self.port, tls = _request_bytes(job)
        self.head = job["method"] == "HEAD"
        self.ssl: ssl.SSLContext | None = None
        if tls:
            self.ssl = ssl.create_default_context()
            if job.get("insecure"):
                self.ssl.check_hostname = False
                self.ssl.verify_mode = ssl.CERT_NONE
        self.ok_status = set(job["ok_status"]) if job.get("ok_status") else None
        self.timeout = float(job["timeout_s"])
        self.limit = int(job["max_in_flight"])
        self.max_lag = float(job["max_lag_s"])
        self.max_conns = int(job["connections"])
        self.queue: deque[float] = deque()
        self.idle: list[_Conn] = []
        self.busy: set[_Conn] = set()
        self.connecting: Counter[float] = Counter()  # due times of the requests waiting for a new connection
        self.t0 = 0.0
        self._settled = -1
        self.next_due = 0.0  # the first arrival not handled yet: its slot and later ones may still change
        self.stopping = False
        self._reset_slot()
        self.totals: Counter[str] = Counter()
        self.saturated = False
        self._busy_checked = 0.0
        self._busy_recent = False
        self._cpu_at, self._wall_at = _cpu_demand(), time.monotonic()

    def _reset_slot(self) -> None:
        self.acc: dict[int, _Acc] = {}
        self.refused: Counter[int] = Counter()  # arrivals refused by the bound, awaiting a verdict
        self.s_lag_max = 0.0

    def slot_of(self, due: float) -> int:
        # 1 µs of slack: `t0 + 50 / 50` minus t0 may come out a hair under 1.0 in floating point
        return max(0, int((due - self.t0) / SLOT_S + 1e-5))

    def _acc(self, due: float) -> _Acc:
        return self._acc_of(self.slot_of(due))

    def _acc_of(self, k: int) -> _Acc:
        a = self.acc.get(k)
        if a is None:
            a = self.acc[k] = _Acc()
        return a

    @property
    def in_flight(self) -> int:
        return len(self.busy) + self.connecting.total() + len(self.queue)

    def pending_dues(self) -> list[float]:
        return [c.due for c in self.busy] + list(self.queue) + list(self.connecting.elements())

    # ---- sending ------------------------------------------------------------------------------------------
    def send(self, due: float, now: float) -> None:
        acc = self._acc(due)
        acc.sched += 1
        lag = now - due
        if lag > self.s_lag_max:
            self.s_lag_max = lag
        if lag > self.max_lag:
            acc.behind += 1
            return
        if self.in_flight >= self.limit:
            # the bound is reached because answers come back slowly: the service's doing, unless this process
            # is the one that cannot keep up (its core busy, its loop late), then the generator is behind.
            # Undecided now (the first burst has no CPU figure yet), it is judged when the 100 ms ends, by
            # what this process did over them
            if self.saturated or lag > REFUSED_LAG_S or self._busy_now(now):
                acc.behind += 1
            else:
                self.refused[self.slot_of(due)] += 1
            return
        acc.sent += 1  # issued: on the wire, connecting, or waiting for a connection of the pool
        if self.idle:
            self._start(self.idle.pop(), due, now)
        elif len(self.busy) + self.connecting.total() < self.max_conns:
            self.connecting[due] += 1
            asyncio.get_running_loop().create_task(self._connect(due, now + self.timeout))
        else:
            # every connection is busy: the request waits its turn here, its latency counting from its due
            # time (wrk2's correction); the wait is the server's doing, not the generator's
            self.queue.append(due)

    def _busy_now(self, now: float) -> bool:
        """Saturation measured since the last frame (at most every 10 ms): the first slot has no verdict yet."""
        if now - self._busy_checked >= 0.01 and now - self._wall_at >= 0.05:  # a shorter window is noise
            self._busy_checked = now
            cpu = _cpu_demand()
            self._busy_recent = (cpu - self._cpu_at) / max(1e-6, now - self._wall_at) > SATURATED_CPU
        return self._busy_recent

    def _start(self, conn: _Conn, due: float, now: float) -> None:
        conn.due = due
        conn.deadline = now + self.timeout
        self.busy.add(conn)
        conn.transport.write(self.req)  # type: ignore[union-attr]

    def _next(self, conn: _Conn) -> None:
        """A connection is free: it takes the oldest waiting request, or goes idle."""
        while self.queue:
            due = self.queue.popleft()
            now = time.monotonic()
            if now - due > self.timeout:
                # waited longer than the timeout without a connection: timed out, never sent
                self._net_failure("timeout", due)
                continue
            self._start(conn, due, now)
            return
        self.idle.append(conn)

    async def warm_up(self) -> None:
        """Open the connections a fast service needs at this rate (5 ms each) before the clock starts, as wrk2
        does: otherwise the first burst is spent connecting and looks like a slow service. A failure here is
        no outcome: the scheduled requests will meet it themselves."""
        rate = float(self.job["rate"]) / int(self.job["workers"])
        want = min(self.max_conns, math.ceil(rate * 0.005))
        if want < 2:
            return
        loop = asyncio.get_running_loop()

        async def one() -> None:
            try:
                async with asyncio.timeout(min(self.timeout, 5.0)):
                    _, conn = await loop.create_connection(
                        lambda: _Conn(self), self.host, self.port, ssl=self.ssl
                    )
            except (OSError, TimeoutError):
                return
            self.idle.append(conn)

        await asyncio.gather(*(one() for _ in range(want)))

    async def _connect(self, due: float, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        conn: _Conn | None = None
        try:
            async with asyncio.timeout_at(deadline):
                _, conn = await loop.create_connection(
                    lambda: _Conn(self), self.host, self.port, ssl=self.ssl
                )
        except TimeoutError:
            self._connected(due)
            self._net_failure("timeout", due)
            return
        except OSError as exc:
            self._connected(due)
            self._net_failure(type(exc).__name__, due)
            return
        if not self._connected(due):
            # the run's end gave this request up already (counted as a timeout): the connection is spare
            if conn.transport is not None:
                conn.transport.close()
            return
        if conn.transport is None or conn.transport.is_closing():
            self._net_failure("ConnectionLost", due)
            return
        conn.due = due
        conn.deadline = deadline
        self.busy.add(conn)
        conn.transport.write(self.req)

    def _connected(self, due: float) -> bool:
        """The request due at `due` is no longer waiting for a connection; False when it was given up."""
        if self.connecting[due] <= 0:
            return False
        self.connecting[due] -= 1
        if not self.connecting[due]:
            del self.connecting[due]
        return True

    def _replace(self) -> None:
        """A connection went away: open another for the oldest waiting request, if any."""
        if self.queue:
            due = self.queue.popleft()
            now = time.monotonic()
            self.connecting[due] += 1
            asyncio.get_running_loop().create_task(self._connect(due, now + self.timeout))

    # ---- outcomes -----------------------------------------------------------------------------------------
    def _net_failure(self, kind: str, due: float) -> None:
        self._acc(due).net[kind] += 1

    def answered(self, conn: _Conn, status: int, keep_alive: bool) -> None:
        if conn not in self.busy:
            return  # an unsolicited answer (or one after its timeout): not a request of ours
        self.busy.discard(conn)
        acc = self._acc(conn.due)
        acc.lat.append((time.monotonic() - conn.due) * 1000.0)
        good = status in self.ok_status if self.ok_status is not None else status < 400
        if good:
            acc.ok += 1
        else:
            acc.status[status] += 1
        conn.due = 0.0
        if keep_alive:
            self._next(conn)
        else:
            if conn.transport is not None:
                conn.transport.close()
            self._replace()

    def failed(self, conn: _Conn, kind: str) -> None:
        if conn in self.busy:
            self.busy.discard(conn)
            self._net_failure(kind, conn.due)
            if conn.transport is not None:
                conn.transport.abort()
            self._replace()
        elif conn.transport is not None:
            conn.transport.abort()

    def lost(self, conn: _Conn) -> None:
        if conn in self.busy:
            self.busy.discard(conn)
            self._net_failure("ConnectionLost", conn.due)
            self._replace()
        elif conn in self.idle:
            self.idle.remove(conn)

    def sweep(self, now: float) -> None:
        expired = [c for c in self.busy if c.deadline <= now]
        for conn in expired:
            self.failed(conn, "timeout")

    # ---- reporting ----------------------------------------------------------------------------------------
    def flush(self, slot: int) -> None:
        """Report every scheduled slot that changed since the last frame (`slot`: the 100 ms just ended)."""
        cpu, wall = _cpu_demand(), time.monotonic()
        busy = (cpu - self._cpu_at) / max(1e-6, wall - self._wall_at)
        self.saturated = busy > SATURATED_CPU or self.s_lag_max > SATURATED_LAG_S
        self._cpu_at, self._wall_at = cpu, wall
        for k, n in self.refused.items():
            if self.saturated:
                self._acc_of(k).behind += n
            else:
                self._acc_of(k).overflow += n
        pending: dict[int, list[float]] = {}
        for due in self.pending_dues():
            k = self.slot_of(due)
            p = pending.get(k)
            if p is None:
                pending[k] = [1, due - self.t0]
            else:
                p[0] += 1
                p[1] = max(p[1], due - self.t0)
        settled = self.slot_of(self.next_due) if math.isfinite(self.next_due) else 1 << 62
        if pending:
            settled = min(settled, min(pending))
        if not self.acc and not pending and settled == self._settled:
            return  # nothing new to say
        self._settled = settled
        slots = {k: a.frame() for k, a in self.acc.items()}
        for a in self.acc.values():
            self.totals["scheduled"] += a.sched
            self.totals["sent"] += a.sent
            self.totals["ok"] += a.ok
            self.totals["behind"] += a.behind
            self.totals["overflow"] += a.overflow
            self.totals["failed_status"] += a.status.total()
            self.totals["failed_network"] += a.net.total()
        frame: dict[str, Any] = {
            "slot": slot,
            "slots": slots,
            # a request not answered yet has waited at least this long: gates see a stall while it lasts
            "pending": {k: (int(n), off) for k, (n, off) in pending.items()},
            "at": time.monotonic() - self.t0,  # when these were still pending (offset from the start)
            "settled": settled,
            "in_flight": self.in_flight,
            "lag_max": self.s_lag_max,
            "busy": round(busy, 3),
        }
        self._reset_slot()
        self.emit(frame)

    def emit(self, frame: dict[str, Any]) -> None:
        data = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
        self.out.write(struct.pack(">I", len(data)) + data)
        self.out.flush()

    # ---- the run ------------------------------------------------------------------------------------------
    async def run(self, t0: float, stop: asyncio.Event) -> None:
        job = self.job
        self.t0 = t0
        self._cpu_at, self._wall_at = _cpu_demand(), time.monotonic()  # the idle wait for t0 is no load
        workers, index = int(job["workers"]), int(job["index"])
        rate = float(job["rate"])
        duration = job.get("duration_s")
        end = t0 + duration if duration is not None else float("inf")
        rng = random.Random(f"{job.get('seed')}:{index}") if job["arrival"] == "poisson" else None
        worker_rate = rate / workers

        def due_at(i: int, prev: float) -> float:
            if rng is not None:
                return prev + rng.expovariate(worker_rate)
            return t0 + (index + i * workers) / rate

        state: dict[str, float] = {"i": 0, "due": due_at(0, t0)}
        self.next_due = state["due"]
        loop = asyncio.get_running_loop()
        finished = asyncio.Event()

        def tick() -> None:
            # a timer callback, not a coroutine: one timer per wake-up, every due arrival sent in it
            if stop.is_set():
                self.next_due = math.inf
                finished.set()
                return
            now = time.monotonic()
            due, i = state["due"], int(state["i"])
            if i == 0:
                # the CPU figure of the first 100 ms starts with the first arrival: the wait for the shared
                # start would read as an idle generator and its first burst's refusals as the service's
                self._cpu_at, self._wall_at = _cpu_demand(), now
            while due <= now and due < end:
                self.send(due, now)
                i += 1
                due = due_at(i, due)
            state["due"], state["i"] = due, i
            self.next_due = due
            if due >= end:
                self.next_due = math.inf
                finished.set()
            else:
                loop.call_later(max(_MIN_SLEEP_S, due - time.monotonic()), tick)

        loop.call_later(max(_MIN_SLEEP_S, state["due"] - time.monotonic()), tick)
        reporter = loop.create_task(self._report(stop))
        try:
            waiter = loop.create_task(stop.wait())
            await asyncio.wait(
                [waiter, loop.create_task(finished.wait())], return_when=asyncio.FIRST_COMPLETED
            )
            waiter.cancel()
            # the run is over: the answers in flight still count (each is bounded by the timeout)
            self.stopping = True
            self.next_due = math.inf  # nothing more is scheduled
            limit = time.monotonic() + self.timeout + 1.0
            while self.in_flight and time.monotonic() < limit:
                await asyncio.sleep(_SWEEP_S)
        finally:
            reporter.cancel()
            now = time.monotonic()
            # whatever is still unanswered now timed out
            self.sweep(float("inf"))
            for due in [*self.queue, *self.connecting.elements()]:
                self._net_failure("timeout", due)
            self.queue.clear()
            self.connecting.clear()
            self.flush(int((now - t0) / SLOT_S))
            for conn in self.idle:
                if conn.transport is not None:
                    conn.transport.close()
            self.emit({"end": True, "totals": dict(self.totals)})

    async def _report(self, stop: asyncio.Event) -> None:
        next_slot = 1
        while True:
            await asyncio.sleep(max(0.0, min(_SWEEP_S, self.t0 + next_slot * SLOT_S - time.monotonic())))
            now = time.monotonic()
            self.sweep(now)
            if now >= self.t0 + next_slot * SLOT_S:
                # everything counted so far belongs to the slot that just closed
                current = int((now - self.t0) / SLOT_S)
                self.flush(current - 1)
                next_slot = current + 1


async def _main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    job = json.loads(await reader.readline())
    worker = Worker(job, sys.stdout.buffer)
    await worker.warm_up()
    worker.emit({"ready": True, "pid": os.getpid()})
    line = await reader.readline()
    if not line.strip() or line.strip() == b"stop":
        worker.emit({"end": True, "totals": {}})
        return
    stop = asyncio.Event()

    async def watch_stdin() -> None:
        await reader.readline()  # `stop`, or end of file when the parent is gone
        stop.set()

    watcher = loop.create_task(watch_stdin())
    try:
        await worker.run(float(line), stop)
    finally:
        watcher.cancel()


def main() -> None:
    # the client makes few reference cycles; collecting the young generation every 700 allocations (the
    # default) costs pauses that would show as latency at 20,000 requests a second
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    try:
        import uvloop
    except ImportError:
        asyncio.run(_main())
    else:
        uvloop.run(_main())


if __name__ == "__main__":
    main()
