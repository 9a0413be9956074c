"""ClickHouse as a new user meets it: the CLI with `--store clickhouse://...` and `FAULTPLANE_STORE`, a server that
is down or misnamed, and a server that dies while a run is under way (its journal is kept and indexed later)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from clickhouse_helpers import LAB_POLICY, ClickHouseServer, start_clickhouse, stop_clickhouse
from evidence_helpers import steady_probe

from clihelp import cli, env
from policy_helpers import use_lab_policy

pytestmark = pytest.mark.clickhouse


def _experiment(path: Path, method: list[dict[str, Any]] | None = None) -> Path:
    probe = steady_probe("p99-ms")
    doc = {
        "title": "checkout latency",
        "family": "checkout",
        "tags": ["DORA-25"],
        "steady-state-hypothesis": {"title": "p99 under bound", "probes": [probe]},
        "method": method or [{**probe, "name": "p99-under-fault"}],
    }
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    use_lab_policy(LAB_POLICY)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_run_and_read_back_on_the_server(
    clickhouse_server: ClickHouseServer, lab: Path, monkeypatch: Any
) -> None:
    url = clickhouse_server.url(f"fp_{uuid.uuid4().hex[:10]}")
    exp = _experiment(lab / "exp.yaml")
    first = cli("run", str(exp), "--store", url, "--format", "json")
    assert first.returncode == 0, first.stdout + first.stderr
    run_id = json.loads(first.stdout)["run_id"]
    # the same store named by the environment instead of the option
    monkeypatch.setenv("FAULTPLANE_STORE", url)
    second = cli("run", str(exp), "--format", "json")
    assert second.returncode == 0, second.stderr
    listed = cli("runs", "list", "--store", url, "--format", "json")
    assert listed.returncode == 0, listed.stderr
    ids = {r["run_id"] for r in json.loads(listed.stdout)}
    assert {run_id, json.loads(second.stdout)["run_id"]} <= ids
    for args in (("--store", url), ()):
        report = cli("compliance", "report", "--format", "json", *args)
        assert report.returncode == 0, report.stderr
        dora = next(r for r in json.loads(report.stdout)["requirements"] if r["id"] == "DORA-25")
        assert dora["runs"] == 2 and dora["status"] == "covered"
    assert not list(lab.glob("clickhouse*")), "a URL must never become a DuckDB file"


def test_unreachable_and_misconfigured_stores_fail_in_one_line(lab: Path, tmp_path: Path) -> None:
    from clickhouse_helpers import free_port

    dead = f"clickhouse://default@127.0.0.1:{free_port()}/fp"
    exp = _experiment(lab / "exp.yaml")
    for args in (
        ("run", str(exp), "--store", dead),
        ("runs", "list", "--store", dead),
        ("compliance", "report", "--format", "json", "--store", dead),
        ("analyze", "--store", dead),
        ("gameday", "list", "--store", dead),
    ):
        _one_line_error(cli(*args), "127.0.0.1", "check the host and port")
    _one_line_error(cli("runs", "list", "--store", "clickhouse://u:secret@127.0.0.1:notaport/fp"), "port")
    _one_line_error(cli("runs", "list", "--store", "clickhouse://127.0.0.1:1/bad-name"), "database")
    _one_line_error(cli("runs", "list", "--store", "postgres://h/db"), "clickhouse://", "chdb://")
    proc = cli("runs", "list", "--store", "clickhouse://u:secret@127.0.0.1:notaport/fp")
    assert "secret" not in proc.stderr


def test_wrong_password_names_the_login(clickhouse_server: ClickHouseServer, lab: Path) -> None:
    url = f"clickhouse://nobody:wrong@127.0.0.1:{clickhouse_server.http_port}/fp"
    _one_line_error(cli("runs", "list", "--store", url), "user and password")


def _restart(server: ClickHouseServer) -> ClickHouseServer:
    log = (server.directory / "stdout.log").open("ab")
    cmd = list(server.proc.args)  # type: ignore[arg-type]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=server.directory)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{server.http_port}/ping", timeout=1).text.strip() == "Ok.":
                return ClickHouseServer(server.http_port, server.directory, proc)
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("clickhouse-server did not come back")


def _approved(lab: Path, exp: Path) -> str:
    """A person's signed approval of exactly this experiment: killing a process needs one by policy."""
    from faultplane.core import approval as approvals
    from faultplane.services.guard import prepare

    passphrase = "correct horse battery staple"
    key = lab / "keys" / "ops-approver.key"
    line = approvals.generate_key(key, "ops", passphrase, scrypt_n=2**14)
    # approvers are trusted by the person's own policy, never by a file in the project
    use_lab_policy(LAB_POLICY + f"approval: {{trusted_keys: [{json.dumps(line)}]}}\n")
    signer = approvals.load_signing_key(key, passphrase)
    granted = approvals.sign_approval(
        prepare(exp).approval_hash, key=signer, trusted_keys=[line], family="checkout", record=False
    )
    return granted.token


def test_server_dies_during_a_run_journal_kept_and_indexed_later(tmp_path: Path, lab: Path) -> None:
    server = start_clickhouse(tmp_path / "ch")
    try:
        url = server.url("fp_dies")
        # the method itself stops the store's server: the run goes on, the write at its end cannot happen
        kill = {
            "type": "action",
            "name": "stop-store",
            "provider": {"type": "process", "path": "kill", "arguments": ["-9", str(server.proc.pid)]},
        }
        exp = _experiment(lab / "exp.yaml", [kill])
        token = _approved(lab, exp)
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "faultplane.cli.main",
                "run",
                str(exp),
                "--store",
                url,
                "--output",
                "json",
                "--approval",
                token,
            ],
            capture_output=True,
            text=True,
            env=env(),
            timeout=120,
        )
        server.proc.wait(timeout=30)
        assert "Traceback" not in proc.stderr
        run_id = json.loads(proc.stdout)["run_id"]
        note = [ln for ln in proc.stderr.splitlines() if run_id in ln]
        assert note and "journal is kept at" in note[0], proc.stderr
        journal_path = Path(note[0].split("journal is kept at ")[1].split(" and ")[0])
        assert json.loads(journal_path.read_text(encoding="utf-8"))["run_id"] == run_id
        server = _restart(server)
        shown = cli("journal", "show", run_id, "--store", url, "--format", "json")
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["run_id"] == run_id
    finally:
        stop_clickhouse(server)
