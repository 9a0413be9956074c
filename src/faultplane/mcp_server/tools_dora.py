"""MCP tool for DORA's Four Keys beside chaos evidence: a thin call into faultplane.services.dora."""

from __future__ import annotations

from typing import Annotated, Any

import anyio
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from faultplane.core.formats import dumps
from faultplane.services.dora import FourKeys

_READ = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)


class DoraOutput(BaseModel):
    services: list[FourKeys] = Field(description="one row per service, in name order")
    toon: str = Field(description="the same rows in TOON")


def register(server: Any, cfg: Any = None) -> None:
    """Add chaos_dora_keys to `server`."""

    @server.tool(annotations=_READ)
    async def chaos_dora_keys(
        service: Annotated[str | None, Field(description="one service; omit for all")] = None,
    ) -> DoraOutput:
        """DORA Four Keys per service (deployment frequency, lead time, change failure rate, time to restore,
        from imported CI/CD events) beside the faults its experiments exercised and their recovery times."""
        from faultplane.services.dora import DoraError, four_keys

        def read() -> list[FourKeys]:
            if cfg is not None and hasattr(cfg, "store"):
                return four_keys(cfg.store(), service)
            from faultplane.core.store import open_store

            return four_keys(open_store(), service)

        try:
            keys = await anyio.to_thread.run_sync(read)
        except DoraError as exc:
            raise ToolError(str(exc)) from None
        return DoraOutput(services=keys, toon=dumps([k.model_dump(mode="json") for k in keys], "toon"))
