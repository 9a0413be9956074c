"""A global control that records its configuration (with the settings it was handed) and one hook."""

from __future__ import annotations

from typing import Any


def _line(path: str, text: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text + "\n")


def configure_control(path: str, fail: bool = False, settings: Any = None) -> None:
    _line(path, f"configure settings={sorted(settings or {})}")
    if fail:
        raise RuntimeError("cannot configure")


def before_experiment_control(context: Any, path: str, **kwargs: Any) -> None:
    _line(path, "before_experiment")
