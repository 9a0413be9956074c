"""The hook's file tools (Write, Edit, MultiEdit, NotebookEdit, Read) against guardrail files, and hostile
input: oversized or deeply nested JSON, deep shell nesting, odd Unicode. Every failure must block (exit 2),
never crash with exit 1, which Claude Code would read as "go ahead"."""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from faultplane.hook.judge import judge_tool_call


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    (root / ".claude").mkdir()
    (root / "faultplane.policy.yaml").write_text("version: 1\n")
    (root / "policy-link.yaml").symlink_to(root / "faultplane.policy.yaml")
    return root


def edit(tool: str, path: str, cwd: Path) -> dict[str, Any]:
    key = "notebook_path" if tool == "NotebookEdit" else "file_path"
    return {"cwd": str(cwd), "hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": {key: path}}


def config_home() -> Path:
    return Path(os.environ["XDG_CONFIG_HOME"])


PROTECTED = [
    "faultplane.policy.yaml",
    "./faultplane.policy.yml",
    "sub/dir/faultplane.policy.yaml",
    "faultplane.policy.local.yaml",
    "FaultPlane.Policy.YAML",
    "policy-link.yaml",  # a symlink to the policy is the policy
    "../project/faultplane.policy.yaml",
    ".faultplane/approvals/abc.json",
    ".faultplane/keys/approver.pem",
    ".claude/settings.json",
    ".claude/settings.local.json",
    "~/.config/faultplane/faultplane.policy.yaml",
    "~/.claude/settings.json",
]


@pytest.mark.parametrize("tool", ["Write", "Edit", "MultiEdit", "NotebookEdit"])
@pytest.mark.parametrize("path", PROTECTED)
def test_file_tools_cannot_change_guardrail_files(project: Path, tool: str, path: str) -> None:
    verdict = judge_tool_call(edit(tool, path, project))
    assert not verdict.allow, path
    assert "only a person" in verdict.reason


@pytest.mark.parametrize("tool", ["Write", "Edit", "MultiEdit"])
def test_file_tools_cannot_change_user_config(project: Path, tool: str) -> None:
    for target in (
        config_home() / "faultplane" / "policy.yaml",
        config_home() / "faultplane" / "approval.key",
    ):
        assert not judge_tool_call(edit(tool, str(target), project)).allow


@pytest.mark.parametrize(
    "path",
    ["experiments/new.yaml", "README.md", "src/app.py", "notes/faultplane-policy-notes.md", ".claude/x.md"],
)
def test_file_tools_edit_ordinary_files(project: Path, path: str) -> None:
    for tool in ("Write", "Edit", "MultiEdit"):
        assert judge_tool_call(edit(tool, path, project)).allow, (tool, path)


def test_read_tool_reads_policy_but_not_keys(project: Path) -> None:
    assert judge_tool_call(edit("Read", "faultplane.policy.yaml", project)).allow
    key = config_home() / "faultplane" / "approval.key"
    verdict = judge_tool_call(edit("Read", str(key), project))
    assert not verdict.allow and "approval" in verdict.reason
    assert not judge_tool_call(edit("Read", ".faultplane/keys/approver.pem", project)).allow


def test_key_moved_by_environment_is_guarded(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = project.parent / "elsewhere" / "my.key"
    monkeypatch.setenv("FAULTPLANE_APPROVAL_KEY", str(key))
    assert not judge_tool_call(edit("Read", str(key), project)).allow
    bash = {"cwd": str(project), "tool_name": "Bash", "tool_input": {"command": f"cat {key}"}}
    assert not judge_tool_call(bash).allow


def test_services_guard_does_not_reach_up_to_the_hook() -> None:
    # The hook asks services, never the reverse: services.guard neither imports the hook nor answers its names.
    import faultplane.services.guard as guard

    tree = ast.parse(inspect.getsource(guard))
    modules = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    modules += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert "faultplane.core.policy" in modules  # the walk sees the module's imports
    assert [m for m in modules if m.startswith("faultplane.hook")] == []
    assert not hasattr(guard, "judge_tool_call")


# ---- hostile input ---------------------------------------------------------------------------------------


def run_hook(stdin: bytes, *entry: str) -> subprocess.CompletedProcess[bytes]:
    argv = list(entry) or [sys.executable, "-m", "faultplane.hook"]
    return subprocess.run(argv, input=stdin, capture_output=True, timeout=60, check=False)


@pytest.mark.parametrize(
    "stdin",
    [
        b"",
        b"not json",
        b"[1, 2]",
        b"null",
        b"\xff\xfe garbage",
        b"[" * 100_000 + b"]" * 100_000,
        b'{"tool_name": "Bash", "tool_input": ' + b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"}",
    ],
    ids=["empty", "text", "list", "null", "bad-utf8", "deep-list", "deep-object"],
)
def test_malformed_stdin_blocks(stdin: bytes) -> None:
    res = run_hook(stdin)
    assert res.returncode == 2, res.stderr
    assert b"Traceback" not in res.stderr
    assert res.stderr.strip().count(b"\n") <= 2  # a sentence, not a dump


def test_oversized_input_blocks() -> None:
    payload = {"tool_name": "Bash", "cwd": "/", "tool_input": {"command": "echo " + "a" * 5_000_000}}
    res = run_hook(json.dumps(payload).encode())
    assert res.returncode == 2 and b"larger than" in res.stderr


def test_same_answers_from_every_entry(project: Path) -> None:
    good = json.dumps({"cwd": str(project), "tool_name": "Bash", "tool_input": {"command": "ls"}}).encode()
    bad = json.dumps(
        {"cwd": str(project), "tool_name": "Bash", "tool_input": {"command": "rm faultplane.policy.yaml"}}
    ).encode()
    for entry in (
        [sys.executable, "-m", "faultplane.hook"],
        [sys.executable, "-m", "faultplane.cli.main", "guard", "hook"],
        [sys.executable, "-m", "faultplane.hook.entry"],
    ):
        assert run_hook(good, *entry).returncode == 0
        res = run_hook(bad, *entry)
        assert res.returncode == 2 and b"guardrail" in res.stderr


def bash(command: str, cwd: Path) -> dict[str, Any]:
    return {"cwd": str(cwd), "tool_name": "Bash", "tool_input": {"command": command}}


def test_deep_nesting_is_refused_not_crashed(project: Path) -> None:
    command = "faultplane run exp.yaml"
    for _ in range(12):
        command = f"bash -c {json.dumps(command)}"
    verdict = judge_tool_call(bash(command, project))
    assert not verdict.allow
    deep = "(" * 3000 + "faultplane run prod.yaml" + ")" * 3000
    assert not judge_tool_call(bash(deep, project)).allow
    subs = "echo " + "$(" * 500 + "kubectl delete ns prod" + ")" * 500
    assert not judge_tool_call(bash(subs, project)).allow


def test_huge_harmless_command_passes(project: Path) -> None:
    assert judge_tool_call(bash("; ".join(["ls -la"] * 20_000), project)).allow


@pytest.mark.parametrize(
    "command",
    [
        "kubectl delete pod api-1 -n pr\u200bod",  # zero-width space inside the namespace
        "kubectl delete pod api-1 -n \uff50\uff52\uff4f\uff44",  # full-width letters
        "kubectl delete pod api-1 -n PR\u041eD",  # Cyrillic capital O
        "kubectl delete pod api-1 --context=pr\u00f3d-eu",  # an accent
        "helm uninstall api -n %70rod",  # percent-encoded
    ],
)
def test_unicode_lookalikes_in_fault_tools(project: Path, command: str) -> None:
    verdict = judge_tool_call(bash(command, project))
    assert not verdict.allow and "forbidden." in verdict.reason, verdict.reason


def test_lone_surrogates_and_nul_do_not_crash(project: Path) -> None:
    for command in (
        "echo \ud800 && ls",
        "ls\x00; faultplane approve x.yaml",
        "echo \udcff > faultplane.policy.yaml",
    ):
        verdict = judge_tool_call(bash(command, project))
        assert isinstance(verdict.allow, bool)
    assert not judge_tool_call(bash("echo \udcff > faultplane.policy.yaml", project)).allow


def _patch_call(project: Path, tool: str, **tool_input: Any) -> dict[str, Any]:
    return {"cwd": str(project), "hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": tool_input}


@pytest.mark.parametrize("path", PROTECTED[:9])
def test_the_apply_patch_tool_cannot_change_guardrail_files(project: Path, path: str) -> None:
    """The patch names its files in its text, not under a path key: every one of them was allowed."""
    envelope = f"*** Begin Patch\n*** Update File: {path}\n@@\n-version: 1\n+version: 2\n*** End Patch\n"
    unified = f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-version: 1\n+version: 2\n"
    for tool, text in (
        ("apply_patch", envelope),
        ("mcp__codex__apply_patch", envelope),
        ("apply_patch", unified),
    ):
        verdict = judge_tool_call(_patch_call(project, tool, input=text))
        assert not verdict.allow and "only a person" in verdict.reason, (tool, path)
    moved = "*** Begin Patch\n*** Update File: lax.yaml\n*** Move to: faultplane.policy.yaml\n*** End Patch\n"
    assert not judge_tool_call(_patch_call(project, "apply_patch", input=moved)).allow


def test_the_apply_patch_tool_changes_ordinary_files(project: Path) -> None:
    text = "*** Begin Patch\n*** Add File: src/app.py\n+print('faultplane.policy.yaml is read here')\n*** End Patch\n"
    assert judge_tool_call(_patch_call(project, "apply_patch", input=text)).allow


def test_non_string_fields(project: Path) -> None:
    assert not judge_tool_call(
        {"cwd": str(project), "tool_name": "Bash", "tool_input": {"command": 42}}
    ).allow
    # a path that is neither a string nor a list of them: what the tool makes of it is unknown
    for value in ([["faultplane.policy.yaml"]], {"p": "faultplane.policy.yaml"}, 5):
        verdict = judge_tool_call(_patch_call(project, "Write", file_path=value, content="x"))
        assert not verdict.allow and "blocking to be safe" in verdict.reason, value
    assert not judge_tool_call({"cwd": str(project), "tool_name": "Bash", "tool_input": "rm -rf /"}).allow
    assert not judge_tool_call(["Bash"]).allow  # type: ignore[arg-type]


LEAN_PROBE = """
import io, json, sys
sys.argv = sys.argv[:1] + ["guard", "hook"]
sys.stdin = io.StringIO(json.dumps({"cwd": %r, "tool_name": "Bash", "tool_input": {"command": %r}}))
try:
    import faultplane.cli.main
except SystemExit as exc:
    code = exc.code
heavy = sorted(m for m in ("typer", "rich", "pydantic", "duckdb", "mcp", "yaml", "faultplane.core.policy",
                           "faultplane.engine.lifecycle", "faultplane.faultpoint") if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy}))
"""


def _lean_probe(project: Path, command: str) -> tuple[dict[str, Any], str]:
    """LEAN_PROBE in a fresh interpreter: the hook's exit code on `command` and the heavy modules it imported;
    and its stderr."""
    res = subprocess.run(
        [sys.executable, "-c", LEAN_PROBE % (str(project), command)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return json.loads(res.stdout.strip().splitlines()[-1]), res.stderr


@pytest.mark.parametrize(
    ("command", "code"),
    [
        ("git status && pytest -q", 0),
        ("cat notes.txt | grep -c x > n.txt", 0),
        ("rm faultplane.policy.yaml", 2),
    ],
)
def test_unrelated_commands_load_nothing_heavy(project: Path, command: str, code: int) -> None:
    """`faultplane guard hook` answers ordinary commands without typer, the policy model or the store."""
    out, stderr = _lean_probe(project, command)
    assert out == {"code": code, "heavy": []}, stderr


def test_chaos_commands_do_load_the_policy(project: Path) -> None:
    out, _ = _lean_probe(project, "kubectl delete pod x -n staging")
    assert out["code"] == 0 and "faultplane.core.policy" in out["heavy"]


def test_other_servers_file_and_shell_tools(project: Path) -> None:
    """An MCP filesystem or shell server is a way around Write and Bash: its tools are judged the same."""
    key = config_home() / "faultplane" / "approval.key"
    refused = [
        ("mcp__filesystem__write_file", {"path": str(project / "faultplane.policy.yaml"), "content": ""}),
        (
            "mcp__filesystem__move_file",
            {"source": str(project / "faultplane.policy.yaml"), "destination": "/tmp/x"},
        ),
        ("mcp__filesystem__edit_file", {"path": ".claude/settings.json", "edits": []}),
        ("mcp__filesystem__read_file", {"path": str(key)}),
        ("mcp__filesystem__read_multiple_files", {"paths": ["README.md", str(key)]}),
        ("Grep", {"pattern": ".", "path": str(key)}),
        ("mcp__shell__run_command", {"command": "faultplane approve stage1.yaml"}),
        ("mcp__desktop-commander__execute_command", {"command": "rm faultplane.policy.yaml"}),
        ("mcp__shell__run_command", {"command": ["rm", "faultplane.policy.yaml"]}),
    ]
    for tool, tool_input in refused:
        verdict = judge_tool_call({"cwd": str(project), "tool_name": tool, "tool_input": tool_input})
        assert not verdict.allow, tool
    allowed = [
        ("mcp__filesystem__write_file", {"path": str(project / "notes.md"), "content": ""}),
        ("mcp__filesystem__read_file", {"path": str(project / "faultplane.policy.yaml")}),
        ("Grep", {"pattern": "prod", "path": str(project)}),
        ("mcp__shell__run_command", {"command": "ls -la"}),
    ]
    for tool, tool_input in allowed:
        verdict = judge_tool_call({"cwd": str(project), "tool_name": tool, "tool_input": tool_input})
        assert verdict.allow, (tool, verdict.reason)
