"""Raw JSON-RPC messages of the MCP wire, for tests (and benchmarks) that speak it without an SDK client:
malformed input, proxies, signal handling."""

from __future__ import annotations

from typing import Any

PROTOCOL = "2025-11-25"


def init_params() -> dict[str, Any]:
    """The `initialize` params of a client that asks for no capability."""
    return {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}


def initialize(rid: Any = 0) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": init_params()}


def tool_call(rid: Any, name: str, arguments: dict[str, Any] | None = None, **params: Any) -> dict[str, Any]:
    """A `tools/call` request; `params` adds fields next to name and arguments (such as `_meta`)."""
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {"name": name, "arguments": {} if arguments is None else arguments, **params},
    }
