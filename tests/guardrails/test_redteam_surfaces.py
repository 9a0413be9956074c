"""Every surface gives the same answer on the red-team corpus: `guard check`, `validate`, `run --dry-run`, a
real `run`, and the MCP tools of a real subprocess server. A refused case never executes: its action would
create a marker file, and the marker is absent afterwards. The legitimate corpus is allowed everywhere."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from redteam_corpus import FLAG_FORMS, ORDINARY_WORDS, PRODUCTION_NAMES
from typer.testing import CliRunner

from faultplane.cli.main import app

runner = CliRunner()
LAB_POLICY = "gates: {required: false, min_gates: 0, require_window: false}\n"


def marker_experiment(marker: Path, word: str, *, where: str = "argv") -> dict[str, Any]:
    """An experiment whose one action writes `marker`; `word` sits where the action will use it."""
    script = f"open({str(marker)!r}, 'w').write('ran')"
    provider: dict[str, Any] = {"type": "process", "path": sys.executable, "arguments": ["-c", script, word]}
    doc: dict[str, Any] = {
        "title": "mark",
        "method": [{"type": "action", "name": "mark", "provider": provider}],
    }
    if where == "env":
        provider["env"] = {"TARGET_HOST": word}
    elif where == "config":
        doc["configuration"] = {"target": word}
        provider["arguments"] = ["-c", script, "${target}"]
    elif where == "rollback":
        provider["arguments"] = ["-c", script]
        doc["rollbacks"] = [
            {"type": "action", "name": "undo", "provider": {**provider, "arguments": ["-c", "0", word]}}
        ]
    elif where == "shell":
        provider["arguments"] = ["-c", script, *shlex.split(word)]
    return doc


REFUSED = [
    (f"name-{where}-{i}", n, where)
    for i, n in enumerate(PRODUCTION_NAMES)
    for where in ("argv", "env", "config")
]
REFUSED += [(f"name-rollback-{i}", n, "rollback") for i, n in enumerate(PRODUCTION_NAMES[:15])]
REFUSED += [(f"flag-{i}", f, "shell") for i, f in enumerate(FLAG_FORMS)]
ALLOWED = [
    (f"word-{where}-{i}", w, where) for i, w in enumerate(ORDINARY_WORDS) for where in ("argv", "config")
]
ALLOWED += [
    (f"lab-{i}", w, "argv")
    for i, w in enumerate(
        [
            "127.0.0.1:5432",
            "localhost",
            "staging-db",
            "qa.internal",
            "payments-dev",
            "http://[::1]:8080/h",
            "postgresql://app@127.0.0.1:5432/x",
            "host=127.0.0.1 dbname=payments",
            "kubectl -n staging get po",
            "--namespace=dev",
            "--context=kind-lab",
            "approved",
            "proxy-db",
            "reproducer",
        ]
    )
]


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "lab"
    (root / ".git").mkdir(parents=True)
    (root / "faultplane.policy.yaml").write_text(LAB_POLICY)
    monkeypatch.chdir(root)
    monkeypatch.delenv("FAULTPLANE_POLICY", raising=False)
    return root


def _write(lab: Path, doc: dict[str, Any]) -> Path:
    path = lab / "exp.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return path


def _cli_verdicts(path: Path) -> dict[str, bool]:
    """surface -> allowed?"""
    out: dict[str, bool] = {}
    res = runner.invoke(app, ["guard", "check", str(path), "--format", "json"])
    assert res.exit_code in (0, 3), res.output
    out["guard check"] = json.loads(res.stdout)["allowed"]
    res = runner.invoke(app, ["validate", str(path), "--format", "json"])
    out["validate"] = res.exit_code == 0
    res = runner.invoke(app, ["run", "--dry-run", str(path), "--format", "json", "-q"])
    out["run --dry-run"] = res.exit_code != 3 and '"refused"' not in res.output
    return out


@pytest.mark.parametrize(("case", "word", "where"), REFUSED, ids=[c[0] for c in REFUSED])
def test_refused_on_every_cli_surface_and_never_executed(lab: Path, case: str, word: str, where: str) -> None:
    marker = lab / "marker"
    path = _write(lab, marker_experiment(marker, word, where=where))
    verdicts = _cli_verdicts(path)
    assert not any(verdicts.values()), verdicts
    res = runner.invoke(app, ["run", str(path), "-q"])
    assert res.exit_code == 3 and not marker.exists(), res.output


@pytest.mark.parametrize(("case", "word", "where"), ALLOWED, ids=[c[0] for c in ALLOWED])
def test_legitimate_corpus_is_allowed_on_every_cli_surface(
    lab: Path, case: str, word: str, where: str
) -> None:
    path = _write(lab, marker_experiment(lab / "marker", word, where=where))
    verdicts = _cli_verdicts(path)
    assert all(verdicts.values()), verdicts


def test_the_marker_does_appear_when_a_legitimate_run_executes(lab: Path) -> None:
    """The control: without it, an absent marker would prove nothing."""
    marker = lab / "marker"
    path = _write(lab, marker_experiment(marker, "staging-db"))
    res = runner.invoke(app, ["run", str(path), "-q"])
    assert res.exit_code == 0 and marker.read_text() == "ran", res.output


def test_the_engine_refuses_at_the_choke_point_what_phase_0_never_saw(tmp_path: Path) -> None:
    """A plan run without a phase-0 decision (a surface that skipped it) is still judged per activity."""
    from faultplane.core.policy import Policy
    from faultplane.engine.lifecycle import plan, run_plan

    marker = tmp_path / "marker"
    p = plan(marker_experiment(marker, "proddb"))
    journal = anyio.run(lambda: run_plan(p, policy=Policy()))
    assert not marker.exists()
    (act,) = journal.run
    assert act.status == "failed" and "refused by the policy just before it ran" in (act.exception or "")


def test_mcp_tools_agree_with_the_cli(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mcp"))
    from mcp_helpers import make_env, stdio_client

    senv = make_env(tmp_path / "srv")
    (tmp_path / "srv" / "faultplane.policy.yaml").write_text(LAB_POLICY)
    marker = tmp_path / "marker"
    cases = [(word, where, False) for _, word, where in REFUSED] + [(w, wh, True) for _, w, wh in ALLOWED]
    disagreements: list[str] = []

    async def main() -> None:
        async with stdio_client(senv) as client:
            for word, where, expected in cases:
                text = yaml.safe_dump(marker_experiment(marker, word, where=where), allow_unicode=True)
                val = await client.call_tool("chaos_validate_experiment", {"experiment": text})
                valid = (not val.is_error) and val.structured_content["valid"]
                run = await client.call_tool("chaos_run_experiment", {"experiment": text, "dry_run": True})
                ran = (not run.is_error) and run.structured_content["status"] != "refused"
                if (valid, ran) != (expected, expected):
                    disagreements.append(
                        f"{word!r}@{where}: validate={valid} dry-run={ran}, expected {expected}"
                    )
            # the real runs of refused cases, over MCP: nothing executes
            for word, where, expected in cases[::7]:
                if expected:
                    continue
                text = yaml.safe_dump(marker_experiment(marker, word, where=where), allow_unicode=True)
                run = await client.call_tool("chaos_run_experiment", {"experiment": text})
                if run.is_error or run.structured_content["status"] != "refused" or marker.exists():
                    disagreements.append(f"{word!r}@{where}: real run over MCP was not refused")

    anyio.run(main)
    assert not disagreements, "\n".join(disagreements)
