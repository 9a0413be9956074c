"""What a run would find out too late, found in phase 0: provider modules, functions and their signatures,
executables, driver actions and their arguments, controls, and the keys Chaos Toolkit requires.

`preflight(plan)` returns (errors, warnings). Errors refuse the run before anything executes, and `validate`
reports the same list, so what validates is what runs. Each problem is reported once, where it is declared
(an activity used again through `ref` is checked once)."""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import shutil
from typing import Any

from pydantic import ValidationError

from faultplane.core.formats import ValidationIssue
from faultplane.core.model import Activity, DriverProvider, HttpProvider, ProcessProvider, PythonProvider

__all__ = ["preflight"]


def _meant(name: str, choices: list[str]) -> str:
    found = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f"did you mean {found[0]!r}?" if found else ""


def _declared(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(field path, activity) for every activity written out in the document, tolerance probes included."""
    out: list[tuple[str, dict[str, Any]]] = []
    hypo = doc.get("steady-state-hypothesis") or {}
    sections = [("steady-state-hypothesis.probes", hypo.get("probes") or [])]
    sections += [(s, doc.get(s) or []) for s in ("method", "rollbacks")]
    for where, items in sections:
        for i, a in enumerate(items):
            if isinstance(a, dict) and "provider" in a:
                out.append((f"{where}[{i}]", a))
                tol = a.get("tolerance")
                if (
                    isinstance(tol, dict)
                    and tol.get("type") == "probe"
                    and isinstance(tol.get("provider"), dict)
                ):
                    out.append((f"{where}[{i}].tolerance", tol))
    return out


_SIGNATURES: dict[Any, inspect.Signature | None] = {}
_BINDS: dict[tuple[Any, frozenset[str]], bool] = {}


def _signature(func: Any) -> inspect.Signature | None:
    """A function's signature, read once per function: a method of 200 probes of one function asks 200 times."""
    try:
        return _SIGNATURES[func]
    except (KeyError, TypeError):  # TypeError: an unhashable callable
        pass
    try:
        sig: inspect.Signature | None = inspect.signature(func)
    except (TypeError, ValueError):
        sig = None
    try:
        if len(_SIGNATURES) < 4096:
            _SIGNATURES[func] = sig
    except TypeError:
        pass
    return sig


def _python(
    where: str, p: PythonProvider, tolerance_probe: bool, compat: bool = False
) -> list[ValidationIssue]:
    try:
        module = importlib.import_module(p.module)
    except Exception as exc:  # ImportError, or the module failing while it imports
        return [
            ValidationIssue(
                field=f"{where}.provider.module",
                message=f"cannot import python module {p.module!r}: {type(exc).__name__}: {exc}",
                fix="install the package that provides it, or correct the module path",
            )
        ]
    func = getattr(module, p.func, None)
    if not callable(func):
        names = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")]
        return [
            ValidationIssue(
                field=f"{where}.provider.func",
                message=f"module {p.module!r} has no function {p.func!r}",
                fix=_meant(p.func, names) or f"name a function of {p.module}",
            )
        ]
    sig = _signature(func)
    if sig is None:
        return []
    args = dict(p.arguments)
    if tolerance_probe and not compat:
        args.setdefault("value", None)  # the probed value is passed in at run time
    for injected in ("configuration", "secrets"):
        if injected in sig.parameters:
            args.setdefault(injected, None)
    # Binding keywords depends on their names only, not their values: a method of 200 probes of one function
    # with the same argument names binds once.
    key = (func, frozenset(args))
    try:
        fits = _BINDS[key]
    except (KeyError, TypeError):  # TypeError: an unhashable callable
        try:
            sig.bind(**args)
            fits = True
        except TypeError:
            fits = False
        try:
            if len(_BINDS) < 4096:
                _BINDS[key] = fits
        except TypeError:
            pass
    if fits:
        return []
    params = sig.parameters
    takes_any = any(v.kind is inspect.Parameter.VAR_KEYWORD for v in params.values())
    required = [
        name
        for name, param in params.items()
        if param.default is inspect.Parameter.empty
        and param.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and name not in args
    ]
    unexpected = [] if takes_any else [name for name in args if name not in params]
    issues = []
    for name in unexpected:
        # a misspelt required argument is one problem, not "unexpected" plus "missing"
        close = difflib.get_close_matches(name, required, n=1, cutoff=0.6)
        if close:
            required.remove(close[0])
            issues.append(
                ValidationIssue(
                    field=f"{where}.provider.arguments.{name}",
                    message=f"{p.module}.{p.func}() requires argument {close[0]!r} and takes no {name!r}",
                    fix=f"rename {name!r} to {close[0]!r}",
                )
            )
            continue
        issues.append(
            ValidationIssue(
                field=f"{where}.provider.arguments.{name}",
                message=f"{p.module}.{p.func}() takes no argument {name!r}",
                fix=_meant(name, list(params)) or f"its arguments are: {', '.join(params) or '(none)'}",
            )
        )
    for name in required:
        issues.append(
            ValidationIssue(
                field=f"{where}.provider.arguments",
                message=f"{p.module}.{p.func}() requires argument {name!r}",
                fix=f"add `{name}` under arguments",
            )
        )
    return issues or [
        ValidationIssue(
            field=f"{where}.provider.arguments",
            message=f"the arguments do not match {p.module}.{p.func}{sig}",
            fix="pass the function's arguments by name",
        )
    ]


def _process(where: str, p: ProcessProvider) -> list[ValidationIssue]:
    path = shutil.which(os.path.expanduser(p.path))
    if path is None:
        return [
            ValidationIssue(
                field=f"{where}.provider.path",
                message=f"executable {p.path!r} not found (not a file, not executable, or not on PATH)",
                fix="install it or give its full path",
            )
        ]
    return []


def _http(where: str, p: HttpProvider) -> list[ValidationIssue]:
    """A warning, not an error: Chaos Toolkit runs such an activity, and it fails (a probe's tolerance then
    decides); the user learns it here instead of from the journal."""
    from faultplane.core.urls import http_url_problem

    problem = http_url_problem(p.url)
    if problem is None:
        return []
    return [
        ValidationIssue(
            field=f"{where}.provider.url",
            message=f"url {p.url!r} {problem}: every request of this activity will fail",
            fix="give an http(s) URL with a host, e.g. http://127.0.0.1:8080/health",
        )
    ]


def _driver(where: str, p: DriverProvider) -> list[ValidationIssue]:
    from faultplane.drivers.base import DriverError, get_activity, list_activities

    try:
        spec = get_activity(p.driver, p.name)
    except DriverError as exc:
        specs = list_activities()
        drivers = sorted({s.driver for s in specs})
        if p.driver not in drivers:
            return [
                ValidationIssue(
                    field=f"{where}.provider.driver",
                    message=str(exc),
                    fix=_meant(p.driver, drivers) or "see `faultplane drivers list`",
                )
            ]
        names = [s.name for s in specs if s.driver == p.driver]
        return [
            ValidationIssue(
                field=f"{where}.provider.name",
                message=str(exc),
                fix=_meant(p.name, names) or f"see `faultplane drivers show {p.driver}`",
            )
        ]
    if any(isinstance(v, str) and "${" in v for v in p.arguments.values()):
        return []  # resolved at run time
    try:
        spec.params.model_validate(p.arguments)
    except ValidationError as exc:
        fields = list(spec.params.model_fields)
        errs = exc.errors()
        missing = [".".join(map(str, e["loc"])) for e in errs if e["type"] == "missing"]
        renamed: dict[str, str] = {}  # misspelling -> the required argument it stands for
        for e in errs:
            extra = ".".join(map(str, e["loc"]))
            free = [m for m in missing if m not in renamed.values()]
            close = difflib.get_close_matches(extra, free, n=1, cutoff=0.6)
            if e["type"] == "extra_forbidden" and close:
                renamed[extra] = close[0]
        issues = []
        for err in errs:
            name = ".".join(str(x) for x in err["loc"]) or "(arguments)"
            if err["type"] == "missing" and name in renamed.values():
                continue  # one problem: reported with the misspelling that stands for it
            if err["type"] == "extra_forbidden":
                if name in renamed:
                    close = [renamed[name]]
                    msg, fix = (
                        f"{p.driver}.{p.name} requires argument {close[0]!r} and takes no {name!r}",
                        f"rename {name!r} to {close[0]!r}",
                    )
                else:
                    msg = f"{p.driver}.{p.name} takes no argument {name!r}"
                    fix = _meant(name, fields) or f"its arguments are: {', '.join(fields)}"
            elif err["type"] == "missing":
                msg, fix = f"{p.driver}.{p.name} requires argument {name!r}", f"add `{name}` under arguments"
            else:
                msg, fix = err["msg"], f"see `faultplane drivers show {p.driver}`"
            issues.append(ValidationIssue(field=f"{where}.provider.arguments.{name}", message=msg, fix=fix))
        return issues
    return []


def preflight(p: Any) -> tuple[list[ValidationIssue], list[ValidationIssue]]:
    """(errors, warnings) for a planned experiment (`engine.plan.Plan`)."""
    from faultplane.engine.controls import unloadable_controls

    compat = p.experiment.runtime.ctk_compat
    doc = p.dump()
    errors: list[ValidationIssue] = []
    warnings: list[ValidationIssue] = []
    for where, raw in _declared(doc):
        try:
            activity = Activity.model_validate({k: v for k, v in raw.items() if k != "tolerance"})
        except ValidationError:
            continue  # the schema has reported it already
        prov = activity.provider
        if isinstance(prov, PythonProvider):
            errors += _python(where, prov, where.endswith(".tolerance"), compat)
        elif isinstance(prov, ProcessProvider):
            errors += _process(where, prov)
        elif isinstance(prov, DriverProvider):
            errors += _driver(where, prov)
        elif isinstance(prov, HttpProvider):
            warnings += _http(where, prov)
    load = doc.get("load")
    if isinstance(load, dict) and load.get("engine") == "k6":
        from faultplane.engine.load_k6 import k6_problem

        problem = k6_problem(load.get("script"))
        if problem is not None:  # the run would start its fault with no load to measure it
            field, message, fix = problem
            errors.append(ValidationIssue(field=f"load.{field}", message=message, fix=fix))
    raw_config = p.raw.get("configuration")
    for key in getattr(p, "dynamic", []):
        from faultplane.engine.dynamic_config import dynamic_activity

        where = f"configuration.{key}"
        found = dynamic_activity(key, raw_config[key])
        if isinstance(found, ValidationIssue):
            errors.append(found)
        elif isinstance(found.provider, PythonProvider):
            errors += _python(where, found.provider, False, compat)
        elif isinstance(found.provider, ProcessProvider):
            errors += _process(where, found.provider)
    # Chaos Toolkit refuses these; Faultplane warns (docs/chaostoolkit.md: description-and-tolerance-optional)
    ctk_required = []
    for key in ("description", "method"):
        if not p.raw.get(key) and not (key == "method" and isinstance(p.raw.get(key), list)):
            ctk_required.append(
                ValidationIssue(
                    field=key, message=f"`{key}` is missing (Chaos Toolkit requires it)", fix=f"add `{key}`"
                )
            )
    raw_hypo = p.raw.get("steady-state-hypothesis")
    if isinstance(raw_hypo, dict) and not raw_hypo.get("title"):
        ctk_required.append(
            ValidationIssue(
                field="steady-state-hypothesis.title",
                message="the hypothesis has no title (Chaos Toolkit requires one)",
                fix="add `title` under steady-state-hypothesis",
            )
        )
    for i, probe in enumerate((doc.get("steady-state-hypothesis") or {}).get("probes") or []):
        if isinstance(probe, dict) and "provider" in probe and "tolerance" not in probe:
            ctk_required.append(
                ValidationIssue(
                    field=f"steady-state-hypothesis.probes[{i}].tolerance",
                    message="a hypothesis probe without a tolerance (Chaos Toolkit refuses it)",
                    fix="add the `tolerance` its output must meet",
                )
            )
    (errors if compat else warnings).extend(ctk_required)
    from faultplane.engine.controls import control_issues

    errors.extend(control_issues(doc, compat))
    if getattr(p, "global_controls", None) is not None:
        warnings.extend(p.global_controls.warnings)
    for where, message in unloadable_controls(doc):
        warnings.append(ValidationIssue(field=where, message=message, fix="install the control's package"))
    return errors, warnings
