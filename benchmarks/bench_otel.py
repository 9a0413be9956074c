"""OpenTelemetry that never slows a run: `faultplane run` wall and CPU time with no telemetry, with a live OTLP/HTTP
receiver, with a dead collector port (nothing listens) and with a hung collector (accepts TCP, never answers).

Each case runs the same small experiment through the real CLI, `REPEAT` times, in fresh processes, interleaved so
that the machine's load falls on every case alike. Besides the process's wall and CPU time, a wrapper times what
telemetry itself takes inside the process: building, encoding and queueing the run's spans and metrics
(`emit_journal_spans`) plus the wait at exit (`otlp._at_exit`). That figure does not drown in the load of a shared
machine the way a whole process's wall time does; what a dead or hung collector adds on top of a live one is the
figure the issue bounds (< 100 ms).

    python benchmarks/bench_otel.py [REPEAT]     (default 5)
"""

from __future__ import annotations

import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench_helpers import free_port
from lab_policy import lab_config_home

REPEAT = int(sys.argv[1]) if len(sys.argv) > 1 else 5


class _Receiver(BaseHTTPRequestHandler):
    posts = 0

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).posts += 1
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


# runs the CLI in this process with telemetry's two entry points timed; the figure goes to a file
_WRAPPER = """
import atexit, sys, time
import faultplane.core.otlp as otlp
import faultplane.engine.journal as journal

spent = [0.0]
out = sys.argv[1]
emit = journal.emit_journal_spans

def timed_emit(*args, **kwargs):
    t = time.perf_counter()
    try:
        return emit(*args, **kwargs)
    finally:
        spent[0] += time.perf_counter() - t

def timed_exit():
    t = time.perf_counter()
    otlp._at_exit()
    spent[0] += time.perf_counter() - t
    with open(out, "w") as f:
        f.write(repr(spent[0]))

journal.emit_journal_spans = timed_emit
atexit.unregister(otlp._at_exit)
atexit.register(timed_exit)
sys.argv = ["faultplane", *sys.argv[2:]]
import runpy
runpy.run_module("faultplane.cli.main", run_name="__main__")
"""


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="fp-bench-otel-"))
    wrapper = work / "wrapper.py"
    wrapper.write_text(_WRAPPER, encoding="utf-8")
    spent_file = work / "spent"
    probe = {
        "type": "probe",
        "name": "p",
        "tolerance": {"type": "range", "range": [0, 200]},
        "provider": {"type": "python", "module": "json", "func": "loads", "arguments": {"s": "120"}},
    }
    exp = work / "exp.json"
    exp.write_text(
        json.dumps(
            {"title": "t", "steady-state-hypothesis": {"title": "h", "probes": [probe]}, "method": [probe]}
        ),
        encoding="utf-8",
    )

    live = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=live.serve_forever, daemon=True).start()
    hung = socket.socket()  # listens, never accepts: the kernel completes the handshake, nobody answers
    hung.bind(("127.0.0.1", 0))
    hung.listen(64)
    cases = {
        "no telemetry": None,
        "live receiver": f"http://127.0.0.1:{live.server_address[1]}",
        "dead port": f"http://127.0.0.1:{free_port()}",
        "hung collector": f"http://127.0.0.1:{hung.getsockname()[1]}",
    }
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    base.update(
        XDG_CONFIG_HOME=lab_config_home(work),
        XDG_DATA_HOME=str(work / "data"),
        XDG_STATE_HOME=str(work / "state"),
        FAULTPLANE_STORE=str(work / "store.duckdb"),
    )
    wall: dict[str, list[float]] = {k: [] for k in cases}
    cpu: dict[str, list[float]] = {k: [] for k in cases}
    inside: dict[str, list[float]] = {k: [] for k in cases}
    lines: dict[str, str] = {}
    try:
        for _ in range(REPEAT):
            for name, endpoint in cases.items():
                env = dict(base)
                if endpoint:
                    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
                    env["OTEL_EXPORTER_OTLP_TIMEOUT"] = "10000"  # the spec's default: what a user would wait
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                t = time.perf_counter()
                proc = subprocess.run(
                    [sys.executable, str(wrapper), str(spent_file), "run", str(exp), "--format", "json"],
                    capture_output=True,
                    text=True,
                    env=env,
                    timeout=120,
                )
                wall[name].append(time.perf_counter() - t)
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[name].append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
                if proc.returncode != 0:
                    raise SystemExit(f"{name}: run failed: {proc.stderr[-2000:]}")
                lines[name] = " | ".join(ln for ln in proc.stderr.splitlines() if ln.strip())
                inside[name].append(float(spent_file.read_text()))
        ref = statistics.median(wall["no telemetry"])
        live_in = statistics.median(inside["live receiver"])
        print(f"`faultplane run` of a 1-probe experiment, median of {REPEAT} (export timeout 10 s)")
        print(
            f"{'case':<18}{'wall (s)':>10}{'CPU (s)':>10}{'wall vs none':>14}"
            f"{'telemetry (ms)':>16}{'vs live (ms)':>14}"
        )
        for name in cases:
            w, c, i = (statistics.median(x[name]) for x in (wall, cpu, inside))
            print(
                f"{name:<18}{w:>10.3f}{c:>10.3f}{(w - ref) * 1000:>12.0f}ms"
                f"{i * 1000:>16.1f}{(i - live_in) * 1000:>14.1f}"
            )
        print(
            f"live receiver got {_Receiver.posts} POSTs ({2 * REPEAT} expected: traces and metrics per run)"
        )
        for name in ("dead port", "hung collector"):
            print(f"{name} stderr: {lines.get(name) or '(nothing)'}")
        worst = max(statistics.median(inside[n]) for n in ("dead port", "hung collector"))
        ok = (worst - live_in) * 1000 < 100
        print(
            f"target (a dead or hung collector adds < 100 ms over a live one): {'met' if ok else 'NOT met'}"
        )
        return 0
    finally:
        live.shutdown()
        hung.close()


if __name__ == "__main__":
    raise SystemExit(main())
