"""Evidence fixtures: a real ClickHouse server on a free loopback port, and real runs of real experiments.

The runs are made once per module by the engine (`run_experiment`) against a small file-backed service whose
recovery time each run controls (evidence_helpers.py), so every figure the tests check was measured.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from evidence_helpers import ESTIMATE, PLAN, service_experiment

from faultplane.core.store import Store
from policy_helpers import use_lab_policy

LAB_POLICY = "# evidence tests: a lab, gates not required\ngates: {required: false}\n"

_CONFIG = """<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>{d}/server.log</log><errorlog>{d}/server.err.log</errorlog>
    <size>10M</size><count>1</count></logger>
  <listen_host>127.0.0.1</listen_host>
  <http_port>{http}</http_port>
  <tcp_port>{tcp}</tcp_port>
  <path>{d}/data/</path>
  <tmp_path>{d}/tmp/</tmp_path>
  <user_files_path>{d}/user_files/</user_files_path>
  <format_schema_path>{d}/format_schemas/</format_schema_path>
  <users_config>users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
  <mark_cache_size>67108864</mark_cache_size>
  <uncompressed_cache_size>67108864</uncompressed_cache_size>
  <max_concurrent_queries>50</max_concurrent_queries>
</yandex>
"""
_USERS = """<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>2000000000</max_memory_usage></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip></networks>
    <profile>default</profile><quota>default</quota></default></users>
  <quotas><default></default></quotas>
</yandex>
"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clickhouse_command() -> list[str] | None:
    """The server binary: Debian's clickhouse-server, or the multi-call `clickhouse server` of newer packages."""
    for candidate in ("clickhouse-server", "/usr/sbin/clickhouse-server", "/usr/bin/clickhouse-server"):
        path = shutil.which(candidate) or (candidate if os.path.isfile(candidate) else None)
        if path:
            return [path]
    multi = shutil.which("clickhouse")
    return [multi, "server"] if multi else None


@dataclass
class ClickHouseServer:
    http_port: int
    directory: Path
    proc: subprocess.Popen[bytes] = field(repr=False)

    def url(self, database: str) -> str:
        return f"clickhouse://default@127.0.0.1:{self.http_port}/{database}"


def start_clickhouse(directory: Path) -> ClickHouseServer:
    cmd = clickhouse_command()
    if cmd is None:
        pytest.skip(
            "clickhouse-server is not installed: run `make services` (Debian package clickhouse-server)"
        )
    for sub in ("data", "tmp", "user_files", "format_schemas"):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    http, tcp = free_port(), free_port()
    (directory / "config.xml").write_text(_CONFIG.format(d=directory, http=http, tcp=tcp), encoding="utf-8")
    (directory / "users.xml").write_text(_USERS, encoding="utf-8")
    log = (directory / "stdout.log").open("wb")
    proc = subprocess.Popen(
        [*cmd, f"--config-file={directory / 'config.xml'}"],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=directory,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"clickhouse-server exited with {proc.returncode}: {_tail(directory)}")
        try:
            if httpx.get(f"http://127.0.0.1:{http}/ping", timeout=1).text.strip() == "Ok.":
                return ClickHouseServer(http, directory, proc)
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"clickhouse-server did not answer within 60 s: {_tail(directory)}")


def _tail(directory: Path) -> str:
    text = ""
    for name in ("stdout.log", "server.err.log"):
        p = directory / name
        if p.exists():
            text += p.read_text(errors="replace")[-1500:]
    return text


def stop_clickhouse(server: ClickHouseServer) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait(timeout=10)


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


def chdb_store(chdb_dir: Path) -> Any:
    """A fresh chDB store: a database of its own in the session's chDB directory."""
    from faultplane.core.store_clickhouse import ClickHouseStore

    return ClickHouseStore(f"chdb://{chdb_dir}?database=fp_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def chdb(chdb_dir: Path) -> Iterator[Any]:
    store = chdb_store(chdb_dir)
    try:
        yield store
    finally:
        store.execute(f"DROP DATABASE IF EXISTS {store.database}")
