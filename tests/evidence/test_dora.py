"""DORA Four Keys from CI/CD exports beside chaos evidence, on DuckDB and on ClickHouse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import ctk_helpers
from faultplane.core.store import Store
from faultplane.services.dora import DoraError, four_keys, import_events, parse_events

DEPLOYS_CSV = """id,service,environment,deployed_at,commit_at,status
d1,orders,production,2026-11-01T10:00:00Z,2026-10-31T10:00:00Z,success
d2,orders,production,2026-11-03T10:00:00Z,2026-11-02T22:00:00Z,failure
d3,orders,production,2026-11-05T10:00:00Z,2026-11-05T04:00:00Z,success
d4,orders,production,2026-11-06T10:00:00Z,,canceled
"""
INCIDENTS_CSV = """id,service,started_at,restored_at,deployment_id
i1,orders,2026-11-05T11:00:00Z,2026-11-05T12:30:00Z,d3
i2,orders,2026-11-07T08:00:00Z,2026-11-07T08:30:00Z,
"""
# the shapes of GitHub's GET /repos/{o}/{r}/deployments (statuses embedded) and of its deployment_status webhook
GITHUB = [
    {
        "id": 101,
        "sha": "a1b2c3",
        "task": "deploy",
        "environment": "production",
        "created_at": "2026-11-02T09:00:00Z",
        "updated_at": "2026-11-02T09:05:00Z",
        "payload": {"service": "payments", "change_created_at": "2026-11-01T09:05:00Z"},
        "statuses": [{"state": "success", "created_at": "2026-11-02T09:05:00Z"}],
    },
    {
        "deployment_status": {"state": "failure", "created_at": "2026-11-04T09:05:00Z"},
        "deployment": {
            "id": 102,
            "sha": "d4e5",
            "task": "deploy",
            "environment": "production",
            "created_at": "2026-11-04T09:00:00Z",
            "payload": {},
        },
        "repository": {"name": "payments"},
    },
]
# the shape of GitLab's GET /projects/:id/deployments
GITLAB = [
    {
        "id": 42,
        "iid": 2,
        "ref": "main",
        "sha": "99aa",
        "status": "success",
        "created_at": "2026-11-03T12:00:00Z",
        "updated_at": "2026-11-03T12:10:00Z",
        "environment": {"id": 9, "name": "checkout"},
        "deployable": {
            "finished_at": "2026-11-03T12:10:00Z",
            "commit": {"created_at": "2026-11-03T10:10:00Z"},
        },
    }
]


def _experiment(service: str, fault_ms: float) -> dict[str, Any]:
    """A real run whose target is `service`, registering a latency fault and measuring recovery."""
    return {
        "title": f"{service} under latency",
        "description": "d",
        "targets": [{"name": service, "labels": {"env": "lab", "service": service}}],
        "blast_radius": {"percent": 10},
        "steady-state-hypothesis": {
            "title": "h",
            "probes": [ctk_helpers.cpu_count_probe()],
        },
        "method": [
            {
                "type": "action",
                "name": "slow",
                "provider": {
                    "type": "driver",
                    "driver": "faults",
                    "name": "register",
                    "arguments": {
                        "name": f"{service}.db",
                        "fault_type": "latency",
                        "duration_seconds": fault_ms / 1000,
                        "probability": 1.0,
                    },
                },
            }
        ],
        "rollbacks": [
            {
                "type": "action",
                "name": "restore",
                "provider": {
                    "type": "driver",
                    "driver": "faults",
                    "name": "remove",
                    "arguments": {"name": f"{service}.db"},
                },
            }
        ],
    }


@pytest.fixture
def evidence(tmp_path: Path, lab_policy: Path) -> list[dict[str, Any]]:
    """Two real runs against `orders` in a DuckDB store; their journals, for copying into another store."""
    from faultplane.services.experiments import run_experiment
    from faultplane.services.runs import load_journal

    store = Store(tmp_path / "runs.duckdb")
    journals = []
    for ms in (10, 20):

        async def go(ms: float = ms) -> Any:
            return await run_experiment(_experiment("orders", ms), store=store, journal_dir=tmp_path / "j")

        result = anyio.run(go)
        assert result.status == "completed"
        journals.append(load_journal(result.run_id, store))
    return journals


@pytest.fixture(params=["duckdb", "clickhouse"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path, evidence: list[dict[str, Any]]) -> Any:
    from faultplane.core.model import Journal

    if request.param == "duckdb":
        store = Store(tmp_path / "runs.duckdb")
        store.flush()
        return store
    ch = request.getfixturevalue("ch_store")
    for j in evidence:
        ch.persist_journal(Journal.model_validate(j), body=json.dumps(j))
    return ch


def test_the_four_keys_beside_the_experiments(any_store: Any) -> None:
    import_events(any_store, parse_events(DEPLOYS_CSV, "deployments"), "deployments")
    import_events(any_store, parse_events(INCIDENTS_CSV, "incidents"), "incidents")
    import_events(any_store, parse_events(json.dumps(GITHUB), "deployments"), "deployments")
    import_events(any_store, parse_events(json.dumps(GITLAB), "deployments"), "deployments")
    keys = {k.service: k for k in four_keys(any_store)}
    assert set(keys) == {"orders", "payments", "checkout"}
    orders = keys["orders"]
    assert orders.deployments == 3  # the cancelled one is not a deployment
    assert orders.deployments_per_day == pytest.approx(3 / 4)  # over the 4 days from first to last
    assert orders.lead_time_hours == pytest.approx(12.0)  # median of 24 h, 12 h, 6 h
    assert orders.change_failure_rate == pytest.approx(2 / 3)  # d2 failed, d3 caused i1
    assert orders.incidents == 2 and orders.time_to_restore_hours == pytest.approx(
        1.0
    )  # median of 1.5 h, 0.5 h
    assert orders.experiments == orders.experiments_passed == 2
    assert orders.faults_exercised == ["latency"] and orders.experiment_recovery_s is not None
    if orders.experiment_recovery_s:  # recovered at the first check: no ratio to a zero
        assert orders.restore_vs_experiments == pytest.approx(3600.0 / orders.experiment_recovery_s, rel=1e-3)
    payments = keys["payments"]
    assert payments.deployments == 2 and payments.change_failure_rate == pytest.approx(0.5)
    assert payments.lead_time_hours == pytest.approx(24.0)  # only the export that carried a change time
    assert payments.experiments == 0 and payments.faults_exercised == []
    assert keys["checkout"].lead_time_hours == pytest.approx(2.0)


def test_reimporting_an_export_replaces_rather_than_doubles(any_store: Any) -> None:
    rows = parse_events(DEPLOYS_CSV, "deployments")
    import_events(any_store, rows, "deployments")
    import_events(any_store, rows, "deployments")
    [orders] = four_keys(any_store, "orders")
    assert orders.deployments == 3


@pytest.mark.parametrize(
    "text, kind, fragment",
    [
        ("id,service,deployed_at\nd1,,2026-11-01T10:00:00Z\n", "deployments", "deployments[0].service"),
        ("id,service,deployed_at\nd1,orders,yesterday\n", "deployments", "deployments[0].deployed_at"),
        (
            "id,service,deployed_at,commit_at\nd1,o,2026-11-01T10:00:00Z,2026-11-02T10:00:00Z\n",
            "deployments",
            "change_at: after the deployment",
        ),
        (
            "id,service,started_at,restored_at\ni1,o,2026-11-02T10:00:00Z,2026-11-01T10:00:00Z\n",
            "incidents",
            "restored_at: before started_at",
        ),
        ("id,service\ni1,o\n", "incidents", "incidents[0].started_at"),
        ("[1, 2]", "deployments", "expected a list of deployments objects"),
        ("{not json", "deployments", "not JSON"),
        ("", "incidents", "empty CSV"),
    ],
)
def test_bad_exports_name_the_record_and_the_field(text: str, kind: str, fragment: str) -> None:
    with pytest.raises(DoraError, match=None) as info:
        parse_events(text, kind)  # type: ignore[arg-type]
    assert fragment in str(info.value)


def test_the_cli_imports_records_from_a_pipeline_and_reports(tmp_path: Path) -> None:
    env = {**os.environ, "FAULTPLANE_STORE": str(tmp_path / "s.duckdb")}

    def fp(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "faultplane", "dora", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )

    (tmp_path / "d.csv").write_text(DEPLOYS_CSV)
    assert fp("import", str(tmp_path / "d.csv")).returncode == 0
    piped = fp("import", "-", "--format", "json", stdin=json.dumps(GITLAB))  # a webhook body on stdin
    assert piped.returncode == 0, piped.stderr
    step = fp(
        "record",
        "deployment",
        "--service",
        "orders",
        "--status",
        "failure",
        "--id",
        "d9",
        "--at",
        "2026-11-09T10:00:00Z",
        "--change-at",
        "2026-11-09T09:00:00Z",
    )
    assert step.returncode == 0 and json.loads(step.stdout)["status"] == "failure"
    inc = fp(
        "record",
        "incident",
        "--service",
        "orders",
        "--started",
        "2026-11-09T10:05:00Z",
        "--restored",
        "2026-11-09T10:35:00Z",
        "--caused-by",
        "d9",
    )
    assert inc.returncode == 0, inc.stderr
    report = fp("report", "--json", "-o", str(tmp_path / "dora.html"))
    assert report.returncode == 0, report.stderr
    keys = {k["service"]: k for k in json.loads(report.stdout)}
    assert keys["orders"]["deployments"] == 4 and keys["orders"]["incidents"] == 1
    html = (tmp_path / "dora.html").read_text()
    assert "<svg" in html and "orders" in html and "checkout" in html
    bad = fp("import", str(tmp_path / "missing.csv"))
    assert bad.returncode == 2 and "missing.csv" in bad.stderr and "Traceback" not in bad.stderr
    wrong_kind = fp("import", str(tmp_path / "d.csv"), "--kind", "outages")
    assert wrong_kind.returncode == 2 and "--kind" in wrong_kind.stderr


def test_exports_as_spreadsheets_and_pipes_write_them(tmp_path: Path) -> None:
    """A BOM from a spreadsheet's CSV is dropped; bytes that are not UTF-8, from a file or a pipe, a folder and a
    missing file are one line each, exit 2, never a traceback."""
    env = {**os.environ, "FAULTPLANE_STORE": str(tmp_path / "s.duckdb")}

    def fp(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        cmd = [sys.executable, "-m", "faultplane", "dora", "import", *args]
        return subprocess.run(cmd, input=stdin, capture_output=True, env=env, timeout=60)

    bom = tmp_path / "excel.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + DEPLOYS_CSV.encode())
    plain = tmp_path / "plain.csv"
    plain.write_text(DEPLOYS_CSV)
    expected = fp(str(plain)).stdout.decode().split(" from")[0]
    done = fp(str(bom))
    assert done.returncode == 0, done.stderr
    assert expected.startswith("imported 3") and done.stdout.decode().startswith(expected)
    (tmp_path / "latin1.csv").write_bytes(
        "id,service,deployed_at\nd1,caf\xe9,2026-11-01T10:00:00Z\n".encode("latin-1")
    )
    (tmp_path / "folder.csv").mkdir()
    for args, stdin, words in [
        ([str(tmp_path / "latin1.csv")], None, "not UTF-8"),
        (["-"], b"\xff\xfeid,service\n", "not UTF-8"),
        ([str(tmp_path / "folder.csv")], None, "not a regular file"),
        ([str(tmp_path / "missing.csv")], None, "missing.csv"),
    ]:
        out = fp(*args, stdin=stdin)
        err = out.stderr.decode()
        assert out.returncode == 2 and words in err and "Traceback" not in err and err.count("\n") == 1, err
