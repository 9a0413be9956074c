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
from collections.abc import AsyncIterator
from typing import Any, BinaryIO

import anyio
from mcp.server.stdio import stdio_server

from faultplane.core.jsonrpc_guard import (
    INVALID_REQUEST,
    FrameError,
    FrameLimits,
    check_frame,
    guess_id,
    is_response,
    loads_bounded,
)

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


def invalid_request_reply(line: str | bytes, limits: FrameLimits = FrameLimits()) -> str | None:
    """The JSON-RPC error frame owed for `line`, or None when it is a valid message for the SDK to handle.

    The SDK drops lines that are not valid JSON-RPC silently (and crashes on deep nesting); JSON-RPC 2.0
    requires -32700 for what is not JSON and -32600 for what is not a valid message, with the request's id
    when it can be read. Responses are never answered, even invalid ones (answering one could ping-pong).
    """
    data = line.encode("utf-8", "surrogateescape") if isinstance(line, str) else line
    if not data.strip():
        return None  # a blank line between frames is no message at all
    try:
        check_frame(data, limits)
    except FrameError as exc:
        if exc.code == INVALID_REQUEST and _response_shaped(data):
            return None
        return exc.reply().decode() + "\n"
    return None


def _response_shaped(data: bytes) -> bool:
    try:
        return is_response(loads_bounded(data))
    except ValueError:
        return False


class _Wire:
    """The protocol output: whole frames only, one writer at a time (the SDK's writer and ours share it).

    The SDK writes a frame then flushes it; here the write only buffers, and the flush does the write and
    the flush in one worker-thread call: one thread hop per frame instead of two.
    """

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._pending: list[str] = []
        self._lock = anyio.Lock()

    def _emit(self, data: bytes) -> None:
        self._raw.write(data)
        self._raw.flush()

    async def write(self, text: str) -> None:
        self._pending.append(text)

    async def flush(self) -> None:
        async with self._lock:
            if not self._pending:
                return
            data = "".join(self._pending).encode("utf-8")
            self._pending.clear()
            await anyio.to_thread.run_sync(self._emit, data)

    async def send_frame(self, frame: str) -> None:
        await self.write(frame)
        await self.flush()


class _Requests:
    """The protocol input as the SDK reads it, minus invalid messages, which are answered here instead.

    Lines are read as bytes with a bound, so an endless line costs at most one frame limit of memory and
    is answered with an error once its newline arrives; invalid UTF-8 is a parse error, not replaced text.
    """

    def __init__(self, raw: BinaryIO, wire: _Wire, limits: FrameLimits) -> None:
        self._raw = raw
        self._wire = wire
        self._limits = limits

    def _next(self) -> tuple[bytes, int]:
        """(the frame or its first part, its full length); b"" at EOF. Runs in a worker thread."""
        cap = self._limits.max_frame_bytes + 1
        line = self._raw.readline(cap)
        size = len(line)
        if size < cap or line.endswith(b"\n"):
            return line, size
        head = line[:512]
        while line and not line.endswith(b"\n"):  # discard the rest of an oversized frame
            line = self._raw.readline(1 << 20)
            size += len(line)
        return head, size

    async def __aiter__(self) -> AsyncIterator[str]:
        limit = self._limits.max_frame_bytes
        while True:
            line, size = await anyio.to_thread.run_sync(self._next)
            if not line:
                return
            if size > limit:
                error = FrameError(
                    INVALID_REQUEST,
                    f"Invalid Request: message of {size} bytes exceeds the limit of {limit} bytes; fix: send "
                    f"less, or raise the limit with {self._limits.option}",
                    guess_id(line),
                )
                await self._wire.send_frame(error.reply().decode() + "\n")
                continue
            reply = invalid_request_reply(line, self._limits)
            if reply is None:
                if line.strip():
                    yield line.decode("utf-8")
            else:
                await self._wire.send_frame(reply)


async def serve_stdio(server: Any, limits: FrameLimits | None = None) -> None:
    """Serve one MCP session over the process's stdin/stdout (an `MCPServer`)."""
    wire_in, wire_out = claim_stdio()
    # closefd=False: the reader thread may still block on wire_in after the session ends.
    reader = os.fdopen(wire_in, "rb", closefd=False)
    writer = os.fdopen(wire_out, "wb", closefd=False)
    wire = _Wire(writer)
    # Explicit streams make the SDK skip its own (temporary) claim of fd 0 and fd 1.
    streams = stdio_server(stdin=_Requests(reader, wire, limits or FrameLimits()), stdout=wire)  # type: ignore[arg-type]
    async with streams as (read, write):
        lowlevel = server._lowlevel_server  # MCPServer.run_stdio_async does the same, with the SDK's claim
        await lowlevel.run(read, write, lowlevel.create_initialization_options())
