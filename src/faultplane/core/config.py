"""Configuration and secrets: resolving values, `${var}` substitution, and masking secrets in output."""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from faultplane.core.formats import ExperimentError, ValidationIssue, loads

__all__ = [
    "MASK",
    "Resolved",
    "load_var_file",
    "mask_secrets",
    "parse_var",
    "resolve",
    "substitute_like_ctk",
]

MASK = "***"
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_.-]*)\}")
# Sections whose strings are definitions, not uses: they are resolved, never substituted into.
_NOT_SUBSTITUTED = ("configuration", "secrets")
# Sections Chaos Toolkit never substitutes into: prose and metadata, where `${` is just text.
_PROSE = ("description", "tags", "contributions", "extensions")
_ENV_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "int": int,
    "float": float,
    "json": json.loads,
    "bool": lambda s: s.lower() in ("1", "true", "yes"),
}


class Resolved:
    """An experiment document with configuration/secrets resolved and `${var}` references substituted."""

    def __init__(
        self,
        document: dict[str, Any],
        configuration: dict[str, Any],
        secrets: dict[str, Any],
        secret_values: list[str],
    ) -> None:
        self.document = document
        self.configuration = configuration
        self.secrets = secrets
        self.secret_values = secret_values


_VAR_TYPES: dict[str, Callable[[str], Any]] = {
    "str": str,
    "int": int,
    "float": float,
    "bytes": str.encode,
    "bool": lambda s: s.lower() in ("1", "true", "yes"),
    "json": json.loads,
}


def parse_var(text: str) -> tuple[str, Any]:
    """`name=value` from `--var`; the value is read as JSON when it parses (`x=1.5` is a number), else kept
    as a string. Chaos Toolkit's `name:type=value` (str, int, float, bytes, bool, json) converts explicitly."""
    head, sep, raw_value = text.partition("=")
    if sep and ":" in head:
        name, _, kind = head.rpartition(":")
        if kind in _VAR_TYPES:
            try:
                return name.strip(), _VAR_TYPES[kind](raw_value)
            except ValueError:
                raise ExperimentError(
                    [
                        ValidationIssue(
                            field=f"--var {text}",
                            message=f"{raw_value!r} is not a valid {kind}",
                            fix=f"give {name.strip()} a {kind} value",
                        )
                    ]
                ) from None
    if "=" not in text:
        raise ExperimentError(
            [
                ValidationIssue(
                    field=f"--var {text}", message="expected name=value", fix="write it as --var name=value"
                )
            ]
        )
    name, _, raw = text.partition("=")
    try:
        return name.strip(), json.loads(raw)
    except json.JSONDecodeError:
        return name.strip(), raw


def load_var_file(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ExperimentError(
            [
                ValidationIssue(
                    field="--var-file",
                    message=f"file not found: {p}",
                    fix="pass an existing .json, .yaml or .env file",
                )
            ]
        )
    from faultplane.core.hostile import HostileInput, read_text_limited

    try:
        # size and encoding before parsing: a .env file is read line by line and gets no other check
        text = read_text_limited(p, "--var-file")
    except HostileInput as exc:
        message, _, fix = str(exc).partition("; ")
        raise ExperimentError(
            [ValidationIssue(field=f"--var-file {p}", message=message, fix=fix or "pass a smaller file")]
        ) from None
    except OSError as exc:
        raise ExperimentError(
            [
                ValidationIssue(
                    field=f"--var-file {p}",
                    message=f"cannot read the file: {exc.strerror or exc}",
                    fix="pass a readable UTF-8 .json, .yaml or .env file",
                )
            ]
        ) from None
    if p.suffix == ".env":
        out: dict[str, Any] = {}
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                k, _, v = line.partition("=")
                out[k.strip()] = v.strip().strip("'\"")
        return out
    # the experiment loader's parser: syntax errors come back naming the file, line and column, with the fix
    data = loads(text, "json" if p.suffix == ".json" else "yaml", source=f"--var-file {p}")
    if not isinstance(data, dict):
        raise ExperimentError(
            [
                ValidationIssue(
                    field=f"--var-file {p}",
                    message=f"expected a mapping of names to values, got {type(data).__name__}",
                    fix="write `name: value` pairs",
                )
            ]
        )
    # Chaos Toolkit var files may nest values under `configuration`/`secrets`
    if set(data) <= {"configuration", "secrets"}:
        return {**data.get("secrets", {}), **data.get("configuration", {})}
    return data


def _resolve_value(value: Any, where: str, issues: list[ValidationIssue]) -> Any:
    if isinstance(value, dict) and value.get("type") == "env":
        key = value.get("key")
        if not isinstance(key, str):
            issues.append(
                ValidationIssue(
                    field=where, message="env reference without `key`", fix="write {type: env, key: NAME}"
                )
            )
            return None
        if key in os.environ:
            raw = os.environ[key]
            env_type = value.get("env_var_type")
            if env_type in ("int", "float", "bool", "json"):
                try:
                    return _ENV_CONVERTERS[env_type](raw)
                except ValueError:
                    issues.append(
                        ValidationIssue(
                            field=where,
                            message=f"${key}={raw!r} is not a valid {env_type}",
                            fix=f"set {key} to a {env_type}",
                        )
                    )
            return raw
        if "default" in value:
            return value["default"]
        issues.append(
            ValidationIssue(
                field=where,
                message=f"environment variable {key} is not set",
                fix=f"export {key}=..., pass --var, or add `default:`",
            )
        )
        return None
    return value


def _substitute(
    node: Any,
    values: Mapping[str, Any],
    where: str,
    issues: list[ValidationIssue],
    keep: bool = False,
    used: set[str] | None = None,
) -> Any:
    if isinstance(node, str):
        if used is not None and "${" in node:
            used.update(m.group(1) for m in _VAR.finditer(node))
        whole = _VAR.fullmatch(node)
        if whole:  # a lone reference keeps the value's type (numbers stay numbers)
            name = whole.group(1)
            if name in values:
                return values[name]
            if not keep:
                issues.append(_unknown(name, where))
            return node

        def repl(m: re.Match[str]) -> str:
            if m.group(1) in values:
                return str(values[m.group(1)])
            if not keep:
                issues.append(_unknown(m.group(1), where))
            return m.group(0)

        return _VAR.sub(repl, node)
    if isinstance(node, list):
        return [_substitute(v, values, f"{where}[{i}]", issues, keep, used) for i, v in enumerate(node)]
    if isinstance(node, dict):
        return {
            k: _substitute(v, values, f"{where}.{k}" if where else str(k), issues, keep, used)
            for k, v in node.items()
        }
    return node


def _unknown(name: str, where: str) -> ValidationIssue:
    return ValidationIssue(
        field=where,
        message=f"unknown variable ${{{name}}}",
        fix=f"define `{name}` under configuration, or pass --var {name}=...",
    )


def resolve(
    document: Mapping[str, Any],
    variables: Mapping[str, Any] | None = None,
    *,
    substitute: bool = True,
    keep_unknown: bool = False,
    strict: Collection[str] = (),
) -> Resolved:
    """Resolve configuration (env refs, overrides) and secrets, then substitute `${var}` everywhere else.
    `substitute=False` when the caller knows the document holds no `${`: the walk is skipped.
    `keep_unknown`: an undefined `${name}` stays as written (Chaos Toolkit) instead of being an error.
    `strict`: variable names given one by one (`--var`): one the experiment neither declares nor uses is an
    error, since a misspelt name would otherwise leave the default in place silently."""
    variables = dict(variables or {})
    issues: list[ValidationIssue] = []
    configuration: dict[str, Any] = {}
    raw_config = document.get("configuration") or {}
    if not isinstance(raw_config, dict):
        raw_config = {}
    for key, value in raw_config.items():
        configuration[key] = (
            variables[key] if key in variables else _resolve_value(value, f"configuration.{key}", issues)
        )
    for key, value in variables.items():
        configuration.setdefault(key, value)
    secrets: dict[str, Any] = {}
    secret_values: list[str] = []
    raw_secrets = document.get("secrets") or {}
    if isinstance(raw_secrets, dict):
        for scope, entries in raw_secrets.items():
            if not isinstance(entries, dict):
                continue
            secrets[scope] = {}
            for key, value in entries.items():
                resolved = _resolve_value(value, f"secrets.{scope}.{key}", issues)
                secrets[scope][key] = resolved
                if resolved not in (None, ""):
                    secret_values.append(str(resolved))
    values = dict(configuration)
    for entries in secrets.values():
        values.update(entries)
    out: dict[str, Any] = {}
    used: set[str] = set()
    for key, node in document.items():
        out[key] = (
            node
            if key in _NOT_SUBSTITUTED or key in _PROSE or not substitute
            else _substitute(node, values, key, issues, keep_unknown, used)
        )
    if strict and not keep_unknown:
        secret_keys = {k for entries in secrets.values() for k in entries}
        for name in sorted(set(strict) - set(raw_config) - secret_keys - used):
            near = difflib.get_close_matches(name, [*raw_config, *sorted(used)], n=1, cutoff=0.6)
            issues.append(
                ValidationIssue(
                    field=f"--var {name}",
                    message=f"the experiment neither declares nor uses a variable {name!r}",
                    fix=f"did you mean {near[0]!r}?"
                    if near
                    else "declare it under configuration, or drop it",
                )
            )
    if issues:
        raise ExperimentError(issues)
    return Resolved(out, configuration, secrets, secret_values)


def mask_secrets(data: Any, secret_values: list[str]) -> Any:
    """Replace every secret value (also inside longer strings) with ***; secrets sections lose their values."""
    if not secret_values:
        return data
    ordered = sorted(set(secret_values), key=len, reverse=True)

    def walk(node: Any, key: str | None = None) -> Any:
        if key == "secrets" and isinstance(node, dict):
            return {
                scope: ({k: MASK for k in v} if isinstance(v, dict) else MASK) for scope, v in node.items()
            }
        if isinstance(node, str):
            for s in ordered:
                if s in node:
                    node = node.replace(s, MASK)
            return node
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, dict):
            return {k: walk(v, k) for k, v in node.items()}
        return node

    return walk(data)


def substitute_like_ctk(data: Any, configuration: Mapping[str, Any], secrets: Mapping[str, Any]) -> Any:
    """chaoslib's `substitute`: `${name}` from the configuration, then any secrets scope; a string that is
    one reference takes the value with its type; an unknown name is left as written."""
    values: dict[str, Any] = {}
    for scope in reversed(list(secrets.values())):
        if isinstance(scope, dict):
            values.update(scope)
    values.update(configuration)

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            whole = _VAR.fullmatch(node)
            if whole and whole.group(1) in values:
                return values[whole.group(1)]
            return _VAR.sub(lambda m: str(values[m.group(1)]) if m.group(1) in values else m.group(0), node)
        if isinstance(node, list | tuple):
            return [walk(v) for v in node]
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        return node

    return walk(data)
