"""What a boundary-search spec may say, and how one is read.

Decides the spec's schema (the searched parameters with their ranges and which way each makes the fault
worse, the objective and its bound, the budget, the sampler and its seed; closed: an unknown field is an
error naming it), where a spec comes from (a file, YAML/JSON text, a mapping, or a bundled spec's name, with
relative experiment and policy paths following the file), and the shapes of a trial's and a search's result.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from faultplane.core.formats import ExperimentError, ValidationIssue, issues_from_pydantic, load_document

__all__ = [
    "Objective",
    "ParamSpec",
    "SearchResult",
    "SearchSpec",
    "TrialResult",
    "load_search_spec",
    "with_overrides",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # .inf/.nan in YAML are no figures


class ParamSpec(_Strict):
    """One searched parameter: a number range (int or float) or a list of choices."""

    type: Literal["int", "float", "categorical"] = "float"
    low: float | None = None
    high: float | None = None
    step: float | None = Field(None, gt=0)
    log: bool = False
    choices: list[Any] | None = None
    severity: Literal["increasing", "decreasing"] = Field(
        "increasing",
        description="which way the fault gets worse: increasing (more latency) or decreasing (a smaller pool)",
    )

    @model_validator(mode="after")
    def _shape(self) -> ParamSpec:
        if self.type == "categorical":
            if not self.choices:
                raise ValueError("a categorical parameter needs `choices: [...]` (at least one)")
            return self
        if self.low is None or self.high is None:
            raise ValueError(f"a {self.type} parameter needs `low` and `high`")
        if not self.low < self.high:
            raise ValueError(f"`low` ({self.low:g}) must be below `high` ({self.high:g})")
        if self.log and self.low <= 0:
            raise ValueError("`log: true` needs `low` > 0")
        if self.type == "int" and (self.low != int(self.low) or self.high != int(self.high)):
            raise ValueError("an int parameter needs whole-number `low` and `high`")
        return self

    def severity_of(self, value: Any) -> float:
        if self.type == "categorical":
            assert self.choices is not None
            pos = self.choices.index(value) / max(1, len(self.choices) - 1) if value in self.choices else 0.5
        else:
            assert self.low is not None and self.high is not None
            pos = (float(value) - self.low) / (self.high - self.low)
        pos = min(1.0, max(0.0, pos))
        return pos if self.severity == "increasing" else 1.0 - pos


class Objective(_Strict):
    """What is measured, and the bound it is measured against."""

    source: Literal["gate", "probe", "load"] = Field(
        description="gate: an SLO gate's samples; probe: a named probe's outputs; load: the load figures"
    )
    name: str = Field(
        min_length=1, description="the gate name, the probe's activity name, or the load figure"
    )
    value_path: str | None = Field(None, description="dotted path to the number in a probe's output")
    op: Literal[">", ">=", "<", "<="] | None = Field(
        None, description="the breaching side (default: the gate's own operator, else `>`)"
    )
    bound: float | None = Field(None, description="the SLO bound (default: the gate's threshold)")

    @model_validator(mode="after")
    def _bound(self) -> Objective:
        if self.source != "gate" and self.bound is None:
            raise ValueError(f"objective.bound is needed for source {self.source!r} (e.g. bound: 1000)")
        return self


class SearchSpec(_Strict):
    experiment: str | dict[str, Any] = Field(
        description="a file path, a listed name, or the experiment itself"
    )
    parameters: dict[str, ParamSpec] = Field(min_length=1)
    objective: Objective
    budget: int = Field(12, ge=1, le=200, description="most trials (each one a real experiment run)")
    seed: int = 0
    sampler: Literal["nsga2", "tpe", "random"] = "nsga2"
    population: int | None = Field(None, ge=2, le=100, description="NSGA-II population (default from budget)")
    variables: dict[str, Any] = Field(default_factory=dict, description="fixed values for other variables")
    stop_after_breaches: int | None = Field(
        None, ge=1, description="end early after this many breaching trials"
    )
    cooldown_s: float = Field(0.0, ge=0, le=300, description="pause between trials so the system settles")
    policy: str | None = Field(
        None,
        description="policy file (default: the one in force); refused when the search comes from an agent "
        "(MCP), which always runs under the server's policy",
    )


class TrialResult(BaseModel):
    trial: int
    params: dict[str, Any]
    run_id: str | None
    run_status: str
    measured: float | None
    breached: bool
    margin: float | None
    severity: float
    fitness: float | None
    duration_s: float
    note: str | None = None


class SearchResult(BaseModel):
    search_id: str
    status: Literal["completed", "refused", "stopped", "interrupted"] = Field(
        description="completed: the budget was spent; stopped: the breach limit was reached; refused: the "
        "policy stopped it; interrupted: cancelled or aborted before its budget was spent"
    )
    experiment_title: str
    sampler: str
    seed: int
    budget: int
    objective: str
    found_breach: bool
    best: TrialResult | None = Field(description="the breaching trial closest to the bound")
    boundary: dict[str, Any] | None = Field(
        description="{holds: params of the most severe trial that held, breaches: params of `best`}"
    )
    trials: list[TrialResult]
    elapsed_s: float
    message: str


def load_search_spec(source: str | Path | Mapping[str, Any]) -> SearchSpec:
    """A search spec from a YAML/JSON file, text, mapping or the name of a bundled spec (`search-payment`);
    relative experiment and policy paths follow the file."""
    base: Path | None = None
    if isinstance(source, Mapping):
        data = dict(source)
    else:
        if isinstance(source, str) and _looks_like_name(source):
            source = _find_spec(source)
        elif isinstance(source, str) and "\n" not in source and source.lstrip().startswith("{"):
            source += "\n"  # one-line JSON text, not a path that happens to contain a dot
        if isinstance(source, Path) or (
            isinstance(source, str) and "\n" not in source and len(source) < 4096 and Path(source).is_file()
        ):
            base = Path(source).resolve().parent
        try:
            data = load_document(source)
        except ExperimentError as exc:
            # load_document speaks of experiments; here the document is the search spec
            raise ExperimentError(
                [
                    ValidationIssue(
                        field="spec" if i.field == "experiment" else i.field,
                        message=i.message,
                        fix="pass a search spec file (.yaml/.json), its YAML/JSON text, or a bundled spec "
                        "name such as search-payment",
                    )
                    for i in exc.issues
                ]
            ) from None
    if "method" in data and "parameters" not in data:
        raise ExperimentError.one(
            field="spec",
            message="this is an experiment, not a search spec",
            fix="write a search spec that names it: experiment: <its path>, parameters: {...}, "
            "objective: {...} (docs/gamedays.md, 'Boundary search')",
        )
    try:
        spec = SearchSpec.model_validate(data)
    except ValidationError as exc:
        raise ExperimentError(issues_from_pydantic(exc)) from None
    if base is not None and isinstance(spec.experiment, str):
        candidate = base / spec.experiment
        if candidate.is_file():
            spec.experiment = str(candidate)
    if base is not None and spec.policy and not Path(spec.policy).expanduser().is_absolute():
        spec.policy = str(base / spec.policy)
    return spec


def with_overrides(spec: SearchSpec, **changes: Any) -> SearchSpec:
    """`spec` with some fields replaced (None leaves a field as it is) and `variables` merged over its own;
    raises ExperimentError naming the field when a value is out of range."""
    data = spec.model_dump()
    extra = changes.pop("variables", None) or {}
    data.update({k: v for k, v in changes.items() if v is not None})
    data["variables"] = {**spec.variables, **extra}
    try:
        return SearchSpec.model_validate(data)
    except ValidationError as exc:
        raise ExperimentError(issues_from_pydantic(exc)) from None


def _looks_like_name(text: str) -> bool:
    return (
        "\n" not in text
        and "{" not in text
        and ":" not in text
        and not Path(text).suffix
        and (not Path(text).exists())
    )


def _find_spec(name: str) -> Path:
    """A spec by name, in the directories experiments are listed from (the bundled examples last)."""
    from faultplane.services.experiments import experiment_dirs

    for d in experiment_dirs():
        for suffix in (".yaml", ".yml", ".json"):
            if (d / f"{name}{suffix}").is_file():
                return d / f"{name}{suffix}"
    raise ExperimentError.one(
        field="spec",
        message=f"no search spec file or bundled spec named {name!r}",
        fix="pass a search spec file path, or a bundled spec name such as search-payment",
    )
