"""Plane fixtures: the fixture MCP server and both proxies, as real subprocesses on loopback."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from planehelp import PY, SERVER, child_env

from proc_helpers import free_port, stop, wait_port


@pytest.fixture(scope="module")
def _shared_upstream() -> Iterator[str]:
    """One default (stateful, SSE) fixture server for a whole module: clients never share its sessions."""
    port = free_port()
    proc = subprocess.Popen([PY, SERVER, "http", str(port)], env=child_env())
    try:
        wait_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(proc)


def _listening(procs: list[subprocess.Popen[bytes]], cmd: list[str], port: int, env: dict[str, str]) -> str:
    """Start `cmd` (kept in `procs` for the fixture to stop) and return its /mcp URL once `port` listens."""
    proc = subprocess.Popen(cmd, env=env)
    procs.append(proc)
    wait_port(port, proc)
    return f"http://127.0.0.1:{port}/mcp"


@pytest.fixture
def http_upstream(_shared_upstream: str) -> Iterator[Callable[..., str]]:
    """The fixture server over streamable HTTP, returning its /mcp URL (flags start a dedicated one)."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*flags: str) -> str:
        if not flags:
            return _shared_upstream
        port = free_port()
        return _listening(procs, [PY, SERVER, "http", str(port), *flags], port, child_env())

    yield start
    for p in procs:
        stop(p)


@pytest.fixture
def http_proxy() -> Iterator[Callable[..., str]]:
    """Start the HTTP proxy in front of an upstream URL; returns the proxy's /mcp URL."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(upstream: str, plan: Path | None = None, *args: str, **env: str) -> str:
        port = free_port()
        cmd = [PY, "-m", "faultplane.plane.proxy_http", "--upstream", upstream, "--port", str(port)]
        if plan is not None:
            cmd += ["--plan", str(plan)]
        return _listening(procs, [*cmd, *args], port, child_env(**env))

    yield start
    for p in procs:
        stop(p)
