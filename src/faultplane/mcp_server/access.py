"""What an operator lets an agent do: a read-only mode and a per-tool allow list, on stdio and HTTP alike.

Both are server settings (`faultplane mcp --read-only`, `--allow-tool NAME`), enforced as the first
middleware, before arguments are checked or anything runs. A refused call is a tool error whose text names
the setting that refuses it, so the agent can tell its operator what to change. Tools stay listed: an agent
that can see what exists can ask for it. Read-only means the tool is annotated `readOnlyHint: true`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from mcp.types import CallToolResult, TextContent

__all__ = ["AccessError", "AccessPolicy"]


class AccessError(ValueError):
    """An allow list naming a tool the server does not have; the message lists the valid names."""


@dataclass(frozen=True)
class AccessPolicy:
    read_only: bool = False
    allowed_tools: frozenset[str] | None = None  # None: every tool

    @property
    def restricts(self) -> bool:
        return self.read_only or self.allowed_tools is not None

    def check_names(self, known: Collection[str]) -> None:
        unknown = sorted(set(self.allowed_tools or ()) - set(known))
        if unknown:
            raise AccessError(
                f"--allow-tool {', '.join(unknown)}: no such tool; fix: use some of {', '.join(sorted(known))}"
            )

    def refusal(self, tool: str, read_only_tool: bool) -> str | None:
        if self.allowed_tools is not None and tool not in self.allowed_tools:
            allowed = ", ".join(sorted(self.allowed_tools)) or "none"
            return (
                f"{tool}: not allowed on this server (allowed: {allowed}); fix: the operator adds "
                f"--allow-tool {tool} to `faultplane mcp`"
            )
        if self.read_only and not read_only_tool:
            return (
                f"{tool}: refused, the server runs read-only (--read-only) and {tool} changes the system; fix: "
                "the operator restarts `faultplane mcp` without --read-only"
            )
        return None


class AccessCheck:
    """ServerMiddleware enforcing an AccessPolicy on tools/call."""

    def __init__(self, server: Any, policy: AccessPolicy) -> None:
        self._server = server
        self._policy = policy
        self._read_only: Mapping[str, bool] | None = None

    async def _read_only_tools(self) -> Mapping[str, bool]:
        if self._read_only is None:
            self._read_only = {
                t.name: bool(t.annotations and t.annotations.read_only_hint)
                for t in await self._server.list_tools()
            }
        return self._read_only

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        params = ctx.params
        if ctx.method != "tools/call" or not isinstance(params, Mapping):
            return await call_next(ctx)
        name = params.get("name")
        tools = await self._read_only_tools()
        if not isinstance(name, str) or name not in tools:
            return await call_next(ctx)  # unknown tool: the SDK's answer
        message = self._policy.refusal(name, tools[name])
        if message is None:
            return await call_next(ctx)
        return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)
