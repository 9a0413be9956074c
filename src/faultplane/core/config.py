"""Configuration and secrets: resolving values, `${var}` substitution, and masking secrets in output."""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from faultplane.core.formats import ExperimentError, ValidationIssue, loads, read_named_file

__all__ = [
    "MASK",
    "Resolved",
    "Variables",
    "convert_to_type",
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


def convert_to_type(kind: str | None, value: Any) -> Any:
    """chaoslib's `convert_to_type`, used for `env_var_type` and `--var name:type=value` alike: `bool` is
    false only for false/0/no (any other text is true), `json` leaves an empty value as it is. Raises
    ValueError for a value that does not convert or an unknown type."""
    if kind is None or kind in ("str", "string"):
        return value
    if kind in ("int", "integer"):
        return int(value)
    if kind in ("float", "number"):
        return float(value)
    if kind == "bytes":
        return value.encode("utf-8") if isinstance(value, str) else value
    if kind == "bool":
        if isinstance(value, bool):
            return value
        return str(value).lower() not in ("false", "0", "no")
    if kind == "json":
        if value in ("", None) or not isinstance(value, str | bytes):
            return value
        return json.loads(value)
    raise ValueError(f"unknown type {kind!r}")


_TYPES = ("str", "string", "int", "integer", "float", "number", "bytes", "bool", "json")


class Variables(dict[str, Any]):
    """Values given from outside the experiment: configuration values by name (`--var`, var files), and
    the `secrets:` sections of var files by scope (`secrets`), which replace the experiment's scope of the
    same name whole, as `chaos run` does."""

    def __init__(self, *args: Any, secrets: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.secrets: dict[str, Any] = dict(secrets or {})

    def merge(self, other: Mapping[str, Any]) -> None:
        """A later var file over an earlier one: names and secret scopes override one by one."""
        self.update(other)
        self.secrets.update(getattr(other, "secrets", {}) or {})


class Resolved:
    """An experiment document with configuration/secrets resolved and `${var}` references substituted."""

    def __init__(
        self,
        document: dict[str, Any],
        configuration: dict[str, Any],
        secrets: dict[str, Any],
        secret_values: list[str],
        dynamic: list[str] | None = None,
    ) -> None:
        self.document = document
        self.configuration = configuration
        self.secrets = secrets
        self.secret_values = secret_values
        # configuration keys whose value a probe gives when the run starts (chaoslib's dynamic configuration)
        self.dynamic = dynamic or []


def parse_var(text: str) -> tuple[str, Any]:
    """`name=value` from `--var`; the value is read as JSON when it parses (`x=1.5` is a number), else kept
    as a string. Chaos Toolkit's `name:type=value` (str, int, float, bytes, bool, json) converts explicitly,
    as chaoslib's `convert_to_type` does."""
    head, sep, raw_value = text.partition("=")
    if sep and ":" in head:
        name, _, kind = head.rpartition(":")
        if kind in _TYPES:
            try:
                return name.strip(), convert_to_type(kind, raw_value)
            except ValueError:
                raise ExperimentError.one(
                    field=f"--var {text}",
                    message=f"{raw_value!r} is not a valid {kind}",
                    fix=f"give {name.strip()} a {kind} value",
                ) from None
    if "=" not in text:
        raise ExperimentError.one(
            field=f"--var {text}", message="expected name=value", fix="write it as --var name=value"
        )
    name, _, raw = text.partition("=")
    try:
        return name.strip(), json.loads(raw)
    except json.JSONDecodeError:
        return name.strip(), raw


def load_var_file(path: str | Path) -> Variables:
    """A var file as `chaos run --var-file` reads it: `.env` lines, or JSON/YAML with `configuration:` and
    `secrets:` sections (secrets by scope), or a flat mapping of configuration values."""
    p = Path(path)
    # size and encoding before parsing: a .env file is read line by line and gets no other check
    text = read_named_file(
        p,
        field="--var-file",
        what="--var-file",
        source=f"--var-file {p}",
        fix="pass an existing, readable UTF-8 .json, .yaml or .env file",
    )
    if p.suffix == ".env":
        out = Variables()
        for line in text.removeprefix("\ufeff").splitlines():  # a BOM would stick to the first name
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                k, _, v = line.partition("=")
                out[k.strip()] = v.strip().strip("'\"")
        return out
    # the experiment loader's parser: syntax errors come back naming the file, line and column, with the fix
    data = loads(text, "json" if p.suffix == ".json" else "yaml", source=f"--var-file {p}")
    if not isinstance(data, dict):
        raise ExperimentError.one(
            field=f"--var-file {p}",
            message=f"expected a mapping of names to values, got {type(data).__name__}",
            fix="write `name: value` pairs",
        )
    # Chaos Toolkit's var files hold `configuration:` and `secrets:` sections (any other key is ignored, as
    # chaoslib's `merge_vars` ignores it); a plain mapping of names to values is configuration
    if "configuration" in data or "secrets" in data:
        sections = []
        for section in ("configuration", "secrets"):
            value = data.get(section) or {}
            if not isinstance(value, dict):
                raise ExperimentError.one(
                    field=f"--var-file {p}: {section}",
                    message=f"expected a mapping, got {type(value).__name__}",
                    fix="write `name: value` pairs"
                    + (" under each secrets scope" if section == "secrets" else ""),
                )
            sections.append(value)
        return Variables(sections[0], secrets=sections[1])
    return Variables(data)


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
        if key in os.environ or "default" in value:
            # chaoslib converts the default too: `default: "8080"` with `env_var_type: int` is 8080
            raw = os.environ[key] if key in os.environ else value["default"]
            env_type = value.get("env_var_type")
            try:
                return convert_to_type(env_type, raw)
            except (ValueError, TypeError, AttributeError):
                issues.append(
                    ValidationIssue(
                        field=f"{where}.env_var_type",
                        message=f"{'$' + key if key in os.environ else 'default'}={raw!r} "
                        f"is not a valid {env_type}"
                        if env_type in _TYPES
                        else f"unknown type {env_type!r}",
                        fix=f"set {key} to a {env_type}"
                        if env_type in _TYPES
                        else f"use one of {', '.join(_TYPES)}",
                    )
                )
                return None
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
    deferred: Collection[str] = (),
) -> Any:
    if isinstance(node, str):
        if used is not None and "${" in node:
            used.update(m.group(1) for m in _VAR.finditer(node))
        whole = _VAR.fullmatch(node)
        if whole:  # a lone reference keeps the value's type (numbers stay numbers)
            name = whole.group(1)
            if name in values:
                return values[name]
            if not keep and name not in deferred:
                issues.append(_unknown(name, where))
            return node

        def repl(m: re.Match[str]) -> str:
            if m.group(1) in values:
                return str(values[m.group(1)])
            if not keep and m.group(1) not in deferred:
                issues.append(_unknown(m.group(1), where))
            return m.group(0)

        return _VAR.sub(repl, node)
    if isinstance(node, list):
        return [
            _substitute(v, values, f"{where}[{i}]", issues, keep, used, deferred) for i, v in enumerate(node)
        ]
    if isinstance(node, dict):
        return {
            k: _substitute(v, values, f"{where}.{k}" if where else str(k), issues, keep, used, deferred)
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
    var_secrets: Mapping[str, Any] = getattr(variables, "secrets", None) or {}
    variables = dict(variables or {})
    issues: list[ValidationIssue] = []
    configuration: dict[str, Any] = {}
    raw_config = document.get("configuration") or {}
    if not isinstance(raw_config, dict):
        raw_config = {}
    dynamic: list[str] = []
    for key, value in raw_config.items():
        if key not in variables and isinstance(value, dict) and value.get("type") == "probe":
            # chaoslib's dynamic configuration: the probe runs when the run starts (engine/dynamic_config.py);
            # until then `${key}` stays as written
            dynamic.append(key)
            continue
        # a var file may give the whole definition (`{type: env, ...}`), which is resolved like the
        # experiment's own (chaoslib's load_configuration swaps it in)
        configuration[key] = _resolve_value(variables.get(key, value), f"configuration.{key}", issues)
    for key, value in variables.items():
        configuration.setdefault(key, value)
    secrets: dict[str, Any] = {}
    secret_values: list[str] = []
    raw_secrets = document.get("secrets") or {}
    if isinstance(raw_secrets, dict):
        for scope, entries in raw_secrets.items():
            if not isinstance(entries, dict):
                continue
            given = var_secrets.get(scope)
            if isinstance(given, dict):
                # chaoslib's load_secrets: a var file's scope replaces the experiment's scope of that name
                secrets[scope] = dict(given)
                secret_values.extend(str(v) for v in given.values() if v not in (None, ""))
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
            else _substitute(node, values, key, issues, keep_unknown, used, dynamic)
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
    return Resolved(out, configuration, secrets, secret_values, dynamic)


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
