"""The agent hook against an adversarial shell corpus (hook_shell_corpus.txt): every line through the judging
function, again wrapped in `sh -c` and in a subshell (a wrapper must never change the verdict), and a sample
through the real hook process, fed Claude Code's PreToolUse JSON on stdin, both entry points."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from guard_helpers import base_experiment, bash_payload, hook_project, write_experiment

from faultplane.hook.judge import judge_tool_call

CORPUS = Path(__file__).with_name("hook_shell_corpus.txt")
CYR_P = "\u0440"

# reason class -> what the refusal must say (the agent reads it to know what to do instead)
REASONS = {
    "production": r"forbidden\.",
    "forbidden": r"forbidden\.",
    "runtime": r"at run time",
    "write-run": r"writes a script and runs it",
    "piped": r"piped into",
    "python-api": r"uses faultplane.*Instead",
    "opaque-code": r"cannot be checked",
    "parse": r"cannot parse",
    "approve": r"approvals are given by a person",
    "policy-switch": r"switches the guardrail policy",
    "guardfile": r"guardrail",
    "secret": r"approval (secrets|key)|keys",
    "unreadable": r"cannot read experiment",
}


def load_corpus() -> list[tuple[str, str, str]]:
    cases = []
    for n, line in enumerate(CORPUS.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        head, sep, command = line.partition(" :: ")
        assert sep, f"{CORPUS.name}:{n}: no ' :: ' separator"
        verdict, _, reason = head.strip().partition(" ")
        assert verdict in ("allow", "refuse"), f"{CORPUS.name}:{n}: verdict {verdict!r}"
        assert verdict == "allow" or reason, f"{CORPUS.name}:{n}: a refusal names its reason class"
        cases.append((verdict, reason.strip(), command.replace("⏎", "\n")))
    return cases


CASES = load_corpus()


def expected_reason(reason: str) -> str:
    return REASONS.get(reason, re.escape(reason))  # a policy rule name (forbidden.labels.env) as itself


def wrapped(command: str) -> list[tuple[str, str]]:
    return [
        ("sh -c", f"sh -c {shlex.quote(command)}"),
        ("subshell", f"echo begin; (\n{command}\n)"),
    ]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus") / "project"
    hook_project(root)
    (root / "faultplane.policy.yaml").write_text("version: 1\n")  # the strict default, spelled out
    write_experiment(root, base_experiment(), "ctk-ok.json")
    ctk = base_experiment()
    ctk["method"] = [
        {
            "type": "action",
            "name": "terminate",
            "provider": {
                "type": "python",
                "module": "chaosk8s.pod.actions",
                "func": "terminate_pods",
                "arguments": {"label_selector": "app=api", "ns": "prod"},
            },
        }
    ]
    write_experiment(root, ctk, "ctk-prod.json")
    (root / "vars-prod.yaml").write_text("api_url: https://api.prod.example.com\n")
    (root / "vars-ok.yaml").write_text("api_url: http://127.0.0.1:8080\n")
    (root / "notes.txt").write_text("a\n")
    (root / "ok.sh").write_text("#!/bin/sh\necho hello\nls -la\n")
    diff = "--- a/{0}\n+++ b/{0}\n@@ -1 +1 @@\n-version: 1\n+version: 2\n"
    (root / "evil.patch").write_text(diff.format("faultplane.policy.yaml"))
    (root / "ok.patch").write_text(diff.format("src/app.py"))
    (root / "evil.sh").write_text(f"#!/bin/bash\nfaultplane run {root}/prod.yaml\n")
    for script in ("ok.sh", "evil.sh"):
        (root / script).chmod(0o755)
    kube = root.parent / "kubeconfig"
    kube.write_text("apiVersion: v1\nkind: Config\ncurrent-context: kind-lab\n")
    return root


@pytest.fixture(autouse=True)
def kube_context(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(project.parent / "kubeconfig"))
    monkeypatch.delenv("FAULTPLANE_POLICY", raising=False)
    monkeypatch.delenv("FAULTPLANE_APPROVAL", raising=False)


def check(verdict: str, reason: str, command: str, project: Path) -> None:
    got = judge_tool_call(bash_payload(command, project))
    if verdict == "allow":
        assert got.allow, f"refused legitimate {command!r}: {got.reason}"
    else:
        assert not got.allow, f"let through {command!r} (expected {reason})"
        assert re.search(expected_reason(reason), got.reason), f"{command!r}: {got.reason}"


def test_corpus_is_large_and_balanced() -> None:
    allowed = [c for c in CASES if c[0] == "allow"]
    refused = [c for c in CASES if c[0] == "refuse"]
    assert len(allowed) >= 50 and len(refused) >= 200
    assert len({c[2] for c in CASES}) == len(CASES), "duplicate commands in the corpus"


@pytest.mark.parametrize(("verdict", "reason", "command"), CASES, ids=[c[2][:60] for c in CASES])
def test_corpus(verdict: str, reason: str, command: str, project: Path) -> None:
    check(verdict, reason, command, project)


@pytest.mark.parametrize(("verdict", "reason", "command"), CASES, ids=[c[2][:60] for c in CASES])
def test_corpus_wrapped(verdict: str, reason: str, command: str, project: Path) -> None:
    for _how, outer in wrapped(command):
        check(verdict, reason, outer, project)


SAMPLE = CASES[::7]


@pytest.mark.parametrize(("verdict", "reason", "command"), SAMPLE, ids=[c[2][:60] for c in SAMPLE])
def test_corpus_through_the_hook_process(verdict: str, reason: str, command: str, project: Path) -> None:
    entry = (
        [sys.executable, "-m", "faultplane.cli.main", "guard", "hook"]
        if len(command) % 2
        else [sys.executable, "-m", "faultplane.hook"]
    )
    res = subprocess.run(
        entry,
        input=json.dumps(bash_payload(command, project)),
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
        check=False,
    )
    if verdict == "allow":
        assert res.returncode == 0, res.stderr
        assert res.stderr == ""
    else:
        assert res.returncode == 2, (command, res.stdout, res.stderr)
        assert re.search(expected_reason(reason), res.stderr), res.stderr


def test_sample_covers_both_entries_and_verdicts() -> None:
    assert sum(v == "allow" for v, _, _ in SAMPLE) >= 15
    assert sum(v == "refuse" for v, _, _ in SAMPLE) >= 25


def test_yaml_helper_round_trips_unicode(project: Path) -> None:
    # the corpus relies on a look-alike letter surviving the file round trip
    assert CYR_P in CORPUS.read_text(encoding="utf-8")
    assert yaml.safe_load((project / "prod.yaml").read_text())["targets"][0]["labels"]["env"] == "prod"
