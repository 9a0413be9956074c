"""Functions the compatibility corpus calls through the python provider, under `chaos run` and Faultplane alike.

Plain Python only (no Faultplane import): Chaos Toolkit imports this module in its own process."""

from __future__ import annotations

import json
import os
import time
from typing import Any


def value(v: Any) -> Any:
    return v


def fail(message: str = "boom") -> None:
    raise RuntimeError(message)


def record(path: str, line: str = "ran") -> str:
    """Append a line: lets the test see that an activity ran, and how often."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
    return line


def count(path: str) -> int:
    try:
        with open(path, encoding="utf-8") as fh:
            return len(fh.read().splitlines())
    except FileNotFoundError:
        return 0


def exists(path: str) -> bool:
    return os.path.exists(path)


def remove(path: str) -> bool:
    try:
        os.remove(path)
    except FileNotFoundError:
        return False
    return True


def config_value(key: str, configuration: dict[str, Any] | None = None) -> Any:
    return (configuration or {}).get(key)


def secret_value(key: str, secrets: dict[str, Any] | None = None) -> Any:
    return (secrets or {}).get(key)


def is_positive(value: Any) -> bool:
    return isinstance(value, int | float) and value > 0


def contains(value: Any, word: str) -> bool:
    return word in json.dumps(value) if not isinstance(value, str) else word in value


def inventory() -> dict[str, Any]:
    return {
        "status": "ok",
        "count": 3,
        "items": [
            {"name": "db", "up": True, "replicas": 3, "tags": ["stateful"]},
            {"name": "api", "up": True, "replicas": 2, "tags": []},
            {"name": "cache", "up": False, "replicas": 1, "tags": ["volatile"]},
        ],
        "meta": {"region": "eu-west-1", "zones": ["a", "b"]},
    }


def inventory_text() -> str:
    return json.dumps(inventory())


def sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def nap_then_touch(seconds: float, path: str) -> str:
    time.sleep(seconds)
    return record(path, "late")


def typed(v: Any) -> str:
    """The type a substituted value arrived as."""
    return type(v).__name__


def add(a: float, b: float) -> float:
    return a + b


def secret_keys(secrets: dict[str, Any] | None = None) -> str:
    """The names in the secrets scope the activity was given, sorted: shows which scope a var file replaced."""
    return ",".join(sorted(secrets or {}))
