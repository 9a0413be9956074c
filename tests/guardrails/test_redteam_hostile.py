"""Hostile files and JSON: size, depth and alias-bomb limits give one line, never a traceback, on every surface."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from faultplane.cli.main import app
from faultplane.core.formats import ExperimentError, load_document, loads
from faultplane.core.hostile import MAX_BYTES, MAX_DEPTH
from faultplane.core.policy import PolicyError, load_policy

runner = CliRunner()

BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join(['*' + p] * 10)}]\n" for p, n in zip("abcdefg", "bcdefgh", strict=True)
)

HOSTILE: dict[str, str] = {
    "deep-json-array": "[" * 50_000 + "]" * 50_000,
    "deep-json-object": '{"a":' * 50_000 + "1" + "}" * 50_000,
    "deep-yaml-flow": "a: " + "[" * 5_000 + "]" * 5_000 + "\n",
    "deep-yaml-block": "".join("  " * i + f"k{i}:\n" for i in range(200)) + "  " * 200 + "v: 1\n",
    "moderately-deep-json": json.dumps(json.loads('{"a":' * (MAX_DEPTH + 5) + "1" + "}" * (MAX_DEPTH + 5))),
    "yaml-alias-bomb": BOMB,
    "huge": "title: x\ndescription: " + "a" * (MAX_BYTES + 10) + "\n",
    "yaml-python-tag": "title: !!python/object/apply:os.system ['touch /tmp/pwned']\n",
    "binary": "\x00\x01\x02\xff",
    "top-level-list": "[1, 2, 3]",
    "top-level-scalar": "42",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_loads_refuses_in_one_line(name: str) -> None:
    with pytest.raises(ExperimentError) as info:
        load_document(HOSTILE[name])
    assert "\n" not in str(info.value) and "Traceback" not in str(info.value)


@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.parametrize("command", [["validate"], ["guard", "check"], ["run", "--dry-run"]])
def test_cli_refuses_hostile_files_without_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, command: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / ("exp.json" if HOSTILE[name].startswith(("[", "{")) else "exp.yaml")
    path.write_text(HOSTILE[name], encoding="utf-8", errors="surrogateescape")
    res = runner.invoke(app, [*command, str(path)])
    assert res.exit_code != 0
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output
    assert not Path("/tmp/pwned").exists() or name != "yaml-python-tag"


def test_a_mapping_from_an_api_is_held_to_the_same_limits() -> None:
    node: dict[str, object] = {}
    doc = node
    for _ in range(MAX_DEPTH + 3):
        node["a"] = {}
        node = node["a"]  # type: ignore[assignment]
    with pytest.raises(ExperimentError, match="nests deeper"):
        load_document({"title": "x", "method": [doc]})


@pytest.mark.parametrize("name", ["deep-json-object", "yaml-alias-bomb", "huge", "binary", "deep-yaml-flow"])
def test_hostile_policy_file_is_a_policy_error(tmp_path: Path, name: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(HOSTILE[name], encoding="utf-8")
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value).strip()


def test_ordinary_documents_are_untouched() -> None:
    assert loads('{"a": [1, 2, {"b": "c"}]}') == {"a": [1, 2, {"b": "c"}]}
