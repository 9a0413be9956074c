"""One decision everywhere: approvals bind the experiment as it will run (variables and secrets included),
`guard check`, the agent hook and the engine agree, and a production experiment is refused by the run service
(which the CLI and the MCP tool call) with nothing executed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from guard_helpers import (
    APPROVER_PASSPHRASE,
    Approver,
    DegradableService,
    base_experiment,
    runnable_experiment,
    write_experiment,
)
from typer.testing import CliRunner

from faultplane.cli.main import app
from faultplane.core import approval as approvals
from faultplane.core.formats import ExperimentError
from faultplane.core.policy import load_policy
from faultplane.core.store import Store
from faultplane.engine.lifecycle import evaluate_plan, execute, plan
from faultplane.hook.judge import judge_tool_call
from faultplane.services.experiments import run_experiment
from faultplane.services.guard import approve_experiment, check_experiment

pytestmark = pytest.mark.anyio
runner = CliRunner()


@pytest.fixture
def project(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("FAULTPLANE_APPROVAL", raising=False)
    return project


def _hook_allows(command: str, cwd: Path) -> bool:
    payload = {"hook_event_name": "PreToolUse", "cwd": str(cwd), "tool_name": "Bash"}
    return judge_tool_call({**payload, "tool_input": {"command": command}}).allow


# ---- approvals bind the resolved experiment ------------------------------------------------------------------


def _templated() -> dict[str, Any]:
    """Stage 2 (50%) needs an approval; what it does depends on two variables."""
    return base_experiment(
        targets=None,
        blast_radius={"percent": 50},
        configuration={"route_name": "cart", "tox": 0.1},
        method=[
            {
                "type": "action",
                "name": "toxic",
                "provider": {
                    "type": "process",
                    "path": "true",
                    "arguments": ["--route", "${route_name}", "--toxicity", "${tox}"],
                },
            }
        ],
    )


APPROVED = {"route_name": "cart", "tox": 0.1}
OTHER = {"route_name": "payments", "tox": 1.0}


async def test_an_approval_covers_only_the_variables_it_was_given(project: Path, approver: Approver) -> None:
    approver.write_policy(project)
    path = write_experiment(project, _templated(), "tox.yaml")
    store = Store(project / "s.duckdb")
    assert not check_experiment(path, variables=APPROVED, store=store).allowed
    approve_experiment(path, variables=APPROVED, key_path=approver.key_path, passphrase=APPROVER_PASSPHRASE)

    assert check_experiment(path, variables=APPROVED, store=store).approved_by == "alice"
    refused = check_experiment(path, variables=OTHER, store=store)
    assert not refused.allowed and "variables" in refused.violations[0].message
    assert not check_experiment(path, variables={"route_name": "cart", "tox": 1.0}, store=store).allowed

    # the engine: same variables run, others are refused before anything runs
    ok = await execute(_templated(), variables=APPROVED, store=store, dry_run=True)
    assert ok.status != "refused", ok.error
    bad = await execute(_templated(), variables=OTHER, store=store, dry_run=True)
    assert bad.status == "refused" and "approval.required" in (bad.error or "")

    # the hook, judging `faultplane run` with --var, and the CLI
    approved_cmd = "faultplane run tox.yaml --var route_name=cart --var tox=0.1"
    assert _hook_allows(approved_cmd, project)
    assert not _hook_allows("faultplane run tox.yaml --var route_name=payments --var tox=1.0", project)
    res = runner.invoke(
        app, ["guard", "check", "tox.yaml", "--var", "route_name=payments", "--var", "tox=1.0"]
    )
    assert res.exit_code == 3
    res = runner.invoke(app, ["guard", "check", "tox.yaml", "--var", "route_name=cart", "--var", "tox=0.1"])
    assert res.exit_code == 0, res.output


def test_the_cli_approval_binds_its_vars(
    project: Path, approver: Approver, monkeypatch: pytest.MonkeyPatch
) -> None:
    approver.write_policy(project)
    monkeypatch.setenv("FAULTPLANE_APPROVER_PASSPHRASE", APPROVER_PASSPHRASE)
    write_experiment(project, _templated(), "tox.yaml")
    res = runner.invoke(
        app,
        [
            "guard",
            "approve",
            "tox.yaml",
            "--var",
            "route_name=cart",
            "--var",
            "tox=0.1",
            "--key",
            str(approver.key_path),
        ],
    )
    assert res.exit_code == 0, res.output
    assert (
        runner.invoke(
            app, ["guard", "check", "tox.yaml", "--var", "route_name=cart", "--var", "tox=0.1"]
        ).exit_code
        == 0
    )
    assert runner.invoke(app, ["guard", "check", "tox.yaml", "--var", "route_name=payments"]).exit_code == 3
    # cart / 0.1 are the file's own defaults: without --var it is the very experiment that was approved
    assert runner.invoke(app, ["guard", "check", "tox.yaml"]).exit_code == 0


def test_a_changed_secret_invalidates_the_approval_and_is_never_stored(
    project: Path, monkeypatch: pytest.MonkeyPatch, approver: Approver
) -> None:
    approver.write_policy(project)
    doc = _templated()
    doc["secrets"] = {"api": {"token": {"type": "env", "key": "FP_TEST_TOKEN"}}}
    doc["method"][0]["provider"]["arguments"] += ["--token", "${token}"]
    path = write_experiment(project, doc, "secret.yaml")
    monkeypatch.setenv("FP_TEST_TOKEN", "tok-AAAA-1111")
    granted = approve_experiment(path, key_path=approver.key_path, passphrase=APPROVER_PASSPHRASE)
    assert check_experiment(path).approved_by == "alice"
    stored = "".join(f.read_text() for f in approvals.approvals_dir().glob("*.json"))
    assert "tok-AAAA-1111" not in stored and "tok-AAAA-1111" not in granted.token
    monkeypatch.setenv("FP_TEST_TOKEN", "tok-BBBB-2222")
    assert not check_experiment(path).allowed


def test_an_approval_needs_every_variable_resolved(project: Path, approver: Approver) -> None:
    approver.write_policy(project)
    doc = _templated()
    doc["configuration"] = {"route_name": {"type": "env", "key": "FP_TEST_UNSET_ROUTE"}, "tox": 0.1}
    path = write_experiment(project, doc, "unset.yaml")
    with pytest.raises(ExperimentError) as info:
        approve_experiment(path, key_path=approver.key_path, passphrase=APPROVER_PASSPHRASE)
    assert "FP_TEST_UNSET_ROUTE" in str(info.value) and "--var" in str(info.value)
    assert not approvals.approvals_dir().exists() or not list(approvals.approvals_dir().glob("*.json"))


# ---- guard check, the hook and the engine agree ----------------------------------------------------------------


def _driver(driver: str, action: str, **arguments: Any) -> dict[str, Any]:
    return {
        "type": "action",
        "name": f"{driver}-{action}",
        "provider": {"type": "driver", "driver": driver, "name": action, "arguments": arguments},
    }


CASES: dict[str, tuple[dict[str, Any], bool]] = {
    "plain": (base_experiment(), True),
    # the catalog says resource_exhaustion: approval needed, though nothing in the name says so
    "scale": (
        base_experiment(
            targets=None,
            method=[_driver("kubernetes", "scale_deployment", name="checkout", namespace="shop", replicas=0)],
        ),
        False,
    ),
    # a process kill needs a person whatever its size (approval.fault_types: process_kill, by effect)
    "kill-one": (
        base_experiment(targets=None, method=[_driver("process", "kill", name="api", count=1)]),
        False,
    ),
    "pause-one": (
        base_experiment(targets=None, method=[_driver("process", "suspend", name="api", count=1)]),
        True,
    ),
    "kill-wide": (
        base_experiment(targets=None, method=[_driver("process", "kill", name="api", percentage=50)]),
        False,
    ),
    "kill-prod": (base_experiment(targets=None, method=[_driver("process", "kill", name="prod-api")]), False),
    "stress": (
        base_experiment(targets=None, method=[_driver("process", "stress_cpu", duration_seconds=1)]),
        False,
    ),
    # named like a latency fault, but the catalog knows it only removes a route: no approval needed
    "remove-route": (
        base_experiment(targets=None, method=[_driver("netproxy", "remove_route", name="latency_partition")]),
        True,
    ),
    "no-gates": (base_experiment(slo_gates=None), False),
    "stage-skip": (base_experiment(blast_radius={"percent": 25}), False),
}


async def test_guard_check_hook_and_engine_agree(project: Path) -> None:
    store = Store(project / "s.duckdb")
    policy = load_policy()
    for name, (doc, expected) in CASES.items():
        path = write_experiment(project, doc, f"{name}.yaml")
        checked = check_experiment(path, store=store)
        engine = evaluate_plan(plan(doc), policy, store, None)
        journal = await execute(doc, store=store, dry_run=True)
        hooked = _hook_allows(f"faultplane run {name}.yaml --store s.duckdb", project)
        cli = runner.invoke(app, ["guard", "check", f"{name}.yaml", "--store", "s.duckdb"]).exit_code == 0
        verdicts = {
            "guard check": checked.allowed,
            "cli": cli,
            "hook": hooked,
            "engine": journal.status != "refused",
            "evaluate_plan": engine.allowed,
        }
        assert set(verdicts.values()) == {expected}, (name, verdicts, checked.summary())
        assert [v.rule for v in checked.violations] == [v.rule for v in engine.violations], name


# ---- a production experiment is refused by the run service, nothing executed ---------------------------------
# (test names avoid the word: pytest puts them into tmp paths, which the scan would rightly read)


def _prod_toucher(marker: Path, url: str = "http://127.0.0.1:9") -> dict[str, Any]:
    return runnable_experiment(
        url,
        targets=[{"name": "api", "labels": {"env": "Production"}}],
        blast_radius={"percent": 10},
        method=[
            {
                "type": "action",
                "name": "touch",
                "provider": {"type": "process", "path": "touch", "arguments": [str(marker)]},
            }
        ],
    )


async def test_live_labelled_experiment_is_refused_by_the_run_service_with_nothing_run(
    project: Path, service: DegradableService
) -> None:
    marker = project / "touched"
    # the control: the same experiment pointed at staging really runs the action
    staging = _prod_toucher(marker, service.url)
    staging["targets"][0]["labels"]["env"] = "staging"
    result = await run_experiment(staging, store=Store(project / "s.duckdb"))
    assert result.status == "completed" and marker.exists(), result.error
    marker.unlink()

    result = await run_experiment(_prod_toucher(marker), store=Store(project / "s.duckdb"))
    assert result.status == "refused" and result.exit_code == 3
    assert "forbidden.labels.env" in (result.error or "") and not marker.exists()

    # as the MCP tool calls it: inline YAML text
    text = yaml.safe_dump(_prod_toucher(marker))
    result = await run_experiment(text, store=Store(project / "s.duckdb"))
    assert result.status == "refused" and result.exit_code == 3 and not marker.exists()


def test_refused_run_from_the_cli_exits_3(project: Path) -> None:
    marker = project / "touched"
    write_experiment(project, _prod_toucher(marker), "prod.yaml")
    res = runner.invoke(app, ["run", "prod.yaml"])
    assert res.exit_code == 3, res.output
    assert "refused" in res.output.lower() and not marker.exists()
    journals = json.dumps(Store().query("SELECT status FROM runs"), default=str)
    assert "refused" in journals
