"""A control that records what Chaos Toolkit's control interface hands it: configuration, secrets, state."""

from __future__ import annotations

from typing import Any


def _line(path: str, text: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text + "\n")


def before_experiment_control(
    context: Any, path: str, configuration: Any = None, secrets: Any = None
) -> None:
    token = "yes" if (secrets or {}).get("vault", {}).get("token") else "no"
    _line(path, f"before_experiment region={(configuration or {}).get('region')} token={token}")


def after_activity_control(context: Any, state: Any, path: str) -> None:
    _line(path, f"after_activity {context.get('name')} {state.get('status')}")


def after_experiment_control(context: Any, state: Any, path: str) -> None:
    _line(path, f"after_experiment {state.get('status')}")


CONFIGURED: dict[str, Any] = {}


def configure_control(path: str, configuration: Any = None) -> None:
    CONFIGURED["path"] = path
    CONFIGURED["region"] = (configuration or {}).get("region")


def cleanup_control() -> None:
    CONFIGURED["cleaned"] = True
