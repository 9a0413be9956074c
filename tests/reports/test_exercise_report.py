"""Signed post-exercise reports: made from real runs, verified by the CLI, and every kind of tampering named."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from faultplane.core.approval import generate_key
from policy_helpers import use_lab_policy

PASSPHRASE = "correct horse battery staple"


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Three real runs, an approver key outside any project, and a signed report of the period."""
    base = tmp_path_factory.mktemp("exercise")
    key = base / "keys" / "alice.key"
    key.parent.mkdir()
    line = generate_key(key, "alice", PASSPHRASE, scrypt_n=2**14)
    env = {
        **os.environ,
        "FAULTPLANE_STORE": str(base / "store.duckdb"),
        "XDG_DATA_HOME": str(base / "data"),
        "XDG_STATE_HOME": str(base / "state"),
        "XDG_CONFIG_HOME": str(base / "config"),
        "FAULTPLANE_STORE_WRITER": "inline",
        "FAULTPLANE_APPROVER_PASSPHRASE": PASSPHRASE,
    }
    use_lab_policy("gates: {required: false}\n", base / "config")
    since = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    probe = {"type": "python", "module": "os", "func": "getcwd"}
    for i in range(3):
        exp = base / f"exp{i}.yaml"
        exp.write_text(
            yaml.safe_dump(
                {
                    "title": f"exercise {i}",
                    "description": "d",
                    "tags": ["ISO22301-8.5"],
                    "method": [{"type": "probe", "name": "p", "provider": probe}],
                }
            )
        )
        run = _fp(env, "run", str(exp), "-q")
        assert run.returncode == 0, run.stderr
    out = base / "report"
    made = _exercise(env, out, since, key)
    assert made.returncode == 0, made.stderr
    return {"env": env, "dir": out, "line": line, "key": key, "base": base, "since": since}


def _fp(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "faultplane", *args], env=env, capture_output=True, text=True, timeout=120
    )


def _exercise(
    env: dict[str, str], out: Path, since: str, key: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    """`faultplane report exercise` of the runs since `since` into `out`, signed with `key`."""
    return _fp(env, "report", "exercise", "-o", str(out), "--since", since, "--key", str(key), *extra)


def _copy(signed: dict[str, Any], tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(signed["dir"], target)
    return target


def _verify(signed: dict[str, Any], folder: Path, *trusted: str) -> subprocess.CompletedProcess[str]:
    args = ["report", "verify", str(folder)]
    for t in trusted or (signed["line"],):
        args += ["--trusted-key", t]
    return _fp(signed["env"], *args)


def test_a_signed_report_cites_every_run_and_verifies(signed: dict[str, Any]) -> None:
    manifest = json.loads((signed["dir"] / "manifest.json").read_text())
    assert len(manifest["journals"]) == 3 and manifest["signature"]["public_key"].endswith(" alice")
    assert "exercise 0" in (signed["dir"] / "report.html").read_text()
    ok = _verify(signed, signed["dir"])
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "intact" in ok.stdout and "signed by alice" in ok.stdout


def test_one_changed_byte_of_a_cited_journal_is_named(signed: dict[str, Any], tmp_path: Path) -> None:
    folder = _copy(signed, tmp_path)
    victim = sorted((folder / "journals").iterdir())[1]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))
    out = _verify(signed, folder)
    assert out.returncode == 1
    assert f"journals/{victim.name}: changed" in out.stdout and "intact" not in out.stdout


@pytest.mark.parametrize(
    "tamper, named",
    [
        (
            lambda f: (f / "report.html").write_text((f / "report.html").read_text().replace("held", "HELD")),
            "report.html: changed",
        ),
        (lambda f: sorted((f / "journals").iterdir())[0].unlink(), ": missing"),
        (
            lambda f: (f / "journals" / "extra.json").write_text("{}"),
            "journals/extra.json: not in the manifest",
        ),
        (lambda f: _edit(f, lambda m: m.update(title="A better exercise")), "signature does not match"),
        (lambda f: _edit(f, lambda m: m["journals"].reverse()), "hash chain"),
        (lambda f: _edit(f, lambda m: m["journals"].pop()), "hash chain"),
        (lambda f: _edit(f, lambda m: m.pop("signature")), "not signed"),
        (lambda f: (f / "manifest.json").write_text("{broken"), "manifest.json: not JSON"),
    ],
    ids=[
        "html",
        "journal-removed",
        "file-added",
        "manifest-edited",
        "reordered",
        "journal-dropped",
        "unsigned",
        "garbled",
    ],
)
def test_every_kind_of_tampering_is_named(
    signed: dict[str, Any], tmp_path: Path, tamper: Any, named: str
) -> None:
    folder = _copy(signed, tmp_path)
    tamper(folder)
    out = _verify(signed, folder)
    assert out.returncode == 1, out.stdout
    assert named in out.stdout


def _edit(folder: Path, change: Any) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    change(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_a_signature_by_a_key_nobody_trusts_fails(signed: dict[str, Any], tmp_path: Path) -> None:
    other = generate_key(tmp_path / "mallory.key", "mallory", PASSPHRASE, scrypt_n=2**14)
    out = _verify(signed, signed["dir"], other)
    assert out.returncode == 1 and "not among the trusted keys" in out.stdout


def test_a_report_resigned_by_another_key_after_tampering_is_not_trusted(
    signed: dict[str, Any], tmp_path: Path
) -> None:
    """An agent that edits a journal and re-signs with its own key still fails against the trusted keys."""
    from faultplane.services.exercise_report import build_report  # noqa: F401 - the same code path signs

    folder = _copy(signed, tmp_path)
    mallory = tmp_path / "mallory.key"
    generate_key(mallory, "mallory", PASSPHRASE, scrypt_n=2**14)
    from faultplane.core.approval import load_signing_key, public_line
    from faultplane.services.exercise_report import _canonical, _sha, chain

    victim = sorted((folder / "journals").iterdir())[0]
    victim.write_text(victim.read_text().replace('"completed"', '"completed" '))
    manifest = json.loads((folder / "manifest.json").read_text())
    for j in manifest["journals"]:
        j["sha256"] = _sha((folder / j["file"]).read_bytes())
    manifest["chain"] = chain([j["sha256"] for j in manifest["journals"]])
    key = load_signing_key(mallory, PASSPHRASE)
    import base64

    manifest["signature"] = {
        "algorithm": "ed25519",
        "key_id": key.key_id,
        "public_key": public_line(key.private_key.public_key(), "alice"),
        "value": base64.b64encode(key.private_key.sign(_canonical(manifest))).decode(),
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    out = _verify(signed, folder)
    assert out.returncode == 1 and "not among the trusted keys" in out.stdout  # a name is not a key


def test_bad_requests_are_one_line_errors(signed: dict[str, Any], tmp_path: Path) -> None:
    env = signed["env"]
    empty = _exercise(env, tmp_path / "r1", "2001-01-01", signed["key"], "--until", "2001-01-02")
    assert empty.returncode == 2 and "no runs to report" in empty.stderr
    taken = _exercise(env, signed["dir"], signed["since"], signed["key"])
    assert taken.returncode == 2 and "not empty" in taken.stderr
    nokey = _exercise(env, tmp_path / "r2", signed["since"], tmp_path / "none.key")
    assert nokey.returncode == 2 and "approvals keygen" in nokey.stderr
    wrong = _exercise(
        {**env, "FAULTPLANE_APPROVER_PASSPHRASE": "not the passphrase!"},
        tmp_path / "r3",
        signed["since"],
        signed["key"],
    )
    assert wrong.returncode == 2 and "wrong passphrase" in wrong.stderr
    nowhere = _fp(env, "report", "verify", str(tmp_path / "nothing"))
    assert nowhere.returncode == 2 and "no manifest.json" in nowhere.stderr
    for out in (empty, taken, nokey, wrong, nowhere):
        assert "Traceback" not in out.stderr
