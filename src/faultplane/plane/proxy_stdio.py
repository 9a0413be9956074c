"""The stdio driver: sit between an MCP client and a stdio MCP server it spawns, one JSON line at a time.

Frames are relayed as the bytes that arrived; a frame is re-encoded only when a fault changes it, so an empty
plan is byte-for-byte transparent. The child's stdin stays open after the client's closes until every
forwarded request has been answered, because stdio MCP servers cancel in-flight work at EOF.

Run it without the CLI's import cost: `python -m faultplane.plane.proxy_stdio --plan P -- CMD ARGS...`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import anyio
import anyio.abc

from faultplane.core.jsonrpc_guard import (
    INVALID_REQUEST,
    FrameError,
    FrameLimits,
    guess_id,
    loads_bounded,
    too_deep,
)
from faultplane.plane.interceptor import PASS, Interceptor
from faultplane.plane.plan import FaultPlan
from faultplane.plane.proxy_cli import add_session_options, session_options, start
from faultplane.plane.recorder import Recorder

__all__ = ["DEFAULT_MAX_FRAME_BYTES", "main", "run_stdio_proxy"]

INTERNAL_ERROR = -32603

log = logging.getLogger("faultplane.plane")

DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024
_FLUSH_EVERY_S = 1.0


class Oversized(bytes):
    """The first bytes of a frame longer than the limit (the rest was discarded); `size` is its length."""

    size: int


class _LineReader:
    """Splits a byte stream into newline-terminated frames (the terminator stays on the frame).

    A frame longer than `limit` is not buffered: its first bytes come back as `Oversized` once its newline
    has gone by, so one huge frame costs one limit of memory and the session goes on.
    """

    def __init__(self, receive: Callable[[], Awaitable[bytes]], limit: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._receive = receive
        self._limit = limit
        self._buf = bytearray()
        self._scanned = 0  # bytes already known to hold no newline, so big frames are scanned once
        self._eof = False

    async def readline(self) -> bytes:
        while True:
            i = self._buf.find(b"\n", self._scanned)
            if i >= self._limit:
                head = Oversized(bytes(self._buf[:512]))
                head.size = i + 1
                del self._buf[: i + 1]
                self._scanned = 0
                return head
            if i >= 0:
                line = bytes(self._buf[: i + 1])
                del self._buf[: i + 1]
                self._scanned = 0
                return line
            self._scanned = len(self._buf)
            if self._eof:
                line = bytes(self._buf)
                self._buf.clear()
                self._scanned = 0
                return line
            if len(self._buf) > self._limit:
                return await self._skip_oversized()
            self._buf += await self._next_chunk()

    async def _next_chunk(self) -> bytes:
        """The next bytes of the stream; b"" once it has ended or broken (and then it is at its end)."""
        try:
            chunk = await self._receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            chunk = b""
        if not chunk:
            self._eof = True
        return chunk

    async def _skip_oversized(self) -> Oversized:
        head = Oversized(bytes(self._buf[:512]))
        size = len(self._buf)
        self._buf.clear()
        self._scanned = 0
        while not self._eof:
            chunk = await self._next_chunk()
            if not chunk:
                break
            i = chunk.find(b"\n")
            if i >= 0:
                size += i + 1
                self._buf += chunk[i + 1 :]
                break
            size += len(chunk)
        head.size = size
        return head


async def _own_stdio(
    stdin_fd: int, stdout_fd: int
) -> tuple[Callable[[], Awaitable[bytes]], Callable[[bytes], None], Callable[[], Awaitable[None]]]:
    """Non-blocking pipe transports for our own stdin/stdout; threads when they are not pipes."""
    loop = asyncio.get_running_loop()
    receive: Callable[[], Awaitable[bytes]]
    try:
        # a pipe or socket only: asyncio also takes a character device such as /dev/null, whose registration
        # with epoll then fails inside a callback (a logged traceback) and leaves the proxy waiting forever
        if not stat.S_ISFIFO(mode := os.fstat(stdin_fd).st_mode) and not stat.S_ISSOCK(mode):
            raise ValueError("not a pipe")
        reader = asyncio.StreamReader(limit=1 << 20, loop=loop)  # read() in chunks; the limit is ours
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader, loop=loop),
            open(stdin_fd, "rb", 0, closefd=False),  # noqa: SIM115
        )

        async def receive() -> bytes:
            return await reader.read(65536)

    except (ValueError, OSError):
        src = open(stdin_fd, "rb", 0, closefd=False)  # noqa: SIM115

        async def receive() -> bytes:
            return await anyio.to_thread.run_sync(src.read, 65536)

    try:
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin,
            open(stdout_fd, "wb", 0, closefd=False),  # noqa: SIM115
        )
        writer = asyncio.StreamWriter(transport, protocol, None, loop)

        def write(data: bytes) -> None:
            if not transport.is_closing():
                writer.write(data)

        async def drain() -> None:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await writer.drain()

    except (ValueError, OSError):
        dst = open(stdout_fd, "wb", 0, closefd=False)  # noqa: SIM115

        def write(data: bytes) -> None:
            with contextlib.suppress(BrokenPipeError, ValueError):
                dst.write(data)

        async def drain() -> None:
            return None

    return receive, write, drain


async def run_stdio_proxy(
    command: Sequence[str],
    plan: FaultPlan,
    *,
    strict: bool = False,
    recorder: Recorder | None = None,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    stdin_fd: int = 0,
    stdout_fd: int = 1,
    drain_timeout_s: float = 30.0,
    limits: FrameLimits | None = None,
) -> int:
    """Relay until the client hangs up and the child exits; return the child's exit code."""
    if not command:
        raise ValueError("no server command given; put it after `--`")
    interceptor = Interceptor(plan, strict=strict, recorder=recorder)
    receive, write_client, drain_client = await _own_stdio(stdin_fd, stdout_fd)
    process = await anyio.open_process(
        list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, env=env, cwd=cwd
    )
    assert process.stdin is not None and process.stdout is not None
    child_in: anyio.abc.ByteSendStream = process.stdin
    limits = limits or FrameLimits(max_frame_bytes=DEFAULT_MAX_FRAME_BYTES)
    child_out = _LineReader(process.stdout.receive, limits.max_frame_bytes)
    client_in = _LineReader(receive, limits.max_frame_bytes)
    in_flight = 0  # delayed frames not yet forwarded
    held: list[list[bytes]] = []  # responses held back by a reorder fault; a list each, so equal bytes differ
    child_stdin_open = True

    def deliver(frame: bytes, *, response: bool = True) -> None:
        write_client(frame)
        if held and response:
            # A held response goes out right after the next response: that is the reorder. Notifications
            # and server->client requests do not release it.
            for h in held:
                write_client(h[0])
            held.clear()

    async def release_later(entry: list[bytes], hold_s: float) -> None:
        await anyio.sleep(hold_s)
        if any(h is entry for h in held):
            held[:] = [h for h in held if h is not entry]
            write_client(entry[0])
            await drain_client()

    async def send_child(frame: bytes) -> None:
        if child_stdin_open:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                await child_in.send(frame)

    async def delayed(frame: bytes, delay_s: float, forward: bool, reply: bytes | None) -> None:
        nonlocal in_flight
        try:
            await anyio.sleep(delay_s)
            if forward:
                await send_child(frame)
            elif reply is not None:
                deliver(reply + b"\n")
                await drain_client()
        finally:
            in_flight -= 1

    async def client_to_server(tg: anyio.abc.TaskGroup) -> None:
        nonlocal in_flight, child_stdin_open
        while True:
            line = await client_in.readline()
            if not line:
                break
            if not line.strip():
                await send_child(line)
                continue
            refusal = _refusal(line, limits, "request")
            if refusal is not None:
                deliver(refusal.reply() + b"\n")
                await drain_client()
                continue
            action = interceptor.on_client_frame(line)
            if action is PASS:
                await send_child(line)
            elif action.delay_s > 0:
                in_flight += 1
                tg.start_soon(delayed, line, action.delay_s, action.forward, action.reply)
            elif action.forward:
                await send_child(line)
            elif action.reply is not None:
                deliver(action.reply + b"\n")
                await drain_client()
        # The client hung up. Keep the child's stdin open until it has answered what it was sent.
        with anyio.move_on_after(drain_timeout_s):
            while in_flight or interceptor.has_pending():
                await anyio.sleep(0.005)
        child_stdin_open = False
        await child_in.aclose()

    async def server_to_client(tg: anyio.abc.TaskGroup) -> None:
        while True:
            line = await child_out.readline()
            if not line:
                break
            if isinstance(line, Oversized):
                # The client cannot be handed a frame above the limit; the request it answered gets an
                # error in its place, so the client is not left waiting.
                refusal = _refusal(line, limits, "response")
                log.warning(
                    "dropped a %d-byte frame from the server (limit %d)", line.size, limits.max_frame_bytes
                )
                if refusal is None or refusal.rid is None:
                    continue
                line = Oversized(refusal.reply() + b"\n")
            action = interceptor.on_server_frame(line)
            if action.hold_s is None:
                response = not held or _is_response(line)  # parsed only while something is held
                for frame in action.frames:
                    deliver(line if frame is None else frame + b"\n", response=response)
            else:
                for frame in action.frames:
                    entry = [line if frame is None else frame + b"\n"]
                    held.append(entry)
                    tg.start_soon(release_later, entry, action.hold_s)
            await drain_client()

    async def flush_periodically() -> None:
        if recorder is None:
            return
        while True:
            await anyio.sleep(_FLUSH_EVERY_S)
            await anyio.to_thread.run_sync(recorder.flush)

    async def on_signals(scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                scope.cancel()
                return

    code = 0
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(on_signals, tg.cancel_scope)
            tg.start_soon(flush_periodically)
            tg.start_soon(client_to_server, tg)
            await server_to_client(tg)
            # The child closed its stdout: it is gone or going. Nothing more can be relayed.
            for h in held:
                write_client(h[0])
            held.clear()
            await drain_client()
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            with contextlib.suppress(Exception):
                await child_in.aclose()  # EOF is how a stdio server learns to exit
            code = await _stop(process)
            interceptor.close()
            if recorder is not None:
                await anyio.to_thread.run_sync(lambda: recorder.flush(final=True))
    return code


def _refusal(line: bytes, limits: FrameLimits, what: str) -> FrameError | None:
    """The error owed for a frame the proxy will not relay: larger than the limit, or nested too deep to
    parse safely. Everything else passes untouched, invalid or not: judging it is the server's job."""
    if isinstance(line, Oversized):
        code = INVALID_REQUEST if what == "request" else INTERNAL_ERROR
        return FrameError(
            code,
            f"{'Invalid Request' if what == 'request' else 'Internal error'}: {what} of {line.size} bytes "
            f"exceeds the proxy's limit of {limits.max_frame_bytes} bytes; fix: raise it with "
            f"{limits.option}",
            guess_id(line),
        )
    if too_deep(line, limits.max_depth):
        return FrameError(
            INVALID_REQUEST,
            f"Invalid Request: JSON nested deeper than {limits.max_depth} levels",
            guess_id(line),
        )
    return None


def _is_response(line: bytes) -> bool:
    try:
        msg = loads_bounded(line)
    except ValueError:
        return False
    return (
        isinstance(msg, dict) and "id" in msg and "method" not in msg and ("result" in msg or "error" in msg)
    )


async def _stop(process: anyio.abc.Process) -> int:
    """The MCP client shutdown order: stdin closed already, then wait, SIGTERM, wait, SIGKILL."""
    with anyio.move_on_after(2.0):
        return await process.wait()
    process.terminate()
    with anyio.move_on_after(2.0):
        return await process.wait()
    process.kill()
    return await process.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m faultplane.plane.proxy_stdio [--plan P] [--strict] [--session ID] -- CMD...`"""
    parser = argparse.ArgumentParser(prog="faultplane-plane-proxy-stdio", description=__doc__)
    add_session_options(parser)
    parser.add_argument("--max-frame-bytes", type=int, default=DEFAULT_MAX_FRAME_BYTES)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return serve(command, **session_options(args), max_frame_bytes=args.max_frame_bytes)


def serve(
    command: Sequence[str],
    *,
    plan_path: str | Path | None,
    strict: bool = False,
    session_id: str | None = None,
    store: str | None = None,
    record: bool = True,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
) -> int:
    plan = start(plan_path)
    if plan is None:
        return 2
    try:
        limits = FrameLimits(max_frame_bytes=max_frame_bytes)
    except ValueError as exc:
        print(f"faultplane plane proxy stdio: {exc}", file=sys.stderr)
        return 2
    if not command:
        print("faultplane plane proxy stdio: give the server command after `--`", file=sys.stderr)
        return 2
    recorder = Recorder(
        session_id=session_id or os.environ.get("FAULTPLANE_PLANE_SESSION"),
        driver="stdio",
        target=" ".join(command),
        plan=plan,
        strict=strict,
        store_path=store,
        enabled=record,
    )
    try:
        return anyio.run(
            lambda: run_stdio_proxy(command, plan, strict=strict, recorder=recorder, limits=limits)
        )
    except (FileNotFoundError, PermissionError) as exc:
        print(f"faultplane plane proxy stdio: cannot start server: {exc}", file=sys.stderr)
        return 127
    except Exception as exc:
        log.debug("proxy failed", exc_info=True)
        causes = exc.exceptions if isinstance(exc, BaseExceptionGroup) else [exc]
        print(f"faultplane plane proxy stdio: stopped: {'; '.join(map(str, causes))}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
