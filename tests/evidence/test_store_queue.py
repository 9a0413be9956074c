"""A finished run does not wait for the database: its journal file is the record, its rows are queued, and
every reader through `Store` (in any process), or the run's own process at exit, writes them."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import duckdb
import pytest

from clihelp import cli, env
from faultplane.core.history import family_runs
from faultplane.core.store import Store
from faultplane.services.experiments import run_experiment

pytestmark = pytest.mark.usefixtures("lab_policy")


def _experiment(title: str = "queued rows", func: str = "getcwd") -> dict[str, Any]:
    return {
        "title": title,
        "steady-state-hypothesis": {
            "title": "ok",
            "probes": [
                {"type": "probe", "name": "cwd", "provider": {"type": "python", "module": "os", "func": func}}
            ],
        },
        "method": [
            {"type": "probe", "name": "pid", "provider": {"type": "python", "module": "os", "func": "getpid"}}
        ],
    }


def _run(store: Store, doc: dict[str, Any], journals: Path) -> Any:
    async def go() -> Any:
        return await run_experiment(doc, store=store, journal_dir=journals)

    return anyio.run(go)


def _raw_rows(path: Path, run_id: str) -> list[tuple[Any, ...]]:
    """What a reader outside Faultplane sees: the DuckDB file as it is, nothing written on its behalf."""
    if not path.exists():
        return []  # a first run does not even create the database: its rows wait in the queue
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute("SELECT status FROM runs WHERE run_id = ?", [run_id]).fetchall()
    finally:
        con.close()


def test_the_run_returns_first_and_any_store_reader_sees_it(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    result = _run(store, _experiment(), tmp_path / "j")
    assert result.status == "completed"
    assert Path(result.journal_path).is_file()  # the record exists before any row
    assert [p.name for p in store.pending_dir.iterdir()] == [f"{result.run_id}.json"]
    assert _raw_rows(store.path, result.run_id) == []  # not written yet: the run did not wait for it

    rows = Store(store.path).query("SELECT status, journal_path FROM runs WHERE run_id = ?", [result.run_id])
    assert rows == [{"status": "completed", "journal_path": result.journal_path}]
    assert list(store.pending_dir.iterdir()) == []
    assert _raw_rows(store.path, result.run_id) == [("completed",)]
    n = store.query("SELECT count(*) AS n FROM activities WHERE run_id = ?", [result.run_id])[0]["n"]
    assert n == 3  # hypothesis before and after, one method probe


_CHILD = textwrap.dedent(
    """
    import os, sys, anyio
    from pathlib import Path
    from faultplane.core.store import Store
    from faultplane.services.experiments import run_experiment
    doc = {doc!r}
    async def go():
        return await run_experiment(doc, store=Store(Path(sys.argv[1])), journal_dir=Path(sys.argv[2]))
    result = anyio.run(go)
    print(result.run_id, flush=True)
    if sys.argv[3] == "killed":
        os._exit(0)  # no interpreter shutdown: as if killed right after the run
    """
)


def _child(tmp_path: Path, how: str) -> str:
    code = _CHILD.format(doc=_experiment(f"child {how}"))
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "s.duckdb"), str(tmp_path / "j"), how],
        capture_output=True,
        text=True,
        env=env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[-1]


def test_a_process_that_exits_writes_its_rows_before_it_goes(tmp_path: Path) -> None:
    run_id = _child(tmp_path, "exits")
    assert _raw_rows(tmp_path / "s.duckdb", run_id) == [("completed",)]
    assert list((tmp_path / "s.duckdb.pending").iterdir()) == []


def test_a_process_killed_after_its_run_leaves_the_rows_to_the_next_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = _child(tmp_path, "killed")
    assert (tmp_path / "s.duckdb.pending" / f"{run_id}.json").is_file()
    assert _raw_rows(tmp_path / "s.duckdb", run_id) == []
    monkeypatch.setenv("FAULTPLANE_STORE", str(tmp_path / "s.duckdb"))
    listing = cli("runs", "list", "--format", "json")  # another process, reading through Store
    assert listing.returncode == 0, listing.stderr
    assert [(r["run_id"], r["status"]) for r in json.loads(listing.stdout)] == [(run_id, "completed")]
    assert _raw_rows(tmp_path / "s.duckdb", run_id) == [("completed",)]


def _db_history(store: Store, family: str) -> list[tuple[Any, ...]]:
    rows = store.query(
        "SELECT status, steady_state_before, steady_state_after, blast_stage FROM runs "
        "WHERE experiment_family = ? AND NOT dry_run ORDER BY started_at DESC",
        [family],
    )
    return [tuple(r.values()) for r in rows]


def _index_history(store: Store, family: str) -> list[tuple[Any, ...]]:
    return [
        (r["status"], r["steady_state_before"], r["steady_state_after"], r["blast_stage"])
        for r in family_runs(store, family)
    ]


def test_history_index_agrees_with_the_database_and_never_outlives_it(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    family = "history-index"
    green = {**_experiment(), "family": family}
    red = {**_experiment(), "family": family}
    # before-hypothesis fails (a probe calling a missing function is now refused in phase 0 instead)
    red["steady-state-hypothesis"]["probes"][0]["tolerance"] = "/definitely/not/the/cwd"
    statuses = []
    for doc in (green, red, green, green, red, green):
        result = _run(store, doc, tmp_path / "j")
        statuses.append(result.status)
        # each run's policy check read the index; it must equal the database at every step
        assert _index_history(store, family) == _db_history(store, family)
    assert statuses == ["completed", "failed", "completed", "completed", "failed", "completed"]
    index = list((tmp_path / "s.duckdb.history").iterdir())
    assert len(index) == 1

    # the store file replaced: the index describes a database that is gone and is not believed
    for p in tmp_path.glob("s.duckdb*"):
        if p.is_file():
            p.unlink()
    fresh = Store(tmp_path / "s.duckdb")
    assert _index_history(fresh, family) == [] == _db_history(fresh, family)
    assert os.path.exists(index[0])  # rebuilt for the new store, with its (empty) history


def test_a_wider_stage_is_judged_on_the_database_not_the_index(tmp_path: Path) -> None:
    from faultplane.core import history
    from faultplane.core.policy import Policy, evaluate

    store = Store(tmp_path / "s.duckdb")
    family = "staged"
    assert family_runs(store, family) == []  # indexes the (empty) history
    path = history._index_path(store.path, family)
    doc = json.loads(path.read_text())
    doc["rows"] = [  # an index that claims a green run at stage 0 the database never had
        {
            "run_id": "forged",
            "status": "completed",
            "steady_state_before": True,
            "steady_state_after": True,
            "blast_stage": 0,
            "started_us": 1,
        }
    ]
    path.write_text(json.dumps(doc))
    assert [r["run_id"] for r in family_runs(store, family)] == ["forged"]  # advice would read it...

    experiment = {**_experiment(), "family": family, "blast_radius": {"percent": 25}}
    decision = evaluate(experiment, policy=Policy(), store=store, family=family)
    assert decision.stage == 1 and decision.allowed_stage == 0  # ...the stage gate did not
    assert any("skips a stage" in v.message for v in decision.violations)


def test_a_journal_that_cannot_be_indexed_is_set_aside_not_blocking_the_store(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = Store(tmp_path / "s.duckdb")
    good = _run(store, _experiment(), tmp_path / "j")
    bad = tmp_path / "j" / "torn.json"
    bad.write_text('{"run_id": "torn", "status": ')  # a journal file cut short
    store.queue_journal(bad, "torn", None)
    with caplog.at_level("WARNING", logger="faultplane.store"):
        rows = Store(store.path).query("SELECT run_id FROM runs")
    assert rows == [{"run_id": good.run_id}]  # the good one indexed, the store still answers
    assert sorted(p.name for p in store.pending_dir.iterdir()) == ["torn.rejected"]
    assert "torn.json" in caplog.text and "torn.rejected" in caplog.text
    assert not store.has_pending()


def _cli_run(tmp_path: Path, *, extra_env: dict[str, str] | None = None) -> tuple[str, str]:
    exp = tmp_path / "exp.json"
    exp.write_text(json.dumps(_experiment("cli queued rows")))
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "faultplane", "run", str(exp), "-q", "--format", "json"],
        capture_output=True,
        text=True,
        env={**env(), "FAULTPLANE_STORE": str(tmp_path / "s.duckdb"), **(extra_env or {})},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)["run_id"], done.stderr


def test_the_cli_run_leaves_its_rows_to_a_detached_writer_and_never_loads_duckdb(tmp_path: Path) -> None:
    first, _ = _cli_run(tmp_path)  # the family's first run reads the database once for its history
    _wait_for_rows(tmp_path / "s.duckdb", first)  # its writer done: the next run starts on a settled store
    run_id, imports = _cli_run(tmp_path)
    assert not [ln for ln in imports.splitlines() if ln.rstrip().endswith(("| duckdb", "| pyarrow"))]
    _wait_for_rows(tmp_path / "s.duckdb", run_id)
    assert _raw_rows(tmp_path / "s.duckdb", run_id) == [("completed",)]
    assert not list((tmp_path / "s.duckdb.pending").glob("*.json"))


def _wait_for_rows(db: Path, run_id: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the detached writer needs DuckDB's start-up, then a moment
        with contextlib.suppress(duckdb.IOException):  # the writer holds the file lock while it writes
            if _raw_rows(db, run_id) == [("completed",)] and not list(
                db.with_name(db.name + ".pending").glob("*")
            ):
                return
        time.sleep(0.2)


def test_the_cli_run_writes_its_rows_itself_when_asked(tmp_path: Path) -> None:
    run_id, _ = _cli_run(tmp_path, extra_env={"FAULTPLANE_STORE_WRITER": "inline"})
    assert _raw_rows(tmp_path / "s.duckdb", run_id) == [("completed",)]  # at once: written before exit
