"""Observation without injection: --read-only and --allow-tool refuse calls on stdio and HTTP alike, and the
refusal names the setting to change. Real servers (a stdio subprocess, an HTTP server on loopback)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import anyio
import pytest
from mcp_helpers import make_env, run_http_server, server_argv, stdio_client

from mcp import Client

pytestmark = pytest.mark.anyio


async def _text(c: Client, tool: str, args: dict) -> tuple[bool, str]:
    r = await c.call_tool(tool, args)
    return bool(r.is_error), r.content[0].text if r.content else ""  # type: ignore[union-attr]


INJECT = {"fault_name": "slow-db", "action": "register", "fault_type": "latency"}


async def test_read_only_over_stdio_refuses_every_tool_that_changes_the_system(tmp_path: Path) -> None:
    senv = make_env(tmp_path / "srv")
    with anyio.fail_after(90):
        async with stdio_client(senv, "--read-only") as c:
            failed, _ = await _text(c, "chaos_status", {})
            assert not failed
            for tool, args in (
                ("chaos_inject_fault", INJECT),
                ("chaos_run_experiment", {"experiment_name": "mcp-smoke"}),
                ("chaos_abort", {}),
            ):
                failed, text = await _text(c, tool, args)
                assert failed and "--read-only" in text and tool in text, text
            failed, _ = await _text(c, "chaos_list_experiments", {})
            assert not failed
            status = (await c.call_tool("chaos_status", {"include_results": True})).structured_content
    assert status and status["active_faults"] == [] and status["total_runs"] == 0
    assert not senv.registry.exists() or "slow-db" not in senv.registry.read_text()


async def test_allow_list_over_http_refuses_other_tools_naming_the_setting(tmp_path: Path) -> None:
    senv = make_env(tmp_path / "srv")
    with run_http_server(senv, "--allow-tool", "chaos_status", "--allow-tool", "chaos_inject_fault") as srv:
        with anyio.fail_after(90):
            async with srv.client() as c:
                failed, _ = await _text(c, "chaos_inject_fault", INJECT)
                assert not failed
                failed, text = await _text(c, "chaos_list_experiments", {})
                assert failed and "--allow-tool chaos_list_experiments" in text, text
                assert "chaos_inject_fault, chaos_status" in text
                failed, text = await _text(c, "chaos_run_experiment", {"experiment_name": "mcp-smoke"})
                assert failed and "--allow-tool" in text


async def test_allow_list_and_read_only_together_and_unknown_names_fail_fast(tmp_path: Path) -> None:
    senv = make_env(tmp_path / "srv")
    with anyio.fail_after(90):
        async with stdio_client(senv, "--read-only", "--allow-tool", "chaos_inject_fault") as c:
            failed, text = await _text(c, "chaos_inject_fault", INJECT)
            assert failed and "--read-only" in text
    proc = subprocess.run(
        server_argv("--allow-tool", "chaos_statuz"),
        env={**os.environ, **senv.env},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2
    assert "chaos_statuz" in proc.stderr and "chaos_status" in proc.stderr and "Traceback" not in proc.stderr
