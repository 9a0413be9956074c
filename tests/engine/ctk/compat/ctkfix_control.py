"""A Chaos Toolkit python control that records each hook it is called at, for both runners to compare."""

from __future__ import annotations

from typing import Any


def _record(path: str, hook: str, context: Any, extra: dict[str, Any] | None = None) -> None:
    name = context.get("name") or context.get("title") if isinstance(context, dict) else None
    label = (extra or {}).get("label", "")  # which of several recorders wrote the line
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(f"{label}{hook}:{name}\n")


def before_experiment_control(context: Any, path: str, **kwargs: Any) -> None:
    _record(path, "experiment-before", context, kwargs)


def after_experiment_control(context: Any, state: Any, path: str, **kwargs: Any) -> None:
    _record(path, "experiment-after", context, kwargs)


def before_hypothesis_control(context: Any, path: str, **kwargs: Any) -> None:
    _record(path, "hypothesis-before", context, kwargs)


def after_hypothesis_control(context: Any, state: Any, path: str, **kwargs: Any) -> None:
    _record(path, "hypothesis-after", context, kwargs)


def before_method_control(context: Any, path: str, **kwargs: Any) -> None:
    _record(path, "method-before", context, kwargs)


def after_method_control(context: Any, state: Any, path: str, **kwargs: Any) -> None:
    _record(path, "method-after", context, kwargs)


def before_rollback_control(context: Any, path: str, **kwargs: Any) -> None:
    _record(path, "rollback-before", context, kwargs)


def after_rollback_control(context: Any, state: Any, path: str, **kwargs: Any) -> None:
    _record(path, "rollback-after", context, kwargs)


def before_activity_control(context: Any, path: str, **kwargs: Any) -> None:
    _record(path, "activity-before", context, kwargs)


def after_activity_control(
    context: Any, state: Any, path: str, configuration: Any = None, **kwargs: Any
) -> None:
    _record(path, f"activity-after[{state.get('status')}]", context, kwargs)
