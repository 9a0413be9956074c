"""Tool contracts held exactly: every input schema is closed, so a misspelt argument is refused by name.

Pydantic publishes a tool's arguments as an open object, and the SDK drops unknown keys, so
`{"probabilty": 0.9}` silently ran with the default probability. Closing each schema
(`additionalProperties: false`) makes `ArgumentCheck`, which validates against the published schema, refuse
it with the list of valid names.
"""

from __future__ import annotations

from typing import Any

__all__ = ["close_input_schemas"]


def close_input_schemas(server: Any) -> None:
    """Set `additionalProperties: false` on every registered tool's input schema (call after registering)."""
    for tool in server._tool_manager.list_tools():
        tool.parameters["additionalProperties"] = False
