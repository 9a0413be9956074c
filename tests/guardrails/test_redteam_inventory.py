"""A declared target inventory: anything undeclared is refused, in phase 0, at the choke point, on every surface."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from typer.testing import CliRunner

from faultplane.cli.main import app
from faultplane.core.policy import Policy, evaluate
from faultplane.engine.lifecycle import plan, run_plan

runner = CliRunner()
INVENTORY = {
    "hosts": ["127.0.0.1", "localhost", "*.staging.internal", "10.20.0.0/16"],
    "kube_contexts": ["kind-lab"],
    "kube_namespaces": ["staging", "team-*"],
    "databases": ["postgresql://127.0.0.1:5432/payments*", "redis://127.0.0.1:6379*"],
    "executables": ["true", sys.executable, "*/kubectl", "kubectl"],
}
POLICY = {"gates": {"required": False, "min_gates": 0, "require_window": False}, "inventory": INVENTORY}


def _exp(*args: str, path: str = "true", **extra: Any) -> dict[str, Any]:
    provider = {"type": "process", "path": path, "arguments": list(args)}
    return {"title": "inv", "method": [{"type": "action", "name": "a", "provider": provider}], **extra}


UNDECLARED = [
    ("url-host", _exp("http://10.99.0.5:8080/h"), "inventory.hosts"),
    ("hostname", _exp("curl", "https://api.other.internal/x"), "inventory.hosts"),
    ("user-at-host", _exp("ssh", "admin@db7.corp"), "inventory.hosts"),
    ("bare-ip", _exp("--target", "192.168.1.9"), "inventory.hosts"),
    ("cidr-outside", _exp("http://10.21.0.1/"), "inventory.hosts"),
    ("namespace-flag", _exp("delete", "pod", "-n", "payments", path="kubectl"), "inventory.kube_namespaces"),
    ("namespace-attached", _exp("delete", "pod", "-npayments", path="kubectl"), "inventory.kube_namespaces"),
    (
        "namespace-eq",
        _exp("delete", "pod", "--namespace=payments", path="kubectl"),
        "inventory.kube_namespaces",
    ),
    ("context-eq", _exp("get", "po", "--context=gke-main", path="kubectl"), "inventory.kube_contexts"),
    ("db-url", _exp("postgresql://app@127.0.0.1:5432/ledger"), "inventory.databases"),
    ("db-keyword", _exp("host=127.0.0.1 port=5432 dbname=ledger"), "inventory.databases"),
    ("redis-other-port", _exp("redis://127.0.0.1:6380/0"), "inventory.databases"),
    ("executable", _exp("-c", "1", path="/usr/bin/perl"), "inventory.executables"),
    ("config-host", _exp(configuration={"db_host": "db9.corp"}), "inventory.hosts"),
    (
        "secret-dsn",
        _exp(secrets={"db": {"dsn": "postgresql://u:p@db9.corp:5432/payments"}}),
        "inventory.hosts",
    ),
    (
        "rollback-host",
        {
            **_exp(),
            "rollbacks": [
                {"type": "action", "name": "r", "provider": {"type": "http", "url": "http://evil.example/"}}
            ],
        },
        "inventory.hosts",
    ),
    ("load-url", _exp(load={"url": "http://10.30.0.1:80/", "rate": 1}), "inventory.hosts"),
]
DECLARED = [
    _exp("http://127.0.0.1:8080/health"),
    _exp("https://api.staging.internal/x"),
    _exp("http://10.20.3.4:9000/"),
    _exp("get", "po", "-n", "staging", "--context=kind-lab", path="kubectl"),
    _exp("get", "po", "--namespace=team-a", path="kubectl"),
    _exp("postgresql://app@127.0.0.1:5432/payments"),
    _exp("host=127.0.0.1 port=5432 dbname=payments_test"),
    _exp("-c", "print(1)", path=sys.executable),
]


@pytest.mark.parametrize(("case", "doc", "rule"), UNDECLARED, ids=[c[0] for c in UNDECLARED])
def test_undeclared_targets_are_refused(case: str, doc: dict[str, Any], rule: str) -> None:
    decision = evaluate(doc, policy=Policy.model_validate(POLICY), store=None)
    assert not decision.allowed and rule in [v.rule for v in decision.violations], decision.violations
    if case == "secret-dsn":
        assert all("db9" not in v.message for v in decision.violations)


@pytest.mark.parametrize("doc", DECLARED)
def test_declared_targets_are_allowed(doc: dict[str, Any]) -> None:
    decision = evaluate(doc, policy=Policy.model_validate(POLICY), store=None)
    assert decision.allowed, decision.violations


def test_without_an_inventory_nothing_changes() -> None:
    assert evaluate(
        UNDECLARED[0][1], policy=Policy.model_validate({"gates": {"required": False}}), store=None
    ).allowed


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working directory: a git project whose project policy is POLICY, and no other policy in force."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "faultplane.policy.yaml").write_text(yaml.safe_dump(POLICY))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FAULTPLANE_POLICY", raising=False)
    return tmp_path


@pytest.mark.parametrize("command", [["guard", "check"], ["validate"], ["run", "--dry-run"], ["run"]])
def test_every_cli_surface_uses_the_project_inventory(command: list[str], project: Path) -> None:
    marker = project / "marker"
    doc = _exp("-c", f"open({str(marker)!r}, 'w')", "http://10.99.0.5/", path=sys.executable)
    (project / "exp.yaml").write_text(yaml.safe_dump(doc))
    res = runner.invoke(app, [*command, "exp.yaml"])
    assert res.exit_code != 0 and not marker.exists(), res.output


def test_the_choke_point_enforces_the_inventory(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    p = plan(_exp("-c", f"open({str(marker)!r}, 'w')", "admin@db7.corp", path=sys.executable))
    journal = anyio.run(lambda: run_plan(p, policy=Policy.model_validate(POLICY)))
    assert not marker.exists() and "inventory" in (journal.run[0].exception or "")


def test_an_env_policy_cannot_drop_the_project_inventory(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from faultplane.core.policy import load_policy

    lax = project / "lax.yaml"
    lax.write_text("inventory: {hosts: ['*']}\n")
    monkeypatch.setenv("FAULTPLANE_POLICY", str(lax))
    pol = load_policy()
    assert pol.inventory is not None and pol.inventory.hosts == []  # no entry both layers declare
    assert pol.inventory.kube_namespaces == ["staging", "team-*"]


@pytest.mark.parametrize("name", ["prod-db", "proddb", "\u0440rod1", "payments-prodweb"])
def test_fault_registration_names_are_judged_by_the_policy(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from faultplane.core.faults import FaultRegistry
    from faultplane.services.faults import FaultInputError, list_faults, manage_fault

    monkeypatch.chdir(tmp_path)
    reg = FaultRegistry(tmp_path / "faults.json")
    with pytest.raises(FaultInputError, match="refused by policy"):
        manage_fault(name, "register", fault_type="latency", probability=1.0, registry=reg)
    with pytest.raises(FaultInputError, match="refused by policy"):
        manage_fault("db", "register", fault_type="latency", target=f"{name}:5432", registry=reg)
    assert list_faults(reg) == []
    manage_fault("product-db", "register", fault_type="latency", probability=1.0, registry=reg)
    assert [f.name for f in list_faults(reg)] == ["product-db"]


def test_fault_registration_target_outside_the_inventory_is_refused(project: Path) -> None:
    from faultplane.core.faults import FaultRegistry
    from faultplane.services.faults import FaultInputError, manage_fault

    reg = FaultRegistry(project / "faults.json")
    with pytest.raises(FaultInputError, match="inventory"):
        manage_fault("db", "register", fault_type="latency", target="db7.corp", registry=reg)
    manage_fault("db", "register", fault_type="latency", target="127.0.0.1", registry=reg)
