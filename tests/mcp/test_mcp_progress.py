"""Agents can watch and stop long work: progress notifications for a run (phases, activities, gate values
against thresholds) and cancellation that rolls back and records the journal as interrupted. A real
ClientSession against `faultplane mcp` over stdio (a subprocess)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp_helpers import ServerEnv, make_env, server_argv, slow_experiment

from mcp import ClientSession, StdioServerParameters, stdio_client

pytestmark = pytest.mark.anyio

GATED = """\
title: MCP gated
slo_gates:
  - name: target-latency
    sli: probe
    rollback_on: "probe > 5 for 2s"
    interval_s: 0.2
    probe:
      type: probe
      name: answers
      provider: {type: python, module: mcp_target, func: number, arguments: {value: 1.5}}
method:
  - type: action
    name: hold
    provider: {type: python, module: mcp_target, func: sleep, arguments: {seconds: 1.0}}
"""


@asynccontextmanager
async def session(senv: ServerEnv) -> AsyncIterator[ClientSession]:
    argv = server_argv()
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=senv.env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        yield s


async def test_a_run_reports_phases_and_activities_as_progress(tmp_path: Path) -> None:
    senv = make_env(tmp_path / "srv")
    seen: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    with anyio.fail_after(90):
        async with session(senv) as s:
            r = await s.call_tool(
                "chaos_run_experiment", {"experiment_name": "mcp-smoke"}, progress_callback=on_progress
            )
            assert not r.is_error, r.content
            # without a progress token, nothing is sent and the run is the same
            quiet = await s.call_tool(
                "chaos_run_experiment", {"experiment_name": "mcp-smoke", "dry_run": True}
            )
            assert not quiet.is_error
    messages = [m for _, m in seen]
    for phase in ("phase baseline", "phase inject", "phase recover", "phase analyse"):
        assert phase in messages, messages
    assert any(m and "register-slow-db" in m for m in messages), messages
    assert [p for p, _ in seen] == sorted(p for p, _ in seen)  # progress only grows


async def test_progress_carries_live_gate_values_against_thresholds(tmp_path: Path) -> None:
    senv = make_env(tmp_path / "srv")
    seen: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message or "")

    with anyio.fail_after(90):
        async with session(senv) as s:
            r = await s.call_tool(
                "chaos_run_experiment", {"experiment": GATED}, progress_callback=on_progress
            )
    gates = [m for m in seen if m.startswith("gate target-latency")]
    assert r.structured_content and not r.is_error, (r.content, seen)
    assert gates and all("1.5 > 5" in m and m.endswith("ok") for m in gates), seen


async def test_a_cancelled_run_rolls_back_and_is_journalled_as_interrupted(tmp_path: Path) -> None:
    senv = make_env(tmp_path / "srv")
    marker = tmp_path / "rolled-back"
    with anyio.fail_after(120):
        async with session(senv) as s:
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(
                        s.call_tool, "chaos_run_experiment", {"experiment": slow_experiment(marker, 60)}
                    )
                    for _ in range(300):  # bounded: up to ~30 s for the method to begin
                        if Path(f"{marker}.started").exists():
                            break
                        await anyio.sleep(0.1)
                    assert Path(f"{marker}.started").exists()
                    scope.cancel()  # the client gives up: the SDK sends notifications/cancelled
            status: dict = {}
            for _ in range(300):  # the rollback and the journal complete on the server
                r = await s.call_tool("chaos_status", {"include_results": True})
                status = r.structured_content or {}
                if status.get("results") and status["results"][0].get("status") not in (None, "running"):
                    break
                await anyio.sleep(0.1)
            run = status["results"][0]
            assert run["status"] == "interrupted", run
            j = await s.call_tool("chaos_get_journal", {"run_id": run["run_id"]})
            journal = json.loads(j.structured_content["journal"])  # type: ignore[index]
            assert journal["status"] == "interrupted"
            assert "cancelled by the MCP client" in json.dumps(journal)
    assert marker.exists(), "the rollback did not run"
