"""Agents can watch and stop long work: progress notifications for a run (phases, activities, gate values
against thresholds) and cancellation that rolls back and records the journal as interrupted. A real
ClientSession against `faultplane mcp` over stdio (a subprocess)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.types import CallToolResult
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


async def _call_with_progress(
    senv: ServerEnv, tool: str, arguments: dict[str, Any], timeout: float
) -> tuple[CallToolResult, list[str]]:
    """One tool call on a new session, and the progress messages it sent, in order."""
    seen: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message or "")

    with anyio.fail_after(timeout):
        async with session(senv) as s:
            return await s.call_tool(tool, arguments, progress_callback=on_progress), seen


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
    r, seen = await _call_with_progress(senv, "chaos_run_experiment", {"experiment": GATED}, 90)
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


# ---- GameDays and searches: the same progress and cancellation ---------------------------------------------


def _gameday(first: Path) -> str:
    """Two ordered lanes: the first runs `first`, the second a quick listed experiment."""
    return json.dumps(
        {
            "name": "mcp-watched",
            "lanes": [
                {"name": "slow-lane", "experiments": [str(first)]},
                {"name": "quick-lane", "experiments": ["mcp-smoke"]},
            ],
        }
    )


def _search(marker: Path, hold_s: float) -> str:
    """A boundary search whose trials mark `<marker>.started`, probe `${level}`, hold, and mark on rollback."""
    experiment = {
        "title": "MCP watched search",
        "method": [
            {
                "type": "action",
                "name": "mark-started",
                "provider": {
                    "type": "python",
                    "module": "mcp_target",
                    "func": "mark",
                    "arguments": {"path": f"{marker}.started", "text": "started"},
                },
            },
            {
                "type": "probe",
                "name": "level",
                "provider": {
                    "type": "python",
                    "module": "mcp_target",
                    "func": "number",
                    "arguments": {"value": "${level}"},
                },
            },
            {
                "type": "action",
                "name": "hold",
                "provider": {
                    "type": "python",
                    "module": "mcp_target",
                    "func": "sleep",
                    "arguments": {"seconds": hold_s},
                },
            },
        ],
        "rollbacks": [
            {
                "type": "action",
                "name": "mark-rollback",
                "provider": {
                    "type": "python",
                    "module": "mcp_target",
                    "func": "mark",
                    "arguments": {"path": str(marker)},
                },
            }
        ],
    }
    spec = {
        "experiment": experiment,
        "parameters": {"level": {"type": "float", "low": 1.0, "high": 10.0}},
        "objective": {"source": "probe", "name": "level", "bound": 5.0},
        "budget": 3,
        "seed": 3,
        "sampler": "random",
    }
    return json.dumps(spec)


async def _cancel_once_started(s: ClientSession, tool: str, arguments: dict, marker: Path) -> None:
    """Call `tool`, and once its first run has begun (`<marker>.started`), give up: the SDK sends
    notifications/cancelled for the request."""
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(s.call_tool, tool, arguments)
            for _ in range(300):  # bounded: up to ~30 s for the run to begin
                if Path(f"{marker}.started").exists():
                    break
                await anyio.sleep(0.1)
            assert Path(f"{marker}.started").exists()
            scope.cancel()


async def _settled_runs(s: ClientSession, count: int) -> list[dict]:
    """The newest `count` runs once none of them is still running (rollbacks and journals take a moment)."""
    runs: list[dict] = []
    for _ in range(300):
        r = await s.call_tool("chaos_status", {"include_results": True})
        runs = (r.structured_content or {}).get("results") or []
        if len(runs) >= count and all(run.get("status") not in (None, "running") for run in runs[:count]):
            break
        await anyio.sleep(0.1)
    return runs[:count]


async def test_a_gameday_reports_each_run_as_progress(tmp_path: Path) -> None:
    senv = make_env(tmp_path / "srv")
    quick = tmp_path / "quick.yaml"
    quick.write_text((senv.root / "experiments" / "mcp-smoke.yaml").read_text())
    r, seen = await _call_with_progress(senv, "chaos_gameday_run", {"gameday": _gameday(quick)}, 120)
    assert not r.is_error and r.structured_content, r.content
    assert r.structured_content["planned"] == 2 and r.structured_content["passed"] == 2
    starts = [m for m in seen if m.startswith("gameday lane")]
    assert starts == [
        f"gameday lane slow-lane: experiment {quick} starts",
        "gameday lane quick-lane: experiment mcp-smoke starts",
    ], seen
    # each run's own phases come through too, after the run's start and before the next one
    first, second = seen.index(starts[0]), seen.index(starts[1])
    assert "phase inject" in seen[first:second] and "phase inject" in seen[second:], seen


async def test_a_cancelled_gameday_rolls_back_its_run_and_starts_no_other(tmp_path: Path) -> None:
    senv = make_env(tmp_path / "srv")
    marker = tmp_path / "rolled-back"
    slow = tmp_path / "slow.yaml"
    slow.write_text(slow_experiment(marker, 60))
    with anyio.fail_after(150):
        async with session(senv) as s:
            await _cancel_once_started(s, "chaos_gameday_run", {"gameday": _gameday(slow)}, marker)
            runs = await _settled_runs(s, 1)
            assert len(runs) == 1 and runs[0]["status"] == "interrupted", runs
            j = await s.call_tool("chaos_get_journal", {"run_id": runs[0]["run_id"]})
            journal = json.loads(j.structured_content["journal"])  # type: ignore[index]
            assert journal["status"] == "interrupted" and "cancelled by the MCP client" in json.dumps(journal)
            gameday: dict = {}
            for _ in range(300):  # the GameDay is stored once its lanes are done
                g = await s.call_tool("chaos_gameday_analyze", {})
                if not g.is_error:
                    gameday = g.structured_content or {}
                    break
                await anyio.sleep(0.1)
            assert gameday.get("name") == "mcp-watched", gameday
            # the second lane never ran: stored as skipped, saying why
            assert "skipped: cancelled by the MCP client" in gameday["toon"], gameday["toon"]
            status = await s.call_tool("chaos_status", {"include_results": True})
            assert len((status.structured_content or {}).get("results") or []) == 1
    assert marker.exists(), "the rollback did not run"


async def test_a_search_reports_trials_and_a_cancelled_one_ends_interrupted(tmp_path: Path) -> None:
    senv = make_env(tmp_path / "srv")
    seen: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message or "")

    quick_marker, slow_marker = tmp_path / "quick", tmp_path / "slow"
    with anyio.fail_after(180):
        async with session(senv) as s:
            r = await s.call_tool(
                "chaos_search", {"spec": _search(quick_marker, 0.0)}, progress_callback=on_progress
            )
            assert not r.is_error and r.structured_content, r.content
            assert r.structured_content["trials"] == 3 and r.structured_content["status"] == "completed"
            trials = [m for m in seen if m.startswith("search trial")]
            for i in range(3):
                assert any(m.startswith(f"search trial {i}/3: {{'level': ") for m in trials), trials
                assert any(m.startswith(f"search trial {i}: measured ") for m in trials), trials
            assert "phase inject" in seen, seen

            await _cancel_once_started(s, "chaos_search", {"spec": _search(slow_marker, 60.0)}, slow_marker)
            runs = await _settled_runs(s, 4)
    assert runs[0]["status"] == "interrupted", runs
    assert [run["status"] for run in runs[1:]] == ["completed"] * 3, runs
    assert slow_marker.exists(), "the rollback did not run"
    from faultplane.core.store import open_store
    from faultplane.services.search import list_searches

    searches = list_searches(open_store(str(senv.store)))
    assert [x["status"] for x in searches[:2]] == ["interrupted", "completed"], searches
