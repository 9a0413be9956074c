"""Read-tool answers are reused only while the store is unchanged: any write, by this process or another,
makes the next read go to the database again (a real DuckDB store; the writer is a separate process)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from faultplane.core.store import open_store
from faultplane.mcp_server.readcache import MISS, StoreReadCache


def _audit_rows(store: object) -> int:
    return int(store.query("SELECT count(*) AS n FROM audit")[0]["n"])  # type: ignore[attr-defined]


def _insert(store: object, n: int = 1) -> None:
    row = {"ts": datetime.now(UTC), "actor": "t", "action": "x", "subject": "s", "details": json.dumps({})}
    store.insert("audit", [row] * n)  # type: ignore[attr-defined]


def test_answers_are_reused_until_the_store_changes(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s.duckdb")
    _insert(store)
    cache = StoreReadCache()
    calls = []

    def compute() -> int:
        calls.append(1)
        return _audit_rows(store)

    assert cache.get(store, "n", compute) == 1
    assert cache.get(store, "n", compute) == 1 and len(calls) == 1
    assert cache.peek(store, "n") == 1
    _insert(store)  # a write in this process
    assert cache.peek(store, "n") is MISS
    assert cache.get(store, "n", compute) == 2 and len(calls) == 2

    # a write by another process (the store closes its connection after each operation)
    code = (
        "import json,sys; from datetime import UTC, datetime; from faultplane.core.store import open_store;"
        "s=open_store(sys.argv[1]); s.insert('audit', [{'ts': datetime.now(UTC), 'actor': 'o', 'action': 'y',"
        " 'subject': 's', 'details': '{}'}])"
    )
    subprocess.run([sys.executable, "-c", code, str(store.path)], check=True, timeout=60)
    assert cache.peek(store, "n") is MISS
    assert cache.get(store, "n", compute) == 3


def test_stores_without_a_file_are_never_cached(tmp_path: Path) -> None:
    class Remote:
        path = "clickhouse://127.0.0.1:1/db"

        def has_pending(self) -> bool:
            return False

    cache = StoreReadCache()
    values = iter(range(10))
    assert cache.get(Remote(), "k", lambda: next(values)) == 0
    assert cache.get(Remote(), "k", lambda: next(values)) == 1
    assert cache.peek(Remote(), "k") is MISS
    missing = open_store(tmp_path / "not-yet.duckdb")
    assert cache.peek(missing, "k") is MISS
