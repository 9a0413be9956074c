"""What both payment services share: a quiet threaded JSON HTTP server and small statistics helpers."""

from __future__ import annotations

import json
import math
import select
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from faultplane.examples.bodies import decode_body
from faultplane.examples.serving import run_server

__all__ = ["CURRENT", "JsonHandler", "percentile", "serve", "service_routes"]

Route = Callable[[Any], tuple[int, Any]]
# the handler serving this thread's request, for routes that look at the connection (has the client left?)
CURRENT = threading.local()


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(q / 100 * len(ordered)))) - 1]


class JsonHandler(BaseHTTPRequestHandler):
    """Routes `(method, path)` to `routes[...](body) -> (status, json)`; one write per response."""

    protocol_version = "HTTP/1.1"
    # Headers and body go out in one segment; with Nagle on, a small second write waits for the peer's
    # delayed ACK (40 ms) and would dominate every latency this example measures.
    disable_nagle_algorithm = True
    routes: dict[tuple[str, str], Route] = {}

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _dispatch(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = self.path.split("?", 1)[0]
        route = self.routes.get((method, path))
        if route is None:
            status, body = 404, {"error": f"no route {method} {path}"}
        else:
            try:
                payload = decode_body(raw, self.headers.get("Content-Type"))
            except (json.JSONDecodeError, UnicodeDecodeError):
                status, body = 400, {"error": "the body must be JSON"}
            else:
                try:
                    CURRENT.handler = self
                    status, body = route(payload)
                except ValueError as exc:
                    status, body = 400, {"error": str(exc)}
        data = json.dumps(body).encode()
        head = (
            f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        ).encode()
        if self.peer_gone():
            # the client gave up (its timeout); the work was done anyway, which is the point of this example
            self.close_connection = True
            self.answer_lost(path)
            return
        try:
            self.wfile.write(head + data)
        except OSError:
            self.close_connection = True
            self.answer_lost(path)

    def peer_gone(self) -> bool:
        """True when the client has closed its end (a read would return EOF)."""
        try:
            ready, _, _ = select.select([self.connection], [], [], 0)
            return bool(ready) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def answer_lost(self, path: str) -> None:
        """Called when the client had gone before its answer was written."""

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")


def service_routes(
    state: Callable[[], Any], routes: dict[tuple[str, str], Route]
) -> dict[tuple[str, str], Route]:
    """`routes` plus the admin routes both services answer alike from their state object (`state()`):
    GET /admin/stats answers its `stats()`, POST /admin/reset calls its `reset()`."""

    def stats(body: Any) -> tuple[int, Any]:
        return 200, state().stats()

    def reset(body: Any) -> tuple[int, Any]:
        state().reset()
        return 200, {"reset": True}

    return {**routes, ("GET", "/admin/stats"): stats, ("POST", "/admin/reset"): reset}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # bursts of retries must queue in the kernel, not be refused


def serve(handler: type[JsonHandler], port: int, name: str) -> None:
    run_server(_Server(("127.0.0.1", port), handler), f"{name} listening on")
