"""The streamable-HTTP driver: front an MCP server's `/mcp` endpoint, injecting faults per JSON-RPC exchange.

It works at the HTTP/SSE frame level. Both protocol eras pass through: the legacy one (initialize,
`Mcp-Session-Id`, a GET stream, DELETE) and the stateless 2026-07-28 one (`MCP-Protocol-Version`, `Mcp-Method`,
`Mcp-Name` headers); the proxy never rewrites a request, so routing headers always agree with the body.
JSON responses are relayed as the bytes received; SSE streams are relayed event by event, and an event is
rebuilt only when a fault changes its data. GET streams and DELETE pass through untouched.

Because the proxy forwards with its own Host, it checks Host and Origin itself (421 / 403, as the SDK does).
The HTTP/1.1 on both sides is faultplane.plane.http1 (asyncio + httptools): see there for why.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio

from faultplane.core.jsonrpc_guard import (
    DEFAULT_MAX_DEPTH,
    INVALID_REQUEST,
    FrameError,
    guess_id,
    loads_bounded,
    too_deep,
)
from faultplane.plane import http1
from faultplane.plane.faults import request_id_key
from faultplane.plane.http1 import Reply, Request, UpstreamError, UpstreamResponse
from faultplane.plane.interceptor import ClientAction, Interceptor
from faultplane.plane.plan import FaultPlan
from faultplane.plane.proxy_cli import add_session_options, session_options, start
from faultplane.plane.recorder import Recorder

__all__ = ["ProxySettings", "Relay", "main", "serve_http_proxy"]

log = logging.getLogger("faultplane.plane")

_HOP_BY_HOP = {
    b"host",
    b"content-length",
    b"connection",
    b"keep-alive",
    b"transfer-encoding",
    b"te",
    b"trailer",
    b"upgrade",
    b"proxy-authorization",
    b"proxy-authenticate",
    b"accept-encoding",
    b"expect",
}
_RESPONSE_DROP = {b"content-length", b"connection", b"keep-alive", b"transfer-encoding", b"date", b"server"}
_METHODS = ("GET", "POST", "DELETE")
_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_LINE_SPLIT = re.compile(rb"\r\n|\n|\r")
_FLUSH_EVERY_S = 1.0
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
INTERNAL_ERROR = -32603
_JSON = (b"content-type", b"application/json")


def _jsonrpc_error(status: int, error: FrameError) -> Reply:
    return Reply.json(status, error.reply())


def _plain_error(status: int, message: str, headers: list[tuple[bytes, bytes]] | None = None) -> Reply:
    return Reply.json(status, json.dumps({"error": message}).encode(), headers)


@dataclass
class ProxySettings:
    upstream: str
    path: str = "/mcp"
    strict: bool = False
    allowed_hosts: list[str] = field(default_factory=list)
    allowed_origins: list[str] = field(default_factory=list)
    # How long a "timeout" fault keeps the client's connection open without answering.
    timeout_hold_s: float = 300.0
    # The largest request body accepted, and the largest JSON response or SSE event relayed (413 / error).
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_depth: int = DEFAULT_MAX_DEPTH


def _host_ok(host: str, allowed: list[str]) -> bool:
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    if name in _LOOPBACK:
        return True
    return any(host == a or (a.endswith(":*") and name == a[:-2]) for a in allowed)


def _origin_ok(origin: str, allowed: list[str]) -> bool:
    if origin in allowed:
        return True
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and (parts.hostname or "") in ("127.0.0.1", "localhost", "::1")


def _forward_headers(request: Request) -> list[tuple[bytes, bytes]]:
    # Whitespace around a field value is not part of it (RFC 9110 §5.5): forwarded trimmed, as received.
    return [(k, v.strip(b" \t")) for k, v in request.headers if k not in _HOP_BY_HOP]


def _response_headers(resp: UpstreamResponse) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in resp.headers if k not in _RESPONSE_DROP]


@dataclass(slots=True)
class _Exchange:
    """One request as the interceptor saw it: its scope, its pairing key, what the plan does with it."""

    scope: str
    key: str | None = None
    action: ClientAction | None = None
    body: bytes = b""
    session: str | None = None


def _nothing() -> None:
    """The abort of an exchange already handed to a task (the task is cancelled instead)."""


class Relay:
    """One proxy instance: the upstream connections, the interceptor, and the reorder gate."""

    def __init__(self, settings: ProxySettings, interceptor: Interceptor, recorder: Recorder | None) -> None:
        self.settings = settings
        self.interceptor = interceptor
        self.recorder = recorder
        self.upstream = http1.Upstream(settings.upstream)
        self._exchanges = itertools.count()
        # set (and dropped) when a response goes out; made only while a reorder waits for one, as a new Event
        # per response was a measurable part of the proxy's per-call cost. asyncio's own Event: the HTTP
        # layer is asyncio.
        self._delivered: asyncio.Event | None = None

    def _tick(self) -> None:
        if self._delivered is not None:
            self._delivered.set()
            self._delivered = None

    async def _hold(self, hold_s: float) -> None:
        """A reorder: wait for some other response to go out first, or give up after hold_s."""
        if self._delivered is None:
            self._delivered = asyncio.Event()
        gate = self._delivered
        with anyio.move_on_after(hold_s):
            await gate.wait()

    # An exchange is answered one of two ways, by the same steps. `handle` runs it in a task. `fast` runs the
    # common one (a POST forwarded at once on a pooled connection, its answer whole and small) from protocol
    # callbacks: no task, future or coroutine per call, which was a fifth of the proxy's CPU per call. The
    # moment it would have to wait (a delay, a hold, a stream, a lost connection) it hands the rest to a
    # task, at the same step `handle` would be at.

    async def handle(self, request: Request) -> Reply:
        refused = self._refuse(request)
        if refused is not None:
            return refused
        return await self._forward(request, self._intercept(request))

    def fast(self, request: Request, deliver: Callable[[http1.Answer], None]) -> Callable[[], None] | None:
        """Take the request when it can go upstream now; None (nothing done) leaves it to `handle`."""
        if request.method != "POST" or self._refuse(request) is not None:
            return None
        conn = self.upstream.idle()
        if conn is None:
            return None  # a connect waits: the task path
        ex = self._intercept(request)
        action = ex.action
        if action is not None and (action.delay_s > 0 or not action.forward):
            self.upstream.put_back(conn)
            deliver(self._forward(request, ex))
            return _nothing
        data = self.upstream.request(request.method, request.query, _forward_headers(request), ex.body)
        resp = self.upstream.start(conn, data)
        resp.watch_cap = self.settings.max_body_bytes

        def ready() -> None:
            # Runs inside the upstream connection's parser callbacks: nothing may escape from here.
            try:
                body = resp.whole()
                if body is None:
                    if resp.started.done() and not resp.started.cancelled():
                        resp.started.exception()  # seen: _settle awaits it again, or nobody does (client gone)
                    deliver(self._settle(resp, data, ex))
                else:
                    deliver(self._answer_whole(resp, body, ex))
            except Exception as exc:  # a bug in the proxy answers this request, as on the task path
                log.error("plane proxy: answering a call failed: %s", exc, exc_info=True)
                deliver(_plain_error(500, f"proxy internal error: {type(exc).__name__}"))

        resp.watch = ready
        return resp.abandon

    def _refuse(self, request: Request) -> Reply | None:
        """The answer to a request the proxy refuses itself; None when it goes on."""
        if request.path != self.settings.path:
            return _plain_error(404, "Not Found")
        if request.method not in _METHODS:
            return _plain_error(405, "Method Not Allowed", [(b"allow", ", ".join(_METHODS).encode())])
        if not _host_ok(request.header(b"host") or "", self.settings.allowed_hosts):
            return _plain_error(421, "Invalid Host header")
        origin = request.header(b"origin")
        if origin is not None and not _origin_ok(origin, self.settings.allowed_origins):
            return _plain_error(403, "Invalid Origin header")
        if request.method == "POST":
            return self._check_body(request)
        return None

    def _intercept(self, request: Request) -> _Exchange:
        """What the plan does with the request (asked once per exchange)."""
        ex = _Exchange(f"x{next(self._exchanges)}:")
        if request.method != "POST" or not request.body:
            return ex
        ex.body = request.body
        ex.session = request.header(b"mcp-session-id")
        try:
            msg = loads_bounded(ex.body)
        except ValueError:
            msg = None  # not ours to judge; the server decides what to do with garbage
        ex.action = self.interceptor.on_client_message(msg, ex.scope, ex.session or "")
        if isinstance(msg, dict) and "method" in msg and "id" in msg:
            ex.key = ex.scope + request_id_key(msg["id"])
        return ex

    async def _forward(self, request: Request, ex: _Exchange) -> Reply:
        action = ex.action
        if action is not None:
            if action.delay_s > 0:
                await anyio.sleep(action.delay_s)
            if not action.forward:
                headers = [_JSON]
                if ex.session:
                    headers.append((b"mcp-session-id", ex.session.encode("latin-1")))
                # 202: a notification the plane consumed
                return Reply(200 if action.reply else 202, headers, action.reply or b"", after=self._tick)
        try:
            resp = await self.upstream.send(request.method, request.query, _forward_headers(request), ex.body)
        except UpstreamError as exc:
            return self._unreachable(ex, exc)
        return await self._respond(resp, ex)

    def _unreachable(self, ex: _Exchange, exc: UpstreamError) -> Reply:
        if ex.key:
            self.interceptor.abandon(ex.key)
        return _plain_error(502, f"upstream unreachable: {exc}")

    async def _settle(self, resp: UpstreamResponse, data: bytes, ex: _Exchange) -> Reply:
        """The fast path's hand-over: the response as `handle` would have it after sending."""
        try:
            resp = await self.upstream.settle(resp, data, reused=True)
        except UpstreamError as exc:
            return self._unreachable(ex, exc)
        return await self._respond(resp, ex)

    async def _respond(self, resp: UpstreamResponse, ex: _Exchange) -> Reply:
        key, scope = ex.key, ex.scope
        headers = _response_headers(resp)
        if key is None or not self.interceptor.has_pending(key):
            return Reply(resp.status, headers, stream=self._raw(resp))
        if resp.header(b"content-type").startswith("text/event-stream"):
            return Reply(resp.status, headers, stream=self._sse(resp, scope, key))
        try:
            data = await resp.read(self.settings.max_body_bytes)
        except http1.BodyTooLarge:
            data = self._oversized_answer(key, scope)
        except UpstreamError:
            self.interceptor.abandon(key, "rpc_error")
            return _plain_error(502, "the upstream server closed the connection mid-answer")
        finally:
            await resp.aclose()
        answer = self._answer(resp.status, headers, data, ex)
        return answer if isinstance(answer, Reply) else await answer

    def _answer_whole(self, resp: UpstreamResponse, data: bytes, ex: _Exchange) -> http1.Answer:
        headers = _response_headers(resp)
        if ex.key is None or not self.interceptor.has_pending(ex.key):
            return Reply(resp.status, headers, data)  # whole already: sent with its length, not chunked
        return self._answer(resp.status, headers, data, ex)

    def _answer(
        self, status: int, headers: list[tuple[bytes, bytes]], data: bytes, ex: _Exchange
    ) -> http1.Answer:
        """The client's answer to a whole JSON body (a task only for a hold)."""
        assert ex.key is not None
        # One HTTP body carries one JSON message, so a duplicate fault has nothing to repeat here.
        answer = self.interceptor.on_server_frame(data, ex.scope, can_duplicate=False)
        self.interceptor.abandon(ex.key, "rpc_error")  # a no-op unless the body did not answer the request
        if not answer.frames:
            return Reply(status, headers, stream=self._never())
        out = data if answer.frames[0] is None else answer.frames[0]
        reply = Reply(status, headers, out, after=self._tick)
        if answer.hold_s is not None:
            return self._held(answer.hold_s, reply)
        return reply

    async def _held(self, hold_s: float, reply: Reply) -> Reply:
        await self._hold(hold_s)
        return reply

    def _check_body(self, request: Request) -> Reply | None:
        """The JSON-RPC error for a body too large (413) or nested too deep (400); None when it is fine."""
        cap = self.settings.max_body_bytes
        if request.too_large:
            error = FrameError(
                INVALID_REQUEST,
                f"Invalid Request: body exceeds the proxy's limit of {cap} bytes; fix: send less, or raise "
                "it with --max-body-bytes",
                guess_id(request.body),
            )
            return _jsonrpc_error(413, error)
        if too_deep(request.body, self.settings.max_depth):
            error = FrameError(
                INVALID_REQUEST,
                f"Invalid Request: JSON nested deeper than {self.settings.max_depth} levels",
                guess_id(request.body),
            )
            return _jsonrpc_error(400, error)
        return None

    def _oversized_answer(self, key: str, scope: str) -> bytes:
        """An error answering the request whose response was larger than the proxy relays."""
        rid = json.loads(key[len(scope) :]) if key.startswith(scope) else None
        error = FrameError(
            INTERNAL_ERROR,
            f"Internal error: the server's response exceeds the proxy's limit of {self.settings.max_body_bytes}"
            " bytes; fix: raise it with --max-body-bytes",
            rid if isinstance(rid, str | int) else None,
        )
        return error.reply()

    async def _raw(self, resp: UpstreamResponse) -> AsyncIterator[bytes]:
        try:
            async for chunk in resp.aiter_raw():
                yield chunk
        except UpstreamError as exc:
            log.warning("upstream stream ended early: %s", exc)
        finally:
            await resp.aclose()

    async def _never(self) -> AsyncIterator[bytes]:
        """A timeout fault: the headers went out, the answer never will (until the client hangs up)."""
        await anyio.sleep(self.settings.timeout_hold_s)
        return
        yield b""  # pragma: no cover - makes this an async generator

    async def _sse(self, resp: UpstreamResponse, scope: str, key: str) -> AsyncIterator[bytes]:
        buf = b""
        swallowed = False
        skipping = False  # inside an event larger than the limit: its bytes are dropped as they come
        cap = self.settings.max_body_bytes
        try:
            async for chunk in resp.aiter_raw():
                buf += chunk
                if skipping or (len(buf) > cap and _EVENT_END.search(buf) is None):
                    m = _EVENT_END.search(buf)
                    if m is None:
                        skipping, buf = True, buf[-3:]  # a separator may straddle two chunks
                        continue
                    skipping, buf = False, buf[m.end() :]
                    yield self._oversized_event(key, scope)
                    self._tick()
                while True:
                    m = _EVENT_END.search(buf)
                    if m is None:
                        break
                    block, buf = buf[: m.end()], buf[m.end() :]
                    if len(block) > cap:
                        yield self._oversized_event(key, scope)
                        self._tick()
                        continue
                    outs, dropped, answered = await self._event(block, m.group(), scope)
                    swallowed |= dropped
                    for out in outs:
                        yield out
                    if answered:
                        self._tick()  # after the bytes went out, so a held response follows this one
            if buf and not skipping:
                yield buf
            if swallowed:
                await anyio.sleep(self.settings.timeout_hold_s)
        except UpstreamError as exc:
            log.warning("upstream SSE stream ended early: %s", exc)
        finally:
            await resp.aclose()
            self.interceptor.abandon(key)

    def _oversized_event(self, key: str, scope: str) -> bytes:
        """What the client gets in place of an SSE event larger than the limit: an error answering it."""
        log.warning("replaced an SSE event above %d bytes from the server", self.settings.max_body_bytes)
        answer = self._oversized_answer(key, scope)
        self.interceptor.on_server_frame(answer, scope)
        return b"event: message\ndata: " + answer + b"\n\n"

    async def _event(self, block: bytes, sep: bytes, scope: str) -> tuple[list[bytes], bool, bool]:
        """The SSE event as it should go out, whether a timeout fault swallowed it, whether it answers."""
        lines = _LINE_SPLIT.split(block[: -len(sep)])
        data = [ln[5:].removeprefix(b" ") for ln in lines if ln.startswith(b"data:")]
        if not data:
            return [block], False, False
        payload = b"\n".join(data)
        action = self.interceptor.on_server_frame(payload, scope)
        if not action.frames:
            return [], True, False
        if action.hold_s is not None:
            await self._hold(action.hold_s)
        out = []
        eol = sep[: len(sep) // 2]
        for frame in action.frames:
            if frame is None:
                out.append(block)
            else:
                kept = [ln for ln in lines if not ln.startswith(b"data:")]
                out.append(eol.join([*kept, b"data: " + frame]) + sep)
        return out, False, b'"result"' in payload or b'"error"' in payload


async def _flush_periodically(recorder: Recorder) -> None:
    while True:
        await anyio.sleep(_FLUSH_EVERY_S)
        await anyio.to_thread.run_sync(recorder.flush)


async def serve_http_proxy(
    settings: ProxySettings,
    plan: FaultPlan,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    recorder: Recorder | None = None,
    ready: Any = None,
) -> None:
    """Serve until SIGTERM/SIGINT or cancelled. `ready`, if given, is called with the bound port once
    listening. Must run on the asyncio backend (the HTTP layer is asyncio protocols)."""
    interceptor = Interceptor(plan, strict=settings.strict, recorder=recorder)
    relay = Relay(settings, interceptor, recorder)
    # The cap also bounds what the HTTP layer buffers of a body before the relay refuses it.
    server = await http1.serve(relay.handle, host, port, max_body=settings.max_body_bytes, fast=relay.fast)
    try:
        async with anyio.create_task_group() as tg:
            if recorder is not None:
                tg.start_soon(_flush_periodically, recorder)
            bound = server.sockets[0].getsockname()[1]
            if ready is not None:
                ready(bound)
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    break
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            server.close()
            relay.upstream.close()
            interceptor.close()
            if recorder is not None:
                await anyio.to_thread.run_sync(lambda: recorder.flush(final=True))


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m faultplane.plane.proxy_http --upstream URL [--port N] [--plan P] [--strict]`"""
    import argparse

    parser = argparse.ArgumentParser(prog="faultplane-plane-proxy-http")
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--path", default="/mcp")
    add_session_options(parser)
    parser.add_argument("--allow-host", action="append", default=[])
    parser.add_argument("--allow-origin", action="append", default=[])
    parser.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES)
    args = parser.parse_args(argv)
    return serve(
        upstream=args.upstream,
        host=args.host,
        port=args.port,
        path=args.path,
        **session_options(args),
        allowed_hosts=args.allow_host,
        allowed_origins=args.allow_origin,
        max_body_bytes=args.max_body_bytes,
    )


def serve(
    *,
    upstream: str,
    plan_path: str | Path | None,
    host: str = "127.0.0.1",
    port: int = 0,
    path: str = "/mcp",
    strict: bool = False,
    session_id: str | None = None,
    store: str | None = None,
    record: bool = True,
    allowed_hosts: list[str] | None = None,
    allowed_origins: list[str] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> int:
    plan = start(plan_path)
    if plan is None:
        return 2
    from faultplane.core.urls import http_url_problem

    problem = http_url_problem(upstream)
    if problem:
        print(
            f"faultplane plane proxy http: --upstream {upstream!r} {problem}; fix: e.g. http://127.0.0.1:8000/mcp",
            file=sys.stderr,
        )
        return 2
    settings = ProxySettings(
        upstream=upstream,
        path=path,
        strict=strict,
        allowed_hosts=allowed_hosts or [],
        allowed_origins=allowed_origins or [],
        max_body_bytes=max_body_bytes,
    )
    recorder = Recorder(
        session_id=session_id,
        driver="http",
        target=upstream,
        plan=plan,
        strict=strict,
        store_path=store,
        enabled=record,
    )

    def ready(bound: int) -> None:
        print(
            f"faultplane plane proxy: listening on http://{host}:{bound}{path} -> {upstream} "
            f"(session {recorder.session_id})",
            file=sys.stderr,
            flush=True,
        )

    uvloop = http1.install_uvloop()
    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(
            lambda: serve_http_proxy(settings, plan, host=host, port=port, recorder=recorder, ready=ready),
            backend="asyncio",
            backend_options={"use_uvloop": uvloop is not None},
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
