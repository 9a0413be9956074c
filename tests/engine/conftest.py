from __future__ import annotations

from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

import ctk_helpers  # noqa: F401  (registers the test driver)
from policy_helpers import use_lab_policy
from servers import http_server

LAB_POLICY = """\
# A lab policy for engine tests: production is still forbidden, gates are not required.
gates: {required: false}
"""


@pytest.fixture
def lab_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return use_lab_policy(LAB_POLICY)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        routes = {
            "/health": (200, b'{"status": "ok", "services": [{"name": "db", "up": true}]}'),
            "/broken": (500, b'{"status": "down"}'),
            "/text": (200, b"all systems nominal"),
        }
        status, body = routes.get(self.path, (404, b'{"error": "not found"}'))
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if body.startswith(b"{") else "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="session")
def http_service() -> Iterator[str]:
    """A real HTTP server on a free loopback port."""
    with http_server(_Handler) as url:
        yield url
