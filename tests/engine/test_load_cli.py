"""`faultplane load` as a user runs it: a subprocess against a real loopback server."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from clihelp import run_cli
from servers import http_server


def load(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("load", *args)


@pytest.fixture
def url() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status = 200 if json.loads(body or b"{}").get("amount") == 1 else 400
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

    with http_server(Handler) as base:
        yield base + "/pay"


def test_json_summary(url: str) -> None:
    done = load(
        url, "--rate", "40", "--duration", "1", "--method", "POST", "--data", '{"amount": 1}', "--json"
    )
    assert done.returncode == 0, done.stderr
    s = json.loads(done.stdout)
    assert s["sent"] == 40 and s["ok"] == 40 and s["error_rate"] == 0.0
    assert s["spec"]["method"] == "POST" and s["latency_ms"]["p99"] > 0


def test_failed_requests_exit_1_and_show_in_the_table(url: str) -> None:
    done = load(url, "--rate", "20", "--duration", "1", "-X", "POST", "--data", '{"amount": 2}')
    assert done.returncode == 1
    assert "load summary" in done.stdout and "status:400 x20" in done.stdout


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["http://127.0.0.1:1/", "--rate", "0"], "--rate"),
        (["ftp://example", "--rate", "5"], "URL"),
        (["http://127.0.0.1:1/", "--method", "FETCH"], "--method"),
        (["http://127.0.0.1:1/", "--data", "{not json"], "--data"),
        (["http://127.0.0.1:1/", "--max-in-flight", "0"], "--max-in-flight"),
        # URLs the workers could not split failed the run after it began ("load worker did not start")
        (["http://[::1", "--rate", "5"], "URL"),
        (["http://127.0.0.1:99999/", "--rate", "5"], "URL"),
        (["http://127.0.0.1:port/", "--rate", "5"], "URL"),
        (["http:///no-host", "--rate", "5"], "URL"),
        (["http://127.0.0.1:1/a b", "--rate", "5"], "URL"),
    ],
)
def test_bad_input_names_the_option(args: list[str], named: str) -> None:
    done = load(*args, "--duration", "1")
    assert done.returncode == 2
    assert named in done.stderr and "Traceback" not in done.stderr
