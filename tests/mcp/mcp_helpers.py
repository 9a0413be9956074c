"""Helpers for the MCP server tests: the server as a real subprocess, over stdio and over HTTP on loopback."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
from mcp.client.streamable_http import streamable_http_client

from mcp import Client, StdioServerParameters
from proc_helpers import free_port, wait_port
from servers import _stop

FIXTURES = Path(__file__).parent / "fixtures"
SEED = 1234


START_TIMEOUT_S = 30.0

SMOKE_EXPERIMENT = """\
title: MCP smoke
description: a python-provider probe and a faults-driver action, so a run touches the registry.
steady-state-hypothesis:
  title: service answers
  probes:
    - type: probe
      name: service-ok
      provider: {type: python, module: mcp_target, func: ok}
      tolerance: true
method:
  - type: action
    name: register-slow-db
    provider:
      type: driver
      driver: faults
      name: register
      arguments: {name: mcp-smoke-db, fault_type: latency, probability: 1.0, duration_seconds: 0.01}
"""


def slow_experiment(marker: Path, seconds: float = 60.0) -> str:
    """Marks `<marker>.started` when the method begins, sleeps, and marks `marker` on rollback."""
    return f"""\
title: MCP slow
method:
  - type: action
    name: mark-started
    provider:
      type: python
      module: mcp_target
      func: mark
      arguments: {{path: "{marker}.started", text: started}}
  - type: action
    name: sleep-long
    provider: {{type: python, module: mcp_target, func: sleep, arguments: {{seconds: {seconds}}}}}
rollbacks:
  - type: action
    name: mark-rollback
    provider: {{type: python, module: mcp_target, func: mark, arguments: {{path: "{marker}"}}}}
"""


@dataclass
class ServerEnv:
    """State directories for one server (and any worker process that must share its registry)."""

    root: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def registry(self) -> Path:
        return self.root / "state" / "faultplane" / "faults.json"

    @property
    def store(self) -> Path:
        return self.root / "store.duckdb"


def make_env(root: Path) -> ServerEnv:
    experiments = root / "experiments"
    experiments.mkdir(parents=True, exist_ok=True)
    (experiments / "mcp-smoke.yaml").write_text(SMOKE_EXPERIMENT, encoding="utf-8")
    # the user's policy (the server's XDG_CONFIG_HOME), also named by FAULTPLANE_POLICY so tests can rewrite it:
    # an explicit file alone only tightens, the user's may relax. A lab policy: the strict default requires SLO gates, which these tiny experiments don't declare, and a
    # person's approval for partitions, which these tests register as in-process faults (test_mcp_approval.py
    # covers the approval itself).
    policy = root / "config" / "faultplane" / "policy.yaml"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text(
        "gates: {required: false}\napproval: {fault_types: [resource_exhaustion]}\n", encoding="utf-8"
    )
    src = Path(__file__).resolve().parents[2] / "src"
    env = {
        "XDG_STATE_HOME": str(root / "state"),
        "XDG_DATA_HOME": str(root / "data"),
        "XDG_CONFIG_HOME": str(root / "config"),
        "FAULTPLANE_STORE": str(root / "store.duckdb"),
        "FAULTPLANE_EXPERIMENTS": str(experiments),
        "FAULTPLANE_POLICY": str(policy),
        "PYTHONPATH": os.pathsep.join([str(FIXTURES), str(src)]),
        "PYTHONUNBUFFERED": "1",
    }
    return ServerEnv(root=root, env=env)


def server_argv(*extra: str) -> list[str]:
    return [sys.executable, "-m", "faultplane.cli.main", "mcp", "--seed", str(SEED), *extra]


def stdio_client(senv: ServerEnv, *extra: str, mode: str = "auto") -> Client:
    argv = server_argv(*extra)
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=senv.env)
    return Client(params, read_timeout_seconds=60, mode=mode)  # type: ignore[arg-type]


@dataclass
class HttpServer:
    url: str
    port: int
    proc: subprocess.Popen[bytes]
    senv: ServerEnv
    log: Path
    token: str | None = None

    def client(self, token: str | None = None, *, mode: str = "auto") -> Client:
        headers = {}
        tok = token if token is not None else self.token
        if tok:
            headers["Authorization"] = f"Bearer {tok}"
        http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120))
        return Client(streamable_http_client(self.url, http_client=http), mode=mode, read_timeout_seconds=60)  # type: ignore[arg-type]


@contextlib.contextmanager
def run_http_server(senv: ServerEnv, *extra: str, token: str | None = None) -> Iterator[HttpServer]:
    port = free_port()
    log = senv.root / f"http-{port}.log"
    senv.root.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **senv.env}
    env.pop("FAULTPLANE_MCP_TOKEN", None)
    if token is not None:
        env["FAULTPLANE_MCP_TOKEN"] = token
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            server_argv("--transport", "http", "--port", str(port), *extra),
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        wait_port(port, proc, START_TIMEOUT_S, "MCP server", log)
        yield HttpServer(f"http://127.0.0.1:{port}/mcp", port, proc, senv, log, token)
    finally:
        _stop(proc)


ClientFactory = Callable[[], AbstractAsyncContextManager[Client]]
