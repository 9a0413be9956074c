"""MCP server throughput: `faultplane mcp` read tools against the SDK's bare server with one trivial tool.

Both run as real subprocesses, over stdio (requests pipelined on the one connection) and over streamable
HTTP (stateless, JSON responses; one keep-alive connection per client), measured in the same run. For each
transport and concurrency (1 and 16 clients) it prints calls/s of each server, their ratio and Faultplane's
p50 per call. Targets: chaos_status under 2 ms per call over stdio at one client, and 16 clients faster than
one (calls are not serialised behind one another).

    python benchmarks/bench_mcp_server.py [--seconds S] [--tool chaos_status]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2
from bench_helpers import free_port, sdk_server, suite_helpers, wait_port
from lab_policy import lab_config_home

BARE = sdk_server(
    "bare",
    """
@mcp.tool()
def chaos_status() -> dict:
    return {"active_faults": [], "registered_experiments": 0, "total_runs": 0}
""",
)
PY = sys.executable
TARGET_STDIO_MS = 2.0
REPEATS = 3
jsonrpc = suite_helpers("jsonrpc_helpers")
INIT = jsonrpc.initialize(0)


def _call(i: int, tool: str) -> bytes:
    return json.dumps(jsonrpc.tool_call(i, tool)).encode()


def _env(root: Path) -> dict[str, str]:
    (root / "experiments").mkdir(parents=True, exist_ok=True)
    return {
        **os.environ,
        "FAULTPLANE_STORE": str(root / "store.duckdb"),
        "FAULTPLANE_EXPERIMENTS": str(root / "experiments"),
        "XDG_CONFIG_HOME": lab_config_home(root),
        "XDG_STATE_HOME": str(root / "state"),
        "XDG_DATA_HOME": str(root / "data"),
    }


async def _stdio_rate(
    argv: list[str], env: dict[str, str], tool: str, clients: int, seconds: float
) -> tuple[float, float]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        limit=1 << 24,
    )
    assert proc.stdin and proc.stdout
    waiting: dict[int, asyncio.Future[None]] = {}

    async def reader() -> None:
        assert proc.stdout
        while line := await proc.stdout.readline():
            rid = json.loads(line).get("id")
            fut = waiting.pop(rid, None)
            if fut is not None:
                fut.set_result(None)

    read_task = asyncio.create_task(reader())
    loop = asyncio.get_running_loop()
    ids = iter(range(1, 10**9))

    async def rpc(frame_of: Any) -> None:
        rid = next(ids)
        fut = loop.create_future()
        waiting[rid] = fut
        proc.stdin.write(frame_of(rid) + b"\n")  # type: ignore[union-attr]
        await asyncio.wait_for(fut, 60)

    await rpc(lambda i: json.dumps({**INIT, "id": i}).encode())
    proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    for _ in range(20):  # warm-up: imports, first store open, caches
        await rpc(lambda i: _call(i, tool))
    lat: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            await rpc(lambda i: _call(i, tool))
            lat.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    elapsed = time.perf_counter() - t0
    proc.stdin.close()
    read_task.cancel()
    try:
        await asyncio.wait_for(proc.wait(), 10)
    except TimeoutError:
        proc.kill()
    return len(lat) / elapsed, statistics.median(lat) * 1000


async def _http_rate(url: str, tool: str, clients: int, seconds: float) -> tuple[float, float]:
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    lat: list[float] = []
    limits = httpx2.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx2.AsyncClient(timeout=60, limits=limits) as client:
        init = await client.post(url, content=json.dumps(INIT), headers=headers)
        sid = init.headers.get("mcp-session-id")
        if sid:
            headers["mcp-session-id"] = sid
            await client.post(
                url, content=b'{"jsonrpc":"2.0","method":"notifications/initialized"}', headers=headers
            )
        headers["mcp-protocol-version"] = "2025-11-25"
        for i in range(20):
            (await client.post(url, content=_call(i + 1, tool), headers=headers)).raise_for_status()
        deadline = time.perf_counter() + seconds
        counter = iter(range(100, 10**9))

        async def worker() -> None:
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                r = await client.post(url, content=_call(next(counter), tool), headers=headers)
                r.raise_for_status()
                lat.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        elapsed = time.perf_counter() - t0
    return len(lat) / elapsed, statistics.median(lat) * 1000


def _start_http(argv: list[str], env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, proc, timeout=60)
    return proc


def _best(bare: Any, ours: Any) -> tuple[float, float, float]:
    """Alternating repeats, best of each (this shared VM's speed drifts between identical runs)."""
    b = f = 0.0
    p50 = float("inf")
    for _ in range(REPEATS):
        b = max(b, asyncio.run(bare())[0])
        rate, lat = asyncio.run(ours())
        f, p50 = max(f, rate), min(p50, lat)
    return b, f, p50


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--tool", default="chaos_status")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        bare = root / "bare.py"
        bare.write_text(BARE)
        env = _env(root)
        fp = [PY, "-m", "faultplane.cli.main", "mcp", "--seed", "1"]
        for clients in (1, 16):
            rows.append(
                (
                    "stdio",
                    clients,
                    *_best(
                        lambda: _stdio_rate([PY, str(bare)], env, args.tool, clients, args.seconds),  # noqa: B023 (called at once)
                        lambda: _stdio_rate(fp, env, args.tool, clients, args.seconds),  # noqa: B023 (called at once)
                    ),
                )
            )
        bport, fport = free_port(), free_port()
        bproc = _start_http([PY, str(bare), "http", str(bport)], env, bport)
        fproc = _start_http(
            [*fp, "--transport", "http", "--port", str(fport), "--stateless", "--json-response"], env, fport
        )
        try:
            for clients in (1, 16):
                burl, furl = f"http://127.0.0.1:{bport}/mcp", f"http://127.0.0.1:{fport}/mcp"
                rows.append(
                    (
                        "http",
                        clients,
                        *_best(
                            lambda: _http_rate(burl, args.tool, clients, args.seconds),  # noqa: B023 (called at once)
                            lambda: _http_rate(furl, args.tool, clients, args.seconds),  # noqa: B023 (called at once)
                        ),
                    )
                )
        finally:
            for p in (bproc, fproc):
                p.terminate()
                p.wait(10)
    print(f"MCP server: {args.tool} calls/s, faultplane mcp vs the SDK's bare server (same run)")
    print(f"{'transport':<10}{'clients':>8}{'SDK bare/s':>12}{'faultplane/s':>14}{'ratio':>8}{'p50 ms':>9}")
    for transport, clients, b, f, p50 in rows:
        print(f"{transport:<10}{clients:>8}{b:>12.0f}{f:>14.0f}{f / b:>8.2f}{p50:>9.2f}")
    one = next(r for r in rows if r[0] == "stdio" and r[1] == 1)
    sixteen = next(r for r in rows if r[0] == "stdio" and r[1] == 16)
    print(
        f"target: stdio p50 < {TARGET_STDIO_MS} ms at 1 client: {one[4]:.2f} ms "
        f"({'met' if one[4] < TARGET_STDIO_MS else 'NOT met'}); 16 clients / 1 client = {sixteen[3] / one[3]:.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
