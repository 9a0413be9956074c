"""A small MCP server for the plane tests, run as a real subprocess (stdio, or streamable HTTP).

Usage: python fixture_server.py            -> stdio
       python fixture_server.py http PORT [--json] [--stateless]
"""

from __future__ import annotations

import sys

import anyio
from mcp.server import MCPServer
from pydantic import BaseModel

mcp = MCPServer("plane-fixture", version="0.0.1", log_level="WARNING")


class Weather(BaseModel):
    city: str
    temp_c: float
    conditions: str


class Catalog(BaseModel):
    items: list[str]
    total: int


@mcp.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@mcp.tool()
def weather(city: str) -> Weather:
    """Weather for a city (always the same answer)."""
    return Weather(city=city, temp_c=21.5, conditions="clear")


@mcp.tool()
def catalog(n: int = 10) -> Catalog:
    """A list of n items."""
    return Catalog(items=[f"item-{i}" for i in range(n)], total=n)


@mcp.tool()
def echo(text: str) -> str:
    """Echo text back."""
    return text


@mcp.tool()
async def slow(ms: int = 50) -> str:
    """Answer after ms milliseconds."""
    await anyio.sleep(ms / 1000)
    return "done"


@mcp.tool()
def stamp() -> str:
    """A constant stamp."""
    return "stamp"


@mcp.tool()
def lookup(key: str) -> dict[str, str]:
    """Look a key up."""
    return {"key": key, "value": key.upper()}


@mcp.tool()
def noop() -> bool:
    """Do nothing."""
    return True


@mcp.tool()
def ident(n: int) -> int:
    """Return n."""
    return n


@mcp.tool()
def upper(text: str) -> str:
    """Upper-case text."""
    return text.upper()


@mcp.tool()
def ghost() -> str:
    """A tool a registry fault may hide."""
    return "boo"


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        mcp.run(
            "streamable-http",
            host="127.0.0.1",
            port=int(sys.argv[2]),
            json_response="--json" in sys.argv,
            stateless_http="--stateless" in sys.argv,
        )
    else:
        mcp.run()
