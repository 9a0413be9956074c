"""Evidence fixtures: a real ClickHouse server on a free loopback port, and real runs of real experiments.

The runs are made once per module by the engine (`run_experiment`) against a small file-backed service whose
recovery time each run controls (evidence_helpers.py), so every figure the tests check was measured.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from clickhouse_helpers import LAB_POLICY, ClickHouseServer, chdb_store, start_clickhouse, stop_clickhouse
from evidence_helpers import ESTIMATE, PLAN, service_experiment

from faultplane.core.store import Store
from policy_helpers import use_lab_policy


@pytest.fixture(scope="session")
def clickhouse_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClickHouseServer]:
    server = start_clickhouse(tmp_path_factory.mktemp("clickhouse"))
    try:
        yield server
    finally:
        stop_clickhouse(server)


@pytest.fixture
def ch_store(clickhouse_server: ClickHouseServer) -> Iterator[Any]:
    """A ClickHouse store in a database of its own, dropped afterwards."""
    from faultplane.core.store_clickhouse import ClickHouseStore

    database = f"fp_{uuid.uuid4().hex[:12]}"
    store = ClickHouseStore(clickhouse_server.url(database))
    try:
        yield store
    finally:
        store.execute(f"DROP DATABASE IF EXISTS {database}")
        store.close()


# ---- real runs -----------------------------------------------------------------------------------------------


@pytest.fixture
def lab_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return use_lab_policy(LAB_POLICY)


@dataclass
class RunSet:
    store: Store
    journals: list[dict[str, Any]]
    run_ids: list[str]
    directory: Path


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunSet]:
    """25 real runs of three experiments through the engine, persisted in a DuckDB store."""
    from faultplane.services.experiments import run_experiment
    from faultplane.services.runs import load_journal

    base = tmp_path_factory.mktemp("evidence-runs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CONFIG_HOME", str(base / "xdg-config"))
        use_lab_policy(LAB_POLICY, base / "xdg-config")
        mp.setenv("XDG_DATA_HOME", str(base / "xdg-data"))
        mp.setenv("XDG_STATE_HOME", str(base / "xdg-state"))
        mp.setenv("FAULTPLANE_STORE", str(base / "store.duckdb"))
        store = Store(base / "store.duckdb")
        run_ids = []
        for family, title, extra_ms, restart_s in PLAN:
            state = base / f"{family}.json"
            exp = service_experiment(
                title, state, extra_ms=extra_ms, restart_s=restart_s, family=family, estimate=ESTIMATE
            )

            async def go(exp: dict[str, Any] = exp) -> Any:
                return await run_experiment(exp, store=store, journal_dir=base / "journals")

            run_ids.append(anyio.run(go).run_id)
        journals = [load_journal(r, store) for r in run_ids]
        yield RunSet(store=store, journals=journals, run_ids=run_ids, directory=base)


# ---- chDB: ClickHouse 26.x embedded in this process ----------------------------------------------------------


@pytest.fixture(scope="session")
def chdb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one chDB data directory of this test process (chDB allows one per process)."""
    pytest.importorskip("chdb", reason="chdb-core is not installed: pip install chdb-core")
    return tmp_path_factory.mktemp("chdb")


@pytest.fixture
def chdb(chdb_dir: Path) -> Iterator[Any]:
    store = chdb_store(chdb_dir)
    try:
        yield store
    finally:
        store.execute(f"DROP DATABASE IF EXISTS {store.database}")
