"""Over stdio, fd 1 carries protocol frames only: whatever activities print must not reach the client.

The server runs as a real subprocess without PYTHONUNBUFFERED, so a probe's print() sits in sys.stdout's
buffer the way it does in production, and is flushed whenever the interpreter decides (often at exit).
"""

from __future__ import annotations

import logging

import anyio
import pytest
from mcp_helpers import ServerEnv, stdio_client

pytestmark = pytest.mark.anyio

NOISY_EXPERIMENT = """\
title: MCP noisy
steady-state-hypothesis:
  title: probes print to stdout
  probes:
    - type: probe
      name: print-a-lot
      provider: {type: python, module: mcp_target, func: chatter, arguments: {lines: 5000}}
      tolerance: true
    - type: probe
      name: write-fd-1
      provider: {type: python, module: mcp_target, func: raw_stdout}
      tolerance: true
    - type: probe
      name: child-inherits-stdout
      provider: {type: python, module: mcp_target, func: child_stdout}
      tolerance: true
method:
  - type: action
    name: process-prints
    provider: {type: process, path: /bin/sh, arguments: ["-c", "echo to-stdout; echo to-stderr >&2"]}
"""


async def test_activity_output_never_reaches_the_protocol_stream(
    server_env: ServerEnv, caplog: pytest.LogCaptureFixture
) -> None:
    # The default test env sets PYTHONUNBUFFERED, which hides buffered prints: run the server as users do.
    server_env.env.pop("PYTHONUNBUFFERED", None)
    caplog.set_level(logging.DEBUG, logger="mcp")
    with anyio.fail_after(90):
        async with stdio_client(server_env, mode="legacy") as c:
            for _ in range(2):  # the second run starts with the first run's leftovers still buffered
                r = await c.call_tool("chaos_run_experiment", {"experiment": NOISY_EXPERIMENT})
                assert not r.is_error, r.content
                out = r.structured_content
                assert out and out["status"] == "completed" and out["success"] is True
                assert out["steady_state_before"] is True and out["steady_state_after"] is True
            journal = await c.call_tool("chaos_get_journal", {"run_id": out["run_id"]})
            assert not journal.is_error
            assert journal.structured_content and "to-stdout" in journal.structured_content["journal"]
            status = await c.call_tool("chaos_status", {})
            assert not status.is_error and status.structured_content["total_runs"] == 2
    # Closing the client ends the server: its interpreter exit is when leftover buffers used to hit the wire.
    parse_failures = [r.getMessage() for r in caplog.records if "Failed to parse" in r.getMessage()]
    assert parse_failures == []
