"""A lean HTTP/1.1 front server and keep-alive upstream client for `plane proxy http` (asyncio + httptools).

Why not uvicorn + Starlette + httpx2: every tools/call crosses the proxy twice (request in, response out),
and those layers cost about a millisecond per call on their own (ASGI message dicts, routing, httpcore's
connection pool state machine, anyio stream wrappers) — more than the MCP server behind takes to answer. Here a
request is parsed by httptools straight from the socket's bytes, forwarded on a pooled keep-alive connection
with one write, and the response is parsed by httptools from the upstream socket and relayed as received.

Only what the proxy needs is implemented: one route, bodies by Content-Length or chunked (both directions),
keep-alive, Expect: 100-continue, a body cap, pipelined requests answered in order, write back-pressure, and a
client disconnect cancelling the request's handler (which closes its upstream stream).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httptools

__all__ = ["BodyTooLarge", "Reply", "Request", "Upstream", "UpstreamError", "UpstreamResponse", "serve"]

_REASONS = {
    100: "Continue",
    200: "OK",
    202: "Accepted",
    204: "No Content",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    406: "Not Acceptable",
    409: "Conflict",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    421: "Misdirected Request",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}
_MAX_QUEUED = 16  # pipelined requests read ahead before the socket stops being read


def _status_line(status: int) -> bytes:
    return b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, "Status").encode())


def _nodelay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


@dataclass
class Request:
    method: str
    path: str
    query: str
    headers: list[tuple[bytes, bytes]]  # names lower-cased, as received
    body: bytes
    too_large: bool = False  # the body went past the cap: `body` holds its first bytes only

    def header(self, name: bytes) -> str | None:
        for k, v in self.headers:
            if k == name:
                return v.decode("latin-1")
        return None


@dataclass
class Reply:
    status: int
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None  # sent chunked, as produced
    after: Callable[[], None] | None = None  # called once the last byte is written

    @classmethod
    def json(cls, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> Reply:
        return cls(status, [(b"content-type", b"application/json"), *(headers or [])], body)


Handler = Callable[[Request], Awaitable[Reply]]
# What a request's answer is given as: a Reply, or an awaitable of one (run in a task).
Answer = Reply | Awaitable[Reply]
# The task-free path: fast(request, deliver) either declines (returns None; nothing was done, `handler` runs in
# a task) or takes the request and returns how to abort it (the client hung up first); it calls deliver(answer)
# exactly once, later, from a protocol callback, or at once.
FastHandler = Callable[[Request, Callable[[Answer], None]], Callable[[], None] | None]


class _Taken:
    """One request the fast handler took: delivered at most once, to the connection that asked."""

    __slots__ = ("abort", "conn", "done", "keep_alive")

    def __init__(self, conn: _ServerConn, keep_alive: bool) -> None:
        self.conn = conn
        self.keep_alive = keep_alive
        self.done = False
        self.abort: Callable[[], None] | None = None

    def deliver(self, answer: Answer) -> None:
        self.conn._delivered(self, answer)


class _ServerConn(asyncio.Protocol):
    """One client connection: requests parsed as they arrive, answered one after another."""

    def __init__(self, handler: Handler, max_body: int, fast: FastHandler | None = None) -> None:
        self.handler = handler
        self.fast = fast
        self.max_body = max_body
        self.taken: _Taken | None = None  # a request the fast handler is answering
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.queue: collections.deque[tuple[Request, bool]] = collections.deque()
        self.task: asyncio.Task[None] | None = None
        self.closed = False
        self.eof = False
        self.reading = True
        self.can_write = asyncio.Event()
        self.can_write.set()
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body = bytearray()
        self._too_large = False
        self._declared = b""  # the Content-Length header's value
        self._expect = False  # Expect: 100-continue

    # --- asyncio.Protocol ---

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        _nodelay(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.can_write.set()
        if self.task is not None and not self.task.done():
            self.task.cancel()  # the client hung up: its handler (and upstream stream) end now
        taken, self.taken = self.taken, None
        if taken is not None and not taken.done:
            taken.done = True
            if taken.abort is not None:
                taken.abort()  # the same for a request the fast handler holds

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(400, b"protocol upgrades are not supported")
        except httptools.HttpParserError as exc:
            self._fail(400, f"malformed HTTP request: {exc}".encode())

    def eof_received(self) -> bool:
        # The client closed its side. A half-close cannot be told from a hang-up until a write fails, and an
        # idle SSE stream never writes: like uvicorn, take it as a hang-up (the handler is cancelled).
        self.eof = True
        return False

    # --- httptools callbacks ---

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []
        self._body = bytearray()
        self._too_large = False
        self._declared = b""
        self._expect = False

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        self._headers.append((name, value))
        # the two headers the HTTP layer acts on, noted as they pass instead of searched for afterwards
        if name == b"content-length":
            if not self._declared:
                self._declared = value
        elif name == b"expect" and value.lower() == b"100-continue":
            self._expect = True

    def on_headers_complete(self) -> None:
        declared = self._declared
        if declared.isdigit() and int(declared) > self.max_body:
            self._too_large = True
        elif self._expect:
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self._too_large:
            if len(self._body) < 512:
                self._body += body[: 512 - len(self._body)]
            return
        self._body += body
        if len(self._body) > self.max_body:
            self._too_large = True
            del self._body[512:]

    def on_message_complete(self) -> None:
        raw = self._url
        if raw[:1] == b"/" and b"?" not in raw and b"#" not in raw:
            path, query = raw.decode("latin-1"), ""  # origin-form without a query: what parse_url would give
        else:
            url = httptools.parse_url(raw) if raw else None
            path = url.path.decode("latin-1") if url is not None and url.path else "/"
            query = url.query.decode("latin-1") if url is not None and url.query else ""
        req = Request(
            method=self.parser.get_method().decode("ascii", "replace"),
            path=path,
            query=query,
            headers=self._headers,
            body=bytes(self._body),
            too_large=self._too_large,
        )
        keep_alive = self.parser.should_keep_alive()
        idle = self.taken is None and not self.queue and (self.task is None or self.task.done())
        if idle and self.fast is not None and not self.closed:
            # Answered from protocol callbacks, without a task per request when the handler can.
            taken = self.taken = _Taken(self, keep_alive)
            try:
                abort = self.fast(req, taken.deliver)
            except Exception as exc:  # a bug in the proxy answers this request, never kills the connection
                abort = None
                taken.deliver(
                    Reply.json(500, b'{"error":"proxy internal error: %s"}' % type(exc).__name__.encode())
                )
            if abort is not None or taken.done:
                taken.abort = abort
                return
            self.taken = None  # declined: nothing was done, the task path answers
        self.queue.append((req, keep_alive))
        if len(self.queue) >= _MAX_QUEUED and self.transport is not None and self.reading:
            self.reading = False
            self.transport.pause_reading()
        if self.taken is None and (self.task is None or self.task.done()):
            self.task = asyncio.get_running_loop().create_task(self._serve())

    def _delivered(self, taken: _Taken, answer: Answer) -> None:
        if taken.done:
            if not isinstance(answer, Reply):
                _discard(answer)
            return
        taken.done = True
        if self.taken is taken:
            self.taken = None
        if self.closed:
            if not isinstance(answer, Reply):
                _discard(answer)
            return
        if isinstance(answer, Reply) and answer.stream is None:
            self._write_reply(answer, taken.keep_alive)
            if not taken.keep_alive:
                self._close()
            elif self.queue:
                self.task = asyncio.get_running_loop().create_task(self._serve())
            elif self.eof:
                self._close()
            return
        self.task = asyncio.get_running_loop().create_task(self._finish(answer, taken.keep_alive))

    # --- answering ---

    def _fail(self, status: int, message: bytes) -> None:
        if self.transport is None or self.closed:
            return
        body = b'{"error":"' + message.replace(b"\\", b"\\\\").replace(b'"', b"'") + b'"}'
        self.transport.write(
            _status_line(status)
            + b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body)
            + body
        )
        self.transport.close()
        self.closed = True

    async def _serve(self) -> None:
        while self.queue and not self.closed:
            req, keep_alive = self.queue.popleft()
            if not self.reading and len(self.queue) < _MAX_QUEUED // 2 and self.transport is not None:
                self.reading = True
                self.transport.resume_reading()
            if not await self._answer(self.handler(req), keep_alive):
                return
        if self.eof:
            self._close()

    async def _finish(self, answer: Answer, keep_alive: bool) -> None:
        """A fast-path answer that needs a task (it waits, or streams); then the requests queued behind it."""
        if await self._answer(answer, keep_alive):
            await self._serve()

    async def _answer(self, answer: Answer, keep_alive: bool) -> bool:
        """Send one answer; False when the connection ends with it."""
        try:
            reply = answer if isinstance(answer, Reply) else await answer
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug in the proxy answers this request, never kills the connection
            reply = Reply.json(500, b'{"error":"proxy internal error: %s"}' % type(exc).__name__.encode())
        await self._send(reply, keep_alive)
        if not keep_alive:
            self._close()
            return False
        return True

    def _close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True

    def _write_reply(self, reply: Reply, keep_alive: bool) -> None:
        """A whole reply in one write (no stream)."""
        head = [_status_line(reply.status)]
        for k, v in reply.headers:
            head.append(k + b": " + v + b"\r\n")
        if not keep_alive:
            head.append(b"connection: close\r\n")
        head.append(b"content-length: %d\r\n\r\n" % len(reply.body))
        if not self.closed and self.transport is not None:
            self.transport.write(b"".join(head) + reply.body)
        if reply.after is not None:
            reply.after()

    async def _send(self, reply: Reply, keep_alive: bool) -> None:
        transport = self.transport
        assert transport is not None
        if reply.stream is None:
            self._write_reply(reply, keep_alive)
            return
        head = [_status_line(reply.status)]
        for k, v in reply.headers:
            head.append(k + b": " + v + b"\r\n")
        if not keep_alive:
            head.append(b"connection: close\r\n")
        head.append(b"transfer-encoding: chunked\r\n\r\n")
        transport.write(b"".join(head))
        stream = reply.stream
        try:
            async for chunk in stream:
                if self.closed:
                    break
                if chunk:
                    transport.write(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                    if not self.can_write.is_set():
                        await self.can_write.wait()
            if not self.closed:
                transport.write(b"0\r\n\r\n")
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
            if reply.after is not None:
                reply.after()


def _discard(answer: Awaitable[Reply]) -> None:
    """An answer nobody will send (the client left): a coroutine not yet started is closed, not leaked."""
    close = getattr(answer, "close", None)
    if close is not None:
        close()


async def serve(
    handler: Handler, host: str, port: int, *, max_body: int, fast: FastHandler | None = None
) -> asyncio.Server:
    """Serve `handler` (each request in a task), or `fast` first where it takes the request."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: _ServerConn(handler, max_body, fast), host, port, backlog=1024)


# --- upstream ----------------------------------------------------------------------------------------------


class UpstreamError(Exception):
    pass


class BodyTooLarge(Exception):
    """A response body past the cap; args[0] holds its first bytes."""


class _UpConn(asyncio.Protocol):
    """One keep-alive connection to the upstream server; one response parsed at a time."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.response: UpstreamResponse | None = None
        self.got_bytes = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        _nodelay(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        resp, self.response = self.response, None
        if resp is not None:
            resp._lost(exc)

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        if self.response is None:
            self.close()  # bytes nobody asked for: this connection cannot be trusted with the next request
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.response._lost(UpstreamError(f"malformed HTTP response: {exc}"))
            self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    # --- httptools callbacks ---

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.response is not None
        self.response.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        resp = self.response
        assert resp is not None
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100 Continue): the real one follows
            resp.headers.clear()
            return
        resp.status = status
        resp.keep_alive = self.parser.should_keep_alive()
        if not resp.started.done():
            resp.started.set_result(None)
        if resp.watch is not None and not resp._whole_soon():
            resp._notify()  # streamed, or of unknown length: the watcher takes it from here as it comes

    def on_body(self, body: bytes) -> None:
        assert self.response is not None
        self.response._feed(body)

    def on_message_complete(self) -> None:
        resp = self.response
        if resp is None or resp.status == 0:
            return  # the end of an interim response
        self.response = None
        resp._complete()


class UpstreamResponse:
    def __init__(self, conn: _UpConn, pool: Upstream) -> None:
        self.conn = conn
        self.pool = pool
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.keep_alive = False
        loop = asyncio.get_running_loop()
        self.started: asyncio.Future[None] = loop.create_future()
        self._chunks: collections.deque[bytes] = collections.deque()
        self._wake: asyncio.Future[None] | None = None
        self._done = False
        self._error: BaseException | None = None
        self._released = False
        # Called once, from protocol callbacks, when the whole body is in, or as soon as it will not be read
        # whole (a stream, a body past watch_cap, a lost connection): see Relay.fast.
        self.watch: Callable[[], None] | None = None
        self.watch_cap = 0

    def header(self, name: bytes) -> str:
        for k, v in self.headers:
            if k == name:
                return v.decode("latin-1")
        return ""

    # fed by the connection
    def _feed(self, data: bytes) -> None:
        self._chunks.append(data)
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def _complete(self) -> None:
        self._done = True
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)
        self._release()
        self._notify()

    def _notify(self) -> None:
        watch, self.watch = self.watch, None
        if watch is not None:
            watch()

    def _whole_soon(self) -> bool:
        """A JSON body of declared length within watch_cap: worth waiting for whole."""
        declared = b""
        for k, v in self.headers:
            if k == b"content-length":
                declared = v
            elif k == b"content-type" and v.startswith(b"text/event-stream"):
                return False
        return declared.isdigit() and int(declared) <= self.watch_cap

    def whole(self) -> bytes | None:
        """The body when all of it arrived without error, else None."""
        if not self._done or self._error is not None:
            return None
        data = b"".join(self._chunks)
        self._chunks.clear()
        return data

    def abandon(self) -> None:
        """`aclose` without awaiting: nobody will read this response."""
        self.watch = None
        if not self._done:
            self.conn.response = None
            self.conn.close()
        self._release()

    def _lost(self, exc: BaseException | None) -> None:
        delimited = any(k in (b"content-length", b"transfer-encoding") for k, _ in self.headers)
        if self.status and not delimited and exc is None:
            self._done = True  # a body that runs until the server closes: the close is its end
        elif not self._done:
            self._error = exc or UpstreamError("the upstream server closed the connection")
        if not self.started.done():
            self.started.set_exception(UpstreamError(str(self._error or "connection lost")))
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)
        self._notify()

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        if self._done and self.keep_alive and not self.conn.closed:
            self.pool._put(self.conn)
        else:
            self.conn.close()

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        while True:
            while self._chunks:
                yield self._chunks.popleft()
            if self._done:
                return
            if self._error is not None:
                raise UpstreamError(str(self._error))
            self._wake = asyncio.get_running_loop().create_future()
            await self._wake
            self._wake = None

    async def read(self, cap: int) -> bytes:
        """The whole body; UpstreamError past `cap` bytes or when the connection breaks. One wait for the
        common small answer instead of a generator step per chunk."""
        while not self._done:
            if self._error is not None:
                raise UpstreamError(str(self._error))
            size = sum(map(len, self._chunks))
            if size > cap:
                raise BodyTooLarge(b"".join(self._chunks)[:512])
            self._wake = asyncio.get_running_loop().create_future()
            await self._wake
            self._wake = None
        data = b"".join(self._chunks)
        self._chunks.clear()
        if len(data) > cap:
            raise BodyTooLarge(data[:512])
        return data

    async def aclose(self) -> None:
        if not self._done:
            self.conn.response = None
            self.conn.close()  # abandoned mid-body: the connection's stream position is lost
        self._release()


class Upstream:
    """Keep-alive connections to one upstream origin, reused one request at a time each."""

    def __init__(self, url: str, *, connect_timeout: float = 30.0, max_idle: int = 100) -> None:
        parsed = httptools.parse_url(url.encode())
        self.https = parsed.schema == b"https"
        self.host = parsed.host.decode("idna")
        self.port = parsed.port or (443 if self.https else 80)
        self.path = (parsed.path or b"/").decode("latin-1")
        self.netloc = self.host if parsed.port is None else f"{self.host}:{parsed.port}"
        if ":" in self.host:  # an IPv6 literal
            self.netloc = f"[{self.host}]" if parsed.port is None else f"[{self.host}]:{parsed.port}"
        self.connect_timeout = connect_timeout
        self.max_idle = max_idle
        self._idle: list[_UpConn] = []
        self._ssl: ssl.SSLContext | None = ssl.create_default_context() if self.https else None

    def put_back(self, conn: _UpConn) -> None:
        """A connection taken with `idle()` and not used."""
        self._put(conn)

    def _put(self, conn: _UpConn) -> None:
        if len(self._idle) < self.max_idle:
            self._idle.append(conn)
        else:
            conn.close()

    async def _connect(self) -> _UpConn:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    _UpConn,
                    self.host,
                    self.port,
                    ssl=self._ssl,
                    server_hostname=self.host if self._ssl else None,
                )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise UpstreamError(f"cannot connect to {self.netloc}: {exc or type(exc).__name__}") from None
        return conn

    def request(self, method: str, query: str, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
        """The request's bytes, head and body, for one write."""
        target = self.path + (f"?{query}" if query else "")
        head = [f"{method} {target} HTTP/1.1\r\nhost: {self.netloc}\r\n".encode("latin-1")]
        for k, v in headers:
            head.append(k + b": " + v + b"\r\n")
        if body or method in ("POST", "PUT", "PATCH"):
            head.append(b"content-length: %d\r\n" % len(body))
        head.append(b"\r\n")
        return b"".join(head) + body

    def idle(self) -> _UpConn | None:
        """A pooled connection still open, taken out of the pool; None when there is none."""
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        return None

    def start(self, conn: _UpConn, data: bytes) -> UpstreamResponse:
        """Write the request on `conn`; its response arrives in the returned object."""
        resp = UpstreamResponse(conn, self)
        conn.response = resp
        conn.got_bytes = False
        assert conn.transport is not None
        conn.transport.write(data)
        return resp

    async def send(
        self, method: str, query: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> UpstreamResponse:
        data = self.request(method, query, headers, body)
        conn = self.idle()
        reused = conn is not None
        if conn is None:
            conn = await self._connect()
        return await self.settle(self.start(conn, data), data, reused=reused)

    async def settle(self, resp: UpstreamResponse, data: bytes, *, reused: bool) -> UpstreamResponse:
        """Wait for the response's head; the response to read."""
        conn = resp.conn
        try:
            await resp.started
        except UpstreamError:
            conn.response = None
            conn.close()
            # A pooled connection the server had already closed: nothing was received, so the request
            # never reached a handler; once more on a fresh connection (as HTTP clients do).
            if reused and not conn.got_bytes:
                return await self.settle(self.start(await self._connect(), data), data, reused=False)
            raise
        except BaseException:
            conn.response = None
            conn.close()
            raise
        return resp

    def close(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()


def install_uvloop() -> Any:
    """uvloop's policy when it is installed (a faster event loop), else None."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is optional
        return None
    return uvloop
