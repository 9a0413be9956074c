"""An MCP server with a mutating tool under @idempotent, for the plane tests (stdio subprocess).

Each transfer that really runs appends a line to the ledger file given as argv[1], so a test counts the
actions from outside the server."""

from __future__ import annotations

import sys
from pathlib import Path

from mcp.server import MCPServer

from faultplane.plane.idempotency import idempotent

LEDGER = Path(sys.argv[1])
mcp = MCPServer("idempotent-fixture", version="0.0.1", log_level="WARNING")


@mcp.tool()
@idempotent()
def transfer(amount: int, idempotency_key: str) -> str:
    """Move money once per key."""
    with LEDGER.open("a") as f:
        f.write(f"{idempotency_key} {amount}\n")
    return f"moved {amount}"


@mcp.tool()
def transfer_unsafe(amount: int, idempotency_key: str) -> str:
    """The same action without the contract: every call acts."""
    with LEDGER.open("a") as f:
        f.write(f"{idempotency_key} {amount}\n")
    return f"moved {amount}"


if __name__ == "__main__":
    mcp.run()
