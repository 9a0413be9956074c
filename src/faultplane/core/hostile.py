"""Limits on every file or JSON/YAML document that enters Faultplane, so hostile input gets a one-line error.

A document is refused when its text is larger than `MAX_BYTES`, when it nests deeper than `MAX_DEPTH`, or when
walking it visits more than `MAX_NODES` values (a YAML alias bomb is small on disk and shared in memory, but
every consumer that walks it expands it). Parsers that recurse (json, yaml) raise RecursionError on absurd
nesting; `parse_guarded` turns that into the same one-line error instead of a traceback.

Limits can be raised for a fleet-sized document with FAULTPLANE_MAX_DOCUMENT_BYTES / _DEPTH / _NODES.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_NODES",
    "HostileInput",
    "check_structure",
    "check_text",
    "json_file_or_none",
    "load_json_file",
    "parse_guarded",
    "read_text_limited",
]

T = TypeVar("T")


def _limit(name: str, default: int) -> int:
    try:
        return max(1, int(os.environ.get(f"FAULTPLANE_MAX_DOCUMENT_{name}", default)))
    except ValueError:
        return default


MAX_BYTES = _limit("BYTES", 8 * 1024 * 1024)
MAX_DEPTH = _limit("DEPTH", 64)
MAX_NODES = _limit("NODES", 2_000_000)


class HostileInput(ValueError):
    """A document beyond the limits; the message is one line naming what and the fix."""


def check_text(text: str | bytes, what: str = "document") -> None:
    if len(text) > MAX_BYTES:
        raise HostileInput(
            f"{what} is {len(text):,} bytes, more than the {MAX_BYTES:,} allowed; "
            "split it or raise FAULTPLANE_MAX_DOCUMENT_BYTES"
        )


def read_text_limited(path: str | os.PathLike[str], what: str = "file") -> str:
    """A file's text, refused before reading when larger than the limit (a FIFO or a device is refused too)."""
    p = Path(path)
    if p.exists() and not p.is_file():
        raise HostileInput(f"{what} {p} is not a regular file; pass a .yaml/.json file")
    size = p.stat().st_size
    if size > MAX_BYTES:
        raise HostileInput(
            f"{what} {p} is {size:,} bytes, more than the {MAX_BYTES:,} allowed; "
            "split it or raise FAULTPLANE_MAX_DOCUMENT_BYTES"
        )
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise HostileInput(f"{what} {p} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def check_structure(data: Any, what: str = "document") -> None:
    """Refuse nesting deeper than MAX_DEPTH or more than MAX_NODES values visited (aliases count each time)."""
    budget = MAX_NODES
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        node, depth = stack.pop()
        budget -= 1
        if budget < 0:
            raise HostileInput(
                f"{what} expands to more than {MAX_NODES:,} values (YAML aliases count each time they are "
                "used); remove the repeated anchors or raise FAULTPLANE_MAX_DOCUMENT_NODES"
            )
        if depth > MAX_DEPTH:
            raise HostileInput(
                f"{what} nests deeper than {MAX_DEPTH} levels; flatten it or raise FAULTPLANE_MAX_DOCUMENT_DEPTH"
            )
        if isinstance(node, Mapping):
            for key, value in node.items():
                if not isinstance(value, str | int | float | bool | type(None)):
                    stack.append((value, depth + 1))
                else:
                    budget -= 1
                if not isinstance(key, str | int | float | bool | type(None)):
                    stack.append((key, depth + 1))
        elif isinstance(node, list | tuple | set | frozenset):
            for value in node:
                if not isinstance(value, str | int | float | bool | type(None)):
                    stack.append((value, depth + 1))
                else:
                    budget -= 1


def parse_guarded(parse: Callable[[str], T], text: str, what: str = "document") -> T:
    """`parse(text)` within the limits: size before, depth and expansion after, RecursionError as one line.
    A leading byte-order mark is dropped: Windows editors save UTF-8 with one, and JSON parsers refuse it."""
    check_text(text, what)
    try:
        data = parse(text.removeprefix("\ufeff"))
    except RecursionError:
        raise HostileInput(
            f"{what} nests too deeply to parse; flatten it (at most {MAX_DEPTH} levels)"
        ) from None
    check_structure(data, what)
    return data


def load_json_file(path: str | os.PathLike[str], what: str = "file") -> Any:
    """A JSON file within the limits. Raises HostileInput (size, encoding, nesting) or ValueError (syntax)."""
    import json

    return parse_guarded(json.loads, read_text_limited(path, what), f"{what} {path}")


def json_file_or_none(path: str | os.PathLike[str]) -> Any:
    """A JSON file Faultplane wrote for itself (an index, a marker), or None when it is missing, unreadable,
    beyond the limits or not JSON: a file another process planted there must not stop a command."""
    try:
        return load_json_file(path)
    except (OSError, ValueError):  # HostileInput and JSONDecodeError are ValueErrors
        return None
