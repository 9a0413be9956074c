"""One gate for every JSON-RPC frame that reaches a Faultplane surface: size, encoding, nesting, envelope.

The MCP server (stdio and HTTP) and both plane proxies run each inbound frame through `check_frame` before
anything else parses it. Python's `json` module recurses once per nesting level, so a few thousand `[` end
in RecursionError, which is not a ValueError and used to escape every handler; here the depth is measured
without recursion first. A rejected frame gets the JSON-RPC 2.0 error it is owed (-32700 Parse error for
bytes that are not UTF-8 JSON, -32600 Invalid Request for JSON that is not a valid message), with the
request's id when it can be read, and the session goes on.

Limits are configurable (`FrameLimits`); each error names the limit and the option that raises it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_FRAME_BYTES",
    "INVALID_REQUEST",
    "PARSE_ERROR",
    "FrameError",
    "FrameLimits",
    "check_frame",
    "error_frame",
    "guess_id",
    "loads_bounded",
    "too_deep",
]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600

DEFAULT_MAX_FRAME_BYTES = 4 * 1024 * 1024
# Deeper than any MCP message or experiment needs, far below where `json` and pydantic start to recurse.
DEFAULT_MAX_DEPTH = 128

_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
# The SDKs write "jsonrpc" then "id" first, so the id of even an oversized frame is near its start.
_ID_NEAR_START = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.){0,200}"|-?\d{1,19})(?=\s*[,}])')


@dataclass(frozen=True)
class FrameLimits:
    """The largest frame and the deepest nesting a surface accepts; `option` names the setting to change."""

    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_depth: int = DEFAULT_MAX_DEPTH
    option: str = "--max-frame-bytes"

    def __post_init__(self) -> None:
        if self.max_frame_bytes <= 0:
            raise ValueError(f"{self.option}: must be positive; fix: pass e.g. {DEFAULT_MAX_FRAME_BYTES}")
        if self.max_depth <= 0:
            raise ValueError(f"max depth: must be positive; fix: e.g. {DEFAULT_MAX_DEPTH}")


class FrameError(ValueError):
    """A frame that must be refused: the JSON-RPC code, the message, and the request id if known."""

    def __init__(self, code: int, message: str, rid: str | int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.rid = rid

    def reply(self) -> bytes:
        return error_frame(self.code, self.message, self.rid)


def error_frame(code: int, message: str, rid: str | int | None = None) -> bytes:
    """A compact JSON-RPC error response (no trailing newline)."""
    body = {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def _valid_id(rid: Any) -> bool:
    return isinstance(rid, str | int) and not isinstance(rid, bool)


def guess_id(data: bytes | str) -> str | int | None:
    """The id of a frame too large or too deep to parse, read from its first bytes; None if not there."""
    head = (data.encode("utf-8", "replace") if isinstance(data, str) else data)[:512]
    m = _ID_NEAR_START.search(head)
    if m is None:
        return None
    try:
        rid = json.loads(m.group(1))
    except ValueError:
        return None
    return rid if _valid_id(rid) else None


def too_deep(data: bytes | str, max_depth: int) -> bool:
    """True when arrays/objects nest deeper than `max_depth` (brackets inside strings do not count)."""
    raw = data.encode("utf-8", "replace") if isinstance(data, str) else data
    if raw.count(b"[") + raw.count(b"{") <= max_depth:
        return False  # cannot nest deeper than it has openers: the common case costs two counts
    brackets = _STRINGS.sub(b"", raw).translate(None, _NOT_BRACKETS)
    depth = 0
    for b in brackets:
        if b in (91, 123):  # [ {
            depth += 1
            if depth > max_depth:
                return True
        else:
            depth -= 1
    return False


def loads_bounded(data: bytes | str, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """`json.loads` that raises FrameError (a ValueError) instead of recursing past `max_depth`."""
    if too_deep(data, max_depth):
        raise FrameError(
            INVALID_REQUEST,
            f"Invalid Request: JSON nested deeper than {max_depth} levels",
            guess_id(data),
        )
    try:
        return json.loads(data)
    except RecursionError:  # pragma: no cover - too_deep keeps well below the interpreter's limit
        raise FrameError(INVALID_REQUEST, "Invalid Request: JSON nested too deeply", guess_id(data)) from None


def check_frame(data: bytes, limits: FrameLimits = FrameLimits(), *, strip: bool = True) -> Any:
    """The parsed message if `data` is one valid JSON-RPC 2.0 message; raises FrameError otherwise.

    Valid: a request (string or integer id), a notification (no id), or a response (id plus exactly one of
    result/error). The method itself is not judged here: unknown methods get -32601 from the server.
    """
    if len(data) > limits.max_frame_bytes:
        raise FrameError(
            INVALID_REQUEST,
            f"Invalid Request: message of {len(data)} bytes exceeds the limit of {limits.max_frame_bytes} "
            f"bytes; fix: send less, or raise the limit with {limits.option}",
            guess_id(data),
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FrameError(PARSE_ERROR, f"Parse error: not UTF-8 (byte {exc.start})", guess_id(data)) from None
    if strip:
        text = text.strip()
    if not text:
        raise FrameError(PARSE_ERROR, "Parse error: empty message")
    try:
        msg = loads_bounded(text, limits.max_depth)
    except FrameError:
        raise
    except ValueError as exc:
        raise FrameError(PARSE_ERROR, f"Parse error: {exc}", guess_id(text)) from None
    defect = envelope_defect(msg)
    if defect is not None:
        rid = msg.get("id") if isinstance(msg, dict) else None
        raise FrameError(INVALID_REQUEST, f"Invalid Request: {defect}", rid if _valid_id(rid) else None)
    return msg


def is_response(msg: Any) -> bool:
    return isinstance(msg, dict) and "method" not in msg and ("result" in msg or "error" in msg)


def envelope_defect(msg: Any) -> str | None:
    """What makes `msg` not a JSON-RPC 2.0 message MCP accepts, or None when it is one."""
    if isinstance(msg, list):
        return "batches are not supported; send one JSON-RPC message at a time"
    if not isinstance(msg, dict):
        return "a message must be a JSON object"
    if msg.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"'
    if "method" not in msg:
        if "result" in msg and "error" in msg:
            return "a response carries result or error, not both"
        if "result" not in msg and "error" not in msg:
            return "a message needs a method (request, notification) or a result/error (response)"
        if not _valid_id(msg.get("id")) and not ("error" in msg and msg.get("id") is None):
            return "id must be a string or an integer"
        return None
    method = msg["method"]
    if not isinstance(method, str) or not method:
        return "method must be a non-empty string"
    if "id" in msg:
        if not _valid_id(msg["id"]):
            return "id must be a string or an integer"
        if method.startswith("notifications/"):
            return f"{method} is a notification and must not carry an id"
    if "params" in msg and not isinstance(msg["params"], dict):
        return "params must be an object"
    return None
