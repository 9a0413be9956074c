"""`faultplane init` and `faultplane init --from-ctk`, through the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml


def fp(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "FAULTPLANE_POLICY"}
    return subprocess.run(
        [sys.executable, "-m", "faultplane", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
    )


def test_init_scaffolds_a_project_whose_experiment_validates_and_dry_runs(tmp_path: Path) -> None:
    project = tmp_path / "shop"
    out = fp("init", str(project))
    assert out.returncode == 0, out.stderr
    for name in ("faultplane.policy.yaml", "experiments/first-experiment.yaml", "AGENTS.md", "CLAUDE.md"):
        assert (project / name).is_file(), name
        assert f"created {name}" in out.stdout
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    [entry] = settings["hooks"]["PreToolUse"]
    assert entry["hooks"][0]["command"] == "faultplane guard hook" and "Bash" in entry["matcher"]
    assert json.loads((project / ".mcp.json").read_text())["mcpServers"]["faultplane"]["args"] == ["mcp"]
    assert "## Chaos rules" in (project / "AGENTS.md").read_text()
    policy = yaml.safe_load((project / "faultplane.policy.yaml").read_text())
    assert policy["gates"]["required"] is True and "prod" in policy["forbidden"]["words"]
    # the project's own policy is the one in force from inside the project
    valid = fp("validate", "experiments/first-experiment.yaml", cwd=project)
    assert valid.returncode == 0, valid.stdout + valid.stderr
    dry = fp("run", "experiments/first-experiment.yaml", "--dry-run", "-q", cwd=project)
    assert dry.returncode == 0, dry.stdout + dry.stderr


def test_init_twice_keeps_what_is_there_and_extends_what_the_user_wrote(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("# Agents\n\nUse tabs.\n")
    (tmp_path / ".claude").mkdir()
    other_hook = {"matcher": "Bash", "hooks": [{"type": "command", "command": "lint-guard"}]}
    (tmp_path / ".claude" / "settings.json").write_text(
        json.dumps({"model": "x", "hooks": {"PreToolUse": [other_hook]}})
    )
    (tmp_path / "faultplane.policy.yaml").write_text("version: 1\ngates: {min_gates: 2}\n")
    first = fp("init", str(tmp_path))
    assert first.returncode == 0, first.stderr
    assert "kept faultplane.policy.yaml" in first.stdout
    assert (tmp_path / "faultplane.policy.yaml").read_text() == "version: 1\ngates: {min_gates: 2}\n"
    agents = (tmp_path / "AGENTS.md").read_text()
    assert agents.startswith("# Agents\n\nUse tabs.\n") and agents.count("## Chaos rules") == 1
    settings = json.loads((tmp_path / ".claude" / "settings.json").read_text())
    assert settings["model"] == "x" and settings["hooks"]["PreToolUse"][0] == other_hook
    assert len(settings["hooks"]["PreToolUse"]) == 2
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    second = fp("init", str(tmp_path))
    assert second.returncode == 0 and second.stdout.count("kept ") == 6
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize(
    "content, why",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"hooks": {"PreToolUse": "faultplane guard hook"}}', "is not a list"),
        (b"\xff\xfe{}".decode("latin-1"), "not valid JSON"),
    ],
)
def test_init_refuses_a_malformed_agent_settings_file_and_leaves_it_alone(
    tmp_path: Path, content: str, why: str
) -> None:
    (tmp_path / ".claude").mkdir()
    settings = tmp_path / ".claude" / "settings.json"
    settings.write_text(content, encoding="latin-1")
    before = settings.read_bytes()
    out = fp("init", str(tmp_path))
    assert out.returncode == 2 and why in out.stderr and "settings.json" in out.stderr
    assert "Traceback" not in out.stderr and settings.read_bytes() == before


@pytest.mark.parametrize("name", ["AGENTS.md", "CLAUDE.md"])
def test_init_leaves_an_agents_file_that_is_not_utf8_alone_and_says_so(tmp_path: Path, name: str) -> None:
    rules = tmp_path / name
    rules.write_bytes("# R\u00e8gles\n".encode("latin-1"))
    out = fp("init", str(tmp_path))
    assert out.returncode == 2 and name in out.stderr and "not UTF-8" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and rules.read_bytes() == "# R\u00e8gles\n".encode("latin-1")


def test_init_into_a_file_is_an_error(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    out = fp("init", str(target))
    assert out.returncode == 2 and "not a directory" in out.stderr and "Traceback" not in out.stderr


def _ctk(**extra: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "version": "1.0.0",
        "title": "Service stays up when a pod dies",
        "description": "ctk",
        "method": [
            {
                "type": "action",
                "name": "noop",
                "provider": {
                    "type": "python",
                    "module": "os.path",
                    "func": "exists",
                    "arguments": {"path": "/"},
                },
            }
        ],
    }
    doc.update(extra)
    return doc


def test_from_ctk_derives_a_gate_from_a_range_tolerance_and_explains_it(tmp_path: Path) -> None:
    probe = {
        "type": "probe",
        "name": "cpu-count",
        "tolerance": {"type": "range", "range": [1, 4096]},
        "provider": {"type": "python", "module": "os", "func": "cpu_count"},
    }
    src = tmp_path / "exp.json"
    src.write_text(json.dumps(_ctk(**{"steady-state-hypothesis": {"title": "h", "probes": [probe]}})))
    dest = tmp_path / "exp.faultplane.yaml"
    out = fp("init", "--from-ctk", str(src), "-o", str(dest))
    assert out.returncode == 0, out.stderr
    doc = yaml.safe_load(dest.read_text())
    [gate] = doc["slo_gates"]
    assert gate["rollback_on"] == "probe > 4096 for 10s" and gate["probe"]["provider"] == probe["provider"]
    assert doc["family"] == "service-stays-up-when-a-pod-dies"
    assert doc["steady-state-hypothesis"]["probes"] == [probe] and doc["method"] == _ctk()["method"]
    assert "slo_gates[0]" in out.stderr and "family" in out.stderr
    valid = fp("validate", str(dest), cwd=tmp_path)
    assert valid.returncode == 0, valid.stdout + valid.stderr
    unconverted = fp("validate", str(src), cwd=tmp_path)
    assert unconverted.returncode != 0  # the default policy asks for the gate the conversion added


def test_from_ctk_uses_an_http_url_for_a_latency_gate_and_labels_its_host(tmp_path: Path) -> None:
    probe = {
        "type": "probe",
        "name": "home",
        "tolerance": 200,
        "provider": {"type": "http", "url": "http://127.0.0.1:9/health", "timeout": 1},
    }
    src = tmp_path / "exp.yaml"
    src.write_text(yaml.safe_dump(_ctk(**{"steady-state-hypothesis": {"title": "h", "probes": [probe]}})))
    out = fp("init", "--from-ctk", str(src))
    assert out.returncode == 0, out.stderr
    doc = yaml.safe_load(out.stdout)
    [gate] = doc["slo_gates"]
    assert gate["probe"]["provider"]["arguments"]["url"] == "http://127.0.0.1:9/health"
    assert gate["value_path"] == "p50_ms"
    assert doc["targets"] == [{"name": "127.0.0.1", "labels": {"env": "lab"}}]
    assert doc["blast_radius"] == {"percent": 10} and "chaostoolkit" in doc["tags"]
    dest = tmp_path / "out.yaml"
    dest.write_text(out.stdout)
    valid = fp("validate", str(dest), cwd=tmp_path)
    assert valid.returncode == 0, valid.stdout + valid.stderr


@pytest.mark.parametrize(
    "doc, field",
    [
        ({"description": "no title", "method": []}, "title"),
        ({"title": "no method"}, "method"),
        ([1, 2], "experiment"),
    ],
)
def test_from_ctk_names_what_is_missing(tmp_path: Path, doc: object, field: str) -> None:
    src = tmp_path / "bad.json"
    src.write_text(json.dumps(doc))
    out = fp("init", "--from-ctk", str(src))
    assert out.returncode == 2 and out.stderr.startswith(field) and "Traceback" not in out.stderr


def test_from_ctk_without_anything_to_derive_says_what_to_add(tmp_path: Path) -> None:
    src = tmp_path / "exp.json"
    src.write_text(json.dumps(_ctk()))
    out = fp("init", "--from-ctk", str(src))
    assert out.returncode == 0 and "slo_gates: none could be derived" in out.stderr
    assert "slo_gates" not in yaml.safe_load(out.stdout)


def test_from_ctk_does_not_overwrite_without_force(tmp_path: Path) -> None:
    src = tmp_path / "exp.json"
    src.write_text(json.dumps(_ctk()))
    dest = tmp_path / "taken.yaml"
    dest.write_text("mine\n")
    out = fp("init", "--from-ctk", str(src), "-o", str(dest))
    assert out.returncode == 2 and "--force" in out.stderr and dest.read_text() == "mine\n"
    forced = fp("init", "--from-ctk", str(src), "-o", str(dest), "--force")
    assert forced.returncode == 0 and yaml.safe_load(dest.read_text())["title"] == _ctk()["title"]
