"""The stdio transport with a wire that only protocol frames can reach.

The SDK's own `stdio_server()` diverts fd 1 to stderr while it serves, but restores it on exit, and it leaves
`sys.stdout` as it was: a probe's buffered `print()` output that has not been flushed yet is written to the
restored fd 1 when the interpreter exits, and the client reads it as a corrupt JSON-RPC frame. Here the wire
lives on private descriptors, fd 1 points at stderr for good (so child processes inherit stderr), `sys.stdout`
is stderr, and fd 0 is the null device (so nothing but the transport reads the client's requests).
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from collections.abc import AsyncIterator
from io import TextIOWrapper
from typing import Any

import anyio
from mcp.server.stdio import stdio_server
from mcp.types import INVALID_REQUEST, jsonrpc_message_adapter

__all__ = ["claim_stdio", "invalid_request_reply", "serve_stdio"]


def claim_stdio() -> tuple[int, int]:
    """Move the wire to private descriptors (close-on-exec, above 2); returns (wire_in, wire_out)."""
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    os.dup2(2, 1)
    # Output buffered before the claim was never a frame: it now drains to stderr, not the wire.
    sys.stdout.flush()
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    sys.stdout = sys.stderr
    return wire_in, wire_out


def invalid_request_reply(line: str) -> str | None:
    """The JSON-RPC error frame owed for `line`, when it is JSON but not a valid JSON-RPC message.

    The SDK drops such lines silently, but JSON-RPC 2.0 requires an Invalid Request (-32600) answer, with
    the request's id when it can be read and null otherwise. Not answered: valid messages (the SDK handles
    them, e.g. -32601 for an unknown method), lines that are not JSON at all (dropped, as the SDK does; no
    -32700 is sent over stdio), and anything shaped like a response (answering a response could ping-pong).
    """
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    # The SDK reads a request whose id is not a string or an integer (null, 1.5, [1]) as a notification and
    # drops it; MCP requires string or integer ids, so it is an Invalid Request.
    bad_id = isinstance(obj, dict) and "id" in obj and "method" in obj and not _valid_id(obj["id"])
    if not bad_id:
        try:
            jsonrpc_message_adapter.validate_json(line, by_name=False)
        except ValueError:
            pass
        else:
            return None
    if isinstance(obj, dict) and "method" not in obj and ("result" in obj or "error" in obj):
        return None
    rid = obj.get("id") if isinstance(obj, dict) else None
    if not _valid_id(rid):
        rid = None
    error = {"code": INVALID_REQUEST, "message": f"Invalid Request: {_defect(obj)}"}
    return json.dumps({"jsonrpc": "2.0", "id": rid, "error": error}, separators=(",", ":")) + "\n"


def _valid_id(rid: Any) -> bool:
    return isinstance(rid, str | int) and not isinstance(rid, bool)


def _defect(obj: Any) -> str:
    if isinstance(obj, list):
        return "batches are not supported; send one JSON object per line"
    if not isinstance(obj, dict):
        return "a message must be a JSON object"
    if obj.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"'
    if not isinstance(obj.get("method"), str):
        return "method must be a string"
    if "id" in obj and not _valid_id(obj["id"]):
        return "id must be a string or an integer"
    if "params" in obj and not isinstance(obj["params"], dict):
        return "params must be an object"
    return "not a JSON-RPC 2.0 request or notification"


class _Wire:
    """The protocol output: whole frames only, one writer at a time (the SDK's writer and ours share it)."""

    def __init__(self, raw: TextIOWrapper) -> None:
        self._file = anyio.wrap_file(raw)
        self._lock = anyio.Lock()

    async def write(self, text: str) -> None:
        async with self._lock:
            await self._file.write(text)

    async def flush(self) -> None:
        async with self._lock:
            await self._file.flush()

    async def send_frame(self, frame: str) -> None:
        async with self._lock:
            await self._file.write(frame)
            await self._file.flush()


class _Requests:
    """The protocol input as the SDK reads it, minus invalid messages, which are answered here instead."""

    def __init__(self, raw: TextIOWrapper, wire: _Wire) -> None:
        self._file = anyio.wrap_file(raw)
        self._wire = wire

    async def __aiter__(self) -> AsyncIterator[str]:
        async for line in self._file:
            reply = invalid_request_reply(line)
            if reply is None:
                yield line
            else:
                await self._wire.send_frame(reply)


async def serve_stdio(server: Any) -> None:
    """Serve one MCP session over the process's stdin/stdout (an `MCPServer`)."""
    wire_in, wire_out = claim_stdio()
    # closefd=False: the reader thread may still block on wire_in after the session ends.
    reader = TextIOWrapper(os.fdopen(wire_in, "rb", closefd=False), encoding="utf-8", errors="replace")
    writer = TextIOWrapper(os.fdopen(wire_out, "wb", closefd=False), encoding="utf-8")
    wire = _Wire(writer)
    # Explicit streams make the SDK skip its own (temporary) claim of fd 0 and fd 1.
    streams = stdio_server(stdin=_Requests(reader, wire), stdout=wire)  # type: ignore[arg-type]
    async with streams as (read, write):
        lowlevel = server._lowlevel_server  # MCPServer.run_stdio_async does the same, with the SDK's claim
        await lowlevel.run(read, write, lowlevel.create_initialization_options())
