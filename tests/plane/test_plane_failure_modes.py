"""The failure modes seed 002 names that the plane lacked: the article's own plan as written, a stale route
that answers successfully with the wrong thing, and gateway head-of-line blocking; through the simulator
and both proxies against a real subprocess MCP server."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from planehelp import stdio_proxy_params, write_plan
from test_plan import SEED_PLAN

from faultplane.plane.faults import FaultEngine
from faultplane.plane.plan import load_plan, parse_plan
from faultplane.plane.simulator import Workload, simulate
from jsonrpc_helpers import tool_call
from mcp import Client

SEED_TOOLS = ("get_incident", "fetch_logs", "restart_service", "search")


def _call(rid: int, tool: str, **arguments: Any) -> dict[str, Any]:
    return tool_call(rid, tool, arguments)


def _answer(rid: int, doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "result": {
            "content": [{"type": "text", "text": json.dumps(doc)}],
            "structuredContent": doc,
            "isError": False,
        },
    }


# --- the article's plan ---------------------------------------------------------------------------------------


def test_the_articles_plan_runs_in_the_simulator_against_its_own_tools(tmp_path: Path) -> None:
    path = tmp_path / "fault-plan.yaml"
    path.write_text(SEED_PLAN, encoding="utf-8")
    plan = load_plan(path)
    w = Workload(tasks=400, fanout=8, tools=SEED_TOOLS, base_latency_ms=dict.fromkeys(SEED_TOOLS, 80.0))
    first, again = simulate(plan, w), simulate(plan, w)
    assert first.fingerprint() == again.fingerprint()  # seeded: the same plan gives the same calls
    by_fault: dict[str, int] = {}
    for c in first.calls:
        for f in c.faults:
            by_fault[f] = by_fault.get(f, 0) + 1
    assert {"latency", "schema_drift", "partial_result", "registry_inconsistency", "error_injection"} <= set(
        by_fault
    )
    restart = [c for c in first.calls if c.tool == "restart_service"]
    # advertised, and every call fails: an error, or a timeout where the 4 s latency fault hit it first
    assert restart and all("registry_inconsistency" in c.faults for c in restart)
    assert all(c.outcome in ("rpc_error", "timeout") for c in restart)
    m = first.metrics
    assert m.correctness is not None and m.correctness < 1.0  # drift and truncation are wrong answers
    assert m.task_failure_rate is not None and m.task_failure_rate > 0.02  # the fan-out compounds the 2%


def test_default_schema_drift_renames_every_top_level_field() -> None:
    engine = FaultEngine(parse_plan({"faults": [{"type": "schema_drift", "tools": ["get_incident"]}]}))
    d = engine.on_request(_call(1, "get_incident", id=7))
    assert d is not None
    out, effective = engine.respond(_answer(1, {"id": 7, "severity": "high"}), d)
    assert out is not None and [e.fault_type for e in effective] == ["schema_drift"]
    assert out["result"]["structuredContent"] == {"id_v2": 7, "severity_v2": "high"}
    assert json.loads(out["result"]["content"][0]["text"]) == {"id_v2": 7, "severity_v2": "high"}
    assert engine.on_request(_call(2, "other")) is None  # scoped to its tool


# --- stale routes ---------------------------------------------------------------------------------------------


def test_a_stale_route_answers_successfully_with_an_earlier_answer() -> None:
    engine = FaultEngine(
        parse_plan(
            {
                "seed": 3,
                "faults": [{"type": "registry_inconsistency", "mode": "stale_route", "tools": ["lookup"]}],
            }
        )
    )
    d1 = engine.on_request(_call(1, "lookup", tenant="a"))
    assert d1 is not None
    out1, eff1 = engine.respond(_answer(1, {"tenant": "a", "balance": 10}), d1)
    assert out1 is None and eff1 == []  # nothing earlier to answer with yet: the first call is untouched
    d2 = engine.on_request(_call(2, "lookup", tenant="b"))
    assert d2 is not None
    out2, eff2 = engine.respond(_answer(2, {"tenant": "b", "balance": 99}), d2)
    assert out2 is not None and [e.detail for e in eff2] == ["stale_route"]
    assert out2["id"] == 2 and out2["result"]["structuredContent"] == {"tenant": "a", "balance": 10}
    assert out2["result"]["isError"] is False  # a success, of the wrong thing


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), p=st.floats(0.05, 1.0))
def test_the_simulators_correctness_sli_catches_stale_routes_while_availability_stays_green(
    seed: int, p: float
) -> None:
    plan = parse_plan(
        {
            "seed": seed,
            "faults": [{"type": "registry_inconsistency", "mode": "stale_route", "probability": p}],
        }
    )
    result = simulate(plan, Workload(tasks=60, fanout=4))
    m = result.metrics
    stale = [c for c in result.calls if "registry_inconsistency" in c.faults]
    assert m.availability == 1.0  # every call returned, none errored
    assert all(c.outcome == "ok" and c.corrupted for c in stale)
    assert m.correctness == pytest.approx(1 - len(stale) / m.tool_calls)
    if stale:
        assert m.correctness < 1.0 and any(t.outcome == "silent" for t in result.tasks)


# --- head-of-line blocking ------------------------------------------------------------------------------------


def test_head_of_line_blocking_in_the_simulator_delays_the_calls_queued_behind() -> None:
    plan = parse_plan({"seed": 1, "faults": [{"type": "head_of_line", "added_ms": 500, "probability": 0.1}]})
    w = Workload(tasks=100, fanout=4, queued_behind=2, call_timeout_ms=5000, deadline_ms=60_000)
    calls = simulate(plan, w).calls
    stalled = [i for i, c in enumerate(calls) if "head_of_line" in c.faults]
    assert stalled
    clean = simulate(parse_plan({"seed": 1}), w).calls
    for i in stalled:
        assert calls[i].latency_ms >= clean[i].latency_ms + 500 - 1e-6
    base = {i for i, c in enumerate(calls) if c.faults}
    assert len(base) > len(stalled) // 3  # the queued calls behind each stall carry the fault too


@pytest.mark.anyio
async def test_head_of_line_blocking_through_the_stdio_proxy(tmp_path: Path) -> None:
    """The first `slow` call stalls 800 ms and holds the session; an `add` sent just after it waits too."""
    plan = write_plan(
        tmp_path, {"seed": 1, "faults": [{"type": "head_of_line", "added_ms": 800, "tools": ["slow"]}]}
    )
    timings: dict[str, float] = {}
    with anyio.fail_after(60):
        async with Client(stdio_proxy_params(plan)) as c:
            await c.call_tool("add", {"a": 1, "b": 1})  # warm: sessions and imports are not the point
            t0 = time.perf_counter()

            async def call(name: str, args: dict[str, Any]) -> None:
                await c.call_tool(name, args)
                timings[name] = time.perf_counter() - t0

            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "slow", {"ms": 1})
                await anyio.sleep(0.05)
                tg.start_soon(call, "add", {"a": 2, "b": 3})
            alone = time.perf_counter()
            await c.call_tool("add", {"a": 2, "b": 3})
            after = time.perf_counter() - alone
    assert timings["slow"] >= 0.8
    assert timings["add"] >= 0.75  # queued behind the stalled call, not answered in milliseconds
    assert after < 0.75  # once the stall is over, the session is free again


@pytest.mark.anyio
async def test_a_stale_route_through_the_http_proxy_answers_another_calls_result(
    tmp_path: Path, http_upstream: Any, http_proxy: Any
) -> None:
    plan = write_plan(
        tmp_path,
        {"faults": [{"type": "registry_inconsistency", "mode": "stale_route", "tools": ["catalog"]}]},
    )
    url = http_proxy(http_upstream(), plan)
    with anyio.fail_after(60):
        async with Client(url) as c:
            first = await c.call_tool("catalog", {"n": 2})
            second = await c.call_tool("catalog", {"n": 5})
    assert not first.is_error and not second.is_error
    assert first.structured_content == {"items": ["item-0", "item-1"], "total": 2}
    assert second.structured_content == first.structured_content  # n=5 asked, n=2's answer given


@pytest.mark.anyio
async def test_a_stale_route_through_the_stdio_proxy_answers_another_calls_result(tmp_path: Path) -> None:
    plan = write_plan(
        tmp_path,
        {"faults": [{"type": "registry_inconsistency", "mode": "stale_route", "tools": ["weather"]}]},
    )
    with anyio.fail_after(60):
        async with Client(stdio_proxy_params(plan)) as c:
            paris = await c.call_tool("weather", {"city": "Paris"})
            oslo = await c.call_tool("weather", {"city": "Oslo"})
    assert not paris.is_error and not oslo.is_error  # both succeed
    assert paris.structured_content is not None and paris.structured_content["city"] == "Paris"
    assert oslo.structured_content == paris.structured_content  # Oslo asked, Paris's weather given


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_head_of_line_blocking_through_the_http_proxy(
    tmp_path: Path, http_upstream: Any, http_proxy: Any, mode: str
) -> None:
    """Over streamable HTTP calls queue on their MCP session (Mcp-Session-Id, the legacy protocol era); a
    client without a session queues on the proxy's one upstream queue, like a gateway with one connection."""
    plan = write_plan(
        tmp_path, {"seed": 1, "faults": [{"type": "head_of_line", "added_ms": 800, "tools": ["slow"]}]}
    )
    url = http_proxy(http_upstream(), plan)
    timings: dict[str, float] = {}
    with anyio.fail_after(60):
        async with Client(url, mode=mode) as c, Client(url, mode=mode) as other:  # type: ignore[arg-type]
            await c.call_tool("add", {"a": 1, "b": 1})
            await other.call_tool("add", {"a": 1, "b": 1})
            t0 = time.perf_counter()

            async def call(client: Client, label: str, name: str, args: dict[str, Any]) -> None:
                await client.call_tool(name, args)
                timings[label] = time.perf_counter() - t0

            async with anyio.create_task_group() as tg:
                tg.start_soon(call, c, "slow", "slow", {"ms": 1})
                await anyio.sleep(0.05)
                tg.start_soon(call, c, "queued", "add", {"a": 2, "b": 3})
                tg.start_soon(call, other, "elsewhere", "add", {"a": 2, "b": 3})
    assert timings["slow"] >= 0.8 and timings["queued"] >= 0.75, timings  # behind the stall
    if mode == "legacy":
        assert timings["elsewhere"] < 0.75, timings  # another session is not held by it
    else:
        assert timings["elsewhere"] >= 0.75, timings  # no sessions: one queue for the whole proxy
