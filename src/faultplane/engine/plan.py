"""Phase 0, the plan: an experiment document made into a `Plan` ready to run, or refused with every problem
at once. Variables are substituted, the schema checked (unknown keys dropped with a warning, as Chaos Toolkit
ignores them), then what the run would find out too late (`engine/preflight.py`); dynamic configuration
probes run when the run starts and the plan is made again with their values. `validate` and a run both start
here, so what validates is what runs."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from faultplane.core.config import resolve
from faultplane.core.formats import ExperimentError, ValidationIssue
from faultplane.core.model import Experiment

__all__ = ["Plan", "checked_plan", "content_hash", "plan"]


def _canonical(document: Mapping[str, Any]) -> str:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def content_hash(document: Mapping[str, Any]) -> str:
    return hashlib.sha256(_canonical(document).encode()).hexdigest()


@dataclass
class Plan:
    """Phase 0's output: a validated, resolved experiment ready to run."""

    raw: dict[str, Any]
    experiment: Experiment
    configuration: dict[str, Any]
    secrets: dict[str, Any]
    secret_values: list[str]
    content_hash: str
    family: str
    _dump: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    # the document held a `${`: what runs may differ from what was written
    substituted: bool = True
    # keys dropped as unknown, checks that did not refuse the run (unloadable controls, CTK-required keys)
    warnings: list[ValidationIssue] = field(default_factory=list)
    # configuration keys a probe gives when the run starts (engine/dynamic_config.py); `${}` of them unresolved
    dynamic: list[str] = field(default_factory=list)
    # controls from Chaos Toolkit's settings and control files (engine/controls.GlobalControls)
    global_controls: Any | None = None

    def dump(self) -> dict[str, Any]:
        """The experiment as JSON data (aliases, no nulls), made once: the policy reads it and the journal
        takes each activity's entry from it. Treat it as read-only."""
        if self._dump is None:
            self._dump = self.experiment.model_dump(mode="json", by_alias=True, exclude_none=True)
        return self._dump


def plan(
    raw: Mapping[str, Any],
    variables: Mapping[str, Any] | None = None,
    *,
    ctk_compat: bool | None = None,
    strict_variables: Collection[str] = (),
) -> Plan:
    """Resolve and validate; raises ExperimentError listing every problem at once. Keys Faultplane does not
    know are dropped with a warning (`Plan.warnings`), as Chaos Toolkit ignores them."""
    from faultplane.engine.keys import validate_lenient

    raw = dict(raw)

    def structure_issues() -> list[ValidationIssue]:
        # the document as written, before values are substituted in: errors point at what the author wrote
        try:
            validate_lenient(raw)
        except ExperimentError as exc:
            return exc.issues
        return []

    # most experiments hold no `${}`; the one serialisation gives the content hash and says so
    canonical: str | None
    try:
        canonical = _canonical(raw)
    except TypeError:  # keys JSON cannot sort (a YAML mapping with mixed key types): validation names them
        canonical = None
    substituted = canonical is None or "${" in canonical
    runtime = raw.get("runtime")
    compat = (
        ctk_compat
        if ctk_compat is not None
        else isinstance(runtime, dict) and bool(runtime.get("ctk_compat"))
    )
    try:
        resolved = resolve(
            raw, variables, substitute=substituted, keep_unknown=compat, strict=strict_variables
        )
    except ExperimentError as exc:
        raise ExperimentError(structure_issues() + exc.issues) from None
    try:
        # one validation on the common path; the document as written is validated only to explain a failure
        experiment, warnings = validate_lenient(resolved.document)
    except ExperimentError as exc:
        raise ExperimentError(structure_issues() or exc.issues) from None
    if ctk_compat is not None:
        experiment.runtime.ctk_compat = ctk_compat
    if experiment.load is not None:
        from faultplane.engine.load_spec import parse_load_spec

        parse_load_spec(experiment.load)  # raises ExperimentError naming load.<field>
    family = experiment.family or _slug(experiment.title)
    return Plan(
        raw,
        experiment,
        resolved.configuration,
        resolved.secrets,
        resolved.secret_values,
        hashlib.sha256(canonical.encode()).hexdigest() if canonical is not None else content_hash(raw),
        family,
        substituted=substituted,
        warnings=warnings,
        dynamic=resolved.dynamic,
    )


def checked_plan(
    raw: Mapping[str, Any],
    variables: Mapping[str, Any] | None = None,
    *,
    ctk_compat: bool | None = None,
    strict_variables: Collection[str] = (),
    global_controls: Any | None = None,
) -> Plan:
    """`plan`, then what the run would find out too late (engine/preflight.py): both `validate` and a run
    start here, so what validates is what runs."""
    from faultplane.engine.preflight import preflight

    p = plan(raw, variables, ctk_compat=ctk_compat, strict_variables=strict_variables)
    p.global_controls = global_controls
    errors, warnings = preflight(p)
    if errors:
        refusal = ExperimentError(errors)
        refusal.warnings = p.warnings + warnings  # type: ignore[attr-defined]
        raise refusal
    p.warnings.extend(warnings)
    return p


async def _with_dynamic_configuration(
    p: Plan,
    raw: Mapping[str, Any],
    variables: Mapping[str, Any] | None,
    ctk_compat: bool | None,
    strict_variables: Collection[str],
    global_controls: Any | None,
) -> Plan:
    """Run the dynamic configuration probes (chaoslib's `load_dynamic_configuration`), then plan again with
    their values, so the run, the policy and the journal see them like any configuration value."""
    from faultplane.core.config import Variables
    from faultplane.engine.dynamic_config import evaluate

    raw_config = raw.get("configuration")
    values, failures = await evaluate(
        raw_config if isinstance(raw_config, dict) else {},
        p.dynamic,
        p.configuration,
        p.secrets,
        p.secret_values,
    )
    given = Variables(variables or {}, secrets=getattr(variables, "secrets", None))
    given.update(values)
    notes = [
        ValidationIssue(
            field=f.split(":", 1)[0],
            message=f.split(":", 1)[1].strip(),
            fix="the key is left unset, as in Chaos Toolkit; fix the probe or pass --var for it",
        )
        for f in failures
    ]
    try:
        again = checked_plan(
            raw,
            given,
            ctk_compat=ctk_compat,
            strict_variables=strict_variables,
            global_controls=global_controls,
        )
    except ExperimentError as exc:
        # a `${key}` its failed probe should have given is undefined: say why first
        raise ExperimentError(notes + exc.issues) from None
    if again.dynamic and not again.experiment.runtime.ctk_compat:
        # a failed probe's key stays unset; where the experiment uses it, the run would carry `${key}` as text
        doc = json.dumps({k: v for k, v in raw.items() if k not in ("configuration", "secrets")}, default=str)
        used = [
            n
            for n in notes
            if any(f"${{{k}}}" in doc and n.field == f"configuration.{k}" for k in again.dynamic)
        ]
        if used:
            raise ExperimentError(used)
    again.dynamic = []
    again.warnings.extend(notes)
    return again


def _slug(text: str) -> str:
    return "-".join("".join(c.lower() if c.isalnum() else " " for c in text).split())
