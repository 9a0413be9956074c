"""The plane report reads as advice, and counts what a client says it noticed: through the real stdio
proxy, a client that checks answers reports the truncated ones, and the report moves them from silent to
safe; every failure mode met comes with its pattern and the simulated effect of adding it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from planehelp import child_env, write_plan
from test_proxy_stdio import LEGACY_SCRIPT, Raw, proxy_cmd
from typer.testing import CliRunner

from faultplane.cli.plane import app
from faultplane.plane.advice import advise
from faultplane.plane.plan import parse_plan
from jsonrpc_helpers import tool_call

pytestmark = pytest.mark.anyio

PLAN = {
    "seed": 5,
    "faults": [
        {"type": "partial_result", "tools": ["catalog"], "probability": 0.5},
        {"type": "error_injection", "tools": ["add"], "probability": 0.3},
    ],
}


def _call(rid: int, tool: str, args: dict[str, Any], task: str) -> dict[str, Any]:
    return tool_call(rid, tool, args, _meta={"faultplane/task": task})


async def _session(tmp_path: Path, *, report: bool) -> dict[str, Any]:
    """Eight tasks of two calls; a careful client reports the truncated catalogs it catches."""
    name = "careful" if report else "quiet"
    plan = write_plan(tmp_path, PLAN, f"{name}.json")
    cmd = [name if part == "raw" else part for part in proxy_cmd(plan)]  # a session of its own
    reported = 0
    async with await anyio.open_process(cmd, env=child_env(), stderr=subprocess.DEVNULL) as proc:
        raw = Raw(proc)
        await raw.send(LEGACY_SCRIPT[0])
        await raw.line()
        await raw.send(LEGACY_SCRIPT[1])
        rid = 10
        for task in range(8):
            for tool, args in (("add", {"a": 1, "b": 2}), ("catalog", {"n": 4})):
                rid += 1
                await raw.send(_call(rid, tool, args, f"task-{task}"))
                answer = json.loads(await raw.line())
                sc = (answer.get("result") or {}).get("structuredContent") or {}
                if report and tool == "catalog" and len(sc.get("items", [])) != sc.get("total"):
                    reported += 1
                    note = {"requestId": rid, "reason": "items shorter than total"}
                    await raw.send(
                        {"jsonrpc": "2.0", "method": "notifications/faultplane/detected", "params": note}
                    )
        await raw.send({"jsonrpc": "2.0", "id": 999, "method": "ping"})  # the notification was not forwarded:
        assert json.loads(await raw.line())["id"] == 999  # the next answer is the ping's
        assert proc.stdin is not None
        await proc.stdin.aclose()
        with anyio.fail_after(10):
            await proc.wait()
    out = CliRunner().invoke(app, ["report", "--session", name, "--json"])
    assert out.exit_code == 0, out.output
    result: dict[str, Any] = json.loads(out.output)
    result["reported"] = reported
    return result


async def test_a_client_report_turns_a_silent_failure_into_a_safe_one(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        quiet = await _session(tmp_path, report=False)
    with anyio.fail_after(60):
        careful = await _session(tmp_path, report=True)
    assert careful["reported"] > 0
    assert quiet["metrics"]["failed_silently"] == careful["reported"]  # the same seeded truncations
    assert careful["metrics"]["failed_silently"] == 0
    assert careful["metrics"]["failed_safely"] == quiet["metrics"]["failed_safely"] + careful["reported"]
    assert careful["client_detections"] == careful["reported"] and quiet["client_detections"] == 0
    assert any("no client sent any" in n for n in quiet["notes"])
    assert any(f"{careful['reported']} such report(s)" in n for n in careful["notes"])
    assert all("is not observed" in n for n in quiet["notes"])


async def test_the_report_advises_a_pattern_per_failure_mode_with_its_simulated_effect(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        out = await _session(tmp_path, report=False)
    modes = {a["failure_mode"]: a for a in out["advice"]}
    assert set(modes) == {"partial_result", "error_injection"}
    assert "graceful degradation" in modes["partial_result"]["pattern"]
    assert modes["error_injection"]["pattern"] == "a retry budget"
    for a in modes.values():
        assert a["simulated"] and a["task_failure_with"] <= a["task_failure_without"]
        assert "Simulated with this session's plan" in a["sentence"]
    assert modes["partial_result"]["silent_with"] < modes["partial_result"]["silent_without"]
    text = CliRunner().invoke(app, ["report", "--session", "quiet"]).output
    assert "What to do about each failure mode met" in text and "a retry budget" in text


def test_advice_for_modes_the_simulator_cannot_model_says_so() -> None:
    plan = parse_plan(
        {
            "faults": [
                {"type": "duplicate_response"},
                {"type": "registry_inconsistency", "mode": "stale_route", "name": "stale"},
            ]
        }
    )
    advice = {a.failure_mode: a for a in advise(plan, {"duplicate_response", "stale"})}
    assert not advice["duplicate_response"].simulated
    assert "idempotency keys" in advice["duplicate_response"].pattern
    assert "not simulated" in advice["duplicate_response"].sentence()
    assert advice["stale_route"].simulated and "correctness" in advice["stale_route"].pattern
    assert advise(plan, set()) == []  # nothing met, nothing to advise
