"""Helpers for the plane tests: subprocess environments, plan files, predicted fault draws."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from faultplane.plane.faults import FaultEngine
from faultplane.plane.plan import parse_plan
from mcp import Client, MCPError, StdioServerParameters

HERE = Path(__file__).parent
SERVER = str(HERE / "fixture_server.py")
PY = sys.executable


def child_env(**extra: str) -> dict[str, str]:
    """What the proxy subprocess needs: the isolated store (set per test by the root conftest) and PATH."""
    env = {k: v for k, v in os.environ.items() if k.startswith(("FAULTPLANE_", "XDG_"))}
    env["PATH"] = os.environ.get("PATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.update(extra)
    return env


def write_plan(tmp_path: Path, plan: dict[str, Any], name: str = "plan.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(plan))
    return path


def stdio_proxy_params(
    plan: Path | None,
    *,
    strict: bool = False,
    server: list[str] | None = None,
    session: str = "s1",
    **env: str,
) -> StdioServerParameters:
    args = ["-m", "faultplane.plane.proxy_stdio", "--session", session]
    if plan is not None:
        args += ["--plan", str(plan)]
    if strict:
        args.append("--strict")
    args += ["--", *(server or [PY, SERVER])]
    return StdioServerParameters(command=PY, args=args, env=child_env(**env))


def direct_params() -> StdioServerParameters:
    return StdioServerParameters(command=PY, args=[SERVER], env=child_env())


def predicted(plan: dict[str, Any], tool: str, n: int, fault: str) -> list[int]:
    """Which of n calls to `tool` the engine will hit with `fault`: the draws depend only on seed and ordinal."""
    engine = FaultEngine(parse_plan(plan))
    hits = []
    for i in range(n):
        d = engine.on_request(
            {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": tool, "arguments": {}}}
        )
        if d is not None and any(e.fault_type == fault for e in d.events):
            hits.append(i)
    return hits


async def outcomes(target: Any, tool: str, args: dict[str, Any], n: int, **kw: Any) -> list[str]:
    """n calls through the SDK client (`target`: a URL or stdio parameters), each as the client saw it:
    the result, `tool_error`, or `rpc:<code>`."""
    out = []
    async with Client(target, **kw) as c:
        for _ in range(n):
            try:
                r = await c.call_tool(tool, args)
                out.append("tool_error" if r.is_error else json.dumps(r.structured_content, sort_keys=True))
            except MCPError as exc:
                out.append(f"rpc:{exc.error.code}")
    return out
