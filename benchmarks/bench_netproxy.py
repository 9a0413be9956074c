"""Netproxy overhead: throughput and round-trip latency through a route with no toxic vs a direct loopback
connection, measured in the same run. Targets: >= 50% of direct throughput with 64 KiB writes, < 0.2 ms
added p50 round-trip latency.

The sink/echo server and the proxy each run in their own process, the client in this one, all on loopback.
Prints a table; exits 0 (targets are reported, not enforced, since shared CI machines are noisy).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import time
from multiprocessing import Process

CHUNK = 64 * 1024
TOTAL_BYTES = 512 * 1024 * 1024
THROUGHPUT_MAX_S = 6.0
PINGS = 3000
ROUNDS = 5


def _server(port_conn: object) -> None:
    """Sink for streams ('S'), echo for pings ('E'), one thread per connection."""
    import threading

    srv = socket.create_server(("127.0.0.1", 0), backlog=64)
    port_conn.send(srv.getsockname()[1])  # type: ignore[attr-defined]

    def handle(c: socket.socket) -> None:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        mode = c.recv(1)
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        if mode == b"S":
            total = 0
            while True:
                n = c.recv_into(view)
                if not n:
                    break
                total += n
            c.sendall(total.to_bytes(8, "big"))
        else:
            while True:
                data = c.recv(64)
                if not data:
                    break
                c.sendall(data)
        c.close()

    while True:
        c, _ = srv.accept()
        threading.Thread(target=handle, args=(c,), daemon=True).start()


def throughput(port: int) -> float:
    payload = os.urandom(CHUNK)
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"S")
        sent = 0
        start = time.perf_counter()
        while sent < TOTAL_BYTES and time.perf_counter() - start < THROUGHPUT_MAX_S:
            s.sendall(payload)
            sent += CHUNK
        s.shutdown(socket.SHUT_WR)
        got = int.from_bytes(s.recv(8), "big")
        elapsed = time.perf_counter() - start
    assert got == sent, f"sink received {got} of {sent} bytes"
    return sent / elapsed / 1e6


def pings(port: int) -> list[float]:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(b"E")
        out = []
        for _ in range(PINGS):
            t0 = time.perf_counter()
            s.sendall(b"x" * 32)
            n = 0
            while n < 32:
                n += len(s.recv(64))
            out.append((time.perf_counter() - t0) * 1000.0)
        return out


def main() -> int:
    from multiprocessing import Pipe

    parent, child = Pipe()
    server = Process(target=_server, args=(child,), daemon=True)
    server.start()
    up_port = parent.recv()
    proxy = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "faultplane.drivers.netproxy",
            "--upstream",
            f"127.0.0.1:{up_port}",
            "--control",
            "none",
            "--no-registry",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        info = json.loads(proxy.stdout.readline())  # type: ignore[union-attr]
        proxy_port = int(info["routes"][0]["listen"].rsplit(":", 1)[1])
        rows = {"direct": {"mbps": [], "p50": [], "p99": []}, "netproxy": {"mbps": [], "p50": [], "p99": []}}
        for _ in range(ROUNDS):  # interleave so drift in machine load hits both alike
            for label, port in (("direct", up_port), ("netproxy", proxy_port)):
                rows[label]["mbps"].append(throughput(port))
                lat = sorted(pings(port))
                rows[label]["p50"].append(statistics.median(lat))
                rows[label]["p99"].append(lat[int(len(lat) * 0.99)])
        d, p = rows["direct"], rows["netproxy"]
        med = statistics.median
        ratio = med(p["mbps"]) / med(d["mbps"])
        added = med(p["p50"]) - med(d["p50"])
        print(f"{'path':<10} {'MB/s (64 KiB writes)':>22} {'p50 RTT ms':>12} {'p99 RTT ms':>12}")
        for label in ("direct", "netproxy"):
            r = rows[label]
            print(f"{label:<10} {med(r['mbps']):>22.1f} {med(r['p50']):>12.4f} {med(r['p99']):>12.4f}")
        print()
        print(f"throughput ratio: {ratio:.2f}  (target >= 0.50: {'PASS' if ratio >= 0.5 else 'FAIL'})")
        print(f"added p50 RTT: {added:.4f} ms  (target < 0.2 ms: {'PASS' if added < 0.2 else 'FAIL'})")
    finally:
        proxy.terminate()
        proxy.wait(10)
        server.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
