"""Experiment services: validate, list, find and run. The CLI and the MCP server both call these."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from faultplane.core.formats import ExperimentError, ValidationIssue, dumps, load_document
from faultplane.core.model import Experiment, Journal
from faultplane.core.store import Store, open_store
from faultplane.engine.lifecycle import checked_plan, evaluate_policy, execute, exit_code
from faultplane.services.experiment_info import ExperimentInfo

__all__ = [
    "ExperimentInfo",
    "RunResult",
    "ValidationReport",
    "compact_journal",
    "experiment_dirs",
    "find_experiment",
    "journal_toon",
    "list_experiments",
    "run_experiment",
    "validate_experiment",
]

Source = str | Path | Mapping[str, Any]
BUNDLED = Path(__file__).resolve().parent.parent / "examples"
_SUFFIXES = (".yaml", ".yml", ".json", ".toon")


class ValidationReport(BaseModel):
    valid: bool
    title: str | None = None
    errors: list[ValidationIssue] = []
    warnings: list[ValidationIssue] = []
    policy: dict[str, Any] | None = None


class RunResult(BaseModel):
    run_id: str
    experiment_title: str
    status: str
    success: bool
    steady_state_before: bool | None
    steady_state_after: bool | None
    duration_seconds: float
    started_at: datetime
    error: str | None
    exit_code: int
    verdict: str | None = None
    journal_path: str | None = None
    warnings: list[str] = []

    @classmethod
    def from_journal(cls, j: Journal, journal_path: str | None = None) -> RunResult:
        before = (j.steady_states.get("before") or {}).get("steady_state_met")
        after = (j.steady_states.get("after") or {}).get("steady_state_met")
        code = exit_code(j)
        return cls(
            run_id=j.run_id,
            experiment_title=str(j.experiment.get("title", "")),
            status=j.status,
            success=code == 0,
            steady_state_before=before,
            steady_state_after=after,
            duration_seconds=round(j.duration or 0.0, 6),
            started_at=j.start,
            error=j.error,
            exit_code=code,
            verdict=j.verdict,
            journal_path=journal_path,
            warnings=j.warnings,
        )


def experiment_dirs() -> list[Path]:
    """Where named experiments are found: $FAULTPLANE_EXPERIMENTS, ./experiments, then the bundled examples."""
    dirs = [Path(d) for d in os.environ.get("FAULTPLANE_EXPERIMENTS", "").split(os.pathsep) if d]
    dirs.append(Path.cwd() / "experiments")
    dirs.append(BUNDLED)
    return [d for d in dirs if d.is_dir()]


# path -> ((size, mtime_ns), its info or None when it is no experiment): a file is parsed again only when it
# changed, so listing experiments (every chaos_status call) costs a directory walk, not a YAML parse each.
_INFO_CACHE: dict[str, tuple[tuple[int, int], ExperimentInfo | None]] = {}


def _info(path: str) -> ExperimentInfo | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    stamp = (st.st_size, st.st_mtime_ns)
    hit = _INFO_CACHE.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    try:
        doc = load_document(Path(path))
    except (ExperimentError, OSError):  # unreadable, or removed while we scanned
        return None
    info = None
    if "method" in doc and "title" in doc:  # else a policy, plan or var file living beside experiments
        info = ExperimentInfo(
            name=Path(path).stem, path=path, title=doc.get("title"), tags=list(doc.get("tags") or [])
        )
    _INFO_CACHE[path] = (stamp, info)
    return info


def _candidates(root: Path) -> list[str]:
    """Files under `root` with an experiment suffix, in `sorted(root.rglob("*"))` order (plain strings and
    os.walk: this runs on every chaos_status call, and pathlib objects cost more than the walk)."""
    found = []
    for dirpath, _, files in os.walk(root):
        for name in files:
            if os.path.splitext(name)[1] in _SUFFIXES:
                found.append(os.path.join(dirpath, name))
    return sorted(found, key=lambda p: p.split(os.sep))


def list_experiments() -> list[ExperimentInfo]:
    seen: dict[str, ExperimentInfo] = {}
    for d in experiment_dirs():
        for path in _candidates(d):
            stem = os.path.splitext(os.path.basename(path))[0]
            if stem in seen:
                continue
            info = _info(path)
            if info is not None:
                seen[stem] = info.model_copy()
    return list(seen.values())


def find_experiment(name: str) -> Path:
    for info in list_experiments():
        if info.name == name:
            return Path(info.path)
    known = ", ".join(i.name for i in list_experiments()) or "(none)"
    raise LookupError(f"no experiment named {name!r}; known experiments: {known}")


def _load(source: Source) -> dict[str, Any]:
    if isinstance(source, str) and "\n" not in source and not Path(source).suffix and "{" not in source:
        try:
            return load_document(find_experiment(source))
        except LookupError as exc:
            raise ExperimentError.one(
                field="experiment",
                message=str(exc),
                fix="pass a file path, inline YAML/JSON/TOON, or a listed name",
            ) from None
    return load_document(source)


def validate_experiment(
    source: Source,
    *,
    variables: Mapping[str, Any] | None = None,
    policy_path: str | Path | None = None,
    with_policy: bool = True,
    runtime: Mapping[str, Any] | None = None,
    ctk_compat: bool | None = None,
    strict_variables: Collection[str] = (),
    global_controls: Any | None = None,
) -> ValidationReport:
    """Everything a run checks before it executes anything (structure, values, providers, drivers, controls,
    the policy's phase-0 verdict), without running anything; never raises on bad input."""
    from faultplane.services.ctk import apply_runtime, settings_runtime

    try:
        raw = apply_runtime(settings_runtime(_load(source), global_controls), runtime)
        p = checked_plan(
            raw,
            variables,
            ctk_compat=ctk_compat,
            strict_variables=strict_variables,
            global_controls=global_controls,
        )
    except ExperimentError as exc:
        return ValidationReport(valid=False, errors=exc.issues, warnings=getattr(exc, "warnings", []))
    report = ValidationReport(valid=True, title=p.experiment.title, warnings=p.warnings)
    from faultplane.services.compliance import load_catalog, unknown_compliance_tags

    catalog = load_catalog()
    unknown = unknown_compliance_tags(p.experiment.tags or [], catalog)
    if unknown:
        report.valid = False
        report.errors.append(
            ValidationIssue(
                field="tags",
                message=f"unknown compliance requirement id(s): {', '.join(unknown)}",
                fix=f"use one of {', '.join(catalog.all_ids())}",
            )
        )
        return report
    if with_policy:
        from faultplane.core.policy import also_from

        with also_from(source):  # the experiment's own project policy holds wherever it is run from
            decision = evaluate_policy(p, open_store(), policy_path, None)
        if decision is not None:
            report.policy = decision.model_dump(mode="json") if hasattr(decision, "model_dump") else None
            if not decision.allowed:
                report.valid = False
                report.errors = [
                    ValidationIssue(field=v.field, message=f"{v.rule}: {v.message}", fix=v.fix)
                    for v in decision.violations
                ]
    return report


async def run_experiment(
    source: Source,
    *,
    dry_run: bool = False,
    variables: Mapping[str, Any] | None = None,
    store: Store | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    policy_path: str | Path | None = None,
    approval_token: str | None = None,
    handle_signals: bool = False,
    journal_dir: Path | None = None,
    runtime: Mapping[str, Any] | None = None,
    ctk_compat: bool | None = None,
    strict_variables: Collection[str] = (),
    global_controls: Any | None = None,
) -> RunResult:
    """Plan (validate + policy), then run. Raises ExperimentError for invalid input (nothing is run).
    `runtime` overrides the experiment's `runtime` block (the CLI's strategy flags); `ctk_compat` runs with
    Chaos Toolkit's outcomes (docs/chaostoolkit.md)."""
    from faultplane.core.policy import also_from
    from faultplane.services.ctk import apply_runtime, settings_runtime

    with also_from(source):  # the experiment's own project policy holds wherever it is run from
        j = await execute(
            apply_runtime(settings_runtime(_load(source), global_controls), runtime),
            variables=variables,
            dry_run=dry_run,
            store=store if store is not None else open_store(),
            on_event=on_event,
            policy_path=policy_path,
            approval_token=approval_token,
            handle_signals=handle_signals,
            journal_dir=journal_dir,
            ctk_compat=ctk_compat,
            strict_variables=strict_variables,
            global_controls=global_controls,
        )
    return RunResult.from_journal(j, str((journal_dir or _jdir()) / f"{j.run_id}.json"))


def _jdir() -> Path:
    from faultplane.engine.journal import journal_dir

    return journal_dir()


def compact_journal(journal: Mapping[str, Any]) -> dict[str, Any]:
    """The journal reduced to what an agent needs: outcome, steady states, one row per activity."""

    started = _when(journal.get("start"))

    def rows(section: str, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {
                "section": section,
                "name": r["activity"].get("name"),
                "type": r["activity"].get("type"),
                "status": r["status"],
                "at_s": _offset(started, r.get("start")),
                "seconds": round(r["duration"], 4),
                "error": r.get("exception") or "",
            }
            for r in runs
        ]

    activities: list[dict[str, Any]] = []
    for key in ("before", "after"):
        state = journal["steady_states"].get(key) or {}
        activities += rows(f"hypothesis_{key}", state.get("probes", []))
    for state in journal["steady_states"].get("during") or []:
        activities += rows("hypothesis_during", (state or {}).get("probes", []))
    activities += rows("method", journal.get("run", []))
    activities += rows("rollbacks", journal.get("rollbacks", []))
    # in the order they ran; sorted() is stable, so activities without a time keep their section order
    activities = sorted(activities, key=lambda a: (a["at_s"] is None, a["at_s"] or 0.0))
    gates = journal.get("gates") or {}
    return {
        "run_id": journal["run_id"],
        "title": journal["experiment"].get("title"),
        "status": journal["status"],
        "verdict": journal.get("verdict"),
        "steady_state_before": (journal["steady_states"].get("before") or {}).get("steady_state_met"),
        "steady_state_after": (journal["steady_states"].get("after") or {}).get("steady_state_met"),
        "duration_seconds": round(journal.get("duration") or 0, 3),
        "seed": journal.get("seed"),
        "error": journal.get("error") or "",
        "activities": activities,
        "gate_samples": len(gates.get("samples") or []),
        "gate_breach": gates.get("breach"),
        "reverts": journal.get("reverts") or [],
    }


def _when(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
    except ValueError:
        return None


def _offset(start: datetime | None, value: Any) -> float | None:
    at = _when(value)
    if start is None or at is None or (start.tzinfo is None) != (at.tzinfo is None):
        return None
    return round((at - start).total_seconds(), 3)


def journal_toon(run_id: str, store: Store | None = None) -> str:
    from faultplane.services.runs import load_journal

    return dumps(compact_journal(load_journal(run_id, store)), "toon")


def experiment_schema() -> dict[str, Any]:
    return Experiment.model_json_schema(by_alias=True)


def journal_schema() -> dict[str, Any]:
    return Journal.model_json_schema()
