"""The agent hook applies the policy's target inventory, as the engine and the MCP server do: a chaos command it
judges (fault tools, `faultplane run`, Chaos Toolkit's `chaos run`, Faultplane MCP tool calls) is refused
when it names a target the inventory does not declare. Run through the hook's own entry point
(`faultplane.hook.entry.main`: PreToolUse JSON on stdin, exit code out) and, for a sample, its process."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from guard_helpers import hook_payload

from faultplane.hook.entry import main as hook_main

INVENTORY = {
    "hosts": ["127.0.0.1", "localhost", "*.staging.internal", "10.20.0.0/16"],
    "kube_contexts": ["kind-lab"],
    "kube_namespaces": ["staging", "team-*"],
    "databases": ["postgresql://127.0.0.1:5432/payments*"],
}
POLICY = {"gates": {"required": False, "min_gates": 0, "require_window": False}, "inventory": INVENTORY}


def _exp(*args: str) -> dict[str, Any]:
    return {
        "title": "inv",
        "method": [
            {
                "type": "action",
                "name": "a",
                "provider": {"type": "process", "path": "true", "arguments": list(args)},
            }
        ],
    }


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "lab"
    (root / ".git").mkdir(parents=True)
    (root / "faultplane.policy.yaml").write_text(yaml.safe_dump(POLICY))
    (root / "ok.yaml").write_text(yaml.safe_dump(_exp("http://127.0.0.1:8080/h")))
    (root / "far.yaml").write_text(yaml.safe_dump(_exp("http://db7.corp:8080/h")))
    ctk = _exp("http://10.99.0.5/h")
    ctk["description"] = "x"
    (root / "ctk-far.json").write_text(json.dumps(ctk))
    lab_kube = root / "kubeconfig-lab"
    lab_kube.write_text("apiVersion: v1\nkind: Config\ncurrent-context: kind-lab\n")
    (root / "kubeconfig-other").write_text("apiVersion: v1\nkind: Config\ncurrent-context: gke-main\n")
    monkeypatch.setenv("KUBECONFIG", str(lab_kube))  # the agent's current context is the lab's
    monkeypatch.delenv("FAULTPLANE_POLICY", raising=False)
    monkeypatch.chdir(root)
    return root


Hook = Callable[[str, dict[str, Any]], tuple[int, str]]


@pytest.fixture
def hook(project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Hook:
    """The hook's verdict on one tool call (tool name, tool input) made in `project`: its exit code and
    stderr."""

    def judge(tool: str, tool_input: dict[str, Any]) -> tuple[int, str]:
        monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(hook_payload(tool, tool_input, project))))
        code = hook_main()
        return code, capsys.readouterr().err

    return judge


REFUSED = [
    "kubectl delete pod api-1 -n payments",
    "kubectl delete pod api-1 --namespace=payments",
    "kubectl delete pod api-1 -npayments",
    "kubectl -n payments scale deploy/api --replicas=0",
    "kubectl --context gke-main -n staging delete pod api-1",
    "kubectl --context=gke-main drain kind-worker",
    "KUBECONFIG=kubeconfig-other kubectl delete pod api-1 -n staging",
    "kubectl delete pod api-1",
    "kubectl delete pods --all -A",
    "kubectl delete ns payments",
    "helm uninstall api -n payments",
    "iptables -A OUTPUT -d 192.168.1.9 -j DROP",
    "toxiproxy-cli create db --listen 127.0.0.1:26379 --upstream db7.corp:6379",
    "faultplane run far.yaml",
    "chaos run ctk-far.json",
    "env X=1 timeout 60 kubectl delete pod api-1 -n other-team",
]
ALLOWED = [
    "kubectl delete pod api-1 -n staging",
    "kubectl --context kind-lab -n team-a rollout restart deploy/api",
    "kubectl cordon kind-worker",
    "kubectl drain kind-worker --ignore-daemonsets",
    "kubectl delete ns team-tmp",
    "helm uninstall api -n staging",
    "iptables -A OUTPUT -d 10.20.1.5 -j DROP",
    "toxiproxy-cli create db --listen 127.0.0.1:26379 --upstream 127.0.0.1:6379",
    "tc qdisc add dev lo root netem delay 100ms",
    "kubectl get pods -n payments",  # reading is not a fault
    "faultplane run ok.yaml",
    "ls -la && git status",
]


@pytest.mark.parametrize("command", REFUSED)
def test_undeclared_targets_are_refused_by_the_hook(hook: Hook, command: str) -> None:
    code, err = hook("Bash", {"command": command})
    assert code == 2, (command, err)
    assert "inventory" in err and ("Instead" in err or "Fix" in err), err


@pytest.mark.parametrize("command", ALLOWED)
def test_declared_targets_pass_the_hook(hook: Hook, command: str) -> None:
    code, err = hook("Bash", {"command": command})
    assert code == 0, (command, err)


def test_mcp_tool_calls_meet_the_same_inventory(hook: Hook) -> None:
    run = "mcp__faultplane__chaos_run_experiment"
    code, err = hook(run, {"experiment": yaml.safe_dump(_exp("admin@db7.corp"))})
    assert code == 2 and "inventory.hosts" in err, err
    code, err = hook(run, {"experiment_name": "ok.yaml", "variables": {"upstream": "http://10.99.0.5/"}})
    assert code == 2 and "inventory.hosts" in err, err
    code, err = hook(run, {"experiment": yaml.safe_dump(_exp("http://127.0.0.1:8080/h"))})
    assert code == 0, err


def test_without_an_inventory_the_hook_judges_names_only(project: Path, hook: Hook) -> None:
    (project / "faultplane.policy.yaml").write_text(yaml.safe_dump({"gates": POLICY["gates"]}))
    for command in (
        "kubectl delete pod api-1",
        "kubectl delete pod api-1 -n payments",
        "iptables -A OUTPUT -d 192.168.1.9 -j DROP",
    ):
        code, err = hook("Bash", {"command": command})
        assert code == 0, (command, err)
    code, err = hook("Bash", {"command": "kubectl delete pod api-1 -n prod"})
    assert code == 2 and "prod" in err


@pytest.mark.parametrize(
    ("command", "blocked"), [(REFUSED[0], True), (REFUSED[11], True), (ALLOWED[0], False)]
)
def test_the_hook_process_applies_the_inventory(project: Path, command: str, blocked: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != "FAULTPLANE_POLICY"}
    res = subprocess.run(
        [sys.executable, "-m", "faultplane.hook"],
        input=json.dumps(hook_payload("Bash", {"command": command}, project)),
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert res.returncode == (2 if blocked else 0), res.stderr
    assert ("inventory" in res.stderr) == blocked
