"""Keys an experiment may carry that Faultplane does not use: warned about, never refused.

Chaos Toolkit ignores keys it does not know (a `timeout` on a python provider, a top-level `dry_run`), so a
Chaos Toolkit experiment must not be refused for one. Each unknown key is dropped with a warning that names
it and, where one fits, the key that was probably meant. A misspelling of a key that is required and missing
(`fnc` for `func`) stays an error: one, naming both."""

from __future__ import annotations

import copy
import difflib
import functools
from typing import Any

from pydantic import BaseModel, ValidationError

from faultplane.core import model
from faultplane.core.formats import ExperimentError, ValidationIssue, issues_from_pydantic

__all__ = ["validate_lenient"]

# what these keys mean to Chaos Toolkit, and what to write instead
_KNOWN_ELSEWHERE = {
    "dry_run": "Chaos Toolkit ignores it too; pass `--dry-run` to `faultplane run`",
    "dry": "set by `chaos run --dry` (Chaos Toolkit ignores it in the file); pass `--dry MODE` to `faultplane run`, or write `runtime: {dry: MODE}`",
    "timeout": "a provider's `timeout` is ignored for python providers; did you mean the activity's `timeout`?",
}


@functools.cache
def _vocabulary() -> tuple[str, ...]:
    names: set[str] = set()
    for obj in vars(model).values():
        if isinstance(obj, type) and issubclass(obj, BaseModel) and obj.__module__ == model.__name__:
            for name, f in obj.model_fields.items():
                names.add(f.alias or name)
    return tuple(sorted(names))


def _parent(doc: Any, loc: tuple[Any, ...]) -> Any:
    """The mapping holding the key at the end of `loc`; union tags in `loc` are skipped."""
    node = doc
    steps = list(loc[:-1])
    while steps:
        step = steps.pop(0)
        if (isinstance(node, list) and isinstance(step, int) and step < len(node)) or (
            isinstance(node, dict) and step in node and isinstance(node[step], dict | list)
        ):
            node = node[step]
        elif isinstance(step, str):
            continue  # a union branch's tag, not a key of the document
        else:
            return None
    return node if isinstance(node, dict) else None


def _clean(loc: tuple[Any, ...], doc: Any) -> tuple[Any, ...]:
    out: list[Any] = []
    node = doc
    for i, step in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(node, list) and isinstance(step, int):
            node = node[step] if step < len(node) else None
            out.append(step)
        elif (
            isinstance(node, dict)
            and (step in node or last)
            and (last or isinstance(node.get(step), dict | list))
        ):
            node = node.get(step)
            out.append(step)
        elif isinstance(step, str) and not last:
            continue
        else:
            out.append(step)
    return tuple(out)


def _where(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out or "(top level)"


def validate_lenient(document: dict[str, Any]) -> tuple[model.Experiment, list[ValidationIssue]]:
    """The experiment, with unknown keys dropped and listed as warnings; raises ExperimentError otherwise."""
    try:
        return _validate_lenient(document)
    except ExperimentError as exc:
        # the model checks references as a whole; name each bad one where it is written, with a suggestion
        if not any(i.message.startswith("activity reference(s)") for i in exc.issues):
            raise
        refs = _ref_issues(document)
        issues = [i for i in exc.issues if not i.message.startswith("activity reference(s)")]
        raise ExperimentError(issues + refs if refs else exc.issues) from None


def _ref_issues(document: dict[str, Any]) -> list[ValidationIssue]:
    hypo = document.get("steady-state-hypothesis")
    sections = [("steady-state-hypothesis.probes", hypo.get("probes") if isinstance(hypo, dict) else None)]
    sections += [(s, document.get(s)) for s in ("method", "rollbacks")]
    declared: list[str] = []
    refs: list[tuple[str, str]] = []
    for where, items in sections:
        for i, item in enumerate(items if isinstance(items, list) else []):
            if isinstance(item, dict) and "provider" in item and isinstance(item.get("name"), str):
                declared.append(item["name"])
            elif isinstance(item, dict) and "ref" in item:
                refs.append((f"{where}[{i}].ref", str(item["ref"])))
    out = []
    for where, ref in refs:
        if ref in declared:
            continue
        meant = difflib.get_close_matches(ref, declared, n=1, cutoff=0.6)
        out.append(
            ValidationIssue(
                field=where,
                message=f"no activity named {ref!r} is declared",
                fix=f"did you mean {meant[0]!r}?"
                if meant
                else f"name a declared activity: {', '.join(declared) or '(none declared)'}",
            )
        )
    return out


def _validate_lenient(document: dict[str, Any]) -> tuple[model.Experiment, list[ValidationIssue]]:
    warnings: list[ValidationIssue] = []
    doc = document
    copied = False
    for _ in range(8):  # each round drops the unknown keys one validation reports
        try:
            return model.Experiment.model_validate(doc), warnings
        except ValidationError as exc:
            errors = exc.errors()
            extras = [e for e in errors if e["type"] == "extra_forbidden"]
            if not extras:
                raise ExperimentError(issues_from_pydantic(exc)) from None
            if not copied:
                doc, copied = copy.deepcopy(document), True
            missing: dict[tuple[Any, ...], set[str]] = {}
            for e in errors:
                if e["type"] == "missing":
                    loc = _clean(tuple(e["loc"]), doc)
                    missing.setdefault(loc[:-1], set()).add(str(loc[-1]))
            hard: list[ValidationIssue] = []
            dropped = 0
            for e in extras:
                loc = _clean(tuple(e["loc"]), doc)
                key = str(loc[-1])
                meant = difflib.get_close_matches(key, sorted(missing.get(loc[:-1], ())), n=1, cutoff=0.6)
                if meant:
                    hard.append(
                        ValidationIssue(
                            field=_where((*loc[:-1], meant[0])),
                            message=f"required key is missing (found unknown key {key!r})",
                            fix=f"rename {key!r} to {meant[0]!r}",
                        )
                    )
                    continue
                parent = _parent(doc, tuple(e["loc"]))
                if parent is None or key not in parent:
                    continue
                del parent[key]
                dropped += 1
                warnings.append(_warning(loc, key))
            if hard:
                others = [
                    i
                    for i in issues_from_pydantic(exc)
                    if not i.message.startswith("unknown key") and not any(i.field == h.field for h in hard)
                ]
                raise ExperimentError(hard + others) from None
            if not dropped:
                raise ExperimentError(issues_from_pydantic(exc)) from None
    return model.Experiment.model_validate(doc), warnings


def _warning(loc: tuple[Any, ...], key: str) -> ValidationIssue:
    hint = _KNOWN_ELSEWHERE.get(key)
    if hint is None:
        meant = difflib.get_close_matches(key, _vocabulary(), n=1, cutoff=0.75)
        hint = f"did you mean {meant[0]!r}?" if meant else "remove it, or check `faultplane schema`"
    return ValidationIssue(field=_where(loc), message=f"unknown key {key!r} is ignored", fix=hint)
