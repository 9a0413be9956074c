"""The stdio transport with a wire that only protocol frames can reach.

The SDK's own `stdio_server()` diverts fd 1 to stderr while it serves, but restores it on exit, and it leaves
`sys.stdout` as it was: a probe's buffered `print()` output that has not been flushed yet is written to the
restored fd 1 when the interpreter exits, and the client reads it as a corrupt JSON-RPC frame. Here the wire
lives on private descriptors, fd 1 points at stderr for good (so child processes inherit stderr), `sys.stdout`
is stderr, and fd 0 is the null device (so nothing but the transport reads the client's requests).
"""

from __future__ import annotations

import fcntl
import os
import sys
from io import TextIOWrapper
from typing import Any

import anyio
from mcp.server.stdio import stdio_server

__all__ = ["claim_stdio", "serve_stdio"]


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


async def serve_stdio(server: Any) -> None:
    """Serve one MCP session over the process's stdin/stdout (an `MCPServer`)."""
    wire_in, wire_out = claim_stdio()
    # closefd=False: the reader thread may still block on wire_in after the session ends.
    reader = TextIOWrapper(os.fdopen(wire_in, "rb", closefd=False), encoding="utf-8", errors="replace")
    writer = TextIOWrapper(os.fdopen(wire_out, "wb", closefd=False), encoding="utf-8")
    # Explicit streams make the SDK skip its own (temporary) claim of fd 0 and fd 1.
    async with stdio_server(stdin=anyio.wrap_file(reader), stdout=anyio.wrap_file(writer)) as (read, write):
        lowlevel = server._lowlevel_server  # MCPServer.run_stdio_async does the same, with the SDK's claim
        await lowlevel.run(read, write, lowlevel.create_initialization_options())
