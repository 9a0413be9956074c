"""Tool contracts held exactly: every input schema is closed, so a misspelt argument is refused by name.

Pydantic publishes a tool's arguments as an open object, and the SDK drops unknown keys, so
`{"probabilty": 0.9}` silently ran with the default probability. Closing each schema
(`additionalProperties: false`) makes `ArgumentCheck`, which validates against the published schema, refuse
it with the list of valid names.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

__all__ = ["close_input_schemas", "param"]


def close_input_schemas(server: Any) -> None:
    """Set `additionalProperties: false` on every registered tool's input schema (call after registering)."""
    for tool in server._tool_manager.list_tools():
        tool.parameters["additionalProperties"] = False


def param(description: str, **schema: Any) -> Any:
    """A tool parameter's `Field`: its description and further JSON Schema keywords (enum, examples, bounds),
    published as given. The keywords tell the agent what to send; they are not pydantic constraints, so an
    out-of-range value reaches the service, whose error names the field and the fix."""
    return Field(description=description, json_schema_extra=schema)
