"""The HTTP/1.1 layer of `plane proxy http` (faultplane.plane.http1) at the byte level: keep-alive reuse and
the retry of a request a pooled connection lost, chunked and oversized bodies, pipelining, disconnects, and
malformed requests. Real loopback sockets on both sides: a scripted upstream and a raw client."""

from __future__ import annotations

import asyncio
import json
import queue
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httptools
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faultplane.plane import http1
from faultplane.plane.interceptor import Interceptor
from faultplane.plane.plan import FaultPlan
from faultplane.plane.proxy_http import ProxySettings, Relay

pytestmark = pytest.mark.anyio
CAP = 4096


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the HTTP layer is asyncio protocols


Script = Callable[["Upstream", asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class Upstream:
    """A scripted HTTP server: `script(reader, writer, connection_number)` per accepted connection."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []  # (head, body) as received
        self.closed = asyncio.Event()  # some connection saw EOF from the proxy

    async def read_request(self, reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        body = await reader.readexactly(length) if length else b""
        self.requests.append((head, body))
        return head, body

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.script(self, reader, writer, self.connections)
        finally:
            writer.close()


def answer(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s" % (
        len(body),
        extra,
        body,
    )


def rpc(rid: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "ping"}).encode()


@asynccontextmanager
async def proxy_to(script: Script) -> AsyncIterator[tuple[Upstream, int]]:
    up = Upstream(script)
    up_server = await asyncio.start_server(up._accept, "127.0.0.1", 0)
    up_port = up_server.sockets[0].getsockname()[1]
    settings = ProxySettings(upstream=f"http://127.0.0.1:{up_port}/mcp", max_body_bytes=CAP)
    relay = Relay(settings, Interceptor(FaultPlan()), None)
    server = await http1.serve(relay.handle, "127.0.0.1", 0, max_body=CAP, fast=relay.fast)
    try:
        yield up, server.sockets[0].getsockname()[1]
    finally:
        server.close()
        relay.upstream.close()
        up_server.close()


class RawClient:
    """A client that writes bytes as given and parses what comes back with httptools."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.responses: list[tuple[int, dict[bytes, bytes], bytes]] = []
        self._headers: dict[bytes, bytes] = {}
        self._body = b""
        self.parser = httptools.HttpResponseParser(self)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self._body += body

    def on_message_complete(self) -> None:
        self.responses.append((self.parser.get_status_code(), self._headers, self._body))
        self._headers, self._body = {}, b""

    async def responses_until(self, count: int) -> list[tuple[int, dict[bytes, bytes], bytes]]:
        with anyio.fail_after(20):
            while len(self.responses) < count:
                data = await self.reader.read(65536)
                if not data:
                    break
                self.parser.feed_data(data)
        return self.responses

    def post(self, body: bytes, path: bytes = b"/mcp") -> None:
        self.writer.write(
            b"POST %s HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (path, len(body), body)
        )


@asynccontextmanager
async def client(port: int) -> AsyncIterator[RawClient]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        yield RawClient(reader, writer)
    finally:
        writer.close()


async def keep_alive_echo(
    up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int
) -> None:
    while (req := await up.read_request(reader)) is not None:
        writer.write(answer(req[1]))
        await writer.drain()


async def calls_in_turn(c: RawClient, n: int) -> list[tuple[int, bytes]]:
    """`n` calls, each posted once the one before is answered: (status, body) of every answer so far."""
    for i in range(n):
        c.post(rpc(i))
        await c.responses_until(i + 1)
    return [(s, b) for s, _, b in c.responses]


async def test_sequential_calls_share_one_upstream_connection() -> None:
    async with proxy_to(keep_alive_echo) as (up, port), client(port) as c:
        assert await calls_in_turn(c, 5) == [(200, rpc(i)) for i in range(5)]
        assert up.connections == 1


async def one_answer_per_connection(
    up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int
) -> None:
    """Answers the first request of each connection; at the second, hangs up without a byte (an idle
    keep-alive connection the server closed just as the proxy reused it)."""
    req = await up.read_request(reader)
    if req is None:
        return
    writer.write(answer(req[1]))
    await writer.drain()
    await up.read_request(reader)


async def test_a_request_a_pooled_connection_lost_is_sent_again_on_a_fresh_one() -> None:
    async with proxy_to(one_answer_per_connection) as (up, port), client(port) as c:
        assert await calls_in_turn(c, 3) == [(200, rpc(i)) for i in range(3)]
        assert up.connections == 3
        # each lost request reached a server that never answered it, then a fresh connection: 3 + 2
        assert [b for _, b in up.requests] == [rpc(0), rpc(1), rpc(1), rpc(2), rpc(2)]


async def hang_up(up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
    await up.read_request(reader)


async def test_a_fresh_connection_that_answers_nothing_is_a_502_not_a_retry_loop() -> None:
    async with proxy_to(hang_up) as (up, port), client(port) as c:
        c.post(rpc(1))
        (status, _, body), *_ = await c.responses_until(1)
        assert status == 502 and b"upstream unreachable" in body
        assert up.connections == 1


async def test_chunked_request_bodies_go_upstream_whole_with_a_length() -> None:
    async with proxy_to(keep_alive_echo) as (up, port), client(port) as c:
        body = rpc(7)
        c.writer.write(
            b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ntransfer-encoding: chunked\r\n\r\n"
            + b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (5, body[:5], len(body) - 5, body[5:])
        )
        (status, _, echoed), *_ = await c.responses_until(1)
        assert (status, echoed) == (200, body)
        head, received = up.requests[0]
        assert received == body and b"content-length: %d" % len(body) in head
        assert b"transfer-encoding" not in head.lower()


async def test_pipelined_requests_are_answered_in_order() -> None:
    async with proxy_to(keep_alive_echo) as (_, port), client(port) as c:
        for i in range(6):
            c.post(rpc(i))  # all written before any answer is read
        responses = await c.responses_until(6)
        assert [b for _, _, b in responses] == [rpc(i) for i in range(6)]


async def test_an_oversized_body_gets_a_413_and_the_connection_goes_on() -> None:
    async with proxy_to(keep_alive_echo) as (up, port), client(port) as c:
        big = b'{"jsonrpc":"2.0","id":9,"method":"x","params":{"p":"' + b"a" * CAP + b'"}}'
        c.post(big)
        c.post(rpc(10))
        (s1, _, b1), (s2, _, b2) = await c.responses_until(2)
        assert s1 == 413
        error = json.loads(b1)
        assert error["id"] == 9 and error["error"]["code"] == -32600 and "--max-body-bytes" in b1.decode()
        assert (s2, b2) == (200, rpc(10))
        assert [b for _, b in up.requests] == [rpc(10)]  # the oversized body never went upstream


async def endless_stream(
    up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int
) -> None:
    """An SSE stream that never ends on its own; notes when the proxy closes its side."""
    await up.read_request(reader)
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
    event = b": ping\n\n"
    writer.write(b"%x\r\n%s\r\n" % (len(event), event))
    await writer.drain()
    await reader.read()  # returns at EOF: the proxy let go of the stream
    up.closed.set()


async def test_a_client_hanging_up_mid_stream_closes_the_upstream_stream() -> None:
    async with proxy_to(endless_stream) as (up, port):
        async with client(port) as c:
            c.writer.write(b"GET /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\naccept: text/event-stream\r\n\r\n")
            with anyio.fail_after(20):
                first = await c.reader.read(65536)
            assert first.startswith(b"HTTP/1.1 200") and b": ping" in first
        with anyio.fail_after(20):
            await up.closed.wait()


async def until_close(
    up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int
) -> None:
    """An HTTP/1.0-style answer: no length, the end of the body is the end of the connection."""
    await up.read_request(reader)
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n")
    writer.write(rpc(3))
    await writer.drain()


async def test_a_body_delimited_by_the_upstream_closing_is_relayed_whole() -> None:
    async with proxy_to(until_close) as (_, port), client(port) as c:
        c.post(rpc(3))
        (status, _, body), *_ = await c.responses_until(1)
        assert (status, body) == (200, rpc(3))


async def test_malformed_requests_wrong_paths_and_methods_get_clear_answers() -> None:
    async with proxy_to(keep_alive_echo) as (up, port):
        async with client(port) as c:
            c.writer.write(b"NOT HTTP AT ALL\r\n\r\n")
            (status, headers, body), *_ = await c.responses_until(1)
            assert status == 400 and b"malformed HTTP request" in body
            assert headers[b"connection"] == b"close"
        async with client(port) as c:
            c.post(rpc(1), path=b"/elsewhere")
            c.writer.write(b"PUT /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 0\r\n\r\n")
            c.post(rpc(2))
            (s1, _, _), (s2, h2, _), (s3, _, b3) = await c.responses_until(3)
            assert (s1, s2, h2[b"allow"], s3, b3) == (404, 405, b"GET, POST, DELETE", 200, rpc(2))
        assert [b for _, b in up.requests] == [rpc(2)]


# ---- the task-free path (Relay.fast): a call on a pooled connection, and each way it hands over -------------


def in_turn(*answers: Callable[[bytes], bytes] | None) -> Script:
    """One keep-alive connection answering its requests in turn: answers[i](body) is written for the i-th;
    None waits for the proxy to close the connection (and notes it in `up.closed`)."""

    async def script(
        up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int
    ) -> None:
        for make in answers:
            req = await up.read_request(reader)
            if req is None:
                return
            if make is None:
                await reader.read()
                up.closed.set()
                return
            writer.write(make(req[1]))
            await writer.drain()

    return script


async def test_pipelined_requests_behind_a_call_on_a_pooled_connection_are_answered_in_order() -> None:
    async with proxy_to(keep_alive_echo) as (up, port), client(port) as c:
        c.post(rpc(0))
        await c.responses_until(1)  # the upstream connection is pooled now
        for i in range(1, 7):
            c.post(rpc(i))  # the first goes out at once, the rest queue behind it
        responses = await c.responses_until(7)
        assert [(s, b) for s, _, b in responses] == [(200, rpc(i)) for i in range(7)]
        assert up.connections == 1


async def test_a_client_hanging_up_while_its_call_waits_closes_the_upstream_connection() -> None:
    async with proxy_to(in_turn(answer, None)) as (up, port):
        async with client(port) as c:
            c.post(rpc(1))
            await c.responses_until(1)
            c.post(rpc(2))
            with anyio.fail_after(20):
                while len(up.requests) < 2:
                    await asyncio.sleep(0.01)
        with anyio.fail_after(20):
            await up.closed.wait()  # the proxy let go of the call nobody waits for


def sse_answer(body: bytes) -> bytes:
    event = b"event: message\ndata: " + body + b"\n\n"
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        + b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event)
    )


def chunked_json(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n" + (
        b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (3, body[:3], len(body) - 3, body[3:])
    )


def oversized(body: bytes) -> bytes:
    return answer(b'{"jsonrpc":"2.0","id":3,"result":{"x":"' + b"a" * CAP + b'"}}')


async def test_streamed_unsized_and_oversized_answers_on_a_pooled_connection() -> None:
    """Answers the task-free path cannot take whole are handed over as they come: an SSE stream is relayed as
    a stream, a chunked JSON body is read whole, one past the cap becomes the error that answers the call."""
    async with (
        proxy_to(in_turn(answer, sse_answer, chunked_json, oversized, answer)) as (_, port),
        client(port) as c,
    ):
        for i in range(5):
            c.post(rpc(i))
            await c.responses_until(i + 1)
        (s0, _, b0), (s1, h1, b1), (s2, _, b2), (s3, _, b3), (s4, _, b4) = c.responses
    assert (s0, b0) == (200, rpc(0))
    assert s1 == 200 and h1[b"content-type"] == b"text/event-stream"
    assert b1 == b"event: message\ndata: " + rpc(1) + b"\n\n"
    assert (s2, b2) == (200, rpc(2))
    error = json.loads(b3)
    assert (
        s3 == 200
        and error["id"] == 3
        and error["error"]["code"] == -32603
        and "--max-body-bytes" in error["error"]["message"]
    )
    assert (s4, b4) == (200, rpc(4))  # and the connection goes on


# ---- hostile HTTP framing (property-based) -----------------------------------------------------------------


@pytest.fixture(scope="module")
def live_proxy() -> Iterator[int]:
    """The proxy in front of the echoing upstream, on an event loop of its own thread (hypothesis drives
    plain sockets from the test's thread)."""
    loop = asyncio.new_event_loop()
    ready: queue.Queue[int] = queue.Queue()
    stop = asyncio.Event()

    async def main() -> None:
        async with proxy_to(keep_alive_echo) as (_, port):
            ready.put(port)
            await stop.wait()

    def run() -> None:
        loop.run_until_complete(main())
        # the upstream's connection handlers still waiting on their sockets end with the loop
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield ready.get(timeout=20)
    loop.call_soon_threadsafe(stop.set)
    thread.join(20)


def exchange(port: int, data: bytes, wait_s: float = 3.0) -> tuple[int, bytes] | None:
    """Send `data`, then read one response; None when none came (a request still waiting for its bytes)."""
    got: dict[str, Any] = {}

    class Sink:
        def on_body(self, body: bytes) -> None:
            got["body"] = got.get("body", b"") + body

        def on_message_complete(self) -> None:
            got["done"] = True

    parser = httptools.HttpResponseParser(Sink())
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as s:
        s.sendall(data)
        try:
            while "done" not in got:
                chunk = s.recv(65536)
                if not chunk:
                    break
                parser.feed_data(chunk)
        except TimeoutError:
            return None
    if "done" not in got:
        return None
    return parser.get_status_code(), got.get("body", b"")


token = st.text(st.characters(codec="latin-1"), max_size=20).map(lambda t: t.encode("latin-1"))
header_lines = st.lists(
    st.one_of(
        st.tuples(token, token).map(lambda kv: kv[0] + b": " + kv[1]),
        st.sampled_from(
            [
                b"content-length: -1",
                b"content-length: 99999999999999999999999",
                b"content-length: 5\r\ncontent-length: 6",
                b"transfer-encoding: chunked\r\ncontent-length: 3",
                b"transfer-encoding: gzip, chunked",
                b"host: evil.example",
                b"origin: http://evil.example",
                b"expect: 100-continue",
                b"connection: upgrade\r\nupgrade: websocket",
                b"x-folded: a\r\n  b",
            ]
        ),
    ),
    max_size=6,
)
request_lines = st.one_of(
    st.sampled_from(
        [b"POST /mcp HTTP/1.1", b"GET /mcp HTTP/1.1", b"DELETE /mcp HTTP/1.0", b"POST /mcp HTTP/9.9"]
    ),
    st.tuples(token, token, token).map(lambda p: b" ".join(p)),
)
bodies = st.one_of(
    st.binary(max_size=200),
    st.sampled_from([b"5\r\nhello\r\n0\r\n\r\n", b"zz\r\nxx\r\n", b"0\r\n\r\n", rpc(1)]),
)
hostile_requests = st.one_of(
    st.binary(min_size=1, max_size=400),
    st.tuples(request_lines, header_lines, bodies).map(
        lambda r: r[0] + b"\r\n" + b"".join(h + b"\r\n" for h in r[1]) + b"\r\n" + r[2]
    ),
)


@given(data=hostile_requests)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_hostile_http_framing_gets_a_well_formed_answer_and_the_proxy_keeps_serving(
    live_proxy: int, data: bytes
) -> None:
    answered = exchange(live_proxy, data)
    if answered is not None:
        status, body = answered
        assert 100 <= status < 600
        if status >= 400:
            json.loads(body)  # every refusal of the proxy's own is JSON
    after = exchange(
        live_proxy,
        b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: %d\r\n\r\n%s" % (len(rpc(5)), rpc(5)),
    )
    assert after == (200, rpc(5))
