"""The policy in force is the strictest combination of the floor, the user's, the project's and --policy/env."""

from __future__ import annotations

from pathlib import Path

import pytest
from guard_helpers import base_experiment

from faultplane.core.policy import Policy, evaluate, find_forbidden, load_policy
from faultplane.core.policy_layers import combine, loosening_approved

LAX = "gates: {required: false, min_gates: 0, require_window: false}\napproval: {min_stage: null}\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    monkeypatch.chdir(root)
    monkeypatch.delenv("FAULTPLANE_POLICY", raising=False)
    return root


STRICT_PROJECT = "forbidden: {words: [live]}\napproval: {min_stage: 1, fault_types: [latency]}\n"


@pytest.mark.parametrize("via", ["argument", "env"])
def test_explicit_policy_tightens_but_cannot_loosen_the_project(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    (project / "faultplane.policy.yaml").write_text(STRICT_PROJECT)
    lax = tmp_path / "lax.yaml"
    lax.write_text(
        LAX + "forbidden: {extend_defaults: false, words: [], labels: {}, negations: [non, pre, staging]}\n"
    )
    if via == "env":
        monkeypatch.setenv("FAULTPLANE_POLICY", str(lax))
        pol = load_policy()
    else:
        pol = load_policy(lax)
    assert pol.gates.required and pol.approval.min_stage == 1
    assert "live" in pol.forbidden.words and "prod" in pol.forbidden.words
    assert "latency" in pol.approval.fault_types and "network_partition" in pol.approval.fault_types
    assert "staging" not in pol.forbidden.negations
    assert str(lax) in pol.source


def test_user_policy_applies_with_the_project(project: Path, tmp_path: Path) -> None:
    user = Path(__import__("os").environ["XDG_CONFIG_HOME"]) / "faultplane"
    user.mkdir(parents=True)
    (user / "policy.yaml").write_text("forbidden: {words: [corpnet]}\n")
    (project / "faultplane.policy.yaml").write_text(LAX)
    pol = load_policy()
    assert "corpnet" in pol.forbidden.words
    assert pol.gates.required  # the user's file leaves gates at the strict default, so they stay required
    assert find_forbidden(base_experiment(configuration={"h": "corpnet-db"}), pol.forbidden)


def test_a_nested_git_does_not_escape_the_project_policy(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "faultplane.policy.yaml").write_text("forbidden: {words: [live]}\n")
    nested = project / "scratch" / "sub"
    (nested / ".git").mkdir(parents=True)
    (nested / "faultplane.policy.yaml").write_text(LAX)
    monkeypatch.chdir(nested)
    pol = load_policy()
    assert "live" in pol.forbidden.words
    assert pol.gates.required  # the lax file inside the nested repo cannot undo the project's strictness


def test_a_lax_file_above_the_project_loosens_nothing(project: Path, tmp_path: Path) -> None:
    (tmp_path / "faultplane.policy.yaml").write_text(LAX)
    pol = load_policy()
    assert pol.gates.required and pol.approval.min_stage == 2


@pytest.mark.parametrize(
    "text",
    [
        "forbidden: {extend_defaults: false, words: [], labels: {}}\n",
        "forbidden: {allow: ['*', 'prod*', 'prod1']}\n",
        "forbidden: {negations: [non, pre, not, 'no', prod]}\n",
        "approval: {fault_types: []}\n",
        "forbidden: {labels: {env: {unless: ['*']}}}\n",
    ],
)
def test_no_policy_file_disables_the_production_floor(project: Path, text: str) -> None:
    (project / "faultplane.policy.yaml").write_text(text)
    pol = load_policy()
    doc = base_experiment(targets=[{"name": "x", "labels": {"env": "prod1"}}], configuration={"h": "proddb"})
    decision = evaluate(doc, policy=pol, store=None)
    assert not decision.allowed and any(v.rule.startswith("forbidden") for v in decision.violations)
    assert "network_partition" in pol.approval.fault_types


def test_combine_takes_the_stricter_value_of_every_field() -> None:
    a = Policy.model_validate({"gates": {"required": False}, "blast_radius": {"stages": [{"percent": 5}]}})
    b = Policy.model_validate({"approval": {"min_stage": 3, "ttl_hours": 2}})
    c = combine([a, b])
    assert c.gates.required and [s.percent for s in c.blast_radius.stages] == [5]
    assert c.approval.min_stage == 2 and c.approval.ttl_hours == 2  # a (default) asks approval from stage 2


def test_loosening_needs_a_signed_approval_which_is_not_given(tmp_path: Path) -> None:
    assert loosening_approved(tmp_path / "x.yaml", "gates.required") is False


@pytest.mark.parametrize(
    "rollback_on",
    [
        "error_rate < 0 for 30s",
        "error_rate <= -0.5 for 30s",
        "error_rate > 1 for 30s",
        "availability > 1 for 30s",
        "availability < 0 for 30s",
        "latency_p99 < 0 for 30s",
        "throughput <= -1 for 30s",
        "error_rate > 100% for 30s",
    ],
)
def test_gates_that_cannot_trip_are_refused_at_phase_0(rollback_on: str) -> None:
    sli = rollback_on.split()[0]
    doc = base_experiment(slo_gates=[{"name": "g", "sli": sli, "rollback_on": rollback_on}])
    decision = evaluate(doc, policy=Policy(), store=None)
    assert not decision.allowed
    assert any("never" in v.message for v in decision.violations if v.rule.startswith("gates")), (
        decision.violations
    )


@pytest.mark.parametrize(
    "rollback_on", ["error_rate > 0 for 30s", "availability < 1 for 30s", "error_rate >= 1 for 5s"]
)
def test_gates_that_can_trip_pass(rollback_on: str) -> None:
    sli = rollback_on.split()[0]
    doc = base_experiment(slo_gates=[{"name": "g", "sli": sli, "rollback_on": rollback_on}])
    assert evaluate(doc, policy=Policy(), store=None).allowed
