"""Staged blast radius counts real exposure: a stage is earned per target and fault kind by green runs that
really injected that fault at the stage before. Real runs through the CLI, a real Redis (the fault: CLIENT
PAUSE WRITE), a real HTTP service (the steady state) and a real DuckDB store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from guard_helpers import (
    REDIS_TARGET,
    DegradableService,
    fault_experiment,
    pause_writes,
    record_exposure,
    runnable_experiment,
    write_experiment,
)
from typer.testing import CliRunner

from faultplane.cli.main import app
from faultplane.core.exposure import normalise_host, target_identity
from faultplane.core.policy import Policy
from faultplane.core.store import Store
from faultplane.engine.lifecycle import evaluate_document
from servers import redis_server  # noqa: F401  (fixture)

runner = CliRunner()


def test_next_stage_follows_the_newest_green_exposure_not_the_highest(store: Store) -> None:
    doc = fault_experiment(blast_radius={"percent": 50})
    for stage in (0, 1, 2, 0):  # the target went back to a smaller radius
        record_exposure(store, REDIS_TARGET, "timeout", stage)
    decision = evaluate_document(doc, Policy(), store, None)
    assert decision.allowed_stage == 1
    assert "its newest green exposure is at stage 0" in decision.violations[0].message
    # a red run after the newest green does not move the stage either way
    record_exposure(store, REDIS_TARGET, "timeout", 1, green=False)
    assert evaluate_document(doc, Policy(), store, None).allowed_stage == 1
    record_exposure(store, REDIS_TARGET, "timeout", 1)
    assert evaluate_document(fault_experiment(blast_radius={"percent": 25}), Policy(), store, None).allowed


@pytest.mark.parametrize(
    "alias",
    [
        "127.0.0.1",
        "localhost",
        "LOCALHOST.",
        "127.0.0.2",
        "127.1.2.3",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "0.0.0.0",
    ],
)
def test_loopback_aliases_are_one_target(alias: str) -> None:
    assert target_identity("redis", {"url": f"redis://{alias}:6379/0"}) == "loopback:6379"
    assert target_identity("postgres", {"dsn": f"host={alias.strip('[]')} port=6379 dbname=x"}) == (
        "loopback:6379"
    )


def test_other_hosts_and_ports_are_other_targets() -> None:
    seen = {
        target_identity("redis", {"url": url})
        for url in (
            "redis://127.0.0.1:6379/0",
            "redis://127.0.0.1:6380/0",
            "redis://10.0.0.1:6379/0",
            "redis://cache.lab:6379/0",
        )
    }
    assert len(seen) == 4
    assert normalise_host("Cache.Lab.") == "cache.lab"
    # a local driver without an endpoint is this machine, qualified by what it selects
    a = target_identity("process", {"name": "nginx", "count": 1})
    b = target_identity("process", {"name": "postgres", "count": 1})
    assert a.startswith("loopback") and a != b


# ---- real runs through the CLI ---------------------------------------------------------------------------------


@pytest.fixture
def project(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = project
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("FAULTPLANE_NO_WATCHDOG", "1")
    monkeypatch.setenv("FAULTPLANE_STORE", str(tmp_path / "runs.duckdb"))
    # the CLI leaves by os._exit while a non-daemon thread lives (a stuck activity); in-process it must not
    # take the test runner with it
    monkeypatch.setattr("faultplane.cli.core._exit", _raise_exit)
    # no approval by stage, so a refusal below can only come from the stage rule
    (root / "faultplane.policy.yaml").write_text("approval: {min_stage: null}\n")
    return root


def _raise_exit(code: int) -> None:
    import typer

    raise typer.Exit(code)


def _doc(service_url: str, redis_url: str, percent: int, **changes: Any) -> dict[str, Any]:
    changes.setdefault("method", [pause_writes(redis_url)])
    return runnable_experiment(service_url, title="Stage climb", blast_radius={"percent": percent}, **changes)


def _cli(project: Path, doc: dict[str, Any], *command: str) -> Any:
    write_experiment(project, doc, "exp.yaml")
    return runner.invoke(app, [*command, "exp.yaml"])


def _runs(store_path: Path) -> list[tuple[Any, ...]]:
    rows = Store(store_path).query("SELECT status, blast_stage FROM runs ORDER BY started_at")
    return [(r["status"], r["blast_stage"]) for r in rows]


def _exposures(store_path: Path) -> list[tuple[Any, ...]]:
    rows = Store(store_path).query(
        "SELECT target, fault_kind, stage, green FROM exposures ORDER BY started_at, seq"
    )
    return [(r["target"], r["fault_kind"], r["stage"], r["green"]) for r in rows]


def test_real_runs_earn_stages_per_target_and_fault_kind(
    project: Path,
    service: DegradableService,
    redis_server: Any,  # noqa: F811
) -> None:
    store_path = project.parent / "runs.duckdb"
    port = redis_server.port
    ip_url, alias_url = f"redis://127.0.0.1:{port}/0", f"redis://localhost:{port}/0"
    target = f"loopback:{port}"

    # validate refuses the unearned stage, naming the target, the kind and what is missing
    res = _cli(project, _doc(service.url, ip_url, 25), "validate")
    assert res.exit_code == 2, res.output
    assert f"target '{target}' / fault kind 'timeout' lacks 1 green run(s)" in res.output
    assert "at stage 0" in res.output

    # runs that did not really inject the fault earn nothing: a dry run, a no-op labelled as a fault, a fault
    # whose target refused it (nothing applied), a red run
    assert _cli(project, _doc(service.url, ip_url, 10), "run", "--dry-run", "-q").exit_code == 0
    label = [
        {
            "type": "action",
            "name": "pause-writes",
            "provider": {"type": "process", "path": "true", "arguments": ["--fault_type", "timeout"]},
        }
    ]
    assert _cli(project, _doc(service.url, ip_url, 10, method=label), "run", "-q").exit_code == 0
    closed = f"redis://127.0.0.1:{_closed_port()}/0"
    assert _cli(project, _doc(service.url, closed, 10), "run", "-q").exit_code == 1
    service.degrade(error_rate=1.0)
    try:
        assert _cli(project, _doc(service.url, ip_url, 10), "run", "-q").exit_code != 0
    finally:
        service.restore()
    assert [e for e in _exposures(store_path) if e[3] == 1] == []
    res = _cli(project, _doc(service.url, ip_url, 25), "validate")
    assert res.exit_code == 2 and "lacks 1 green run(s)" in res.output, res.output

    # one green run that really paused Redis writes at stage 0 earns stage 1 for that target and kind...
    assert _cli(project, _doc(service.url, ip_url, 10), "run", "-q").exit_code == 0
    assert _exposures(store_path)[-1] == (target, "timeout", 0, 1)
    # ...under any loopback spelling of it, but not stage 2, and not for a fault kind never injected there
    assert _cli(project, _doc(service.url, alias_url, 25), "validate").exit_code == 0
    res = _cli(project, _doc(service.url, ip_url, 50), "validate")
    assert res.exit_code == 2 and "only stage 1 is earned" in res.output, res.output
    assert _cli(project, _doc(service.url, alias_url, 25), "run", "-q").exit_code == 0
    other_kind = _doc(service.url, ip_url, 25)
    other_kind["method"][0]["provider"].update(
        name="client_kill", arguments={"url": ip_url, "name_pattern": "^nobody$"}
    )
    res = _cli(project, other_kind, "validate")
    assert res.exit_code == 2 and f"target '{target}' / fault kind 'error' lacks" in res.output, res.output

    assert _cli(project, _doc(service.url, ip_url, 50), "run", "-q").exit_code == 0  # stage 2 after green 1
    assert _runs(store_path)[-3:] == [("completed", 0), ("completed", 1), ("completed", 2)]
    assert [e[2] for e in _exposures(store_path) if e[3] == 1] == [0, 1, 2]


def test_the_journal_shows_the_injection_and_the_store_keeps_it(
    project: Path,
    service: DegradableService,
    redis_server: Any,  # noqa: F811
) -> None:
    res = _cli(project, _doc(service.url, redis_server.url, 10), "run", "-q")
    assert res.exit_code == 0, res.output
    (row,) = Store(project.parent / "runs.duckdb").query("SELECT body FROM journals")
    journal = json.loads(row["body"])
    (inj,) = journal["injections"]
    assert inj["action"] == "redis.client_pause" and inj["fault_kind"] == "timeout"
    assert inj["target"] == f"loopback:{redis_server.port}" and inj["leases"] == 1


def test_bookkeeping_that_fails_never_fails_the_run(
    project: Path,
    service: DegradableService,
    redis_server: Any,  # noqa: F811
) -> None:
    store_path = project.parent / "runs.duckdb"
    Store(store_path).execute("DROP TABLE exposures")  # an exposure row cannot be written now
    res = _cli(project, _doc(service.url, redis_server.url, 10), "run", "-q")
    assert res.exit_code == 0, res.output
    assert _runs(store_path) == [("completed", 0)]  # the run itself is recorded
    res = _cli(project, _doc(service.url, redis_server.url, 25), "validate")
    assert res.exit_code == 2 and "lacks 1 green run(s)" in res.output  # and the stage is not earned


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
