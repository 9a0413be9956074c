"""`faultplane mcp`: run the MCP server (stdio by default, streamable HTTP with --transport http)."""

from __future__ import annotations

import json
import shutil
import sys
from enum import StrEnum
from pathlib import Path

import typer

app = typer.Typer(
    invoke_without_command=True,
    help="Serve every Faultplane capability to agents over MCP (stdio, or streamable HTTP).",
    add_completion=False,
)


class Transport(StrEnum):
    stdio = "stdio"
    http = "http"


class TextFormat(StrEnum):
    toon = "toon"
    json = "json"


class ClientName(StrEnum):
    claude_desktop = "claude-desktop"
    claude_code = "claude-code"
    cursor = "cursor"


@app.callback()
def serve(
    ctx: typer.Context,
    transport: Transport = typer.Option(Transport.stdio, "--transport", "-t", help="stdio or http"),
    host: str = typer.Option("127.0.0.1", help="HTTP bind address; beyond loopback a token is required"),
    port: int = typer.Option(8000, help="HTTP port (0 picks a free one; the URL is printed on stderr)"),
    path: str = typer.Option("/mcp", help="HTTP endpoint path"),
    token_file: Path | None = typer.Option(
        None, "--token-file", help="file holding the bearer token (else $FAULTPLANE_MCP_TOKEN)"
    ),
    allowed_origin: list[str] = typer.Option(
        [], "--allowed-origin", help="extra Origin allowed (loopback origins always are); repeatable"
    ),
    allowed_host: list[str] = typer.Option(
        [], "--allowed-host", help="Host header allowed when binding beyond loopback; repeatable"
    ),
    max_body_bytes: int = typer.Option(1024 * 1024, help="largest HTTP request body accepted (413 beyond)"),
    max_frame_bytes: int = typer.Option(
        4 * 1024 * 1024, min=1, help="stdio: largest JSON-RPC line accepted (answered -32600 beyond)"
    ),
    stateless: bool = typer.Option(False, help="HTTP: no sessions (each request stands alone)"),
    json_response: bool = typer.Option(False, help="HTTP: answer with JSON bodies instead of SSE streams"),
    seed: int | None = typer.Option(None, help="seed of the fault rolls (drawn and audited when omitted)"),
    store: str | None = typer.Option(
        None,
        help="DuckDB file, clickhouse://user:pass@host:8123/db or chdb:///dir (default: $FAULTPLANE_STORE)",
    ),
    text_format: TextFormat = typer.Option(
        TextFormat.toon, "--text-format", help="text block of results (structured content is always JSON)"
    ),
    read_only: bool = typer.Option(False, "--read-only", help="refuse every tool that changes the system"),
    allow_tool: list[str] = typer.Option(
        [], "--allow-tool", help="only these tools may be called (repeatable; default: all)"
    ),
) -> None:
    if ctx.invoked_subcommand is not None:
        return
    from faultplane.mcp_server.access import AccessError, AccessPolicy
    from faultplane.mcp_server.http import HttpConfig, HttpConfigError, load_token, serve_http
    from faultplane.mcp_server.server import ServerConfig, build_server, record_start

    cfg = ServerConfig(
        seed=seed,
        store_path=store,
        actor=f"mcp:{transport.value}",
        text_format=text_format.value,
        access=AccessPolicy(read_only=read_only, allowed_tools=frozenset(allow_tool) if allow_tool else None),
    )
    try:
        server = build_server(cfg)  # fails fast on an --allow-tool naming no tool
    except AccessError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if transport is Transport.stdio:
        import anyio

        from faultplane.core.jsonrpc_guard import FrameLimits
        from faultplane.mcp_server.shutdown import serve_stdio_until_signalled

        record_start(cfg, "stdio")
        anyio.run(serve_stdio_until_signalled, server, FrameLimits(max_frame_bytes=max_frame_bytes))
        return
    try:
        http = HttpConfig(
            host=host,
            port=port,
            path=path,
            token=load_token(token_file),
            allowed_origins=allowed_origin,
            allowed_hosts=allowed_host,
            max_body_bytes=max_body_bytes,
            stateless=stateless,
            json_response=json_response,
        )
        http.check()
    except HttpConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    cfg.actor = "mcp:http"
    record_start(cfg, "http", {"host": host, "port": port, "token": http.token is not None})
    try:
        serve_http(server, http)
    except HttpConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        pass


def client_config(client: ClientName, command: str | None = None) -> str:
    """Ready-to-paste configuration registering Faultplane's stdio server with an MCP client."""
    beside_python = Path(sys.executable).with_name("faultplane")  # the venv's script, even off PATH
    exe = (
        command
        or shutil.which("faultplane")
        or (str(beside_python) if beside_python.exists() else "faultplane")
    )
    if client is ClientName.claude_code:
        return f"claude mcp add faultplane -- {exe} mcp"
    entry = {"mcpServers": {"faultplane": {"command": exe, "args": ["mcp"]}}}
    return json.dumps(entry, indent=2)


@app.command("config")
def config(
    client: ClientName = typer.Argument(
        ClientName.claude_desktop, help="claude-desktop, claude-code or cursor"
    ),
) -> None:
    """Print the snippet that registers this server with an MCP client."""
    sys.stdout.write(client_config(client) + "\n")
