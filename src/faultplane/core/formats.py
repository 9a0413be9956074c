"""Reading and writing experiments and journals as JSON, YAML and TOON, with errors a person can act on."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ValidationError

from faultplane.core.errors import ExperimentError
from faultplane.core.issues import ValidationIssue, dotted_path

__all__ = [
    "ExperimentError",
    "Format",
    "ValidationIssue",
    "detect_format",
    "dumps",
    "issues_from_pydantic",
    "load_document",
    "loads",
]

Format = Literal["json", "yaml", "toon"]

_TOON_HEADER = re.compile(r"^\s*[\w\".-]+\[#?\d+[^\]]*\](\{.*\})?:", re.MULTILINE)


def detect_format(text: str, filename: str | None = None) -> Format:
    if filename:
        suffix = Path(filename).suffix.lower()
        if suffix == ".json":
            return "json"
        if suffix in (".yaml", ".yml"):
            return "yaml"
        if suffix == ".toon":
            return "toon"
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        return "json"
    if _TOON_HEADER.search(text):
        return "toon"
    return "yaml"


_FAST_YAML = getattr(yaml, "CSafeLoader", None)


def load_yaml(text: str) -> Any:
    """yaml.safe_load through libyaml when it is there (~10x faster); errors come from the pure-Python
    loader, whose messages and positions are what the error reports were written against."""
    if _FAST_YAML is not None:
        try:
            return yaml.load(text, Loader=_FAST_YAML)  # CSafeLoader: the safe loader, in C
        except yaml.YAMLError:
            pass
    return yaml.safe_load(text)


def _hostile_issue(source: str, exc: Exception) -> ExperimentError:
    """A document over the limits (core/hostile.py): its message reads `<problem>; <fix>`."""
    message, _, fix = str(exc).partition("; ")
    return ExperimentError.one(field=source, message=message, fix=fix or "use a smaller document")


def read_named_file(path: Path, *, field: str, what: str, source: str, fix: str) -> str:
    """The text of a file the user named (an experiment, a var file), or an ExperimentError with the fix: missing
    (named `field`), over the size limit or not UTF-8 (core/hostile.py), unreadable (both named `source`)."""
    if not path.is_file():
        raise ExperimentError.one(field=field, message=f"file not found: {path}", fix=fix)
    from faultplane.core.hostile import HostileInput, read_text_limited

    try:
        return read_text_limited(path, what)
    except HostileInput as exc:
        raise _hostile_issue(source, exc) from None
    except OSError as exc:
        raise ExperimentError.one(
            field=source, message=f"cannot read the file: {exc.strerror or exc}", fix=fix
        ) from None


def loads(text: str, fmt: Format | None = None, *, source: str = "<text>") -> Any:
    from faultplane.core.hostile import HostileInput, parse_guarded

    fmt = fmt or detect_format(text, source if source != "<text>" else None)
    what = "document" if source == "<text>" else source
    try:
        if fmt == "json":
            return parse_guarded(json.loads, text, what)
        if fmt == "yaml":
            return parse_guarded(load_yaml, text, what)
        import toon_format  # imported on first use: it costs ~40 ms at start-up

        return parse_guarded(toon_format.decode, text, what)
    except HostileInput as exc:
        raise _hostile_issue(source, exc) from None
    except json.JSONDecodeError as exc:
        raise ExperimentError.one(
            field=f"{source}:{exc.lineno}:{exc.colno}",
            message=f"invalid JSON: {exc.msg}",
            fix="correct the JSON syntax at that position",
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        raise ExperimentError.one(
            field=where,
            message="invalid YAML: " + " ".join(str(getattr(exc, "problem", None) or exc).split()),
            fix="correct the YAML syntax (indentation, quoting) at that position",
        ) from None
    except Exception as exc:  # toon_format raises its own decode errors
        raise ExperimentError.one(
            field=source,
            message="invalid TOON: " + " ".join(str(exc).split()),
            fix="correct the TOON syntax, or use a .json/.yaml file",
        ) from None


def load_document(source: str | Path | Mapping[str, Any], fmt: Format | None = None) -> dict[str, Any]:
    """A mapping from a path, a text (JSON/YAML/TOON) or a mapping."""
    if isinstance(source, Mapping):
        from faultplane.core.hostile import HostileInput, check_structure

        try:
            check_structure(source, "experiment")
        except HostileInput as exc:
            raise _hostile_issue("experiment", exc) from None
        return dict(source)
    if isinstance(source, Path) or ("\n" not in source and len(source) < 4096 and Path(source).suffix):
        path = Path(source)
        text = read_named_file(
            path,
            field="experiment",
            what="experiment file",
            source=str(path),
            fix="pass the path of an existing .yaml/.json/.toon experiment",
        )
        data = loads(text, fmt or detect_format("", path.name), source=str(path))
    else:
        data = loads(source, fmt)
    if not isinstance(data, dict):
        raise ExperimentError.one(
            field="experiment",
            message=f"expected a mapping at the top, got {type(data).__name__}",
            fix="an experiment is an object with at least `title` and `method`",
        )
    return data


def dumps(data: Any, fmt: Format = "json", *, indent: int = 2) -> str:
    plain = json.loads(json.dumps(data, default=str))
    if fmt == "json":
        return json.dumps(plain, indent=indent, ensure_ascii=False)
    if fmt == "yaml":
        return yaml.safe_dump(plain, sort_keys=False, allow_unicode=True)
    import toon_format

    return toon_format.encode(plain)


def _loc(loc: tuple[Any, ...]) -> str:
    return dotted_path(loc, "(top level)")


def _clean_loc(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    # pydantic adds union-branch names ("Activity", "python", ...) to locations; they confuse readers
    noise = {
        "activity",
        "Activity",
        "ActivityRef",
        "python",
        "process",
        "http",
        "driver",
        "function-after[_refs_resolve()]",
    }
    return tuple(p for p in loc if not (isinstance(p, str) and (p in noise or p.startswith("function-"))))


def issues_from_pydantic(exc: ValidationError, model: type[BaseModel] | None = None) -> list[ValidationIssue]:
    issues: list[ValidationIssue] = []
    seen: set[tuple[str, str]] = set()
    for err in exc.errors():
        loc = _clean_loc(tuple(err["loc"]))
        kind = err["type"]
        if kind == "extra_forbidden":
            key = loc[-1] if loc else "?"
            field = _loc(loc)
            msg = f"unknown key {key!r}"
            fix = f"remove {key!r} or check its spelling (see `faultplane schema`)"
        elif kind == "missing":
            field = _loc(loc)
            msg = "required key is missing"
            fix = f"add `{loc[-1]}`" if loc else "add the missing key"
        elif kind == "union_tag_invalid" or kind == "union_tag_not_found":
            field = _loc(loc) + ".type"
            msg = err["msg"]
            fix = "set provider.type to one of: python, process, http, driver"
        else:
            field = _loc(loc)
            msg = err["msg"].removeprefix("Value error, ")
            fix = _fix_for(kind, loc)
        if (field, msg) in seen:
            continue
        seen.add((field, msg))
        issues.append(ValidationIssue(field=field, message=msg, fix=fix))
    return issues


def _fix_for(kind: str, loc: tuple[Any, ...]) -> str:
    name = str(loc[-1]) if loc else "value"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return f"give `{name}` a value of the expected type"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return f"choose a `{name}` within the allowed range"
    if kind == "literal_error":
        return f"use one of the values listed for `{name}`"
    return f"correct `{name}`"
