"""Experiment design: every design validates, passes the strict default policy, and runs for real."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from faultplane.core.formats import ExperimentError
from faultplane.core.policy import Policy, evaluate
from faultplane.drivers.base import get_activity
from faultplane.services.design import design_experiments, write_design
from faultplane.services.experiments import run_experiment, validate_experiment

REQUESTS: list[dict[str, Any]] = [
    {
        "service": "orders",
        "kind": "http",
        "url": "http://127.0.0.1:8080/orders",
        "fault_point": "demo.db",
        "env": "staging",
        "slo": {"error_rate": 0.01, "latency_p99_ms": 800},
    },
    {
        "service": "orders",
        "kind": "http",
        "url": "http://127.0.0.1:8080/orders",
        "proxy": {"route": "orders", "control_url": "http://127.0.0.1:8474"},
        "process": {"name": "orders", "restart_command": ["orders", "--serve"]},
        "load": {"url": "http://127.0.0.1:8080/orders", "rate": 20},
    },
    {"service": "db", "kind": "postgres", "dsn": "postgresql://app@127.0.0.1:5432/app", "table": "orders"},
    {"service": "cache", "kind": "redis", "url": "redis://127.0.0.1:6379/0", "key_pattern": "session:*"},
    {"service": "worker", "kind": "process", "process": {"cmdline_pattern": "worker\\.py"}},
]


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: f"{r['kind']}-{r['service']}")
def test_every_design_validates_and_passes_the_strict_policy(request_: dict[str, Any]) -> None:
    result = design_experiments(request_)
    assert result.experiments, result.notes
    assert [d.stage for d in result.experiments] == list(range(len(result.experiments)))
    for d in result.experiments:
        decision = evaluate(d.experiment, policy=Policy.strict_default(), store=None)
        assert decision.allowed, decision.summary()
        assert decision.stage == 0  # no history: the first blast-radius stage
        exp = d.experiment
        assert exp["slo_gates"] and any(" for " in g["rollback_on"] for g in exp["slo_gates"])
        assert exp["blast_radius"] == {"percent": 10}
        assert exp["rollbacks"] or d.action in {
            # these actions revert through the driver's own paired revert; an explicit rollback would repeat it
            "process.suspend",
            "process.terminate",
            "postgres.lock_table",
            "postgres.terminate_backends",
            "redis.client_pause",
            "redis.debug_sleep",
            "redis.evict_keys",
        }
        report = validate_experiment(exp, with_policy=False)
        assert report.valid, report.errors
        driver, action = d.action.split(".")
        assert get_activity(driver, action).kind == "action"
    # fault types the policy reserves for approval are never in the runnable set
    for h in result.held_back:
        decision = evaluate(h.experiment, policy=Policy.strict_default(), store=None)
        assert not decision.allowed
        assert {v.rule for v in decision.violations} == {"approval.required"}


def test_design_is_deterministic() -> None:
    a = design_experiments(REQUESTS[0]).model_dump()
    b = design_experiments(REQUESTS[0]).model_dump()
    assert a == b


def test_severity_is_a_configuration_variable_an_agent_can_refine() -> None:
    d = design_experiments(REQUESTS[0]).experiments[0]
    assert d.parameters == {"latency_s": 0.4, "probability": 1.0}
    args = d.experiment["method"][0]["provider"]["arguments"]
    assert args["duration_seconds"] == "${latency_s}"
    assert validate_experiment(d.experiment, variables={"latency_s": 0.7}, with_policy=False).valid


@pytest.mark.parametrize(
    ("request_", "field", "words"),
    [
        ({"service": "orders", "kind": "http"}, "url", "endpoint"),
        ({"service": "orders", "kind": "http", "url": "http://x"}, "fault_point", "inject"),
        ({"service": "orders", "kind": "queue"}, "kind", "http"),
        ({"service": "db", "kind": "postgres"}, "dsn", "connection"),
        ({"service": "c", "kind": "redis", "url": "http://x"}, "url", "redis://"),
        # URLs the designed probes could never reach were written into every experiment
        ({"service": "o", "kind": "http", "url": "orders:8080/", "fault_point": "f"}, "url", "http://"),
        ({"service": "o", "kind": "http", "url": "http://[::1", "fault_point": "f"}, "url", "IPv6"),
        ({"service": "o", "kind": "http", "url": "http://:8080/", "fault_point": "f"}, "url", "no host"),
        (
            {"service": "o", "kind": "http", "url": "http://x", "health_url": "/health", "fault_point": "f"},
            "health_url",
            "http://",
        ),
        (
            {"service": "o", "kind": "http", "url": "http://x", "fault_point": "f", "slo": {"error_rate": 2}},
            "slo",
            "",
        ),
        (
            {
                "service": "o",
                "kind": "http",
                "url": "http://x",
                "fault_point": "f",
                "compliance": ["DORA-99"],
            },
            "compliance",
            "DORA-99",
        ),
    ],
)
def test_bad_requests_name_the_field_and_the_fix(request_: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ExperimentError) as info:
        design_experiments(request_)
    issue = info.value.issues[0]
    assert issue.field.startswith(field), info.value
    assert words in issue.message + issue.fix
    assert issue.fix


def test_a_production_target_is_refused_with_the_policy_reason() -> None:
    with pytest.raises(ExperimentError) as info:
        design_experiments({**REQUESTS[0], "env": "production"})
    [issue] = info.value.issues
    assert issue.field == "targets[0].labels.env"
    assert "production" in issue.message and "non-production" in issue.fix


def test_written_designs_are_runnable_files(tmp_path: Path) -> None:
    result = design_experiments(REQUESTS[2])
    paths = write_design(result, tmp_path, include_held_back=True)
    assert [p.name for p in paths] == [
        "00-db-table-lock.yaml",
        "01-db-terminate-backend.yaml",
        "02-db-connection-exhaustion.yaml",
    ]
    assert validate_experiment(str(paths[0])).valid


@pytest.mark.anyio
async def test_designed_experiments_run_against_the_demo_service(demo_url: str) -> None:
    result = design_experiments(
        {
            "service": "orders",
            "kind": "http",
            "url": f"{demo_url}/orders",
            "health_url": f"{demo_url}/health",
            "fault_point": "demo.db",
            "hold_seconds": 1.5,
            "window_seconds": 2,
            "slo": {"latency_p99_ms": 500, "error_rate": 0.01},
        }
    )
    gentle = result.experiments[0]
    run = await run_experiment(gentle.experiment)
    assert run.status == "completed", run.error
    assert run.success
    # an agent refines the severity through the variable: past the SLO, the steady state no longer holds
    harsh = await run_experiment(gentle.experiment, variables={"latency_s": 0.9})
    assert harsh.status in ("deviated", "aborted"), harsh
    assert not harsh.success


@pytest.mark.parametrize("request_", REQUESTS)
def test_written_designs_are_plain_yaml_without_anchors_or_aliases(
    request_: dict[str, Any], tmp_path: Path
) -> None:
    import yaml

    result = design_experiments(request_)
    for path in write_design(result, tmp_path, include_held_back=True):
        text = path.read_text()
        events = list(yaml.parse(text))
        assert not any(getattr(e, "anchor", None) for e in events), f"{path.name} has YAML anchors"
        assert not any(isinstance(e, yaml.AliasEvent) for e in events), f"{path.name} has YAML aliases"
        assert yaml.safe_load(text) == next(
            d.experiment
            for d in [*result.experiments, *result.held_back]
            if path.name.endswith(f"-{d.slug}.yaml")
        )
