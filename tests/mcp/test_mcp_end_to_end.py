"""End to end: a fault registered through the MCP tool takes effect in a separate Python process's fault point;
chaos_abort stops a running experiment and its rollback runs."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_helpers import FIXTURES, ClientFactory, ServerEnv, slow_experiment

pytestmark = pytest.mark.anyio


class Worker:
    """The fault_point_worker.py process: one stdout line per call through its fault point."""

    def __init__(self, senv: ServerEnv, point: str) -> None:
        env = {**os.environ, **senv.env}
        self.proc = subprocess.Popen(
            [sys.executable, str(FIXTURES / "fault_point_worker.py"), point, "60"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )

    async def wait_for(self, predicate: Any, timeout: float = 10.0) -> tuple[str, float]:
        """The first line satisfying `predicate`, and how long it took to appear."""
        assert self.proc.stdout is not None
        start = time.monotonic()
        with anyio.fail_after(timeout):
            while True:
                line = await anyio.to_thread.run_sync(self.proc.stdout.readline)
                assert line, "worker exited"
                if predicate(line.strip()):
                    return line.strip(), time.monotonic() - start

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


async def test_fault_registered_over_mcp_hits_another_process(
    connect: ClientFactory, server_env: ServerEnv
) -> None:
    worker = Worker(server_env, "slow-database")
    try:
        with anyio.fail_after(90):
            await worker.wait_for(lambda s: s == "ok")
            async with connect() as c:
                r = await c.call_tool(
                    "chaos_inject_fault",
                    {
                        "fault_name": "slow-database",
                        "action": "register",
                        "fault_type": "error",
                        "probability": 1.0,
                        "error_message": "injected-by-mcp",
                    },
                )
                assert not r.is_error
                line, _ = await worker.wait_for(lambda s: s.startswith("FAULT"))
                assert line == "FAULT FaultInjected injected-by-mcp"

                # a partition is approval-class in the built-in floor: refused without a person's approval
                r = await c.call_tool(
                    "chaos_inject_fault",
                    {
                        "fault_name": "slow-database",
                        "action": "register",
                        "fault_type": "network_partition",
                        "probability": 1.0,
                    },
                )
                assert r.is_error and "approva" in r.content[0].text  # type: ignore[union-attr]
                r = await c.call_tool(
                    "chaos_inject_fault",
                    {
                        "fault_name": "slow-database",
                        "action": "register",
                        "fault_type": "timeout",
                        "duration_seconds": 0.1,
                        "probability": 1.0,
                    },
                )
                assert not r.is_error
                line, _ = await worker.wait_for(lambda s: "FaultTimeout" in s)

                r = await c.call_tool(
                    "chaos_inject_fault", {"fault_name": "slow-database", "action": "remove"}
                )
                assert not r.is_error
                await worker.wait_for(lambda s: s == "ok")

                # inject: probability 0 per call, so only the armed occurrence fires -- exactly once
                await c.call_tool(
                    "chaos_inject_fault",
                    {
                        "fault_name": "slow-database",
                        "action": "register",
                        "fault_type": "error",
                        "probability": 0.0,
                        "error_message": "one-shot",
                    },
                )
                r = await c.call_tool(
                    "chaos_inject_fault", {"fault_name": "slow-database", "action": "inject"}
                )
                assert (
                    r.structured_content and r.structured_content["was_triggered"] is False
                )  # p=0 never arms
    finally:
        worker.stop()


async def test_injected_occurrence_fires_once_in_another_process(server_env: ServerEnv) -> None:
    """Inject with p=1.0 (a certain roll), then re-register with p=0.0 (register keeps armed occurrences):
    the worker's calls never trigger on their own, so the one failure it sees is the injected occurrence."""
    from faultplane.core.faults import FaultRegistry, FaultSpec

    reg = FaultRegistry(server_env.registry)
    from mcp_helpers import stdio_client

    def register(probability: float) -> dict[str, Any]:
        return {
            "fault_name": "once",
            "action": "register",
            "fault_type": "error",
            "probability": probability,
            "error_message": "armed",
        }

    with anyio.fail_after(90):
        async with stdio_client(server_env) as c:
            await c.call_tool("chaos_inject_fault", register(1.0))
            r = await c.call_tool("chaos_inject_fault", {"fault_name": "once", "action": "inject"})
            assert r.structured_content and r.structured_content["was_triggered"] is True
            # register overwrites the spec but keeps the armed occurrence
            await c.call_tool("chaos_inject_fault", register(0.0))
        assert reg.armed("once") == 1
        worker = Worker(server_env, "once")
        try:
            line, _ = await worker.wait_for(lambda s: s.startswith("FAULT"))
            assert line == "FAULT FaultInjected armed"
            oks = 0
            while oks < 20:  # then only successes: the occurrence was used up
                line, _ = await worker.wait_for(lambda s: True)
                assert line == "ok"
                oks += 1
        finally:
            worker.stop()
        assert reg.armed("once") == 0
        assert reg.get("once") == FaultSpec("once", "error", 0.0, None, "armed")


async def test_abort_stops_a_running_experiment_and_rolls_back(
    connect: ClientFactory, tmp_path: Path
) -> None:
    marker = tmp_path / "rolled-back"
    experiment = slow_experiment(marker, seconds=60)
    results: dict[str, Any] = {}
    with anyio.fail_after(60):
        async with connect() as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            description = tools["chaos_abort"].description or ""

            async def run() -> None:
                r = await c.call_tool("chaos_run_experiment", {"experiment": experiment})
                results["run"] = r

            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                aborted: list[str] = []
                for _ in range(200):  # bounded: up to ~20 s for the run to start
                    await anyio.sleep(0.1)
                    r = await c.call_tool("chaos_abort", {})
                    assert not r.is_error and r.structured_content is not None
                    aborted = r.structured_content["aborted"]
                    if aborted:
                        break
                assert len(aborted) == 1
    r = results["run"]
    assert not r.is_error, r.content
    out = r.structured_content
    # Exactly what chaos_abort's description promises: a requested stop ends "interrupted" (exit code 130);
    # "aborted" means an SLO gate stopped the run.
    assert out["status"] == "interrupted" and out["success"] is False and out["exit_code"] == 130
    assert out["run_id"] == aborted[0] and (out["error"] or "").startswith("interrupted: aborted by request")
    assert 'status "interrupted"' in description and "exit code 130" in description
    assert 'error starting "interrupted: aborted by request"' in description
    assert out["duration_seconds"] < 60
    assert marker.read_text() == "rolled back"


async def _wait_file(path: Path, timeout: float = 30.0) -> None:
    with anyio.fail_after(timeout):
        while not path.exists():
            await anyio.sleep(0.05)


def _run_status(senv: ServerEnv) -> list[tuple[str, str]]:
    from faultplane.core.store import Store

    rows = Store(senv.store).query("SELECT status, error FROM runs WHERE experiment_title = 'MCP slow'")
    return [(r["status"], r["error"] or "") for r in rows]


async def test_sigterm_over_stdio_rolls_back_the_running_experiment(
    server_env: ServerEnv, tmp_path: Path
) -> None:
    import json

    from mcp_helpers import server_argv

    from jsonrpc_helpers import initialize, tool_call

    marker = tmp_path / "rolled-back"
    init = initialize(1)
    call = tool_call(2, "chaos_run_experiment", {"experiment": slow_experiment(marker)})
    env = {**os.environ, **server_env.env}
    with anyio.fail_after(90):
        async with await anyio.open_process(server_argv(), env=env, stderr=subprocess.DEVNULL) as proc:
            assert proc.stdin is not None
            await proc.stdin.send(json.dumps(init).encode() + b"\n")
            await proc.stdin.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
            await proc.stdin.send(json.dumps(call).encode() + b"\n")
            await _wait_file(Path(f"{marker}.started"))
            proc.terminate()
            await proc.wait()
    assert marker.read_text() == "rolled back"
    [(status, error)] = _run_status(server_env)
    assert status == "interrupted" and error.startswith("interrupted: ") and "SIGTERM" in error


async def test_sigterm_over_http_rolls_back_the_running_experiment(
    server_env: ServerEnv, tmp_path: Path
) -> None:
    from mcp_helpers import run_http_server

    marker = tmp_path / "rolled-back"
    outcome: dict[str, Any] = {}
    with run_http_server(server_env) as srv, anyio.fail_after(90):
        # The client's own shutdown talks to a server that is gone by then: its errors are expected.
        with contextlib.suppress(Exception):
            async with srv.client() as c:

                async def run() -> None:
                    outcome["result"] = await c.call_tool(
                        "chaos_run_experiment", {"experiment": slow_experiment(marker)}
                    )

                async with anyio.create_task_group() as tg:
                    tg.start_soon(run)
                    await _wait_file(Path(f"{marker}.started"))
                    srv.proc.terminate()
                    await anyio.to_thread.run_sync(srv.proc.wait, 60)
        assert srv.proc.returncode is not None
    assert marker.read_text() == "rolled back"
    [(status, error)] = _run_status(server_env)
    assert status == "interrupted" and error.startswith("interrupted: ") and "SIGTERM" in error
    if "result" in outcome:  # the in-flight request was answered before the server stopped
        out = outcome["result"].structured_content
        assert out and out["status"] == status
