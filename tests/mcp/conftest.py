"""Fixtures for the MCP server tests (helpers live in mcp_helpers.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp_helpers import ClientFactory, HttpServer, ServerEnv, make_env, run_http_server, stdio_client

from mcp import Client


@pytest.fixture
def server_env(tmp_path: Path) -> ServerEnv:
    return make_env(tmp_path / "srv")


@pytest.fixture
def http_server(server_env: ServerEnv) -> Iterator[HttpServer]:
    with run_http_server(server_env) as srv:
        yield srv


@pytest.fixture(params=["stdio", "http"])
def connect(request: pytest.FixtureRequest, server_env: ServerEnv) -> Iterator[ClientFactory]:
    """A factory of connected clients, over stdio (a subprocess per client) or HTTP (one server)."""
    if request.param == "stdio":

        @asynccontextmanager
        async def open_stdio() -> AsyncIterator[Client]:
            async with stdio_client(server_env) as c:
                yield c

        yield open_stdio
        return
    with run_http_server(server_env) as srv:

        @asynccontextmanager
        async def open_http() -> AsyncIterator[Client]:
            async with srv.client() as c:
                yield c

        yield open_http
