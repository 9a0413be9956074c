"""Fault plans: the three formats load; bad plans are refused with a message naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import toon_format
import yaml

from faultplane.plane.plan import ErrorInjectionFault, LatencyFault, PlanError, load_plan, parse_plan

PLAN = {
    "seed": 42,
    "faults": [
        {"type": "latency", "added_ms": 50, "jitter_ms": 10, "probability": 0.5, "tools": ["add"]},
        {"type": "error_injection", "rate": 0.1, "code": -32000, "message": "boom"},
        {"type": "timeout", "probability": 0.05},
        {"type": "schema_drift", "tools": ["weather"], "rename": {"temp_c": "temperature"}},
        {"type": "partial_result", "keep_fraction": 0.5},
        {"type": "registry_inconsistency", "mode": "missing_from_list", "tools": ["echo"]},
        {"type": "cold_tool", "added_ms": 100, "idle_ms": 1000},
        {"type": "duplicate_response", "probability": 0.1},
        {"type": "reorder", "max_hold_ms": 50},
    ],
}


@pytest.mark.parametrize("fmt", ["json", "yaml", "toon"])
def test_every_format_loads_the_same_plan(tmp_path: Path, fmt: str) -> None:
    text = {"json": json.dumps, "yaml": yaml.safe_dump, "toon": toon_format.encode}[fmt](PLAN)
    path = tmp_path / f"plan.{fmt}"
    path.write_text(text)
    plan = load_plan(path)
    assert plan == parse_plan(PLAN)
    assert plan.seed == 42 and len(plan.faults) == 9
    assert isinstance(plan.faults[0], LatencyFault) and plan.faults[0].added_ms == 50
    err = plan.faults[1]
    assert isinstance(err, ErrorInjectionFault) and err.probability == 0.1  # rate is the probability


def test_empty_plan() -> None:
    assert load_plan(None).empty
    assert parse_plan({"seed": 1}).empty


@pytest.mark.parametrize(
    ("plan", "needle"),
    [
        ({"faults": [{"type": "latency"}]}, "faults[0].added_ms"),
        ({"faults": [{"type": "latency", "added_ms": 5, "probability": 1.5}]}, "faults[0].probability"),
        ({"faults": [{"type": "nope"}]}, "unknown or missing fault type"),
        ({"faults": [{"added_ms": 3}]}, "faults[0]"),
        ({"faults": [{"type": "timeout", "probabilty": 0.1}]}, "faults[0].probabilty: unknown field"),
        ({"seed": "x"}, "seed"),
        ({"faults": [{"type": "schema_drift", "retype": {"temp": "date"}}]}, "faults[0].retype.temp"),
        ({"faults": [{"type": "head_of_line", "added_ms": 0}]}, "faults[0].added_ms"),
        ({"faults": [{"type": "registry_inconsistency", "mode": "stale"}]}, "faults[0].mode"),
        (
            {"faults": [{"type": "error_injection", "rate": 0.1, "probability": 0.2}]},
            "either rate or probability",
        ),
        ({"faults": [{"type": "latency", "added_ms": 1, "tools": []}]}, "faults[0].tools"),
    ],
)
def test_invalid_plans_name_the_field(plan: dict, needle: str) -> None:
    with pytest.raises(PlanError) as info:
        parse_plan(plan)
    assert needle in str(info.value)
    assert "Value error" not in str(info.value)  # pydantic's wording stays out of the message


def test_unreadable_files_are_clear(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="does not exist"):
        load_plan(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(PlanError, match="not valid JSON"):
        load_plan(bad)
    odd = tmp_path / "plan.ini"
    odd.write_text("x")
    with pytest.raises(PlanError, match="not supported"):
        load_plan(odd)
    with pytest.raises(PlanError, match="mapping"):
        parse_plan([1, 2])


# The plan of seed 002 ("Chaos engineering for MCP"), exactly as the article prints it.
SEED_PLAN = """\
# fault-plan.yaml — inject tool-call-plane failures, reproducibly
seed: 42
faults:
  - type: latency                 # push slow tools toward the step deadline
    added_ms: 4000
    jitter_ms: 1500
    probability: 0.3
  - type: schema_drift            # return a shape the agent didn't expect
    tools: ["get_incident"]
    probability: 0.2
  - type: partial_result          # a truncated result the agent treats as complete
    tools: ["fetch_logs"]
    probability: 0.5
  - type: registry_inconsistency  # advertised tool that errors on call
    tools: ["restart_service"]
  - type: error_injection         # the demo's 2% per-call failure
    rate: 0.02
"""


def test_the_seed_articles_plan_validates_as_written(tmp_path: Path) -> None:
    path = tmp_path / "fault-plan.yaml"
    path.write_text(SEED_PLAN, encoding="utf-8")
    plan = load_plan(path)
    assert [f.type for f in plan.faults] == [
        "latency",
        "schema_drift",
        "partial_result",
        "registry_inconsistency",
        "error_injection",
    ]
    drift = plan.faults[1]
    assert drift.default_drift and drift.tools == ["get_incident"] and drift.probability == 0.2
    assert plan.faults[3].mode == "listed_but_broken" and plan.faults[4].probability == 0.02
