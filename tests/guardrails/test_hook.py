"""`faultplane guard hook` as a coding agent runs it: a subprocess fed real PreToolUse JSON on stdin.
Exit 2 with the reason on stderr blocks the tool call; exit 0 lets it through."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from guard_helpers import (
    APPROVER_PASSPHRASE,
    Approver,
    base_experiment,
    bash_payload,
    hook_payload,
    hook_project,
)

from faultplane.core import approval as approvals

CYR_P = "\u0440"


def hook(payload: Any, *, raw: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    text = raw if raw is not None else json.dumps(payload)
    env = {k: v for k, v in os.environ.items() if k not in ("FAULTPLANE_POLICY", "FAULTPLANE_APPROVAL")}
    return subprocess.run(
        [sys.executable, "-m", "faultplane.cli.main", "guard", "hook"],
        input=text,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def mcp(tool: str, tool_input: dict[str, Any], cwd: Path) -> dict[str, Any]:
    return hook_payload(f"mcp__faultplane__{tool}", tool_input, cwd)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return hook_project(tmp_path / "project", prod_env=f"{CYR_P}rod")  # a Cyrillic er: a homoglyph of prod


ALLOWED_BASH = [
    "ls -la",
    "git status && pytest -q",
    "faultplane run exp.yaml",
    "faultplane run exp.yaml --dry-run -o json",
    "cd experiments && faultplane run ok.json -q",
    "uv run faultplane run ./exp.yaml",
    "timeout -s KILL 120 faultplane run exp.yaml",
    "python -m faultplane run exp.yaml",
    "faultplane validate prod.yaml",
    "faultplane abort --all",
    "faultplane journal show abc123",
    "cat faultplane.policy.yaml",
    "faultplane run templated.yaml --var api_url=http://127.0.0.1:8080",
]


@pytest.mark.parametrize("command", ALLOWED_BASH)
def test_bash_allowed(project: Path, command: str) -> None:
    res = hook(bash_payload(command, project))
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""


BLOCKED_BASH = [
    ("faultplane run prod.yaml", "forbidden.labels.env"),
    ("faultplane run url.yaml", "forbidden.hosts"),
    ("faultplane run nogates.yaml", "gates.required"),
    ("faultplane run stage1.yaml", "approval.required"),
    ("echo start; cd experiments && faultplane run ../prod.yaml", "forbidden.labels.env"),
    ("bash -c 'faultplane run prod.yaml'", "forbidden.labels.env"),
    ("sudo -E env DEBUG=1 faultplane run prod.yaml", "forbidden.labels.env"),
    ("timeout -s KILL 60 faultplane run prod.yaml", "forbidden.labels.env"),
    ("/opt/venv/bin/faultplane run prod.yaml", "forbidden.labels.env"),
    ("python3 -m faultplane.cli.main run prod.yaml", "forbidden.labels.env"),
    ("faultplane run templated.yaml --var api_url=https://api.prod.example.com", "forbidden.hosts"),
    ("faultplane run templated.yaml --var=api_url=https://%70rod.example.com", "forbidden.hosts"),
    ("faultplane run missing.yaml", "cannot read experiment"),
    ("FAULTPLANE_POLICY=lax.yaml faultplane run nogates.yaml", "FAULTPLANE_POLICY"),
    ("export FAULTPLANE_POLICY=$PWD/lax.yaml && faultplane run nogates.yaml", "FAULTPLANE_POLICY"),
    ("faultplane run nogates.yaml --policy lax.yaml", "--policy"),
    ("faultplane approve stage1.yaml", "approvals are given by a person"),
    ("faultplane guard approve stage1.yaml", "approvals are given by a person"),
    ("f=faultplane; $f run prod.yaml", "forbidden.labels.env"),  # resolved like bash does
    ("$FP run prod.yaml", "only known at run time"),
    ("faultplane run $(ls prod*.yaml)", "builds words at run time"),
    ("rm -f faultplane.policy.yaml", "policy file"),
    ("echo 'gates: {required: false}' > faultplane.policy.yaml", "policy file"),
    ("sed -i s/true/false/ faultplane.policy.yaml", "policy file"),
    ("cat ~/.config/faultplane/approval.key", "approval secrets"),
    ("faultplane run 'unterminated.yaml", "cannot parse"),
]


@pytest.mark.parametrize(("command", "reason"), BLOCKED_BASH, ids=[c for c, _ in BLOCKED_BASH])
def test_bash_blocked(project: Path, command: str, reason: str) -> None:
    res = hook(bash_payload(command, project))
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert reason in res.stderr


def test_mcp_run_inline_experiment(project: Path) -> None:
    good = yaml.safe_dump(base_experiment())
    assert hook(mcp("chaos_run_experiment", {"experiment": good}, project)).returncode == 0
    bad = yaml.safe_dump(
        base_experiment(configuration={"db": f"postgresql://app@{CYR_P}rod-db:5432/x"}), allow_unicode=True
    )
    res = hook(mcp("chaos_run_experiment", {"experiment": bad, "dry_run": True}, project))
    assert res.returncode == 2 and "forbidden.hosts" in res.stderr
    res = hook(
        mcp("chaos_run_experiment", {"experiment": json.dumps(base_experiment(slo_gates=None))}, project)
    )
    assert res.returncode == 2 and "gates.required" in res.stderr


def test_mcp_run_with_variables(project: Path) -> None:
    doc = base_experiment()
    doc["method"][0]["provider"] = {"type": "http", "url": "${api_url}/faults"}
    text = yaml.safe_dump(doc)
    ok = mcp(
        "chaos_run_experiment", {"experiment": text, "variables": {"api_url": "http://127.0.0.1:1"}}, project
    )
    assert hook(ok).returncode == 0
    bad = mcp(
        "chaos_run_experiment",
        {"experiment": text, "variables": {"api_url": "https://prod.example.com"}},
        project,
    )
    res = hook(bad)
    assert res.returncode == 2 and "forbidden" in res.stderr


def test_mcp_other_tools(project: Path) -> None:
    assert hook(mcp("chaos_list_experiments", {}, project)).returncode == 0
    assert hook(mcp("chaos_validate_experiment", {"experiment": "title: prod\n"}, project)).returncode == 0
    res = hook(
        mcp(
            "chaos_inject_fault",
            {"fault_name": "prod-db-latency", "action": "register", "fault_type": "latency"},
            project,
        )
    )
    assert res.returncode == 2 and "forbidden.words" in res.stderr
    ok = mcp(
        "chaos_inject_fault",
        {"fault_name": "checkout-latency", "action": "register", "fault_type": "latency"},
        project,
    )
    assert hook(ok).returncode == 0


def test_editing_guardrail_files_is_blocked(project: Path) -> None:
    write = {
        "cwd": str(project),
        "hook_event_name": "PreToolUse",
        "tool_name": "Write",
        "tool_input": {"file_path": str(project / "faultplane.policy.yaml"), "content": "gates: {}\n"},
    }
    res = hook(write)
    assert res.returncode == 2 and "policy" in res.stderr
    edit = {
        "cwd": str(project),
        "tool_name": "Edit",
        "tool_input": {"file_path": str(approvals.key_path()), "old_string": "a", "new_string": "b"},
    }
    assert hook(edit).returncode == 2
    fine = {
        "cwd": str(project),
        "tool_name": "Write",
        "tool_input": {"file_path": str(project / "experiments" / "new.yaml"), "content": "title: x\n"},
    }
    assert hook(fine).returncode == 0
    assert hook({"cwd": str(project), "tool_name": "Read", "tool_input": {"file_path": "x"}}).returncode == 0


def test_malformed_input_blocks(project: Path) -> None:
    res = hook(None, raw="this is not json")
    assert res.returncode == 2 and "not the hook's JSON" in res.stderr
    res = hook(None, raw="[1, 2]")
    assert res.returncode == 2


def test_human_approval_unblocks_exactly_that_version(project: Path, approver: Approver) -> None:
    approver.write_policy(project)
    payload = bash_payload("faultplane run stage1.yaml", project)
    assert hook(payload).returncode == 2
    approve = subprocess.run(
        [
            sys.executable,
            "-m",
            "faultplane.cli.main",
            "guard",
            "approve",
            "stage1.yaml",
            "--key",
            str(approver.key_path),
            "--reason",
            "reviewed",
            "-o",
            "json",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**os.environ, "FAULTPLANE_APPROVER_PASSPHRASE": APPROVER_PASSPHRASE},
    )
    assert approve.returncode == 0, approve.stderr
    token = json.loads(approve.stdout)
    assert token["approver"] == "alice" and token["token"].startswith("fpa2.")
    assert hook(payload).returncode == 0
    # the agent edits the approved experiment: the approval no longer applies
    text = (project / "stage1.yaml").read_text()
    (project / "stage1.yaml").write_text(text.replace("staging replica", "staging replica, edited"))
    res = hook(payload)
    assert res.returncode == 2 and "changed since" in res.stderr


def test_project_policy_is_honoured(project: Path) -> None:
    (project / "faultplane.policy.yaml").write_text("gates: {required: false}\n")
    assert hook(bash_payload("faultplane run nogates.yaml", project)).returncode == 0
    (project / "faultplane.policy.yaml").write_text("gates: {requird: false}\n")
    res = hook(bash_payload("faultplane run nogates.yaml", project))
    assert res.returncode == 2 and "policy cannot be read" in res.stderr
