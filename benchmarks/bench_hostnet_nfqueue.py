"""hostnet.netem's userspace NFQUEUE engine: what a TCP download and a UDP round trip look like through it,
against the same veth pair with no fault, measured in the same run.

Rows: no fault (the baseline); the engine passing packets with a token effect (duplicate 0.01%: its per-packet
cost); 10 ms delay (a delayed flow must not be throttled by its held packets); 10 ms +/- 5 ms jitter. Columns:
download MB/s and its ratio to the baseline, packets through the queue per second (the kernel's count), the
helper's CPU seconds per GiB (less sensitive to the machine's load than MB/s), and the median UDP round trip
(for the delay rows: its excess over the asked delay is the engine's timing error).

Needs root (network namespaces). Prints a table; exits 0 (nothing is enforced: shared machines are noisy).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack

import anyio
import psutil
from bench_helpers import suite_helpers

from faultplane.drivers.base import ActivityContext, get_activity

MIB = 16
SERVER = r"""
import socket, sys, threading
host = sys.argv[1]
def bulk():
    s = socket.create_server((host, 9000))
    block = b"x" * (1 << 20)
    while True:
        c, _ = s.accept()
        with c:
            for _ in range(int(sys.argv[2])):
                c.sendall(block)
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((host, 9001))
    while True:
        d, a = s.recvfrom(64); s.sendto(d, a)
threading.Thread(target=bulk, daemon=True).start()
threading.Thread(target=udp, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"""
CLIENT = r"""
import json, socket, sys, time
host = sys.argv[1]
t0 = time.perf_counter(); n = 0
with socket.create_connection((host, 9000), timeout=60) as s:
    while d := s.recv(1 << 16):
        n += len(d)
dl = time.perf_counter() - t0
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(2)
rtts = []
for i in range(200):
    t = time.perf_counter(); u.sendto(b"%d" % i, (host, 9001))
    try:
        while u.recv(64) != b"%d" % i:
            pass
        rtts.append(time.perf_counter() - t)
    except socket.timeout:
        pass
print(json.dumps({"bytes": n, "s": dl, "rtts": rtts}))
"""


def measure(ns_a: str, ip_b: str) -> dict:  # type: ignore[type-arg]
    out = subprocess.run(
        ["ip", "netns", "exec", ns_a, sys.executable, "-c", CLIENT, ip_b],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return json.loads(out.stdout)


async def main() -> int:
    if os.geteuid() != 0:
        print("bench_hostnet_nfqueue: needs root (network namespaces); skipped")
        return 0
    os.environ.setdefault("FAULTPLANE_NO_WATCHDOG", "1")
    server = None
    rows = []
    namespaces = ExitStack()
    try:
        pair = namespaces.enter_context(suite_helpers("netns_helpers").veth_pair("fpb", "fq", "10.214.0"))
        a, b, vb, ip_b = pair.a, pair.b, pair.veth_b, pair.ip_b
        server = subprocess.Popen(
            ["ip", "netns", "exec", b, sys.executable, "-c", SERVER, ip_b, str(MIB)], stdout=subprocess.PIPE
        )
        assert server.stdout is not None and server.stdout.readline().strip() == b"ready"
        cases: list[tuple[str, dict | None]] = [  # type: ignore[type-arg]
            ("no fault", None),
            ("engine, token effect", {"duplicate_percent": 0.01}),
            ("delay 10 ms", {"delay_ms": 10}),
            ("delay 10 +/- 5 ms", {"delay_ms": 10, "jitter_ms": 5}),
        ]
        for name, fx in cases:
            ctx = ActivityContext(run_id="bench-nfqueue")
            info = None
            if fx is not None:
                info = await get_activity("hostnet", "netem").invoke(
                    ctx, {"netns": b, "interface": vb, "engine": "nfqueue", **fx}
                )
            helper = psutil.Process(info["helper_pid"]) if info else None
            cpu0 = sum(helper.cpu_times()[:2]) if helper else 0.0
            t0 = time.perf_counter()
            res = measure(a, ip_b)
            wall = time.perf_counter() - t0
            row = {"case": name, "mbs": res["bytes"] / res["s"] / 1e6, "rtt": statistics.median(res["rtts"])}
            if helper and info:
                q = await get_activity("hostnet", "queued_packets").invoke(
                    ctx, {"netns": b, "queue": info["queue"]}
                )
                row["pps"] = q["queued"] / wall
                row["cpu_gib"] = (sum(helper.cpu_times()[:2]) - cpu0) / (res["bytes"] / (1 << 30))
            rows.append(row)
            await ctx.revert_all()
    finally:
        if server is not None:
            server.kill()
            server.wait(5)
        namespaces.close()
    base = rows[0]["mbs"]
    print(f"{'case':<24}{'MB/s':>9}{'ratio':>8}{'queue pkt/s':>13}{'CPU s/GiB':>11}{'UDP RTT p50':>13}")
    for r in rows:
        pps = f"{r['pps']:,.0f}" if "pps" in r else "-"
        cpu = f"{r['cpu_gib']:.1f}" if "cpu_gib" in r else "-"
        print(
            f"{r['case']:<24}{r['mbs']:>9.1f}{r['mbs'] / base:>8.3f}{pps:>13}{cpu:>11}{r['rtt'] * 1000:>10.2f} ms"
        )
    print(f"({MIB} MiB download per row over a veth pair; 200 sequential UDP echoes for the round trip)")
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
