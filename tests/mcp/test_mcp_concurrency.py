"""Calls do not serialise behind one another: 16 concurrent clients are answered while a long call is in flight.

A 60 s experiment run holds one call open; 16 clients (over HTTP, one connection each; over stdio, 16 tasks
pipelining on the one connection) then make every read tool's call, several times each. If calls queued
behind one another, none of them would be answered before the run ends. The judgement is by order, not by
time: every read is answered while the run's first activity has started and its rollback has not run, and the
run only ends (interrupted, rolled back) when chaos_abort stops it afterwards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_helpers import ClientFactory, ServerEnv, slow_experiment

from mcp import Client

pytestmark = pytest.mark.anyio

CLIENTS = 16
ROUNDS = 3


@pytest.fixture(autouse=True)
def _in_project(server_env: ServerEnv, monkeypatch: pytest.MonkeyPatch) -> None:
    """Servers start in the lab's directory, so its faultplane.policy.yaml (no SLO gates needed) is in force:
    $FAULTPLANE_POLICY can only tighten the policy."""
    monkeypatch.chdir(server_env.root)


async def _reads(c: Client, k: int) -> list[str]:
    """Every read tool once per round; distinct SQL per client so the analyze calls are not all cache hits."""
    done = []
    for r in range(ROUNDS):
        for name, args in (
            ("chaos_status", {}),
            ("chaos_status", {"include_results": True}),
            ("chaos_list_experiments", {}),
            ("chaos_analyze", {"sql": f"SELECT {k} AS client, {r} AS round, count(*) AS n FROM runs"}),
            ("chaos_discover", {"driver": "faults"}),
        ):
            res = await c.call_tool(name, args)
            assert not res.is_error, (name, res.content)
            done.append(name)
    return done


async def test_sixteen_clients_are_answered_while_a_long_call_is_in_flight(
    connect: ClientFactory, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    marker = tmp_path / "rolled-back"
    started = Path(f"{marker}.started")
    over_http = "http" in request.node.callspec.id
    results: dict[str, Any] = {}
    answered: list[tuple[int, list[str]]] = []
    with anyio.fail_after(120):
        async with connect() as runner:

            async def run() -> None:
                r = await runner.call_tool("chaos_run_experiment", {"experiment": slow_experiment(marker)})
                results["run"] = r

            async def client(k: int) -> None:
                if over_http:  # its own client and connection
                    async with connect() as c:
                        answered.append((k, await _reads(c, k)))
                else:  # one stdio connection: 16 callers pipelining on it
                    answered.append((k, await _reads(runner, k)))

            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                while not started.exists():  # the run's first activity ran; its 60 s sleep is under way
                    assert "run" not in results, results["run"].content  # it ended before it began
                    await anyio.sleep(0.05)
                async with anyio.create_task_group() as clients:
                    for k in range(CLIENTS):
                        clients.start_soon(client, k)
                # Every read was answered, and the long call was still in flight through all of them.
                assert "run" not in results and not marker.exists()
                assert sorted(k for k, _ in answered) == list(range(CLIENTS))
                assert all(len(names) == 5 * ROUNDS for _, names in answered)
                stopped = await runner.call_tool("chaos_abort", {})
                assert not stopped.is_error and len(stopped.structured_content["aborted"]) == 1  # type: ignore[index]
    out = results["run"].structured_content
    assert out["status"] == "interrupted", out
    assert marker.read_text() == "rolled back"
