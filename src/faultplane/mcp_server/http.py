"""Streamable HTTP transport: the SDK's app behind Faultplane's own guard (bearer token, Origin, Host).

Policy: the server binds to 127.0.0.1 unless told otherwise, and binding anywhere else requires a bearer token,
because then anything on the network can reach a tool that injects faults. When a token is configured, every
request without `Authorization: Bearer <token>` is answered 401 (compared in constant time). Requests whose
Origin header names a site not explicitly allowed are answered 403, so a web page cannot drive the server
through the user's browser (DNS rebinding). Bodies over the size limit are answered 413 by the SDK before they
are parsed. Every body then goes through the shared frame guard (`core.jsonrpc_guard`): bytes that are not
UTF-8 JSON get 400 -32700, JSON nested too deep, batches and invalid envelopes (an id neither a string nor an
integer, a notification carrying an id) get 400 -32600, with the request's id when it can be read.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import os
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.server import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from faultplane.core.jsonrpc_guard import FrameError, FrameLimits, check_frame

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "TOKEN_ENV",
    "HttpConfig",
    "HttpConfigError",
    "build_http_app",
    "is_loopback",
    "load_token",
    "serve_http",
]

TOKEN_ENV = "FAULTPLANE_MCP_TOKEN"
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
_LOOPBACK_ORIGINS = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")
_LOOPBACK_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")


class HttpConfigError(ValueError):
    """The HTTP options are unsafe or inconsistent; the message names the option and the fix."""


@dataclass
class HttpConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    path: str = "/mcp"
    token: str | None = None
    allowed_origins: Sequence[str] = ()
    allowed_hosts: Sequence[str] = ()
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    stateless: bool = False
    json_response: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        if not is_loopback(self.host) and not self.token:
            raise HttpConfigError(
                f"--host {self.host}: binding beyond loopback requires a bearer token; fix: pass --token-file "
                f"PATH or set {TOKEN_ENV}, or bind to 127.0.0.1"
            )
        if self.token is not None and len(self.token) < 16:
            raise HttpConfigError("token: shorter than 16 characters; fix: use e.g. `openssl rand -hex 32`")
        if self.max_body_bytes <= 0:
            raise HttpConfigError("--max-body-bytes: must be positive; fix: pass e.g. 1048576")
        if not self.path.startswith("/"):
            raise HttpConfigError(f"--path {self.path!r}: must start with '/'; fix: e.g. /mcp")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def load_token(token_file: Path | None) -> str | None:
    """The bearer token from `token_file` (first line), else from $FAULTPLANE_MCP_TOKEN, else None."""
    if token_file is not None:
        try:
            text = token_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise HttpConfigError(f"--token-file {token_file}: cannot read it ({exc.strerror})") from None
        except UnicodeDecodeError:
            raise HttpConfigError(
                f"--token-file {token_file}: not UTF-8 text; fix: write the token in it as plain text"
            ) from None
        token = text.strip().splitlines()[0].strip() if text.strip() else ""
        if not token:
            raise HttpConfigError(f"--token-file {token_file}: the file is empty; fix: write the token in it")
        return token
    return os.environ.get(TOKEN_ENV) or None


def _match(value: str, patterns: Sequence[str]) -> bool:
    for pattern in patterns:
        if pattern == "*" or value == pattern:
            return True
        if pattern.endswith(":*") and value.startswith(pattern[:-1]):
            return True
    return False


async def _refuse(send: Send, status: int, message: str, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}).encode()
    await _respond(send, status, body, headers)


async def _respond(send: Send, status: int, body: bytes, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _authorized(given: bytes, token: bytes) -> bool:
    """`Authorization: Bearer <token>`: the scheme is case-insensitive (RFC 9110 §11.1), separated from the
    credentials by one or more spaces; surrounding whitespace is not part of the field value (§5.5)."""
    scheme, _, credentials = given.strip(b" \t").partition(b" ")
    if scheme.lower() != b"bearer":
        return False
    return hmac.compare_digest(credentials.lstrip(b" "), token)


class Guard:
    """ASGI middleware: bearer token, then Origin, then (when configured) Host; everything else passes."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        allowed_origins: Sequence[str],
        allowed_hosts: Sequence[str],
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.token = token.encode() if token else None
        self.limits = FrameLimits(max_frame_bytes=max_body_bytes, option="--max-body-bytes")
        self.allowed_origins = tuple(allowed_origins)
        self.allowed_hosts = tuple(allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = scope.get("headers", [])
        if any(v[:1] in (b" ", b"\t") or v[-1:] in (b" ", b"\t") for _, v in raw):
            # Leading and trailing whitespace is not part of a field value (RFC 9110 §5.5); the SDK compares
            # Mcp-Name and Mcp-Method with the body as received, so it gets them trimmed.
            scope = {**scope, "headers": [(k, v.strip(b" \t")) for k, v in raw]}
        headers: dict[bytes, bytes] = {}
        for k, v in scope.get("headers", []):
            headers.setdefault(k.lower(), v)
        if self.token is not None and not _authorized(headers.get(b"authorization", b""), self.token):
            await _refuse(
                send,
                401,
                "Unauthorized: send the header 'Authorization: Bearer <token>' with the server's token",
                [(b"www-authenticate", b'Bearer realm="faultplane"')],
            )
            return
        origin = headers.get(b"origin")
        if origin is not None and not _match(origin.decode("latin-1"), self.allowed_origins):
            await _refuse(
                send, 403, "Forbidden: Origin not allowed; start the server with --allowed-origin to allow it"
            )
            return
        if self.allowed_hosts:
            host = headers.get(b"host", b"").decode("latin-1")
            if not _match(host, self.allowed_hosts):
                await _refuse(send, 421, "Misdirected: Host not allowed; add it with --allowed-host")
                return
        if scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            await self._too_large(send)
            return
        await self._post(scope, receive, send)

    async def _too_large(self, send: Send) -> None:
        await _refuse(
            send, 413, f"Request body too large: the limit is {self.max_body_bytes} bytes (--max-body-bytes)"
        )

    async def _post(self, scope: Scope, receive: Receive, send: Send) -> None:
        chunks: list[bytes] = []
        size = 0
        more = True
        trailing: Message | None = None
        while more:
            message = await receive()
            if message["type"] != "http.request":
                trailing = message
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await self._too_large(send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if trailing is None:
            try:
                check_frame(body, self.limits)
            except FrameError as exc:
                await _respond(send, 400, exc.reply())
                return
        replay: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]
        if trailing is not None:
            replay.append(trailing)

        async def replayed() -> Message:
            return replay.pop(0) if replay else await receive()

        await self.app(scope, replayed, send)


def build_http_app(server: MCPServer, cfg: HttpConfig) -> ASGIApp:
    """The Starlette app of `server` wrapped in the guard. Call `cfg.check()` first."""
    loopback = is_loopback(cfg.host)
    origins = [*_LOOPBACK_ORIGINS, *cfg.allowed_origins]
    # Beyond loopback the Host header is whatever name clients use; it is checked only against --allowed-host.
    hosts = [*_LOOPBACK_HOSTS, *cfg.allowed_hosts] if (loopback or cfg.allowed_hosts) else []
    app = server.streamable_http_app(
        streamable_http_path=cfg.path,
        json_response=cfg.json_response,
        stateless_http=cfg.stateless,
        max_request_body_size=cfg.max_body_bytes,
        # Host and Origin are checked by the guard (one policy for loopback and remote binds).
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        host=cfg.host,
    )
    return Guard(
        app, token=cfg.token, allowed_origins=origins, allowed_hosts=hosts, max_body_bytes=cfg.max_body_bytes
    )


def serve_http(server: MCPServer, cfg: HttpConfig) -> None:
    """Bind, print the URL on stderr, and serve until interrupted."""
    import anyio
    import uvicorn

    cfg.check()
    app = build_http_app(server, cfg)
    family = socket.AF_INET6 if ":" in cfg.host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it: without, a keep-alive client's small requests wait out delayed ACKs
    # (40 ms per call), since a pre-bound socket skips the setup uvicorn does for the sockets it binds.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((cfg.host.strip("[]"), cfg.port))
    except OSError as exc:
        raise HttpConfigError(
            f"--port {cfg.port}: cannot bind {cfg.host}:{cfg.port} ({exc.strerror})"
        ) from None
    sock.listen(128)
    port = sock.getsockname()[1]
    shown = f"[{cfg.host}]" if family == socket.AF_INET6 else cfg.host
    print(f"faultplane MCP server listening on http://{shown}:{port}{cfg.path}", file=sys.stderr, flush=True)
    from faultplane.mcp_server.shutdown import ROLLBACK_GRACE_S, abort_in_process_runs

    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            # First abort runs in flight (their rollbacks run while uvicorn drains requests), then stop.
            if not self.should_exit:
                with contextlib.suppress(RuntimeError):
                    loop = asyncio.get_running_loop()
                    loop.call_soon_threadsafe(
                        abort_in_process_runs, f"MCP server stopped by {signal.Signals(sig).name}"
                    )
            super().handle_exit(sig, frame)

    config = uvicorn.Config(
        app, log_level="warning", lifespan="on", timeout_graceful_shutdown=int(ROLLBACK_GRACE_S)
    )
    uv = _Server(config)
    anyio.run(lambda: uv.serve(sockets=[sock]))
