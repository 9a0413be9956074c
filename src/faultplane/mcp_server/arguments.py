"""Tool arguments checked against each tool's published input schema, with messages an agent can act on.

The SDK validates arguments with the tool function's pydantic model and returns pydantic's own text (error
codes, a documentation URL, no fix). This middleware runs first and validates against the very JSON schema the
server publishes in tools/list, so what is enforced is exactly what is advertised; each refusal names the field,
what it must be, what was sent and a value that would work. A tool can ask to hear of refusals (the fault tool
writes them to the audit log, as it does every call).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from mcp.types import CallToolResult, TextContent

__all__ = ["ArgumentCheck", "describe_errors"]

# (tool arguments as sent, the refusal message) -> the tool's error result; None keeps the default result.
OnRefusal = Callable[[Mapping[str, Any], str], Awaitable[CallToolResult | None]]

_TYPE_WORDS = {
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "true or false",
    "object": "an object",
    "array": "a list",
}
_EXAMPLES: dict[str, Any] = {"string": "text", "boolean": True, "object": {}, "array": []}


def _branches(schema: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The non-null alternatives of a property (pydantic writes `X | None` as anyOf [X, null])."""
    alts = schema.get("anyOf") or schema.get("oneOf")
    if not alts:
        return [schema]
    return [a for a in alts if a.get("type") != "null"] or [schema]


def _types(schema: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for branch in _branches(schema):
        t = branch.get("type")
        out.extend([t] if isinstance(t, str) else list(t or []))
    return [t for t in out if t != "null"]


def _bounds(schema: Mapping[str, Any]) -> tuple[Any, Any]:
    lo, hi = schema.get("minimum"), schema.get("maximum")
    for branch in _branches(schema):
        lo = branch.get("minimum", lo)
        hi = branch.get("maximum", hi)
    return lo, hi


def _enum(schema: Mapping[str, Any]) -> list[Any] | None:
    values = schema.get("enum")
    for branch in _branches(schema):
        values = branch.get("enum", values)
    return [v for v in values if v is not None] if values else None


def _what(schema: Mapping[str, Any]) -> str:
    """What a property accepts, in words: 'a number from 0.0 to 1.0', 'one of json, toon'."""
    enum = _enum(schema)
    if enum:
        return "one of " + ", ".join(str(v) for v in enum)
    types = _types(schema)
    words = " or ".join(_TYPE_WORDS.get(t, t) for t in types) or "a value"
    lo, hi = _bounds(schema)
    if lo is not None and hi is not None:
        return f"{words} from {lo} to {hi}"
    if lo is not None:
        return f"{words} of at least {lo}"
    if hi is not None:
        return f"{words} of at most {hi}"
    return words


def _example(schema: Mapping[str, Any]) -> Any:
    """A value the property accepts: its first example, its default, its first choice, or one in range."""
    examples = schema.get("examples")
    if examples:
        return examples[0]
    if schema.get("default") is not None:
        return schema["default"]
    enum = _enum(schema)
    if enum:
        return enum[0]
    types = _types(schema)
    if "number" in types or "integer" in types:
        lo, hi = _bounds(schema)
        if lo is not None and hi is not None:
            mid = lo + (hi - lo) / 4
            return int(mid) if "integer" in types else round(mid, 2)
        return lo if lo is not None else 1
    return _EXAMPLES.get(types[0]) if types and types[0] != "string" else None


def _show(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, dict | list) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fix(schema: Mapping[str, Any]) -> str:
    example = _example(schema)
    if example is not None:
        return f"pass e.g. {json.dumps(example)}"
    if schema.get("description"):
        return f"pass {_what(schema)}: {schema['description']}"
    return "see the tool's input schema (tools/list)"


def describe_errors(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> list[str]:
    """One 'field: must be …; fix: …' line per wrong or missing argument (empty when all are valid)."""
    props: Mapping[str, Any] = schema.get("properties", {})
    messages: dict[str, str] = {}
    validator = Draft202012Validator(schema)
    for error in sorted(validator.iter_errors(dict(arguments)), key=lambda e: list(e.absolute_path)):
        field, message = _describe(error, props)
        messages.setdefault(field, message)  # the first problem per field is the one to fix
    return list(messages.values())


def _describe(error: ValidationError, props: Mapping[str, Any]) -> tuple[str, str]:
    path = list(error.absolute_path)
    if not path:
        if error.validator == "required":
            missing = [p for p in error.validator_value if p not in (error.instance or {})]
            name = missing[0] if missing else "arguments"
            prop = props.get(name, {})
            return name, f"{name}: is required and must be {_what(prop)}; fix: {_fix(prop)}"
        if error.validator == "additionalProperties":
            known = ", ".join(props) or "none"
            return "arguments", f"arguments: {error.message}; fix: use only {known}"
        return (
            "arguments",
            f"arguments: must be an object of named arguments; fix: pass {{{', '.join(props)}}}",
        )
    name = str(path[0])
    prop = props.get(name, {})
    top_value = error.instance if len(path) == 1 else None
    if (
        len(path) > 1
    ):  # inside an object or list argument: name the nested spot, explain with the validator's words
        where = name + "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]" for p in path[1:])
        return (
            name,
            f"{where}: {error.message}; fix: {_fix(prop) if _example(prop) is not None else 'correct it'}",
        )
    return name, f"{name}: must be {_what(prop)} (got {_show(top_value)}); fix: {_fix(prop)}"


def _loosen(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments as the SDK will see them: it parses a JSON string sent for a non-string argument."""
    props: Mapping[str, Any] = schema.get("properties", {})
    out = dict(arguments)
    for key, value in arguments.items():
        if isinstance(value, str) and key in props and "string" not in _types(props[key]):
            try:
                parsed = json.loads(value)
            except ValueError:
                continue
            if not isinstance(parsed, str):
                out[key] = parsed
    return out


class ArgumentCheck:
    """ServerMiddleware: refuse tools/call arguments that break the tool's published input schema."""

    def __init__(self, server: Any, on_refusal: Mapping[str, OnRefusal] | None = None) -> None:
        self._server = server
        self._on_refusal = dict(on_refusal or {})
        self._validators: dict[str, Mapping[str, Any]] | None = None

    async def _schemas(self) -> Mapping[str, Mapping[str, Any]]:
        if self._validators is None:
            self._validators = {t.name: t.input_schema for t in await self._server.list_tools()}
        return self._validators

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        params = ctx.params
        if ctx.method != "tools/call" or not isinstance(params, Mapping):
            return await call_next(ctx)
        name, arguments = params.get("name"), params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(name, str) or not isinstance(arguments, Mapping):
            return await call_next(ctx)  # malformed params: the SDK answers with a JSON-RPC error
        schema = (await self._schemas()).get(name)
        if schema is None:
            return await call_next(ctx)  # unknown tool: the SDK's "Unknown tool" result
        problems = describe_errors(schema, _loosen(schema, arguments))
        if not problems:
            return await call_next(ctx)
        message = "\n".join(problems)
        hook = self._on_refusal.get(name)
        result = await hook(arguments, message) if hook is not None else None
        return result or CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)
