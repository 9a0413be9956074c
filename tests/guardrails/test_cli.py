"""`faultplane guard check | approve | policy show` through the real CLI app."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from guard_helpers import APPROVER_PASSPHRASE, Approver, base_experiment, record_run, write_experiment
from typer.testing import CliRunner

from faultplane.cli.main import app
from faultplane.core.store import Store

runner = CliRunner()


def test_check_allowed_and_refused(project: Path) -> None:
    write_experiment(project, base_experiment(), "ok.yaml")
    write_experiment(project, base_experiment(targets=[{"name": "x", "labels": {"env": "Prod"}}]), "bad.yaml")
    res = runner.invoke(app, ["guard", "check", "ok.yaml"])
    assert res.exit_code == 0 and "allowed" in res.output
    res = runner.invoke(app, ["guard", "check", "bad.yaml", "--format", "json"])
    assert res.exit_code == 3
    out = json.loads(res.stdout)
    assert out["allowed"] is False and out["violations"][0]["rule"] == "forbidden.labels.env"
    assert out["family"] == "payment-db-latency" and len(out["content_hash"]) == 64


def test_check_unreadable_is_exit_2(project: Path) -> None:
    res = runner.invoke(app, ["guard", "check", "nope.yaml"])
    assert res.exit_code == 2 and "cannot check" in res.output


def test_check_reports_three_greens(project: Path) -> None:
    write_experiment(project, base_experiment(), "ok.yaml")
    store = Store()
    for _ in range(3):
        record_run(store, "payment-db-latency", 0)
    res = runner.invoke(app, ["guard", "check", "ok.yaml", "--format", "json"])
    assert res.exit_code == 0
    assert "3 consecutive green runs" in json.loads(res.stdout)["advice"][0]


def test_approve_then_check(project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bob = Approver(tmp_path / "keys", "bob")
    bob.write_policy(project)
    monkeypatch.setenv("FAULTPLANE_APPROVER_PASSPHRASE", APPROVER_PASSPHRASE)
    write_experiment(project, base_experiment(blast_radius={"percent": 25}), "wide.yaml")
    assert runner.invoke(app, ["guard", "check", "wide.yaml"]).exit_code == 3
    key = ["--key", str(bob.key_path)]
    res = runner.invoke(app, ["guard", "approve", "wide.yaml", "--reason", "game day", *key])
    assert res.exit_code == 0 and "approved payment-db-latency" in res.output and "token: fpa2." in res.output
    res = runner.invoke(app, ["guard", "check", "wide.yaml", "--format", "json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["approved_by"] == "bob"
    audit = Store().query("SELECT actor, action, subject FROM audit WHERE action = 'approve'")
    assert audit == [{"actor": "bob", "action": "approve", "subject": "payment-db-latency"}]


def test_approve_warns_when_other_rules_still_refuse(
    project: Path, approver: Approver, monkeypatch: pytest.MonkeyPatch
) -> None:
    approver.write_policy(project)
    monkeypatch.setenv("FAULTPLANE_APPROVER_PASSPHRASE", APPROVER_PASSPHRASE)
    write_experiment(project, base_experiment(slo_gates=None, blast_radius={"percent": 25}), "x.yaml")
    res = runner.invoke(app, ["guard", "approve", "x.yaml", "--key", str(approver.key_path)])
    assert res.exit_code == 0 and "still refuses" in res.output and "gates.required" in res.output


def test_policy_show(project: Path) -> None:
    res = runner.invoke(app, ["guard", "policy", "show"])
    assert (
        res.exit_code == 0 and "# source: built-in strict default" in res.output and "stages:" in res.output
    )
    (project / "faultplane.policy.yaml").write_text("approval: {min_stage: 1}\n")
    res = runner.invoke(app, ["guard", "policy", "show", "--format", "json"])
    shown = json.loads(res.stdout)
    assert shown["source"].endswith("faultplane.policy.yaml") and shown["approval"]["min_stage"] == 1
    (project / "faultplane.policy.yaml").write_text("approval: {min_stag: 1}\n")
    res = runner.invoke(app, ["guard", "policy", "show"])
    assert res.exit_code == 2 and "approval.min_stag" in res.output
