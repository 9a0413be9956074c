"""A real ClickHouse server on a free loopback port and fresh chDB stores, for the evidence tests and their
fixtures (tests import from here, never from conftest: several conftest modules share that name)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from proc_helpers import free_port

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


def chdb_store(chdb_dir: Path) -> Any:
    """A fresh chDB store: a database of its own in the session's chDB directory."""
    from faultplane.core.store_clickhouse import ClickHouseStore

    return ClickHouseStore(f"chdb://{chdb_dir}?database=fp_{uuid.uuid4().hex[:12]}")
