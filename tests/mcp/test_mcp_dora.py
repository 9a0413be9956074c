"""chaos_dora_keys over MCP: the same Four Keys the CLI reports, from the server's store."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp_helpers import ClientFactory, ServerEnv

from faultplane.core.store import Store
from faultplane.services.dora import import_events, parse_events

pytestmark = pytest.mark.anyio

DEPLOYS = """id,service,deployed_at,commit_at,status
d1,orders,2026-11-01T10:00:00Z,2026-11-01T08:00:00Z,success
d2,orders,2026-11-02T10:00:00Z,2026-11-02T06:00:00Z,failure
"""


async def test_dora_keys_over_mcp(connect: ClientFactory, server_env: ServerEnv) -> None:
    import_events(Store(server_env.store), parse_events(DEPLOYS, "deployments"), "deployments")
    with anyio.fail_after(60):
        async with connect() as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert tools["chaos_dora_keys"].output_schema is not None
            r = await c.call_tool("chaos_dora_keys", {})
            assert not r.is_error, r.content
            out: dict[str, Any] = r.structured_content or {}
            [orders] = out["services"]
            assert orders["service"] == "orders" and orders["deployments"] == 2
            assert orders["lead_time_hours"] == pytest.approx(3.0) and orders["change_failure_rate"] == 0.5
            assert "orders" in out["toon"]
            none = await c.call_tool("chaos_dora_keys", {"service": "payments"})
            assert not none.is_error and (none.structured_content or {})["services"] == []
