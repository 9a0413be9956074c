"""A Chaos Toolkit python control that records each hook it is called at, for both runners to compare."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _record(path: str, hook: str, context: Any, extra: dict[str, Any] | None = None) -> None:
    name = context.get("name") or context.get("title") if isinstance(context, dict) else None
    label = (extra or {}).get("label", "")  # which of several recorders wrote the line
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(f"{label}{hook}:{name}\n")


def _before(level: str) -> Callable[..., None]:
    def control(context: Any, path: str, **kwargs: Any) -> None:
        _record(path, f"{level}-before", context, kwargs)

    return control


def _after(level: str) -> Callable[..., None]:
    # `state` named, as a real after-control's is: both runners pass what the signature asks for
    def control(context: Any, state: Any, path: str, **kwargs: Any) -> None:
        _record(path, f"{level}-after", context, kwargs)

    return control


# the runners look each hook up by its name in this module
before_experiment_control = _before("experiment")
after_experiment_control = _after("experiment")
before_hypothesis_control = _before("hypothesis")
after_hypothesis_control = _after("hypothesis")
before_method_control = _before("method")
after_method_control = _after("method")
before_rollback_control = _before("rollback")
after_rollback_control = _after("rollback")
before_activity_control = _before("activity")


def after_activity_control(
    context: Any, state: Any, path: str, configuration: Any = None, **kwargs: Any
) -> None:
    _record(path, f"activity-after[{state.get('status')}]", context, kwargs)
