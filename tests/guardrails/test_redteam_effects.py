"""Approval-class faults are recognised by effect wherever they appear, and refused without an approval."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from guard_helpers import base_experiment, write_experiment
from typer.testing import CliRunner

from faultplane.cli.main import app
from faultplane.core.policy import Policy
from faultplane.engine.lifecycle import evaluate_document

CASES: list[dict[str, Any]] = yaml.safe_load(
    (Path(__file__).parent / "redteam" / "risky_effects.yaml").read_text()
)
runner = CliRunner()


def placed(case: dict[str, Any]) -> dict[str, Any]:
    doc = base_experiment()
    activity = {"type": "action", "name": "step", "provider": copy.deepcopy(case["provider"])}
    if case["section"] == "steady-state-hypothesis":
        doc["steady-state-hypothesis"]["probes"].append({**activity, "type": "probe", "tolerance": 0})
    elif case["section"] == "controls":
        doc["controls"] = [{"name": "c", "provider": activity["provider"]}]
    else:
        doc.setdefault(case["section"], []).append(activity)
    return doc


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_risky_effect_needs_approval(case: dict[str, Any]) -> None:
    decision = evaluate_document(placed(case), Policy(), None, None)
    assert not decision.allowed
    assert any(v.rule == "approval.required" for v in decision.violations), decision.violations
    assert any(case["kind"] in r for r in decision.approval_required), decision.approval_required


@pytest.mark.parametrize("case", CASES[::3], ids=[c["id"] for c in CASES[::3]])
def test_guard_check_refuses_risky_effects(
    case: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FAULTPLANE_POLICY", raising=False)
    write_experiment(tmp_path, placed(case), "exp.yaml")
    res = runner.invoke(app, ["guard", "check", "exp.yaml"])
    assert res.exit_code == 3 and "approval" in res.output


BENIGN = [
    {"type": "process", "path": "true", "arguments": ["--delay", "200ms"]},
    {"type": "driver", "driver": "netproxy", "name": "latency", "arguments": {"route": "db", "ms": 100}},
    {"type": "http", "url": "http://127.0.0.1:8080/health"},
    {
        "type": "python",
        "module": "mylab",
        "func": "toxic",
        "arguments": {"toxic": {"type": "latency", "attributes": {"latency": 50}}},
    },
    {
        "type": "process",
        "path": "tc",
        "arguments": ["qdisc", "add", "dev", "lo", "root", "netem", "loss", "5%"],
    },
    {"type": "process", "path": "curl", "arguments": ["-s", "http://127.0.0.1:8080/product/produce"]},
    # closing a Redis connection, a kill switch, and words that only contain "kill" are not a process kill
    {"type": "driver", "driver": "redis", "name": "client_kill", "arguments": {"url": "redis://127.0.0.1"}},
    {"type": "http", "url": "http://127.0.0.1:8080/kill-switch/status"},
    {"type": "process", "path": "echo", "arguments": ["skill", "killer", "overkill"]},
    {"type": "process", "path": "redis-cli", "arguments": ["CLIENT", "KILL", "TYPE", "normal"]},
]


@pytest.mark.parametrize("provider", BENIGN)
def test_benign_activities_need_no_approval(provider: dict[str, Any]) -> None:
    doc = base_experiment(method=[{"type": "action", "name": "step", "provider": provider}])
    decision = evaluate_document(doc, Policy(), None, None)
    assert decision.allowed, decision.violations
