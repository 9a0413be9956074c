"""Infinite and NaN numbers (`.inf`/`.nan` in YAML, 1e999 in JSON) are refused where a user writes a figure: a
pause, timeout or latency of .inf never ends, a weight or bound of NaN compares false with everything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from faultplane.core.formats import ExperimentError, load_document
from faultplane.core.gates import parse_predicate
from faultplane.drivers.base import check_arguments
from faultplane.engine.lifecycle import plan
from faultplane.plane.plan import PlanError, load_plan
from faultplane.services.gameday_model import Slo, Weights
from faultplane.services.search_spec import Objective, ParamSpec

PROBE: dict[str, Any] = {"type": "probe", "name": "p", "provider": {"type": "process", "path": "true"}}


def _experiment(**activity: Any) -> dict[str, Any]:
    return {"title": "t", "description": "d", "method": [{**PROBE, **activity}]}


@pytest.mark.parametrize(
    ("yaml_text", "field"),
    [
        ("pauses: {after: .inf}", "method[0].pauses.after"),
        ("pauses: {before: .nan}", "method[0].pauses.before"),
        ("timeout: .inf", "method[0].timeout"),
        ("provider: {type: process, path: 'true', timeout: .inf}", "method[0].provider.timeout"),
    ],
)
def test_an_experiment_in_yaml_with_an_infinite_number_is_refused_naming_it(
    tmp_path: Path, yaml_text: str, field: str
) -> None:
    doc = _experiment(**yaml.safe_load("{" + yaml_text + "}"))
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ExperimentError) as info:
        plan(load_document(path))
    (issue,) = [i for i in info.value.issues if i.field == field]
    assert "finite" in issue.message


def test_an_experiment_in_json_with_1e999_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "exp.json"
    path.write_text(json.dumps(_experiment()).replace('"path": "true"', '"path": "true", "timeout": 1e999'))
    with pytest.raises(ExperimentError) as info:
        plan(load_document(path))
    assert [i.field for i in info.value.issues] == ["method[0].provider.timeout"]


@pytest.mark.parametrize(
    "fault",
    [
        "{type: latency, added_ms: .inf}",
        "{type: latency, added_ms: 10, jitter_ms: .nan}",
        "{type: cold_tool, added_ms: 1e999}",
    ],
)
def test_a_fault_plan_with_an_infinite_delay_is_refused(tmp_path: Path, fault: str) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(f"seed: 1\nfaults:\n  - {fault}\n")
    with pytest.raises(PlanError, match="finite"):
        load_plan(path)


@pytest.mark.parametrize(
    ("model", "values"),
    [
        (Slo, {"latency_p99_ms": float("inf")}),
        (Slo, {"recovery_seconds": float("nan")}),
        (Weights, {"pass_rate": float("inf")}),
        (ParamSpec, {"type": "float", "low": float("-inf"), "high": 10}),
        (ParamSpec, {"type": "float", "low": 0, "high": float("inf")}),
        (Objective, {"source": "probe", "name": "p", "bound": float("nan")}),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else ",".join(v),
)
def test_campaign_figures_are_finite(model: type, values: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="finite"):
        model(**values)


@pytest.mark.parametrize(
    ("driver", "name", "arguments", "field"),
    [
        ("netproxy", "latency", {"route": "r", "latency_ms": 10, "jitter_ms": float("inf")}, "jitter_ms"),
        ("netproxy", "timeout", {"route": "r", "timeout_ms": float("inf")}, "timeout_ms"),
        (
            "postgres",
            "inject_latency",
            {"dsn": "postgresql://x", "latency_ms": 1, "jitter_ms": 1e400},
            "jitter_ms",
        ),
    ],
)
def test_driver_arguments_past_the_toxic_bounds_are_refused_at_validation(
    driver: str, name: str, arguments: dict[str, Any], field: str
) -> None:
    errors = check_arguments(driver, name, arguments)
    assert any(field in e.field for e in errors), errors


def test_a_gate_number_too_large_to_be_a_figure_is_refused() -> None:
    with pytest.raises(ValueError, match="too large"):
        parse_predicate("error_rate > " + "9" * 400 + " for 30s")
    with pytest.raises(ValueError, match="too large"):
        parse_predicate("error_rate > 0.01 for " + "9" * 400 + "s")
    assert parse_predicate("error_rate > 0.01 for 30s").window_s == 30
