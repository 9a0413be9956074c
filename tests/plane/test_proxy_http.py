"""The streamable-HTTP proxy in front of a real MCP server (subprocess, loopback), both protocol eras."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from planehelp import PY, SERVER, child_env, outcomes, predicted, write_plan
from typer.testing import CliRunner

from faultplane.cli.plane import app
from faultplane.plane.recorder import plane_store
from jsonrpc_helpers import initialize
from jsonrpc_helpers import tool_call as call
from mcp import Client, MCPError
from proc_helpers import free_port, stop, wait_port

pytestmark = pytest.mark.anyio

Start = Callable[..., str]
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INIT = initialize(0)


async def wait_for_events(session: str, expected: int, timeout: float = 15.0) -> list[dict[str, Any]]:
    """The proxy flushes its records every second from a worker thread: poll until they are all there."""
    events: list[dict[str, Any]] = []
    with anyio.move_on_after(timeout):
        while len(events) < expected:
            await anyio.sleep(0.2)
            events = plane_store().query("SELECT * FROM plane_fault_events WHERE session_id = ?", [session])
    return events


async def legacy_session(http: httpx2.AsyncClient, url: str) -> dict[str, str]:
    r = await http.post(url, json=INIT, headers=ACCEPT)
    assert r.status_code == 200
    headers = {**ACCEPT, "mcp-protocol-version": "2025-11-25"}
    if sid := r.headers.get("mcp-session-id"):
        headers["mcp-session-id"] = sid
    r = await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    assert r.status_code == 202
    return headers


@pytest.mark.parametrize("flags", [(), ("--json", "--stateless")], ids=["sse-stateful", "json-stateless"])
async def test_empty_plan_is_byte_identical(
    http_upstream: Start, http_proxy: Start, flags: tuple[str, ...]
) -> None:
    upstream = http_upstream(*flags)
    proxy = http_proxy(upstream)
    script = [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        call(2, "add", {"a": 2, "b": 3}),
        call("w", "weather", {"city": "é"}),
        call(4, "nope", {}),
        {"jsonrpc": "2.0", "id": 5, "method": "ping"},
    ]
    seen: dict[str, list[tuple[int, str, bytes]]] = {}
    with anyio.fail_after(30):
        async with httpx2.AsyncClient(timeout=10) as http:
            for name, url in (("direct", upstream), ("proxy", proxy)):
                headers = await legacy_session(http, url)
                rows = []
                for msg in script:
                    r = await http.post(url, json=msg, headers=headers)
                    rows.append((r.status_code, r.headers["content-type"], r.content))
                seen[name] = rows
    assert seen["proxy"] == seen["direct"]
    assert all(status == 200 for status, _, _ in seen["direct"])


@pytest.mark.parametrize("flags", [(), ("--json",), ("--stateless",)], ids=["sse", "json", "stateless"])
async def test_sdk_client_both_eras_through_the_proxy(
    http_upstream: Start, http_proxy: Start, flags: tuple[str, ...]
) -> None:
    proxy = http_proxy(http_upstream(*flags))
    with anyio.fail_after(60):
        for mode, version in (("auto", "2026-07-28"), ("legacy", "2025-11-25")):
            async with Client(proxy, mode=mode) as c:
                assert c.session.protocol_version == version
                assert {"add", "weather"} <= {t.name for t in (await c.list_tools()).tools}
                assert (await c.call_tool("add", {"a": 40, "b": 2})).structured_content == {"result": 42}


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_error_injection_matches_the_seeded_prediction(
    http_upstream: Start, http_proxy: Start, tmp_path: Path, mode: str
) -> None:
    plan = {
        "seed": 21,
        "faults": [{"type": "error_injection", "rate": 0.25, "code": -32050, "tools": ["add"]}],
    }
    proxy = http_proxy(http_upstream(), write_plan(tmp_path, plan), "--session", f"h-{mode}")
    n = 60
    with anyio.fail_after(60):
        got = await outcomes(proxy, "add", {"a": 1, "b": 1}, n, mode=mode)
    failed = [i for i, o in enumerate(got) if o == "rpc:-32050"]
    assert failed == predicted(plan, "add", n, "error_injection")
    assert abs(len(failed) - n * 0.25) <= 4.5 * math.sqrt(n * 0.25 * 0.75)
    events = await wait_for_events(f"h-{mode}", len(failed))
    assert len(events) == len(failed) and {e["seed"] for e in events} == {21}


@pytest.mark.parametrize("flags", [(), ("--json", "--stateless")], ids=["sse", "json"])
async def test_result_faults_over_sse_and_json(
    http_upstream: Start, http_proxy: Start, tmp_path: Path, flags: tuple[str, ...]
) -> None:
    plan = {
        "faults": [
            {"type": "schema_drift", "tools": ["weather"], "rename": {"temp_c": "temperature"}},
            {"type": "partial_result", "tools": ["catalog"], "keep_fraction": 0.5},
            {"type": "registry_inconsistency", "mode": "missing_from_list", "tools": ["echo"]},
            {"type": "registry_inconsistency", "mode": "listed_but_broken", "tools": ["slow"]},
        ]
    }
    proxy = http_proxy(http_upstream(*flags), write_plan(tmp_path, plan))
    with anyio.fail_after(60):
        for mode in ("auto", "legacy"):
            async with Client(proxy, mode=mode, cache=None) as c:
                names = {t.name for t in (await c.list_tools()).tools}
                assert "echo" not in names and "slow" in names
                with pytest.raises(RuntimeError, match="temp_c"):
                    await c.call_tool("weather", {"city": "Oslo"})
                r = await c.call_tool("catalog", {"n": 6})
                assert r.structured_content == {"items": ["item-0", "item-1", "item-2"], "total": 6}
                with pytest.raises(MCPError, match="Unknown tool: slow"):
                    await c.call_tool("slow", {"ms": 1})
                assert (await c.call_tool("echo", {"text": "hi"})).structured_content == {"result": "hi"}


@pytest.mark.parametrize(
    ("flags", "mode"), [((), "legacy"), (("--json", "--stateless"), "auto")], ids=["sse", "json"]
)
async def test_timeout_never_answers(
    http_upstream: Start, http_proxy: Start, tmp_path: Path, flags: tuple[str, ...], mode: str
) -> None:
    plan = {"seed": 4, "faults": [{"type": "timeout", "probability": 0.3, "tools": ["add"]}]}
    proxy = http_proxy(http_upstream(*flags), write_plan(tmp_path, plan), "--session", "ht")
    n = 10
    with anyio.fail_after(60):
        got = await outcomes(proxy, "add", {"a": 1, "b": 2}, n, mode=mode, read_timeout_seconds=0.4)
    timed_out = [i for i, o in enumerate(got) if o != '{"result": 3}']
    assert timed_out == predicted(plan, "add", n, "timeout") and timed_out
    assert {got[i] for i in timed_out} == {"rpc:-32001"}


async def test_fail_safe_and_strict(http_upstream: Start, http_proxy: Start, tmp_path: Path) -> None:
    upstream = http_upstream()
    plan = write_plan(tmp_path, {"faults": [{"type": "error_injection", "tools": ["add"]}]})
    env = {"FAULTPLANE_PLANE_SELFTEST_RAISE": "add"}
    safe = http_proxy(upstream, plan, **env)
    strict = http_proxy(upstream, plan, "--strict", **env)
    with anyio.fail_after(60):
        assert await outcomes(safe, "add", {"a": 1, "b": 2}, 2) == ['{"result": 3}'] * 2
        assert await outcomes(strict, "add", {"a": 1, "b": 2}, 2) == ["rpc:-32603"] * 2
        assert await outcomes(strict, "echo", {"text": "x"}, 1) == ['{"result": "x"}']


async def test_host_and_origin_checks_session_lifecycle(http_upstream: Start, http_proxy: Start) -> None:
    proxy = http_proxy(http_upstream())
    port = proxy.split(":")[2].split("/")[0]
    with anyio.fail_after(30):
        async with httpx2.AsyncClient(timeout=10) as http:
            r = await http.post(proxy, json=INIT, headers={**ACCEPT, "host": "evil.example"})
            assert r.status_code == 421
            r = await http.post(proxy, json=INIT, headers={**ACCEPT, "origin": "http://evil.example"})
            assert r.status_code == 403
            r = await http.post(proxy, json=INIT, headers={**ACCEPT, "origin": f"http://localhost:{port}"})
            assert r.status_code == 200
            headers = await legacy_session(http, proxy)
            async with http.stream("GET", proxy, headers={**headers, "accept": "text/event-stream"}) as get:
                assert get.status_code == 200 and get.headers["content-type"].startswith("text/event-stream")
            r = await http.delete(proxy, headers=headers)
            assert r.status_code == 200
            r = await http.post(proxy, json=call(9, "add", {"a": 1, "b": 1}), headers=headers)
            assert r.status_code == 404


async def test_report_and_cli_entry_points(http_upstream: Start, tmp_path: Path) -> None:
    upstream = http_upstream()
    port = free_port()
    plan = write_plan(tmp_path, {"seed": 8, "faults": [{"type": "error_injection", "rate": 0.5}]})
    cli = [PY, "-m", "faultplane.cli.main", "plane", "proxy"]
    proc = subprocess.Popen(
        [
            *cli,
            "http",
            "--upstream",
            upstream,
            "--port",
            str(port),
            "--plan",
            str(plan),
            "--session",
            "cli-h",
        ],
        env=child_env(),
    )
    try:
        wait_port(port, proc)
        with anyio.fail_after(60):
            got = await outcomes(f"http://127.0.0.1:{port}/mcp", "add", {"a": 1, "b": 1}, 20, mode="legacy")
    finally:
        stop(proc)
    assert proc.returncode == 0
    from mcp import StdioServerParameters

    stdio = StdioServerParameters(
        command=PY, args=[*cli[1:], "stdio", "--session", "cli-s", "--", PY, SERVER], env=child_env()
    )
    with anyio.fail_after(60):
        assert await outcomes(stdio, "add", {"a": 1, "b": 1}, 2) == ['{"result": 2}'] * 2
    out = CliRunner().invoke(app, ["report", "--session", "cli-h", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["session"]["driver"] == "http" and data["metrics"]["tool_calls"] == 20
    assert data["metrics"]["faults_injected"] == sum(1 for o in got if o.startswith("rpc"))
    out = CliRunner().invoke(app, ["report", "--session", "cli-s", "--json"])
    assert json.loads(out.output)["metrics"]["tool_calls"] == 2
    for bad in ("ftp://x", "http://[::1", "http://:8000/mcp", "http://127.0.0.1:99999/mcp"):
        r = subprocess.run([*cli, "http", "--upstream", bad], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "--upstream" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1


@pytest.mark.skipif(
    importlib.util.find_spec("mcp_server_time") is None, reason="mcp-server-time not installed"
)
async def test_third_party_mcp_server_time_over_http(http_proxy: Start, tmp_path: Path) -> None:
    port = free_port()
    upstream_proc = subprocess.Popen(
        [PY, str(Path(__file__).parent / "time_server_http.py"), str(port)], env=child_env()
    )
    try:
        wait_port(port, upstream_proc)
        upstream = f"http://127.0.0.1:{port}/mcp"
        plan = {
            "seed": 2,
            "faults": [{"type": "error_injection", "rate": 0.5, "tools": ["get_current_time"]}],
        }
        empty = http_proxy(upstream)
        faulty = http_proxy(upstream, write_plan(tmp_path, plan))
        args = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
        with anyio.fail_after(60):
            direct = await outcomes(upstream, "convert_time", args, 2, mode="legacy")
            assert await outcomes(empty, "convert_time", args, 2, mode="legacy") == direct
            assert "Asia/Tokyo" in direct[0]
            for mode in ("auto", "legacy"):
                got = await outcomes(faulty, "get_current_time", {"timezone": "UTC"}, 20, mode=mode)
                errors = [i for i, o in enumerate(got) if o == "rpc:-32603"]
                expected = predicted(plan, "get_current_time", 40, "error_injection")
                offset = 0 if mode == "auto" else 20  # the proxy's call ordinals continue across sessions
                assert errors == [i - offset for i in expected if offset <= i < offset + 20]
                assert 0 < len(errors) < 20
    finally:
        stop(upstream_proc)
