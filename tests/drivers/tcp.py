"""Tiny real loopback TCP servers for proxy tests (asyncio, run on the test's event loop)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

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
