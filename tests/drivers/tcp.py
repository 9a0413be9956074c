"""Tiny real loopback TCP servers for proxy tests: asyncio ones run on the test's event loop; the threaded echo
server, the round trip with plain sockets and the standalone proxy process serve tests without a loop (those
that drive controller subprocesses)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def tcp_server(handler: Handler) -> AsyncIterator[int]:
    conns: set[asyncio.StreamWriter] = set()

    async def wrapped(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        conns.add(w)
        try:
            await handler(r, w)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            conns.discard(w)
            w.close()

    server = await asyncio.start_server(wrapped, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for w in list(conns):
            w.close()


async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    while data := await r.read(65536):
        w.write(data)
        await w.drain()


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def rtt(port: int, payload: bytes = b"ping") -> float:
    """Seconds for one round trip of ``payload`` on a new connection (connect excluded)."""
    r, w = await connect(port)
    try:
        t0 = time.perf_counter()
        w.write(payload)
        await w.drain()
        await asyncio.wait_for(r.readexactly(len(payload)), 10)
        return time.perf_counter() - t0
    finally:
        w.close()


async def best_rtt(port: int, tries: int = 3) -> float:
    """The fastest of ``tries`` round trips: a check that no delay is left, which one scheduling stall on a
    busy machine must not fail."""
    return min([await rtt(port) for _ in range(tries)])


@contextmanager
def threaded_echo_server() -> Iterator[int]:
    """An echo server on threads (one a connection), yielding its port; closed on exit."""
    srv = socket.create_server(("127.0.0.1", 0))

    def echo_one(c: socket.socket) -> None:
        with c:
            while data := c.recv(65536):
                c.sendall(data)

    def serve() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=echo_one, args=(c,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield srv.getsockname()[1]
    finally:
        srv.close()


def sync_rtt(port: int, payload: bytes = b"ping") -> float:
    """`rtt` with a blocking socket, for tests without an event loop."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        t0 = time.perf_counter()
        s.sendall(payload)
        got = b""
        while len(got) < len(payload):
            got += s.recv(len(payload))
        return time.perf_counter() - t0


@contextmanager
def standalone_netproxy(*args: str, env: dict[str, str]) -> Iterator[dict[str, Any]]:
    """`python -m faultplane.drivers.netproxy ARGS` with a control API on a free port and no registry entry,
    yielding the JSON line it prints at start (control URL, routes); terminated on exit."""
    proxy = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "faultplane.drivers.netproxy",
            *args,
            "--control",
            "127.0.0.1:0",
            "--no-registry",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        yield json.loads(proxy.stdout.readline())  # type: ignore[union-attr]
    finally:
        proxy.terminate()
        proxy.wait(10)


def best_sync_rtt(port: int, tries: int = 3) -> float:
    """`best_rtt` with a blocking socket."""
    return min(sync_rtt(port) for _ in range(tries))
