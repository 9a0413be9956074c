"""Staged blast radius counts real exposure: a stage is earned per target and fault kind by green runs that
really injected that fault at the stage before. Real runs through the CLI, a real Redis (the fault: CLIENT
PAUSE WRITE), a real HTTP service (the steady state) and a real DuckDB store."""

from __future__ import annotations

import json
from dataclasses import dataclass
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
from proc_helpers import free_port
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


@dataclass
class _Lab:
    """The CLI runs of these tests: an experiment against the real service and Redis, at a blast-radius percent,
    written to the project and run or validated; the store it records into."""

    project: Path
    service: DegradableService
    redis_port: int

    @property
    def store(self) -> Store:
        return Store(self.project.parent / "runs.duckdb")  # $FAULTPLANE_STORE of the `project` fixture

    def doc(self, percent: int, redis_url: str | None = None, **changes: Any) -> dict[str, Any]:
        url = redis_url or f"redis://127.0.0.1:{self.redis_port}/0"
        changes.setdefault("method", [pause_writes(url)])
        return runnable_experiment(
            self.service.url, title="Stage climb", blast_radius={"percent": percent}, **changes
        )

    def cli(self, doc: dict[str, Any], *command: str) -> Any:
        write_experiment(self.project, doc, "exp.yaml")
        return runner.invoke(app, [*command, "exp.yaml"])

    def runs(self) -> list[tuple[Any, ...]]:
        rows = self.store.query("SELECT status, blast_stage FROM runs ORDER BY started_at")
        return [(r["status"], r["blast_stage"]) for r in rows]

    def exposures(self) -> list[tuple[Any, ...]]:
        rows = self.store.query(
            "SELECT target, fault_kind, stage, green FROM exposures ORDER BY started_at, seq"
        )
        return [(r["target"], r["fault_kind"], r["stage"], r["green"]) for r in rows]


@pytest.fixture
def lab(project: Path, service: DegradableService, redis_server: Any) -> _Lab:  # noqa: F811
    return _Lab(project, service, redis_server.port)


def test_real_runs_earn_stages_per_target_and_fault_kind(lab: _Lab) -> None:
    port = lab.redis_port
    alias_url = f"redis://localhost:{port}/0"
    target = f"loopback:{port}"

    # validate refuses the unearned stage, naming the target, the kind and what is missing
    res = lab.cli(lab.doc(25), "validate")
    assert res.exit_code == 2, res.output
    assert f"target '{target}' / fault kind 'timeout' lacks 1 green run(s)" in res.output
    assert "at stage 0" in res.output

    # runs that did not really inject the fault earn nothing: a dry run, a no-op labelled as a fault, a fault
    # whose target refused it (nothing applied), a red run
    assert lab.cli(lab.doc(10), "run", "--dry-run", "-q").exit_code == 0
    label = [
        {
            "type": "action",
            "name": "pause-writes",
            "provider": {"type": "process", "path": "true", "arguments": ["--fault_type", "timeout"]},
        }
    ]
    assert lab.cli(lab.doc(10, method=label), "run", "-q").exit_code == 0
    closed = f"redis://127.0.0.1:{free_port()}/0"
    assert lab.cli(lab.doc(10, closed), "run", "-q").exit_code == 1
    lab.service.degrade(error_rate=1.0)
    try:
        assert lab.cli(lab.doc(10), "run", "-q").exit_code != 0
    finally:
        lab.service.restore()
    assert [e for e in lab.exposures() if e[3] == 1] == []
    res = lab.cli(lab.doc(25), "validate")
    assert res.exit_code == 2 and "lacks 1 green run(s)" in res.output, res.output

    # one green run that really paused Redis writes at stage 0 earns stage 1 for that target and kind...
    assert lab.cli(lab.doc(10), "run", "-q").exit_code == 0
    assert lab.exposures()[-1] == (target, "timeout", 0, 1)
    # ...under any loopback spelling of it, but not stage 2, and not for a fault kind never injected there
    assert lab.cli(lab.doc(25, alias_url), "validate").exit_code == 0
    res = lab.cli(lab.doc(50), "validate")
    assert res.exit_code == 2 and "only stage 1 is earned" in res.output, res.output
    assert lab.cli(lab.doc(25, alias_url), "run", "-q").exit_code == 0
    other_kind = lab.doc(25)
    other_kind["method"][0]["provider"].update(
        name="client_kill", arguments={"url": f"redis://127.0.0.1:{port}/0", "name_pattern": "^nobody$"}
    )
    res = lab.cli(other_kind, "validate")
    assert res.exit_code == 2 and f"target '{target}' / fault kind 'error' lacks" in res.output, res.output

    assert lab.cli(lab.doc(50), "run", "-q").exit_code == 0  # stage 2 after green 1
    assert lab.runs()[-3:] == [("completed", 0), ("completed", 1), ("completed", 2)]
    assert [e[2] for e in lab.exposures() if e[3] == 1] == [0, 1, 2]


def test_the_journal_shows_the_injection_and_the_store_keeps_it(lab: _Lab) -> None:
    res = lab.cli(lab.doc(10), "run", "-q")
    assert res.exit_code == 0, res.output
    (row,) = lab.store.query("SELECT body FROM journals")
    journal = json.loads(row["body"])
    (inj,) = journal["injections"]
    assert inj["action"] == "redis.client_pause" and inj["fault_kind"] == "timeout"
    assert inj["target"] == f"loopback:{lab.redis_port}" and inj["leases"] == 1


def test_bookkeeping_that_fails_never_fails_the_run(lab: _Lab) -> None:
    lab.store.execute("DROP TABLE exposures")  # an exposure row cannot be written now
    res = lab.cli(lab.doc(10), "run", "-q")
    assert res.exit_code == 0, res.output
    assert lab.runs() == [("completed", 0)]  # the run itself is recorded
    res = lab.cli(lab.doc(25), "validate")
    assert res.exit_code == 2 and "lacks 1 green run(s)" in res.output  # and the stage is not earned
