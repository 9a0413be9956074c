"""What a GameDay file may say, what is checked when it is read, and the shape of its runs and analysis.

Decides the GameDay schema (lanes, their experiments and modes, variables, one shared load, SLO, compliance
scope, score weights; closed: an unknown field is an error naming it) and refuses, before anything runs, a
repeated lane name, an unknown compliance requirement id or framework.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from faultplane.core.formats import ExperimentError, ValidationIssue, issues_from_pydantic, load_document

__all__ = [
    "Compliance",
    "Entry",
    "GameDay",
    "GameDayAnalysis",
    "GameDayRun",
    "Lane",
    "Slo",
    "Weights",
    "load_gameday",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # .inf/.nan in YAML are no figures


class Entry(_Strict):
    experiment: str = Field(
        min_length=1, description="a path (relative to the GameDay file) or a listed name"
    )
    variables: dict[str, Any] = Field(default_factory=dict)
    compliance: list[str] = Field(default_factory=list)


class Lane(_Strict):
    name: str = Field(min_length=1)
    mode: Literal["ordered", "parallel"] = "ordered"
    experiments: list[str | Entry] = Field(min_length=1)
    variables: dict[str, Any] = Field(default_factory=dict)
    compliance: list[str] = Field(default_factory=list)
    stop_on_failure: bool = Field(
        True, description="ordered lanes: skip the rest after a run that does not pass (an escalation)"
    )

    def entries(self) -> list[Entry]:
        return [Entry(experiment=e) if isinstance(e, str) else e for e in self.experiments]


class Slo(_Strict):
    error_rate: float = Field(0.01, gt=0, le=1)
    latency_p99_ms: float = Field(1000, gt=0)
    recovery_seconds: float = Field(30, gt=0, description="recovery target when a run has no estimate")


class Compliance(_Strict):
    frameworks: list[str] = Field(default_factory=list, description="the scope of compliance coverage")
    requirements: list[str] = Field(default_factory=list, description="ids tagged on every run")


class Weights(_Strict):
    pass_rate: float = Field(0.4, ge=0)
    recovery: float = Field(0.25, ge=0)
    load_impact: float = Field(0.2, ge=0)
    compliance: float = Field(0.15, ge=0)


class GameDay(_Strict):
    name: str = Field(min_length=1)
    description: str = ""
    variables: dict[str, Any] = Field(default_factory=dict)
    load: dict[str, Any] | None = Field(None, description="one load generator for the whole GameDay")
    baseline_s: float = Field(3.0, ge=0, le=600, description="load alone before the first lane")
    slo: Slo = Field(default_factory=Slo)
    compliance: Compliance = Field(default_factory=Compliance)
    weights: Weights = Field(default_factory=Weights)
    lanes: list[Lane] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_lanes(self) -> GameDay:
        names = [lane.name for lane in self.lanes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"lane names must be unique; repeated: {', '.join(dupes)}")
        return self


class GameDayRun(BaseModel):
    lane: str
    lane_mode: str
    position: int
    experiment: str
    run_id: str | None
    status: str = Field(description="the run's status, or `skipped`")
    success: bool
    started_offset_s: float | None = None
    ended_offset_s: float | None = None
    load_error_rate: float | None = None
    load_p99_ms: float | None = None
    compliance: list[str] = Field(default_factory=list)
    error: str | None = None
    time_to_recover_s: float | None = None
    recovered: bool | None = None
    recovery_target_s: float | None = None


class GameDayAnalysis(BaseModel):
    gameday_id: str
    name: str
    started_at: datetime | None
    ended_at: datetime | None
    dry_run: bool
    score: float | None
    grade: str
    components: dict[str, float | None] = Field(
        description="pass_rate, recovery, load_impact, compliance in 0..1"
    )
    weights: dict[str, float]
    planned: int
    passed: int
    lanes: list[dict[str, Any]]
    runs: list[GameDayRun]
    baseline: dict[str, float | None] | None
    compliance: dict[str, Any] | None = Field(description="coverage from this GameDay's runs")
    findings: list[str]


def load_gameday(source: str | Path | Mapping[str, Any]) -> tuple[GameDay, Path | None]:
    """(the GameDay, its file's folder) from a path, YAML/JSON text or a mapping; raises ExperimentError."""
    base: Path | None = None
    if isinstance(source, Mapping):
        data = dict(source)
    else:
        if isinstance(source, Path) or (
            isinstance(source, str) and "\n" not in source and len(source) < 4096 and Path(source).is_file()
        ):
            base = Path(source).resolve().parent
        data = load_document(source)
    try:
        gd = GameDay.model_validate(data)
    except ValidationError as exc:
        raise ExperimentError(issues_from_pydantic(exc)) from None
    from faultplane.services.compliance import load_catalog, split_known

    cat = load_catalog()
    ids = list(gd.compliance.requirements)
    for lane in gd.lanes:
        ids += lane.compliance
        for e in lane.entries():
            ids += e.compliance
    _, unknown = split_known(ids, cat)
    issues = []
    if unknown:
        issues.append(
            ValidationIssue(
                field="compliance",
                message=f"unknown requirement id(s): {', '.join(sorted(set(unknown)))}",
                fix="use ids from `faultplane compliance requirements`, e.g. DORA-25, SOC2-A1.3",
            )
        )
    bad_fw = [f for f in gd.compliance.frameworks if cat.framework(f) is None]
    if bad_fw:
        issues.append(
            ValidationIssue(
                field="compliance.frameworks",
                message=f"unknown framework(s): {', '.join(bad_fw)}",
                fix=f"use {', '.join(f.id for f in cat.frameworks)}",
            )
        )
    if issues:
        raise ExperimentError(issues)
    return gd, base
