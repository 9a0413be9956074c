"""The stdio proxy in front of real MCP servers (subprocesses), driven by the SDK client and by raw lines."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from planehelp import PY, SERVER, child_env, outcomes, predicted, stdio_proxy_params, write_plan
from typer.testing import CliRunner

from faultplane.cli.plane import app
from faultplane.plane.recorder import plane_store
from jsonrpc_helpers import initialize, tool_call
from mcp import Client, MCPError

pytestmark = pytest.mark.anyio


def within(count: int, n: int, p: float) -> bool:
    return abs(count - n * p) <= 4.5 * math.sqrt(n * p * (1 - p)) + 1


# --- raw wire helpers ---------------------------------------------------------------------------------------

LEGACY_SCRIPT = [
    initialize(0),
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
    tool_call(2, "add", {"a": 2, "b": 3}),
    tool_call("s", "weather", {"city": "é"}),
    tool_call(4, "catalog", {"n": 3}),
    tool_call(5, "nope"),
    {"jsonrpc": "2.0", "id": 6, "method": "ping"},
    {"jsonrpc": "2.0", "id": 7, "method": "no/such/method"},
]


class Raw:
    """A line-level client: send frames, read frames, with deadlines."""

    def __init__(self, proc: anyio.abc.Process) -> None:
        self.proc = proc
        self.buf = b""

    async def send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send(json.dumps(msg).encode() + b"\n")

    async def line(self, timeout: float = 10.0) -> bytes:
        assert self.proc.stdout is not None
        with anyio.fail_after(timeout):
            while b"\n" not in self.buf:
                chunk = await self.proc.stdout.receive()
                self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line + b"\n"

    async def initialize(self) -> None:
        """The first request of LEGACY_SCRIPT, answered."""
        await self.send(LEGACY_SCRIPT[0])
        await self.line()

    async def lines_for(self, seconds: float) -> list[bytes]:
        out = []
        with anyio.move_on_after(seconds):
            while True:
                out.append(await self.line(seconds))
        return out


@asynccontextmanager
async def raw_process(cmd: list[str]) -> AsyncIterator[tuple[anyio.abc.Process, Raw]]:
    """`cmd` (a proxy) started with the suite's environment, and a line-level client on its stdio."""
    async with await anyio.open_process(cmd, env=child_env(), stderr=subprocess.DEVNULL) as proc:
        yield proc, Raw(proc)


async def run_raw(cmd: list[str], script: list[dict[str, Any]], env: dict[str, str]) -> list[bytes]:
    out: list[bytes] = []
    async with await anyio.open_process(cmd, env=env, stderr=subprocess.DEVNULL) as proc:
        raw = Raw(proc)
        for msg in script:
            await raw.send(msg)
            if "id" in msg:
                while True:
                    line = await raw.line()
                    out.append(line)
                    if json.loads(line).get("id") == msg["id"]:
                        break
        assert proc.stdin is not None
        await proc.stdin.aclose()
        with anyio.fail_after(10):
            await proc.wait()
    return out


def proxy_cmd(plan: Path | None = None, *extra: str, server: list[str] | None = None) -> list[str]:
    cmd = [PY, "-m", "faultplane.plane.proxy_stdio", "--session", "raw", *extra]
    if plan is not None:
        cmd += ["--plan", str(plan)]
    return [*cmd, "--", *(server or [PY, SERVER])]


# --- tests --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stdin", ["devnull", "file"])
def test_stdin_that_is_no_pipe_is_read_and_ends_the_proxy(tmp_path: Path, stdin: str) -> None:
    """/dev/null (a character device asyncio takes for a pipe, and epoll then refuses) and a regular file: the
    proxy reads them, forwards the requests, and exits when they end, without a traceback."""
    request = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    source = tmp_path / "requests.jsonl"
    source.write_text(json.dumps(request) + "\n" if stdin == "file" else "")
    with open("/dev/null" if stdin == "devnull" else source, "rb") as fh:
        done = subprocess.run(proxy_cmd(None), stdin=fh, capture_output=True, env=child_env(), timeout=30)
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr.decode()
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert answers == ([] if stdin == "devnull" else [{"jsonrpc": "2.0", "id": 1, "result": {}}])


async def test_empty_plan_is_byte_identical(tmp_path: Path) -> None:
    env = child_env()
    untouched = write_plan(tmp_path, {"seed": 1, "faults": [{"type": "error_injection", "tools": ["zzz"]}]})
    with anyio.fail_after(60):
        direct = await run_raw([PY, SERVER], LEGACY_SCRIPT, env)
        proxied = await run_raw(proxy_cmd(), LEGACY_SCRIPT, env)
        unmatched = await run_raw(proxy_cmd(untouched), LEGACY_SCRIPT, env)
    assert len(direct) == sum(1 for m in LEGACY_SCRIPT if "id" in m)
    assert proxied == direct
    assert unmatched == direct


async def test_large_frames_pass_and_truncate(tmp_path: Path) -> None:
    big = "x" * (3 * 1024 * 1024)
    plan = write_plan(
        tmp_path, {"faults": [{"type": "partial_result", "tools": ["catalog"], "keep_fraction": 0.1}]}
    )
    with anyio.fail_after(60):
        async with Client(stdio_proxy_params(plan)) as c:
            assert (await c.call_tool("echo", {"text": big})).structured_content == {"result": big}
            r = await c.call_tool("catalog", {"n": 20000})
            assert r.structured_content is not None and len(r.structured_content["items"]) == 2000


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_sdk_client_through_empty_proxy(mode: str) -> None:
    with anyio.fail_after(30):
        async with Client(stdio_proxy_params(None), mode=mode) as c:
            assert c.session.protocol_version == ("2026-07-28" if mode == "auto" else "2025-11-25")
            names = {t.name for t in (await c.list_tools()).tools}
            assert {"add", "weather", "catalog", "echo", "slow"} <= names
            assert (await c.call_tool("add", {"a": 40, "b": 2})).structured_content == {"result": 42}


async def test_error_injection_matches_the_seeded_prediction(tmp_path: Path) -> None:
    plan = {
        "seed": 11,
        "faults": [{"type": "error_injection", "rate": 0.3, "code": -32050, "tools": ["add"]}],
    }
    n = 150
    with anyio.fail_after(60):
        got = await outcomes(stdio_proxy_params(write_plan(tmp_path, plan)), "add", {"a": 1, "b": 1}, n)
    failed = [i for i, o in enumerate(got) if o == "rpc:-32050"]
    assert failed == predicted(plan, "add", n, "error_injection")
    assert within(len(failed), n, 0.3)
    assert all(o == '{"result": 2}' for i, o in enumerate(got) if i not in failed)
    # every injected fault is in the store, with the seed and the request id
    events = plane_store().query("SELECT * FROM plane_fault_events WHERE session_id = 's1'")
    assert len(events) == len(failed)
    assert {e["seed"] for e in events} == {11} and all(e["tool"] == "add" and e["request_id"] for e in events)


async def test_identical_seeds_identical_results(tmp_path: Path) -> None:
    def plan(seed: int) -> dict[str, Any]:
        return {
            "seed": seed,
            "faults": [
                {"type": "error_injection", "rate": 0.2},
                {"type": "partial_result", "probability": 0.3, "tools": ["catalog"]},
                {"type": "error_injection", "rate": 0.1, "as_tool_error": True, "message": "soft"},
            ],
        }

    runs = []
    with anyio.fail_after(60):
        for i in range(2):
            p = write_plan(tmp_path, plan(5), f"plan{i}.json")
            runs.append(await outcomes(stdio_proxy_params(p), "catalog", {"n": 4}, 40))
    assert runs[0] == runs[1]
    # and another seed would have faulted other calls
    other = [predicted(plan(seed), "catalog", 40, "error_injection") for seed in (5, 6)]
    assert other[0] != other[1]
    assert [i for i, o in enumerate(runs[0]) if o.startswith("rpc:") or o == "tool_error"] == other[0]
    assert {"tool_error", "rpc:-32603", '{"items": ["item-0", "item-1"], "total": 4}'} <= set(runs[0])


async def test_timeout_never_answers(tmp_path: Path) -> None:
    plan = {"seed": 4, "faults": [{"type": "timeout", "probability": 0.3, "tools": ["add"]}]}
    n = 12
    with anyio.fail_after(60):
        async with Client(stdio_proxy_params(write_plan(tmp_path, plan)), read_timeout_seconds=0.4) as c:
            got = []
            for _ in range(n):
                try:
                    await c.call_tool("add", {"a": 1, "b": 2})
                    got.append("ok")
                except MCPError as exc:
                    got.append(f"rpc:{exc.error.code}")
    timed_out = [i for i, o in enumerate(got) if o != "ok"]
    assert timed_out == predicted(plan, "add", n, "timeout") and timed_out
    assert all(got[i] == "rpc:-32001" for i in timed_out)  # the SDK's own read-timeout error


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_schema_drift_is_caught_by_the_client_validating_output(tmp_path: Path, mode: str) -> None:
    plan = {"faults": [{"type": "schema_drift", "tools": ["weather"], "rename": {"temp_c": "temperature"}}]}
    with anyio.fail_after(30):
        async with Client(stdio_proxy_params(write_plan(tmp_path, plan)), mode=mode) as c:
            with pytest.raises(RuntimeError, match="temp_c"):
                await c.call_tool("weather", {"city": "Oslo"})
            assert (await c.call_tool("add", {"a": 1, "b": 1})).structured_content == {"result": 2}


async def test_schema_drift_reaches_a_client_that_does_not_validate(tmp_path: Path) -> None:
    plan = {
        "faults": [
            {
                "type": "schema_drift",
                "tools": ["weather"],
                "remove": ["conditions"],
                "retype": {"temp_c": "string"},
            }
        ]
    }
    with anyio.fail_after(30):
        out = await run_raw(proxy_cmd(write_plan(tmp_path, plan)), LEGACY_SCRIPT[:5], child_env())
    weather = json.loads(out[-1])["result"]
    assert weather["structuredContent"] == {"city": "é", "temp_c": "21.5"}
    assert json.loads(weather["content"][0]["text"]) == {"city": "é", "temp_c": "21.5"}


async def test_partial_result_is_silent(tmp_path: Path) -> None:
    plan = {"faults": [{"type": "partial_result", "keep_fraction": 0.5, "tools": ["catalog", "echo"]}]}
    with anyio.fail_after(30):
        async with Client(stdio_proxy_params(write_plan(tmp_path, plan))) as c:
            r = await c.call_tool("catalog", {"n": 10})
            assert r.is_error is False
            assert r.structured_content == {"items": [f"item-{i}" for i in range(5)], "total": 10}
            e = await c.call_tool("echo", {"text": "abcdefgh"})
            assert e.structured_content == {"result": "abcd"}


async def test_registry_inconsistency_both_ways(tmp_path: Path) -> None:
    plan = {
        "faults": [
            {"type": "registry_inconsistency", "mode": "missing_from_list", "tools": ["echo"]},
            {"type": "registry_inconsistency", "mode": "listed_but_broken", "tools": ["weather"]},
        ]
    }
    with anyio.fail_after(30):
        async with Client(stdio_proxy_params(write_plan(tmp_path, plan)), mode="legacy", cache=None) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            assert "echo" not in names and "weather" in names
            with pytest.raises(MCPError) as info:
                await c.call_tool("weather", {"city": "x"})
            assert info.value.error.code == -32602 and "Unknown tool" in info.value.error.message


async def test_cold_tool_slows_only_the_first_call(tmp_path: Path) -> None:
    plan = {"faults": [{"type": "cold_tool", "added_ms": 150, "idle_ms": 60000, "tools": ["add"]}]}
    with anyio.fail_after(30):
        async with Client(stdio_proxy_params(write_plan(tmp_path, plan))) as c:
            t0 = time.perf_counter()
            await c.call_tool("add", {"a": 1, "b": 1})
            first = time.perf_counter() - t0
            for _ in range(3):
                await c.call_tool("add", {"a": 1, "b": 1})
    assert first >= 0.15
    events = plane_store().query("SELECT fault_type FROM plane_fault_events")
    assert [e["fault_type"] for e in events] == ["cold_tool"]


async def test_sdk_client_shrugs_off_duplicate_responses(tmp_path: Path) -> None:
    # Raw observation of duplicates is in test_fault_statistics; here: the SDK client survives them.
    plan = write_plan(tmp_path, {"faults": [{"type": "duplicate_response", "tools": ["add"]}]})
    with anyio.fail_after(30):
        got = await outcomes(stdio_proxy_params(plan), "add", {"a": 1, "b": 2}, 3)
    assert got == ['{"result": 3}'] * 3


async def test_reorder_holds_a_response_until_the_next_one(tmp_path: Path) -> None:
    plan = write_plan(tmp_path, {"faults": [{"type": "reorder", "tools": ["add"], "max_hold_ms": 1500}]})
    with anyio.fail_after(30):
        async with raw_process(proxy_cmd(plan)) as (proc, raw):
            await raw.initialize()
            await raw.send(LEGACY_SCRIPT[1])
            await raw.send(LEGACY_SCRIPT[3])  # add: held
            await anyio.sleep(0.3)
            await raw.send({"jsonrpc": "2.0", "id": 9, "method": "ping"})
            ids = [json.loads(await raw.line())["id"], json.loads(await raw.line())["id"]]
            assert ids == [9, 2]
            t0 = time.perf_counter()
            await raw.send(LEGACY_SCRIPT[3])  # nothing follows: released when the hold expires
            assert json.loads(await raw.line(10))["id"] == 2
            assert time.perf_counter() - t0 >= 1.4
            assert proc.stdin is not None
            await proc.stdin.aclose()
            await proc.wait()


async def test_fail_safe_passes_through_and_strict_fails_closed(tmp_path: Path) -> None:
    plan = write_plan(tmp_path, {"faults": [{"type": "error_injection", "tools": ["add"]}]})
    env = {"FAULTPLANE_PLANE_SELFTEST_RAISE": "add"}
    with anyio.fail_after(30):
        got = await outcomes(stdio_proxy_params(plan, **env), "add", {"a": 1, "b": 2}, 2)
        assert got == ['{"result": 3}'] * 2  # our logic broke, so the message went through untouched
        async with Client(stdio_proxy_params(plan, strict=True, session="s2", **env)) as c:
            for _ in range(2):
                with pytest.raises(MCPError, match="strict") as info:
                    await c.call_tool("add", {"a": 1, "b": 2})
                assert info.value.error.code == -32603
            assert (await c.call_tool("echo", {"text": "x"})).structured_content == {"result": "x"}


async def test_report_reads_the_session_from_the_store(tmp_path: Path) -> None:
    plan = {"seed": 3, "faults": [{"type": "error_injection", "rate": 0.5, "tools": ["add"]}]}
    with anyio.fail_after(30):
        got = await outcomes(
            stdio_proxy_params(write_plan(tmp_path, plan), session="rep"), "add", {"a": 1, "b": 1}, 20
        )
    runner = CliRunner()
    out = runner.invoke(app, ["report", "--session", "rep", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    m = data["metrics"]
    assert data["session"]["seed"] == 3 and data["session"]["driver"] == "stdio"
    assert m["tool_calls"] == 20
    assert m["faults_injected"] == sum(1 for o in got if o.startswith("rpc"))
    assert m["faults_by_name"] == {"error_injection": m["faults_injected"]}
    assert m["availability"] == pytest.approx(got.count('{"result": 2}') / 20)
    out = runner.invoke(app, ["report"], env={"COLUMNS": "150"})
    assert out.exit_code == 0 and "ETA" in out.output and "rep" in out.output
    out = runner.invoke(app, ["report", "--session", "rep", "--toon"])
    assert out.exit_code == 0 and "tool_calls: 20" in out.output
    out = runner.invoke(app, ["report", "--list"])
    assert "rep" in out.output
    assert runner.invoke(app, ["report", "--session", "nope"]).exit_code == 1


async def test_bad_plan_and_missing_command_are_clear(tmp_path: Path) -> None:
    bad = write_plan(tmp_path, {"faults": [{"type": "latency"}]})
    r = subprocess.run(proxy_cmd(bad), capture_output=True, text=True, env=child_env(), timeout=30)
    assert r.returncode == 2 and "faults[0].added_ms" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([PY, "-m", "faultplane.plane.proxy_stdio"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "after `--`" in r.stderr
    r = subprocess.run(
        proxy_cmd(None, server=["/nonexistent/server"]), capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 127 and "cannot start server" in r.stderr


@pytest.mark.skipif(
    importlib.util.find_spec("mcp_server_time") is None, reason="mcp-server-time not installed"
)
async def test_third_party_mcp_server_time(tmp_path: Path) -> None:
    exe = shutil.which("mcp-server-time") or str(Path(PY).parent / "mcp-server-time")
    server = [exe, "--local-timezone", "UTC"]
    args = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
    plan = {"seed": 1, "faults": [{"type": "error_injection", "rate": 0.5, "tools": ["get_current_time"]}]}
    with anyio.fail_after(60):
        raw_direct = await run_raw(server, LEGACY_SCRIPT[:3], child_env())
        raw_proxy = await run_raw(proxy_cmd(None, server=server), LEGACY_SCRIPT[:3], child_env())
        assert raw_proxy == raw_direct
        got = []
        async with Client(stdio_proxy_params(write_plan(tmp_path, plan), server=server)) as c:
            converted = await c.call_tool("convert_time", args)  # out of the plan's scope: untouched
            assert converted.is_error is False and "Asia/Tokyo" in json.dumps(converted.structured_content)
            for _ in range(20):
                try:
                    await c.call_tool("get_current_time", {"timezone": "UTC"})
                    got.append("ok")
                except MCPError as exc:
                    got.append(f"rpc:{exc.error.code}")
    errors = [i for i, o in enumerate(got) if o == "rpc:-32603"]
    assert errors == predicted(plan, "get_current_time", 20, "error_injection")
    assert 0 < len(errors) < 20


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_task_labels_give_task_metrics(tmp_path: Path, mode: str) -> None:
    plan = {"seed": 1, "faults": [{"type": "partial_result", "tools": ["catalog"], "probability": 0.5}]}
    session = f"tasks-{mode}"
    with anyio.fail_after(30):
        async with Client(stdio_proxy_params(write_plan(tmp_path, plan), session=session), mode=mode) as c:
            for task in range(6):
                meta = {"faultplane/task": f"task-{task}"}
                await c.call_tool("add", {"a": 1, "b": 1}, meta=meta)  # type: ignore[arg-type]
                await c.call_tool("catalog", {"n": 4}, meta=meta)  # type: ignore[arg-type]
    out = CliRunner().invoke(app, ["report", "--session", session, "--json"])
    m = json.loads(out.output)["metrics"]
    hit = len(predicted(plan, "catalog", 6, "partial_result"))
    assert m["tasks"] == 6 and m["tcaf"] == pytest.approx(2.0)
    assert m["task_outcomes"].get("silent", 0) == hit and m["failed_silently"] == hit
    assert m["blast_radius"] == pytest.approx(hit / 6)


async def test_sigterm_stops_cleanly_and_keeps_the_records(tmp_path: Path) -> None:
    plan = write_plan(tmp_path, {"faults": [{"type": "error_injection", "tools": ["add"]}]})
    with anyio.fail_after(30):
        async with raw_process(proxy_cmd(plan)) as (proc, raw):
            await raw.initialize()
            await raw.send(LEGACY_SCRIPT[3])
            assert json.loads(await raw.line())["error"]["code"] == -32603
            proc.terminate()
            assert await proc.wait() == 0
    events = plane_store().query(
        "SELECT fault_type, request_id FROM plane_fault_events WHERE session_id = 'raw'"
    )
    assert events == [{"fault_type": "error_injection", "request_id": "2"}]


RAW_SERVER = [PY, str(Path(__file__).parent / "raw_server.py")]


async def test_a_timed_out_answer_stays_swallowed_after_the_client_cancels(tmp_path: Path) -> None:
    plan = write_plan(tmp_path, {"faults": [{"type": "timeout", "tools": ["late"]}]})
    with anyio.fail_after(30):
        async with raw_process(proxy_cmd(plan, server=RAW_SERVER)) as (proc, raw):
            await raw.send(tool_call(5, "late"))
            # The client gives up; the server answers 5 anyway, and only then 6 (one ordered pipe).
            await raw.send(
                {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}}
            )
            await raw.send({"jsonrpc": "2.0", "id": 6, "method": "ping"})
            assert json.loads(await raw.line())["id"] == 6
            assert proc.stdin is not None
            await proc.stdin.aclose()
            assert proc.stdout is not None
            rest = raw.buf + b"".join([chunk async for chunk in proc.stdout])
            assert rest == b""  # the late answer to 5 never came through
            await proc.wait()
    events = plane_store().query("SELECT fault_type FROM plane_fault_events WHERE session_id = 'raw'")
    assert [e["fault_type"] for e in events] == ["timeout"]


async def test_reorder_is_released_by_a_response_not_by_notifications_or_requests(tmp_path: Path) -> None:
    plan = write_plan(tmp_path, {"faults": [{"type": "reorder", "tools": ["chatty"], "max_hold_ms": 30000}]})
    with anyio.fail_after(30):
        async with raw_process(proxy_cmd(plan, server=RAW_SERVER)) as (proc, raw):
            await raw.send(tool_call(1, "chatty"))  # answered, then a notification and a server request
            first = [json.loads(await raw.line()), json.loads(await raw.line())]
            assert [m.get("method") for m in first] == ["notifications/message", "roots/list"]
            await raw.send({"jsonrpc": "2.0", "id": 2, "method": "ping"})
            assert [json.loads(await raw.line())["id"] for _ in range(2)] == [2, 1]
            assert proc.stdin is not None
            await proc.stdin.aclose()
            await proc.wait()


async def test_response_side_fail_safe_and_strict(tmp_path: Path) -> None:
    plan = write_plan(
        tmp_path, {"faults": [{"type": "schema_drift", "tools": ["weather"], "rename": {"temp_c": "t"}}]}
    )
    env = {"FAULTPLANE_PLANE_SELFTEST_RAISE_RESPONSE": "weather"}
    want = {"city": "Oslo", "temp_c": 21.5, "conditions": "clear"}
    with anyio.fail_after(30):
        async with Client(stdio_proxy_params(plan, session="rs1", **env)) as c:
            r = await c.call_tool("weather", {"city": "Oslo"})
            assert r.structured_content == want  # our logic broke on the answer: it went through untouched
        async with Client(stdio_proxy_params(plan, strict=True, session="rs2", **env)) as c:
            with pytest.raises(MCPError, match="strict") as info:
                await c.call_tool("weather", {"city": "Oslo"})
            assert info.value.error.code == -32603
            assert (await c.call_tool("echo", {"text": "x"})).structured_content == {"result": "x"}
