"""Chaos Toolkit controls: python modules whose `before_<level>_control` / `after_<level>_control` functions
run around the experiment, the hypothesis, the method, the rollbacks and each activity.

Which controls apply at a level, the arguments they receive (their own `arguments` with `${}` substituted,
plus `configuration`, `secrets`, `state`, `experiment`, `extensions` when their signature asks) and the rule
that a failing control never fails the run follow chaoslib's `control` package. A control whose module cannot
be imported is a warning (at validate and in the journal), as in Chaos Toolkit; the run goes on.

Global controls (chaoslib's `load_global_controls`): the `controls:` block of Chaos Toolkit's settings file
(`~/.chaostoolkit/settings.yaml`, or `--settings`) and `--control-file` files, each a mapping of names to
controls. They run at every level before the context's own controls, as `get_context_controls` puts them;
their `configure_control` gets the settings, and one that raises there is dropped for the run."""

from __future__ import annotations

import copy
import difflib
import importlib
import inspect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultplane.core.config import substitute_like_ctk
from faultplane.core.formats import ExperimentError, ValidationIssue

__all__ = ["CTK_SETTINGS", "Controls", "GlobalControls", "load_global_controls", "unloadable_controls"]

# where `chaos` reads its settings unless told otherwise (`chaos --settings PATH`)
CTK_SETTINGS = Path(os.path.expanduser("~/.chaostoolkit/settings.yaml"))


@dataclass
class GlobalControls:
    """Controls that apply to every experiment of a run, from Chaos Toolkit's settings and control files."""

    controls: list[dict[str, Any]] = field(default_factory=list)
    settings: dict[str, Any] | None = None
    # controls that cannot be loaded, a default settings file that cannot be read: the run goes on
    warnings: list[ValidationIssue] = field(default_factory=list)


def _read_mapping(
    path: Path, what: str, *, required: bool
) -> tuple[dict[str, Any] | None, ValidationIssue | None]:
    """The file's mapping; a problem is an issue (the caller decides whether it refuses or warns)."""
    from faultplane.core.formats import loads

    def issue(message: str, fix: str) -> tuple[None, ValidationIssue]:
        return None, ValidationIssue(field=f"{what} {path}", message=message, fix=fix)

    if not path.is_file():
        if not required:
            return None, None
        return issue("file not found", f"pass an existing {what.lstrip('-')} file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return issue(f"cannot read the file: {exc}", "pass a readable UTF-8 YAML or JSON file")
    if not text.strip():
        return {}, None
    try:
        data = loads(text, "json" if path.suffix == ".json" else "yaml", source=f"{what} {path}")
    except ExperimentError as exc:
        return None, exc.issues[0]
    if data is None:
        return {}, None
    if not isinstance(data, dict):
        return issue(f"expected a mapping, got {type(data).__name__}", "write `name: {provider: ...}` pairs")
    return data, None


def load_global_controls(
    settings_path: Path | None = None,
    control_files: Sequence[Path] = (),
    *,
    default_settings: bool = False,
) -> GlobalControls:
    """chaoslib's `load_global_controls`: each control named by its key, settings' first, then each control
    file's in order. A settings file or control file given explicitly that cannot be read is an error; the
    default settings file (`default_settings`: `~/.chaostoolkit/settings.yaml` when no path is given) is
    read if it is there, and a problem with it is a warning, as `chaos` logs it and goes on."""
    out = GlobalControls()
    sources: list[tuple[str, dict[str, Any]]] = []
    path = settings_path if settings_path is not None else (CTK_SETTINGS if default_settings else None)
    if path is not None:
        settings, problem = _read_mapping(path, "--settings", required=settings_path is not None)
        if problem is not None:
            if settings_path is not None:
                raise ExperimentError([problem])
            out.warnings.append(problem)
        elif settings is not None:
            out.settings = settings
            block = settings.get("controls") or {}
            if not isinstance(block, dict):
                raise ExperimentError.one(
                    field=f"--settings {path}: controls",
                    message=f"expected a mapping of names to controls, got {type(block).__name__}",
                    fix="write `controls: {NAME: {provider: {type: python, module: ...}}}`",
                )
            sources.append((f"--settings {path}: controls", block))
    for control_file in control_files:
        data, problem = _read_mapping(Path(control_file), "--control-file", required=True)
        if problem is not None:
            raise ExperimentError([problem])
        sources.append((f"--control-file {control_file}", data or {}))
    for where, block in sources:
        for name, control in block.items():
            if not isinstance(control, dict) or not isinstance(control.get("provider"), dict):
                raise ExperimentError.one(
                    field=f"{where}.{name}",
                    message="a control needs a `provider`",
                    fix="write `provider: {type: python, module: MODULE}`",
                )
            control = {**control, "name": name}
            if control["provider"].get("type", "python") == "python" and _module(control) is None:
                out.warnings.append(
                    ValidationIssue(
                        field=f"{where}.{name}",
                        message=f"control {name!r}: python module {control['provider'].get('module')!r} "
                        "cannot be imported; the run goes on without it (as in Chaos Toolkit)",
                        fix="install the control's package",
                    )
                )
                continue
            out.controls.append(control)
    return out


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
    """Every control declared in the document, with where it is declared (`method[2].controls[0]`)."""
    hypo = experiment.get("steady-state-hypothesis") or {}
    if not isinstance(hypo, dict):
        hypo = {}
    owners: list[tuple[str, Any]] = [("", experiment), ("steady-state-hypothesis.", hypo)]
    for section in ("method", "rollbacks"):
        owners += [(f"{section}[{i}].", a) for i, a in enumerate(experiment.get(section) or [])]
    owners += [(f"steady-state-hypothesis.probes[{i}].", a) for i, a in enumerate(hypo.get("probes") or [])]
    found = []
    for prefix, owner in owners:
        controls = owner.get("controls") if isinstance(owner, dict) else None
        for i, c in enumerate(controls if isinstance(controls, list) else []):
            found.append((f"{prefix}controls[{i}]", c))
    return [(w, c) for w, c in found if isinstance(c, dict)]


def control_issues(experiment: dict[str, Any], compat: bool = False) -> list[ValidationIssue]:
    """chaoslib's `validate_controls`, which makes `chaos run` refuse the experiment: a control needs a
    `name` and a `provider`, its `scope` is before or after, and a `ref` names a declared control. chaoslib
    also wants a `name` on a `{ref: ...}` control, which refuses every reference written as documented; only
    `compat` follows it (docs/chaostoolkit.md: control-ref-without-name)."""
    declared = [c.get("name") for _, c in all_controls(experiment) if "ref" not in c and c.get("name")]
    issues = []
    for where, c in all_controls(experiment):
        if "ref" in c:
            if c["ref"] not in declared:
                meant = difflib.get_close_matches(str(c["ref"]), [str(d) for d in declared], n=1, cutoff=0.6)
                issues.append(
                    ValidationIssue(
                        field=f"{where}.ref",
                        message=f"no control named {c['ref']!r} is declared",
                        fix=f"did you mean {meant[0]!r}?"
                        if meant
                        else f"name a declared control: {', '.join(map(str, declared)) or '(none declared)'}",
                    )
                )
            elif compat and not c.get("name"):
                issues.append(
                    ValidationIssue(
                        field=f"{where}.name",
                        message="Chaos Toolkit requires a name on a control reference too",
                        fix=f"add `name: {c['ref']}`, or run without --ctk-compat",
                    )
                )
            continue
        if not c.get("name"):
            issues.append(
                ValidationIssue(field=f"{where}.name", message="a control needs a name", fix="add `name`")
            )
        if not isinstance(c.get("provider"), dict):
            issues.append(
                ValidationIssue(
                    field=f"{where}.provider",
                    message=f"control {c.get('name')!r} has no provider",
                    fix="add `provider: {type: python, module: MODULE}`",
                )
            )
        if c.get("scope") not in (None, "before", "after"):
            issues.append(
                ValidationIssue(
                    field=f"{where}.scope",
                    message=f"scope {c['scope']!r} is neither 'before' nor 'after'",
                    fix="use before or after, or leave scope out (both)",
                )
            )
    return issues


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


def _declared(func: Callable[..., Any], extra: dict[str, Any]) -> dict[str, Any]:
    """The values of `extra` whose names `func` declares: as chaoslib, a control gets only what it asks for."""
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return {}
    return {k: v for k, v in extra.items() if k in params}


class Controls:
    """The controls of one run."""

    def __init__(
        self,
        experiment: dict[str, Any],
        configuration: dict[str, Any],
        secrets: dict[str, Any],
        on_error: Callable[[str], None],
        global_controls: GlobalControls | None = None,
    ) -> None:
        self.experiment = experiment
        self.configuration = configuration
        self.secrets = secrets
        self.on_error = on_error
        self.globals = list(global_controls.controls) if global_controls else []
        self.settings = global_controls.settings if global_controls else None
        self.enabled = bool(self.globals or all_controls(experiment))

    def _for(self, level: Level, context: dict[str, Any]) -> list[dict[str, Any]]:
        """chaoslib's `get_context_controls`: the context's own controls, with the experiment's automatic
        ones before them; the method and rollback levels take the experiment's automatic ones."""
        top = self.experiment.get("controls") or []
        controls = [*self.globals, *(context.get("controls") or [])]
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
        """chaoslib's `initialize_global_controls` (a global control that raises here is dropped for the
        run), then `initialize_controls`: each control's `configure_control`, once, before the run. Its
        arguments have `${}` resolved, as everywhere in a planned experiment (Chaos Toolkit passes them
        unresolved here, which no control can have relied on usefully)."""
        if not self.enabled:
            return
        for control in self.globals[:]:
            if not self._configure(control, _module(control), settings=self.settings):
                self.globals.remove(control)
        for control, module in self._loaded():
            self._configure(control, module)

    def _configure(self, control: dict[str, Any], module: Any, settings: Any = None) -> bool:
        func = getattr(module, "configure_control", None) if module else None
        if func is None:
            return True
        arguments = copy.deepcopy((control.get("provider") or {}).get("arguments") or {})
        extra = {
            "experiment": self.experiment,
            "secrets": self.secrets,
            "configuration": self.configuration,
            "settings": settings,
            "event_registry": None,
        }
        arguments.update(_declared(func, extra))
        try:
            func(**arguments)
        except Exception as exc:  # as chaoslib: logged, the run goes on
            self.on_error(f"configure_control of {control.get('name')!r}: {type(exc).__name__}: {exc}")
            return False
        return True

    def cleanup(self) -> None:
        if not self.enabled:
            return
        for control, module in [*((c, _module(c)) for c in self.globals), *self._loaded()]:
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
            extra = {
                "secrets": self.secrets,
                "configuration": self.configuration,
                "state": state,
                "experiment": self.experiment,
                "extensions": self.experiment.get("extensions"),
                "settings": self.settings,
            }
            arguments.update(_declared(func, extra))
            try:
                func(context=context, **arguments)
            except Exception as exc:  # a control never fails the run (chaoslib logs and goes on)
                self.on_error(
                    f"{scope}-control {control.get('name')!r} at {level}: {type(exc).__name__}: {exc}"
                )
