"""The experiment and journal schemas. Chaos Toolkit experiments validate against these as-is."""

from __future__ import annotations

import contextlib
import io
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator, model_validator

from faultplane.core.gates import GateSpec

__all__ = [
    "Activity",
    "ActivityRef",
    "ActivityRun",
    "BlastRadius",
    "DriverProvider",
    "Experiment",
    "HttpProvider",
    "Hypothesis",
    "Journal",
    "Pauses",
    "ProcessProvider",
    "PythonProvider",
    "RunStatus",
    "Runtime",
    "Target",
]


class _Strict(BaseModel):
    # no infinite or NaN number: a pause or timeout of .inf (YAML) or 1e999 (JSON) never ends
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


class PythonProvider(_Strict):
    type: Literal["python"]
    module: str
    func: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    secrets: list[str] | None = None


class ProcessProvider(_Strict):
    type: Literal["process"]
    path: str
    arguments: str | list[Any] | dict[str, Any] = ""
    timeout: float | None = None
    env: dict[str, str] | None = None
    secrets: list[str] | None = None


class HttpProvider(_Strict):
    type: Literal["http"]
    url: str
    method: str = "GET"
    headers: dict[str, str] = Field(default_factory=dict)
    arguments: dict[str, Any] | list[Any] | str | None = None
    timeout: float | list[float] | None = None
    expected_status: int | None = None
    verify_tls: bool = True
    secrets: list[str] | None = None


class DriverProvider(_Strict):
    """A named action or probe of a Faultplane driver (see `faultplane discover`)."""

    type: Literal["driver"]
    driver: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


Provider = Annotated[
    PythonProvider | ProcessProvider | HttpProvider | DriverProvider, Field(discriminator="type")
]


class Pauses(_Strict):
    before: float | None = Field(None, ge=0)
    after: float | None = Field(None, ge=0)


class Activity(_Strict):
    type: Literal["action", "probe"]
    name: str = Field(min_length=1)
    provider: Provider
    tolerance: Any = None
    pauses: Pauses | None = None
    background: bool = False
    timeout: float | None = Field(None, gt=0, description="seconds; the activity fails when it runs longer")
    controls: list[dict[str, Any]] | None = None
    configuration: dict[str, Any] | None = None  # CTK allows activity-level config; kept for round-trips

    @field_validator("tolerance")
    @classmethod
    def _tolerance_shape(cls, v: Any) -> Any:
        check_tolerance(v)
        return v


class ActivityRef(_Strict):
    """`{"ref": "name"}`: run an activity declared earlier in the experiment again."""

    ref: str


def _item_kind(v: Any) -> str:
    # one branch per item: a bad key in an activity is one error, not one per branch of the union
    if isinstance(v, dict):
        return "ref" if "ref" in v and "provider" not in v else "activity"
    return "ref" if isinstance(v, ActivityRef) else "activity"


MethodItem = Annotated[
    Annotated[Activity, Tag("activity")] | Annotated[ActivityRef, Tag("ref")], Discriminator(_item_kind)
]


class Hypothesis(_Strict):
    title: str = "steady state"
    probes: list[MethodItem] = Field(default_factory=list)
    controls: list[dict[str, Any]] | None = None


class HypothesisRuntime(_Strict):
    strategy: Literal[
        "default", "before-method-only", "after-method-only", "during-method-only", "continuously"
    ] = "default"
    frequency: float = Field(1.0, gt=0, description="seconds between checks for during-method/continuously")
    fail_fast: bool = False

    @field_validator("strategy", mode="before")
    @classmethod
    def _spellings(cls, v: Any) -> Any:
        # Chaos Toolkit's older spelling and Faultplane's first name for during-method-only
        return {"continously": "continuously", "during-method": "during-method-only"}.get(v, v)


class RollbacksRuntime(_Strict):
    strategy: Literal["default", "always", "never", "deviated"] = "default"


class Runtime(_Strict):
    hypothesis: HypothesisRuntime = Field(default_factory=HypothesisRuntime)
    rollbacks: RollbacksRuntime = Field(default_factory=RollbacksRuntime)
    ctk_compat: bool = Field(
        False, description="run with Chaos Toolkit's outcomes where Faultplane differs (docs/chaostoolkit.md)"
    )
    recovery_timeout: float = Field(
        10.0, ge=0, le=3600, description="seconds to wait for the steady state to return after rollback"
    )
    recovery_window_s: float = Field(
        0.0,
        ge=0,
        le=3600,
        description="the steady state must hold on every check for this long to count as recovered",
    )
    dry: Literal["probes", "actions", "activities", "pause"] | None = Field(
        None,
        description="as `chaos run --dry`: these activities are recorded as succeeded without running "
        "(probes/activities: tolerances are not checked), and their pauses are skipped; `pause` skips pauses only",
    )


class Target(_Strict):
    name: str
    driver: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    selector: dict[str, Any] | None = None


class BlastRadius(_Strict):
    percent: float | None = Field(None, gt=0, le=100)
    count: int | None = Field(None, ge=1)
    stage: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _one_of(self) -> BlastRadius:
        if self.percent is not None and self.count is not None:
            raise ValueError("give either `percent` or `count`, not both")
        return self


class Estimate(_Strict):
    """What the author expects: the hypothesis about impact, compared with what happened."""

    impact: str | None = None
    error_rate: float | None = Field(None, ge=0, le=1)
    latency_p99_ms: float | None = Field(None, ge=0)
    recovery_seconds: float | None = Field(None, ge=0)


class Experiment(_Strict):
    version: str | None = None
    title: str = Field(min_length=1)
    description: str = ""
    family: str | None = Field(None, description="groups versions of one experiment for blast-radius stages")
    tags: list[str] = Field(default_factory=list)
    contributions: dict[str, Any] | None = None
    configuration: dict[str, Any] = Field(default_factory=dict)
    secrets: dict[str, Any] = Field(default_factory=dict)
    extensions: list[dict[str, Any]] | None = None
    controls: list[dict[str, Any]] | None = None
    targets: list[Target] = Field(default_factory=list)
    blast_radius: BlastRadius | None = None
    slo_gates: list[GateSpec] = Field(default_factory=list)
    estimate: Estimate | None = None
    load: dict[str, Any] | None = Field(None, description="background load generator settings")
    seed: int | None = None
    steady_state_hypothesis: Hypothesis | None = Field(None, alias="steady-state-hypothesis")
    method: list[MethodItem] = Field(default_factory=list)
    rollbacks: list[MethodItem] = Field(default_factory=list)
    runtime: Runtime = Field(default_factory=Runtime)

    @model_validator(mode="after")
    def _refs_resolve(self) -> Experiment:
        declared = {a.name for a in self.all_declared_activities()}
        missing = [r.ref for r in self._refs() if r.ref not in declared]
        if missing:
            raise ValueError(
                f"activity reference(s) {', '.join(map(repr, missing))} name no declared activity; "
                f"declared: {', '.join(sorted(declared)) or '(none)'}"
            )
        return self

    def _refs(self) -> list[ActivityRef]:
        items: list[MethodItem] = [*self.method, *self.rollbacks]
        if self.steady_state_hypothesis:
            items += self.steady_state_hypothesis.probes
        return [i for i in items if isinstance(i, ActivityRef)]

    def all_declared_activities(self) -> list[Activity]:
        items: list[MethodItem] = []
        if self.steady_state_hypothesis:
            items += self.steady_state_hypothesis.probes
        items += [*self.method, *self.rollbacks]
        return [i for i in items if isinstance(i, Activity)]

    def resolve(self, item: MethodItem) -> Activity:
        if isinstance(item, Activity):
            return item
        for a in self.all_declared_activities():
            if a.name == item.ref:
                return a
        raise KeyError(item.ref)  # unreachable after validation


def check_tolerance(tol: Any) -> None:
    """Raise ValueError when a tolerance has a shape Faultplane cannot evaluate."""
    if tol is None or isinstance(tol, bool | int | float | str | list):
        return
    if not isinstance(tol, dict):
        raise ValueError(
            f"tolerance must be a bool, number, string, list or object, not {type(tol).__name__}"
        )
    kind = tol.get("type")
    if kind == "range":
        rng = tol.get("range")
        if not (isinstance(rng, list) and len(rng) == 2 and all(isinstance(x, int | float) for x in rng)):
            raise ValueError("range tolerance needs `range: [low, high]` with two numbers")
    elif kind == "regex":
        if not isinstance(tol.get("pattern"), str):
            raise ValueError("regex tolerance needs `pattern: <regular expression>`")
    elif kind == "jsonpath":
        if not isinstance(tol.get("path"), str) or not tol["path"].strip():
            raise ValueError("jsonpath tolerance needs `path: <jsonpath expression>`")
        if "${" not in tol["path"]:
            from jsonpath2.path import Path as JsonPath  # Chaos Toolkit's dialect; ~30 ms, so only here

            try:
                # its ANTLR parser prints syntax errors to stderr before raising: the error below says it all
                with contextlib.redirect_stderr(io.StringIO()):
                    JsonPath.parse_str(tol["path"].strip())
                why = None
            except Exception as exc:  # ValueError, or the generated parser's own errors
                why = f"{type(exc).__name__}: {exc}"
            if why:
                raise ValueError(
                    f"jsonpath {tol['path']!r} does not parse ({why}); Chaos Toolkit's dialect (jsonpath2) "
                    "writes filters as `[*][?(@.key = value)]`"
                )
    elif kind == "probe":
        Activity.model_validate({k: v for k, v in tol.items() if k != "tolerance"})
    else:
        import difflib

        meant = difflib.get_close_matches(str(kind), ["range", "regex", "jsonpath", "probe"], n=1, cutoff=0.6)
        raise ValueError(
            f"unknown tolerance type {kind!r}"
            + (f" (did you mean {meant[0]!r}?)" if meant else "")
            + ": use range, regex, jsonpath or probe (or a plain value/list)"
        )


# ---- journal ---------------------------------------------------------------------------------------------

RunStatus = Literal["running", "completed", "failed", "deviated", "aborted", "interrupted", "refused"]
ActivityStatus = Literal["succeeded", "failed", "timeout", "skipped"]


class ActivityRun(BaseModel):
    activity: dict[str, Any]
    phase: str
    status: ActivityStatus
    start: datetime
    end: datetime
    duration: float
    output: Any = None
    exception: str | None = None
    tolerance_met: bool | None = None


class Journal(BaseModel):
    """The full record of one run. Written incrementally; `status: running` with a dead pid means interrupted."""

    run_id: str
    faultplane_version: str
    experiment: dict[str, Any]
    status: RunStatus
    deviated: bool = False
    start: datetime
    end: datetime | None = None
    duration: float | None = None
    dry_run: bool = False
    seed: int
    controller_pid: int | None = None
    node: str | None = None
    content_hash: str | None = None
    family: str | None = None
    steady_states: dict[str, Any] = Field(
        default_factory=lambda: {"before": None, "after": None, "during": []}
    )
    run: list[ActivityRun] = Field(default_factory=list)
    rollbacks: list[ActivityRun] = Field(default_factory=list)
    reverts: list[dict[str, Any]] = Field(default_factory=list)
    # faults the engine saw applied (a lease taken, or an output naming what was hit): the staged blast
    # radius is earned from these, never from what the experiment says about itself (core.exposure)
    injections: list[dict[str, Any]] = Field(default_factory=list)
    gates: dict[str, Any] = Field(default_factory=lambda: {"samples": [], "breach": None})
    load: dict[str, Any] | None = None
    policy: dict[str, Any] | None = None
    estimate: dict[str, Any] | None = None
    verdict: str | None = None
    error: str | None = None
    phases: list[dict[str, Any]] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
