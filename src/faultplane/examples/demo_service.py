"""A small HTTP service for the demo: an orders API whose "database" call can be slowed down.

Run: python -m faultplane.examples.demo_service --port 0 (prints `listening on PORT` when ready).
The service marks its database call with a Faultplane fault point, and also exposes an admin endpoint, so
faults can reach it both ways: through the fault registry, or over HTTP.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from faultplane.examples.bodies import decode_body
from faultplane.examples.serving import run_server

try:
    from faultplane.faultpoint import fault_point
except ImportError:  # the fault point module is optional for this demo
    fault_point = None  # type: ignore[assignment]

_state: dict[str, Any] = {"latency_ms": 0.0, "error_rate": 0.0, "requests": 0}
_lock = threading.Lock()


def _db_query() -> list[dict[str, Any]]:
    delay = _state["latency_ms"] / 1000.0
    if delay:
        time.sleep(delay)
    return [{"id": 1, "item": "book"}, {"id": 2, "item": "lamp"}]


if fault_point is not None:
    _db_query = fault_point("demo.db")(_db_query)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the demo prints its own story
        pass

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        with _lock:
            _state["requests"] += 1
        if self.path == "/health":
            self._send(200, {"status": "ok"})
        elif self.path == "/orders":
            try:
                self._send(200, {"orders": _db_query()})
            except Exception as exc:
                self._send(503, {"error": str(exc)})
        elif self.path == "/admin/faults":
            self._send(200, dict(_state))
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = decode_body(self.rfile.read(length), self.headers.get("Content-Type"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            self._send(400, {"error": "body must be JSON"})
            return
        if self.path == "/admin/latency":
            ms = body.get("ms")
            if not isinstance(ms, int | float) or ms < 0:
                self._send(400, {"error": "ms must be a number >= 0"})
                return
            _state["latency_ms"] = float(ms)
            self._send(200, {"latency_ms": _state["latency_ms"]})
        else:
            self._send(404, {"error": "not found"})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    run_server(server, "listening on")


if __name__ == "__main__":
    main()
