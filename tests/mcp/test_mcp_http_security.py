"""HTTP transport guards: bearer token, Origin (DNS rebinding), Host, body size, and the bind policy."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp_helpers import ServerEnv, run_http_server, server_argv

from faultplane.mcp_server.http import HttpConfig, HttpConfigError, is_loopback, load_token
from jsonrpc_helpers import initialize

pytestmark = pytest.mark.anyio

TOKEN = "s3cret-token-0123456789abcdef"
INIT = initialize(1)
HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


async def test_token_required_and_checked(server_env: ServerEnv) -> None:
    with run_http_server(server_env, token=TOKEN) as srv:
        with anyio.fail_after(60):
            async with httpx2.AsyncClient(timeout=10) as http:
                # no Authorization, a wrong token, a wrong scheme, a token prefix: all 401
                for auth in (
                    None,
                    "Bearer wrong",
                    f"Basic {TOKEN}",
                    f"Bearer {TOKEN[:-1]}",
                    f"Bearer {TOKEN}x",
                    f"Bearer{TOKEN}",
                    f"Bearer {TOKEN} {TOKEN}",
                    f"Bearer\t{TOKEN}",
                ):
                    headers = dict(HEADERS)
                    if auth:
                        headers["authorization"] = auth
                    r = await http.post(srv.url, json=INIT, headers=headers)
                    assert r.status_code == 401, auth
                    assert r.headers["www-authenticate"].startswith("Bearer")
                    body = r.json()
                    assert body["jsonrpc"] == "2.0" and "Authorization: Bearer" in body["error"]["message"]
                # GET and DELETE are guarded too
                assert (await http.get(srv.url)).status_code == 401
                assert (await http.delete(srv.url)).status_code == 401
                # the right token gets through; the scheme is case-insensitive (RFC 9110 §11.1), and several
                # spaces after it do not matter
                for auth in (
                    f"Bearer {TOKEN}",
                    f"bearer {TOKEN}",
                    f"BEARER {TOKEN}",
                    f"BeArEr   {TOKEN}",
                ):
                    r = await http.post(srv.url, json=INIT, headers={**HEADERS, "authorization": auth})
                    assert r.status_code == 200, auth

            # the SDK client: refused without the token, works with it
            with pytest.raises(Exception):  # noqa: B017 - the SDK surfaces the 401 as an HTTP or MCP error
                async with srv.client(token="wrong-token-wrong-token") as c:
                    await c.list_tools()
            async with srv.client() as c:
                r2 = await c.call_tool("chaos_status", {})
                assert not r2.is_error


async def test_origin_host_and_body_limits(server_env: ServerEnv) -> None:
    with run_http_server(
        server_env, "--max-body-bytes", "2048", "--allowed-origin", "https://ok.example"
    ) as srv:
        with anyio.fail_after(60):
            async with httpx2.AsyncClient(timeout=10) as http:
                r = await http.post(srv.url, json=INIT, headers={**HEADERS, "origin": "http://evil.example"})
                assert r.status_code == 403 and "Origin" in r.json()["error"]["message"]
                # a rebinding page served from a loopback-looking but different scheme/host is refused too
                r = await http.post(
                    srv.url, json=INIT, headers={**HEADERS, "origin": "http://127.0.0.1.evil:80"}
                )
                assert r.status_code == 403
                r = await http.post(srv.url, json=INIT, headers={**HEADERS, "host": "evil.example"})
                assert r.status_code == 421
                for origin in ("http://localhost:3000", "https://ok.example"):
                    r = await http.post(srv.url, json=INIT, headers={**HEADERS, "origin": origin})
                    assert r.status_code == 200, origin
                big = {**INIT, "params": {**INIT["params"], "pad": "x" * 4096}}
                r = await http.post(srv.url, json=big, headers=HEADERS)
                assert r.status_code == 413 and "--max-body-bytes" in r.json()["error"]["message"]

                async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: counted while read
                    for _ in range(4):
                        yield b" " * 1024

                r = await http.post(srv.url, content=chunked(), headers=HEADERS)
                assert r.status_code == 413
                r = await http.post(srv.url, json=INIT, headers=HEADERS)
                assert r.status_code == 200


def test_binding_beyond_loopback_requires_a_token(server_env: ServerEnv, tmp_path: Path) -> None:
    env = {**os.environ, **server_env.env}
    env.pop("FAULTPLANE_MCP_TOKEN", None)
    proc = subprocess.run(
        server_argv("--transport", "http", "--host", "0.0.0.0", "--port", "0"),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "--host 0.0.0.0" in proc.stderr and "--token-file" in proc.stderr

    empty = tmp_path / "empty-token"
    empty.write_text("\n")
    proc = subprocess.run(
        server_argv("--transport", "http", "--token-file", str(empty)),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "empty" in proc.stderr


def test_http_config_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5") and not is_loopback("example.com")
    HttpConfig().check()
    HttpConfig(host="0.0.0.0", token=TOKEN).check()
    with pytest.raises(HttpConfigError, match="requires a bearer token"):
        HttpConfig(host="10.0.0.1").check()
    with pytest.raises(HttpConfigError, match="16 characters"):
        HttpConfig(token="short").check()
    f = tmp_path / "tok"
    f.write_text(TOKEN + "\n")
    assert load_token(f) == TOKEN
    monkeypatch.setenv("FAULTPLANE_MCP_TOKEN", "from-env-from-env-123")
    assert load_token(None) == "from-env-from-env-123"
    with pytest.raises(HttpConfigError, match="cannot read"):
        load_token(tmp_path / "missing")
    (tmp_path / "utf16").write_bytes(TOKEN.encode("utf-16"))  # an editor's "Unicode" encoding
    with pytest.raises(HttpConfigError, match="not UTF-8"):
        load_token(tmp_path / "utf16")


def test_client_config_snippets() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "faultplane.cli.main", "mcp", "config", "cursor"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert '"mcpServers"' in out.stdout and '"mcp"' in out.stdout
