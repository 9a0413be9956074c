"""Hostile files at every place a file or JSON enters: variable files (JSON, YAML, .env), GameDay files, search
specs, fault plans, policy files, experiments, report manifests, and the journals and indexes Faultplane reads
back. 1000-level nesting, files over the size limit, bad UTF-8 and YAML alias bombs ("billion laughs").

A file the user names gets one line, exit code 2 and no traceback. A file Faultplane wrote for itself and
finds planted (an events log, a history index, the fault registry) is ignored: it never stops a command.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from faultplane.cli.main import app
from faultplane.core.hostile import MAX_BYTES

runner = CliRunner()
LAB = "gates: {required: false, min_gates: 0, require_window: false}\n"

BILLION_LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{n}: &{n} [{', '.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)
HOSTILE: dict[str, bytes] = {
    "nested-1000-json": ('{"a":' * 1000 + "1" + "}" * 1000).encode(),
    "nested-1000-yaml": ("a: " + "[" * 1000 + "]" * 1000 + "\n").encode(),
    "nested-1000-block-yaml": "".join("  " * i + f"k{i}:\n" for i in range(1000)).encode(),
    "huge": b"title: x\nnote: " + b"a" * (MAX_BYTES + 16) + b"\n",
    "bad-utf8": b"title: \xff\xfe\xfa caf\xe9\n",
    "billion-laughs": BILLION_LAUGHS.encode(),
}
JSON_KINDS = ["nested-1000-json", "huge", "bad-utf8"]


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "lab"
    (root / ".git").mkdir(parents=True)
    (root / "faultplane.policy.yaml").write_text(LAB)
    (root / "exp.yaml").write_text(
        "title: t\nmethod:\n- {type: action, name: a, provider: {type: process, path: 'true'}}\n"
    )
    (root / "gd.yaml").write_text("name: g\nlanes: [{name: l, experiments: [exp.yaml]}]\n")
    monkeypatch.chdir(root)
    monkeypatch.delenv("FAULTPLANE_POLICY", raising=False)
    return root


def _suffix(kind: str) -> str:
    return ".json" if kind.endswith("json") else ".yaml"


# entry point -> (file suffix for a kind, the command given the hostile file)
ENTRIES: dict[str, tuple[Callable[[str], str], Callable[[str], list[str]]]] = {
    "var-file": (_suffix, lambda f: ["validate", "exp.yaml", "--var-file", f]),
    "var-file-env": (lambda k: ".env", lambda f: ["run", "--dry-run", "exp.yaml", "--var-file", f]),
    "gameday-file": (_suffix, lambda f: ["gameday", "run", f, "--dry-run"]),
    "gameday-var-file": (_suffix, lambda f: ["gameday", "run", "gd.yaml", "--dry-run", "--var-file", f]),
    "search-spec": (_suffix, lambda f: ["search", f]),
    "search-var-file": (_suffix, lambda f: ["search", "search.yaml", "--var-file", f]),
    "fault-plan": (_suffix, lambda f: ["plane", "validate", f]),
    "fault-plan-simulate": (_suffix, lambda f: ["plane", "simulate", "-p", f]),
    "policy-file": (_suffix, lambda f: ["guard", "check", "exp.yaml", "--policy", f]),
    "policy-for-run": (_suffix, lambda f: ["run", "--dry-run", "exp.yaml", "--policy", f]),
    "experiment-validate": (_suffix, lambda f: ["validate", f]),
    "experiment-guard-check": (_suffix, lambda f: ["guard", "check", f]),
    "experiment-dry-run": (_suffix, lambda f: ["run", "--dry-run", f]),
}
CASES = [
    (entry, kind)
    for entry in ENTRIES
    for kind in HOSTILE
    # a .env file is lines of name=value: nesting and aliases mean nothing there
    if entry != "var-file-env" or kind in ("huge", "bad-utf8")
]


def _one_line_refusal(args: list[str]) -> str:
    res = runner.invoke(app, args)
    out = res.output.strip()
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == 2, (res.exit_code, out[:300])
    assert "Traceback" not in out
    assert len(out.splitlines()) == 1, out[:500]
    return out


@pytest.mark.parametrize(("entry", "kind"), CASES, ids=[f"{e}-{k}" for e, k in CASES])
def test_a_hostile_file_gets_one_line_and_exit_2(lab: Path, entry: str, kind: str) -> None:
    if entry == "search-var-file":
        (lab / "search.yaml").write_text(
            "experiment: exp.yaml\nparameters: {x: {type: int, low: 1, high: 2}}\n"
            "objective: {source: probe, name: p, bound: 1}\n"
        )
    suffix, command = ENTRIES[entry]
    path = lab / f"hostile{suffix(kind)}"
    path.write_bytes(HOSTILE[kind])
    out = _one_line_refusal(command(str(path)))
    assert path.name in out or "--var-file" in out, out  # it names the file at fault


@pytest.mark.parametrize("kind", JSON_KINDS)
def test_a_hostile_report_manifest_gets_one_line_and_exit_2(lab: Path, kind: str) -> None:
    folder = lab / "report"
    folder.mkdir()
    (folder / "manifest.json").write_bytes(HOSTILE[kind])
    out = _one_line_refusal(["report", "verify", str(folder)])
    assert "manifest" in out


def test_a_manifest_with_odd_entries_is_a_finding_not_a_crash(lab: Path) -> None:
    folder = lab / "report"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"format": "x", "journals": [1, "a"]}))
    res = runner.invoke(app, ["report", "verify", str(folder)])
    assert res.exit_code == 1, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output


# ---- files Faultplane reads back: planted ones are no run, never a crash -------------------------------------


def _plant_events_logs(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    planted = {
        "deep": HOSTILE["nested-1000-json"] + b"\n",
        "badutf8": b'{"event": "start", "journal": \xff}\n',
        "notevent": b"[1, 2, 3]\n",
        "badjournal": b'{"event": "start", "journal": {"run_id": 5}}\n',
        "huge": b'{"event": "x", "pad": "' + b"a" * (MAX_BYTES + 16) + b'"}\n',
        "bomblike": (json.dumps({"event": "start", "journal": [[[[[]]]]] * 1000}) + "\n").encode(),
    }
    for name, data in planted.items():
        (folder / f"{name}.events.jsonl").write_bytes(data)


def test_planted_events_logs_never_stop_runs_list_or_a_run(lab: Path) -> None:
    from faultplane.engine.journal import journal_dir

    _plant_events_logs(journal_dir())
    res = runner.invoke(app, ["run", "exp.yaml", "-q"])  # every run start recovers interrupted runs
    assert res.exit_code == 0 and res.exception is None, res.output
    res = runner.invoke(app, ["runs", "list"])
    assert res.exit_code == 0 and res.exception is None, res.output
    assert "Traceback" not in res.output and "t" in res.output
    res = runner.invoke(app, ["abort"])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)


def test_a_planted_history_index_or_registry_is_ignored(lab: Path) -> None:
    from faultplane.core.faults import FaultRegistry
    from faultplane.core.store import Store

    index = Path(str(Store().path) + ".history")  # where the store keeps its per-family history index
    index.mkdir(parents=True, exist_ok=True)
    for i, kind in enumerate(("nested-1000-json", "bad-utf8", "huge")):
        (index / f"{i:020d}.json").write_bytes(HOSTILE[kind])
    (index / "list.json").write_text("[1, 2]")
    reg = FaultRegistry()
    reg.path.parent.mkdir(parents=True, exist_ok=True)
    for data in (HOSTILE["nested-1000-json"], b"\xff\xfe", b"[1]", b'{"faults": [1]}'):
        reg.path.write_bytes(data)
        assert reg.active() == []
    res = runner.invoke(app, ["guard", "check", "exp.yaml"])
    assert res.exit_code == 0 and res.exception is None, res.output
    res = runner.invoke(app, ["run", "exp.yaml", "-q"])
    assert res.exit_code == 0 and res.exception is None, res.output


# ---- MCP tool arguments -----------------------------------------------------------------------------------


def test_mcp_inline_documents_are_refused_in_one_line(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mcp"))
    from mcp_helpers import make_env, stdio_client

    senv = make_env(tmp_path / "srv")
    texts = {
        "nested-json": '{"title": "x", "method": ' + "[" * 1000 + "]" * 1000 + "}",
        "nested-yaml": "title: x\nmethod: " + "[" * 1000 + "]" * 1000 + "\n",
        "billion-laughs": "title: x\n" + BILLION_LAUGHS,
    }
    problems: list[str] = []

    async def main() -> None:
        async with stdio_client(senv) as client:
            for name, text in texts.items():
                for tool, args in (
                    ("chaos_validate_experiment", {"experiment": text}),
                    ("chaos_run_experiment", {"experiment": text, "dry_run": True}),
                    ("chaos_run_experiment", {"experiment": text}),
                ):
                    r = await client.call_tool(tool, args)
                    shown = r.content[0].text if r.content else ""
                    if r.structured_content and not r.is_error:
                        shown = json.dumps(r.structured_content)
                        if r.structured_content.get("valid") is not False:
                            problems.append(f"{name} {tool}: accepted: {shown[:200]}")
                    elif not r.is_error:
                        problems.append(f"{name} {tool}: accepted")
                    if "Traceback" in shown or "\n" in shown.strip():
                        problems.append(f"{name} {tool}: not one line: {shown[:300]}")
                    if not any(w in shown for w in ("nests", "expands", "deep")):
                        problems.append(f"{name} {tool}: no reason: {shown[:300]}")
            # the server is still there, answering
            ok = await client.call_tool("chaos_list_experiments", {})
            if ok.is_error:
                problems.append("the server stopped answering")

    anyio.run(main)
    assert not problems, "\n".join(problems)
