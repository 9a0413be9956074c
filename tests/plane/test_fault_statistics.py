"""Every fault type, as a client observes it through each proxy, at the configured probability.

One seeded plan scopes each fault type to its own tool of the fixture server, at probability P. A raw
client (line-level on stdio, HTTP+SSE on the HTTP proxy) calls every tool N times and classifies what it saw.
The calls it saw faulted must be exactly the ones the seeded engine predicts, and their count must be within
binomial bounds of N*P.
"""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2
import pytest
from planehelp import PY, SERVER, child_env, write_plan

from faultplane.plane.faults import FaultEngine
from faultplane.plane.plan import parse_plan
from jsonrpc_helpers import init_params

pytestmark = pytest.mark.anyio

P = 0.3
N = 24
SLOW_MS = 60
PLAN = {
    "seed": 1234,
    "faults": [
        {"type": "error_injection", "rate": P, "tools": ["add"]},
        {"type": "latency", "added_ms": SLOW_MS, "probability": P, "tools": ["echo"]},
        {"type": "timeout", "probability": P, "tools": ["stamp"]},
        {"type": "schema_drift", "probability": P, "tools": ["weather"], "rename": {"temp_c": "temperature"}},
        {"type": "partial_result", "probability": P, "tools": ["catalog"]},
        {
            "type": "registry_inconsistency",
            "mode": "listed_but_broken",
            "probability": P,
            "tools": ["lookup"],
        },
        {"type": "registry_inconsistency", "mode": "missing_from_list", "probability": P, "tools": ["ghost"]},
        {"type": "cold_tool", "added_ms": SLOW_MS, "idle_ms": 0, "probability": P, "tools": ["noop"]},
        {"type": "duplicate_response", "probability": P, "tools": ["ident"]},
        {"type": "reorder", "probability": P, "max_hold_ms": 60000, "tools": ["upper"]},
    ],
}
# fault label -> (method, tool, arguments)
CASES: dict[str, tuple[str, str | None, dict[str, Any]]] = {
    "error_injection": ("tools/call", "add", {"a": 1, "b": 2}),
    "latency": ("tools/call", "echo", {"text": "hi"}),
    "timeout": ("tools/call", "stamp", {}),
    "schema_drift": ("tools/call", "weather", {"city": "Oslo"}),
    "partial_result": ("tools/call", "catalog", {"n": 6}),
    "listed_but_broken": ("tools/call", "lookup", {"key": "k"}),
    "missing_from_list": ("tools/list", None, {}),
    "cold_tool": ("tools/call", "noop", {}),
    "duplicate_response": ("tools/call", "ident", {"n": 7}),
    "reorder": ("tools/call", "upper", {"text": "a"}),
}


def predicted() -> dict[str, list[int]]:
    engine = FaultEngine(parse_plan(PLAN))
    out: dict[str, list[int]] = {}
    for label, (method, tool, _) in CASES.items():
        hits = []
        for i in range(N):
            params = {"name": tool} if tool else {}
            d = engine.on_request({"jsonrpc": "2.0", "id": i, "method": method, "params": params})
            if d is not None and any(e.detail == label or e.fault_type == label for e in d.events):
                hits.append(i)
        out[label] = hits
    return out


class Wire:
    """Responses by request id, in arrival order, whatever the transport."""

    ordered = False  # whether all responses share one ordered channel

    def __init__(self) -> None:
        self.seen: dict[Any, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
        self.arrivals = itertools.count()
        self.events: dict[Any, anyio.Event] = defaultdict(anyio.Event)
        self.ids = itertools.count(1)

    def arrived(self, msg: dict[str, Any]) -> None:
        if "id" in msg and "method" not in msg:
            self.seen[msg["id"]].append((next(self.arrivals), msg))
            self.events[msg["id"]].set()

    async def send(self, msg: dict[str, Any]) -> None:
        """Returns once the proxy has taken the request in, so requests reach it in the order sent."""
        raise NotImplementedError

    async def fire(self, method: str, params: dict[str, Any]) -> Any:
        rid = next(self.ids)
        await self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid

    async def request(self, method: str, params: dict[str, Any], wait: float) -> tuple[Any, float]:
        t0 = time.perf_counter()
        rid = await self.fire(method, params)
        with anyio.move_on_after(wait):
            await self.events[rid].wait()
        return rid, time.perf_counter() - t0

    async def settle(self, rids: list[Any]) -> None:
        """Wait until every copy of the answers to `rids` that is ever going to arrive has arrived."""
        raise NotImplementedError


class StdioWire(Wire):
    ordered = True

    def __init__(self, proc: anyio.abc.Process) -> None:
        super().__init__()
        self.proc = proc

    async def send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send(json.dumps(msg).encode() + b"\n")

    async def settle(self, rids: list[Any]) -> None:
        # One ordered pipe, and the proxy writes a duplicate right behind the original: once the answer
        # to a later ping is in, everything sent before it is in too.
        ping = await self.fire("ping", {})
        with anyio.fail_after(30):
            await self.events[ping].wait()

    async def read_forever(self) -> None:
        assert self.proc.stdout is not None
        buf = b""
        async for chunk in self.proc.stdout:
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.strip():
                    self.arrived(json.loads(line))


class HttpWire(Wire):
    def __init__(self, http: httpx2.AsyncClient, url: str, headers: dict[str, str], tg: anyio.abc.TaskGroup):
        super().__init__()
        self.http, self.url, self.headers, self.tg = http, url, headers, tg
        self.closed: dict[Any, anyio.Event] = defaultdict(anyio.Event)

    async def send(self, msg: dict[str, Any]) -> None:
        # The proxy hands the request to the fault engine before it answers with headers: waiting for the
        # headers keeps the engine's per-tool ordinals in the order of our ids.
        started = anyio.Event()
        self.tg.start_soon(self._post, msg, started)
        with anyio.fail_after(30):
            await started.wait()

    async def settle(self, rids: list[Any]) -> None:
        # Each exchange has its own stream; a duplicate travels in the same stream as the original.
        with anyio.fail_after(30):
            for rid in rids:
                await self.closed[rid].wait()

    async def _post(self, msg: dict[str, Any], started: anyio.Event) -> None:
        try:
            async with self.http.stream("POST", self.url, json=msg, headers=self.headers) as r:
                started.set()
                buf = b""
                async for chunk in r.aiter_bytes():
                    buf += chunk.replace(b"\r\n", b"\n")
                    *events, buf = buf.split(b"\n\n")
                    for event in events:
                        for line in event.split(b"\n"):
                            if line.startswith(b"data:") and line[5:].strip():
                                self.arrived(json.loads(line[5:]))
                if buf.strip() and r.headers.get("content-type", "").startswith("application/json"):
                    self.arrived(json.loads(buf))
        finally:
            started.set()
            self.closed[msg["id"]].set()


def first(wire: Wire, rid: Any) -> dict[str, Any] | None:
    return wire.seen[rid][0][1] if wire.seen[rid] else None


# Generous bounds, not classification thresholds: an unfaulted call that needs longer than this on a loaded
# machine would be misread, and nothing else depends on wall-clock time.
UNHELD_WITHIN_S = 2.0
ANSWERED_WITHIN_S = 20.0


async def observe_reorder(wire: Wire, method: str, params: dict[str, Any]) -> list[int]:
    """A held answer never arrives by itself (max_hold_ms is far away); it comes out right behind the next
    response. So: an answer that arrives on its own was not held; one that has not, must arrive after the
    answer to a ping sent now, and is counted as held only then."""
    hits = []
    for i in range(N):
        rid, _ = await wire.request(method, params, UNHELD_WITHIN_S)
        if first(wire, rid) is not None:
            continue
        mark = next(wire.arrivals)
        ping, _ = await wire.request("ping", {}, ANSWERED_WITHIN_S)
        with anyio.fail_after(ANSWERED_WITHIN_S):
            await wire.events[rid].wait()
        held_at = wire.seen[rid][0][0]
        # One pipe keeps order; two HTTP connections only promise "after the ping went out".
        assert held_at > (wire.seen[ping][0][0] if wire.ordered else mark), i
        hits.append(i)
    return hits


async def observe_timeouts(wire: Wire, method: str, params: dict[str, Any], swallowed: int) -> list[int]:
    """Send all N, wait until the answers that are due have all come back, then let any stray one in:
    the calls still unanswered are the timeouts. No per-call clock."""
    rids = [await wire.fire(method, params) for _ in range(N)]
    with anyio.move_on_after(ANSWERED_WITHIN_S):
        while sum(1 for r in rids if wire.seen[r]) < N - swallowed:
            await anyio.sleep(0.02)
    await wire.settle([r for r in rids if wire.seen[r]])
    await anyio.sleep(0.3)  # a leaked answer would come right behind the others
    return [i for i, r in enumerate(rids) if not wire.seen[r]]


async def observe(wire: Wire) -> dict[str, list[int]]:
    """Call every case N times and classify what came back."""
    hits: dict[str, list[int]] = defaultdict(list)
    expected = predicted()
    for label, (method, tool, args) in CASES.items():
        params = {"name": tool, "arguments": args} if tool else {}
        if label == "reorder":
            hits[label] = await observe_reorder(wire, method, params)
            continue
        if label == "timeout":
            hits[label] = await observe_timeouts(wire, method, params, len(expected[label]))
            continue
        rids = []
        for i in range(N):
            rid, elapsed = await wire.request(method, params, ANSWERED_WITHIN_S)
            rids.append(rid)
            msg = first(wire, rid)
            assert msg is not None, (label, i)
            result = msg.get("result") or {}
            sc = result.get("structuredContent") or {}
            hit = {
                "error_injection": msg.get("error", {}).get("code") == -32603,
                "latency": elapsed >= SLOW_MS / 1000,
                "cold_tool": elapsed >= SLOW_MS / 1000,
                "schema_drift": "temperature" in sc and "temp_c" not in sc,
                "partial_result": len(sc.get("items", [])) < sc.get("total", 0),
                "listed_but_broken": msg.get("error", {}).get("code") == -32602,
                "missing_from_list": "ghost" not in {t["name"] for t in result.get("tools", [])},
                "duplicate_response": False,
            }[label]
            if hit:
                hits[label].append(i)
        if label == "duplicate_response":
            await wire.settle(rids)
            hits[label] = [i for i, r in enumerate(rids) if len(wire.seen[r]) == 2]
    return hits


def check(observed: dict[str, list[int]]) -> None:
    expected = predicted()
    sd = math.sqrt(N * P * (1 - P))
    for label in CASES:
        want = expected[label]
        got = observed.get(label, [])
        if label in ("latency", "cold_tool"):
            # a slow machine can make an unfaulted call slow too; a faulted one is never fast
            assert set(want) <= set(got), label
        else:
            assert got == want, label
        assert abs(len(want) - N * P) <= 4.5 * sd + 1, label
        assert want, label


async def test_every_fault_type_through_the_stdio_proxy(tmp_path: Path) -> None:
    plan = write_plan(tmp_path, PLAN)
    cmd = [PY, "-m", "faultplane.plane.proxy_stdio", "--plan", str(plan), "--", PY, SERVER]
    with anyio.fail_after(120):
        async with await anyio.open_process(cmd, env=child_env(), stderr=subprocess.DEVNULL) as proc:
            async with anyio.create_task_group() as tg:
                wire = StdioWire(proc)
                tg.start_soon(wire.read_forever)
                await wire.request("initialize", init_params(), 30)
                await wire.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
                observed = await observe(wire)
                tg.cancel_scope.cancel()
            assert proc.stdin is not None
            await proc.stdin.aclose()
    check(observed)


async def test_every_fault_type_through_the_http_proxy(
    http_upstream: Callable[..., str], http_proxy: Callable[..., str], tmp_path: Path
) -> None:
    proxy = http_proxy(http_upstream(), write_plan(tmp_path, PLAN))
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    with anyio.fail_after(120):
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(10, read=None)) as http:
            r = await http.post(
                proxy,
                json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init_params()},
                headers=headers,
            )
            headers = {
                **headers,
                "mcp-session-id": r.headers["mcp-session-id"],
                "mcp-protocol-version": "2025-11-25",
            }
            await http.post(
                proxy, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
            )
            async with anyio.create_task_group() as tg:
                observed = await observe(HttpWire(http, proxy, headers, tg))
                tg.cancel_scope.cancel()  # the timed-out exchanges are still open: that is the fault
    check(observed)
