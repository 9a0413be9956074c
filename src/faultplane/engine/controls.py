"""Chaos Toolkit controls: python modules whose `before_<level>_control` / `after_<level>_control` functions
run around the experiment, the hypothesis, the method, the rollbacks and each activity.

Which controls apply at a level, the arguments they receive (their own `arguments` with `${}` substituted,
plus `configuration`, `secrets`, `state`, `experiment`, `extensions` when their signature asks) and the rule
that a failing control never fails the run follow chaoslib's `control` package. A control whose module cannot
be imported is a warning (at validate and in the journal), as in Chaos Toolkit; the run goes on."""

from __future__ import annotations

import copy
import importlib
import inspect
from collections.abc import Callable
from typing import Any

from faultplane.core.config import substitute_like_ctk

__all__ = ["Controls", "unloadable_controls"]

Level = str  # experiment | hypothesis | method | rollback | activity


def _module(control: dict[str, Any]) -> Any | None:
    provider = control.get("provider") or {}
    if provider.get("type", "python") != "python" or not provider.get("module"):
        return None
    try:
        return importlib.import_module(provider["module"])
    except ImportError:
        return None


def all_controls(experiment: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every control declared in the document, with where it is declared."""
    found = [("controls", c) for c in experiment.get("controls") or []]
    hypo = experiment.get("steady-state-hypothesis") or {}
    found += [("steady-state-hypothesis.controls", c) for c in hypo.get("controls") or []]
    for section in ("method", "rollbacks"):
        for i, a in enumerate(experiment.get(section) or []):
            found += [(f"{section}[{i}].controls", c) for c in (a or {}).get("controls") or []]
    for i, a in enumerate(hypo.get("probes") or []):
        found += [
            (f"steady-state-hypothesis.probes[{i}].controls", c) for c in (a or {}).get("controls") or []
        ]
    return [(w, c) for w, c in found if isinstance(c, dict)]


def unloadable_controls(experiment: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, message) for each python control whose module cannot be imported."""
    out = []
    for where, c in all_controls(experiment):
        if "ref" in c:
            continue
        module = (c.get("provider") or {}).get("module")
        if module and _module(c) is None:
            out.append(
                (
                    where,
                    f"control {c.get('name')!r}: python module {module!r} cannot be imported; "
                    "the run goes on without it (as in Chaos Toolkit)",
                )
            )
    return out


class Controls:
    """The controls of one run."""

    def __init__(
        self,
        experiment: dict[str, Any],
        configuration: dict[str, Any],
        secrets: dict[str, Any],
        on_error: Callable[[str], None],
    ) -> None:
        self.experiment = experiment
        self.configuration = configuration
        self.secrets = secrets
        self.on_error = on_error
        self.enabled = bool(all_controls(experiment))

    def _for(self, level: Level, context: dict[str, Any]) -> list[dict[str, Any]]:
        """chaoslib's `get_context_controls`: the context's own controls, with the experiment's automatic
        ones before them; the method and rollback levels take the experiment's automatic ones."""
        top = self.experiment.get("controls") or []
        controls = list(context.get("controls") or [])
        automatic = [copy.deepcopy(c) for c in top if c.get("automatic", True)]
        if not top:
            return controls
        if not controls or level in ("method", "rollback"):
            return automatic
        for c in controls[:]:
            if "ref" in c:
                controls += [copy.deepcopy(t) for t in top if t.get("name") == c["ref"]][:1]
                continue
            for t in reversed(top):
                if c.get("name") != t.get("name") and level != "experiment" and t.get("automatic", True):
                    controls.insert(0, copy.deepcopy(t))
        return [c for c in controls if "ref" not in c]

    def _loaded(self) -> list[tuple[dict[str, Any], Any]]:
        seen: set[str] = set()
        out = []
        for _, control in all_controls(self.experiment):
            name = str(control.get("name"))
            if "ref" in control or name in seen:
                continue
            seen.add(name)
            module = _module(control)
            if module is not None:
                out.append((control, module))
        return out

    def configure(self) -> None:
        """chaoslib's `initialize_controls`: each control's `configure_control`, once, before the run. Its
        arguments have `${}` resolved, as everywhere in a planned experiment (Chaos Toolkit passes them
        unresolved here, which no control can have relied on usefully)."""
        if not self.enabled:
            return
        for control, module in self._loaded():
            func = getattr(module, "configure_control", None)
            if func is None:
                continue
            arguments = copy.deepcopy((control.get("provider") or {}).get("arguments") or {})
            try:
                params = inspect.signature(func).parameters
            except (TypeError, ValueError):
                params = {}  # type: ignore[assignment]
            extra = {
                "experiment": self.experiment,
                "secrets": self.secrets,
                "configuration": self.configuration,
                "settings": None,
                "event_registry": None,
            }
            arguments.update({k: v for k, v in extra.items() if k in params})
            try:
                func(**arguments)
            except Exception as exc:  # as chaoslib: logged, the run goes on
                self.on_error(f"configure_control of {control.get('name')!r}: {type(exc).__name__}: {exc}")

    def cleanup(self) -> None:
        if not self.enabled:
            return
        for control, module in self._loaded():
            func = getattr(module, "cleanup_control", None)
            if func is None:
                continue
            try:
                func()
            except Exception as exc:
                self.on_error(f"cleanup_control of {control.get('name')!r}: {type(exc).__name__}: {exc}")

    def apply(self, level: Level, scope: str, context: dict[str, Any], state: Any = None) -> None:
        if not self.enabled:
            return
        for control in self._for(level, context):
            if control.get("scope") and control["scope"] != scope:
                continue
            module = _module(control)
            func = getattr(module, f"{scope}_{level}_control", None) if module else None
            if func is None:
                continue
            provider = control.get("provider") or {}
            arguments = copy.deepcopy(provider.get("arguments") or {})
            arguments = substitute_like_ctk(arguments, self.configuration, self.secrets)
            try:
                params = inspect.signature(func).parameters
            except (TypeError, ValueError):
                params = {}  # type: ignore[assignment]
            extra = {
                "secrets": self.secrets,
                "configuration": self.configuration,
                "state": state,
                "experiment": self.experiment,
                "extensions": self.experiment.get("extensions"),
                "settings": None,
            }
            arguments.update({k: v for k, v in extra.items() if k in params})
            try:
                func(context=context, **arguments)
            except Exception as exc:  # a control never fails the run (chaoslib logs and goes on)
                self.on_error(
                    f"{scope}-control {control.get('name')!r} at {level}: {type(exc).__name__}: {exc}"
                )
