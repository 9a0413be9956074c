"""The evidence store: journals, runs, activities, audit events and plane metrics in one DuckDB file.

DuckDB lets only one process hold a database file for writing, and Faultplane runs as several processes at
once (a CLI run, an MCP server, a plane proxy, a test polling the store). So the store never keeps a connection
open beyond the work that needs it: each operation opens the file and closes it before returning, and another
process that finds the file locked retries for up to `_LOCK_WAIT_S`. Opening a DuckDB database costs ~15 ms,
so a caller with several operations in a row (a run's schema check and policy history read, a run's persist)
wraps them in `with store.batch():`, which keeps one connection for the block and closes it at the end. The
scope is explicit on purpose: a connection kept "for a while" after an operation starves other processes
that poll the store. Every operation commits before it returns.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb

from faultplane.core.migrations import CORE_MIGRATIONS as _CORE_MIGRATIONS

__all__ = ["Store", "StoreBusyError", "default_store_path", "open_store", "release_store_files"]

_LOCK_WAIT_S = 30.0
# How long an idle connection keeps the file: short enough that another process waits little (it retries),
# long enough to span a short run from its policy check to its persist.
_IDLE_CLOSE_S = 0.25


class _Shared:
    """This process's read-write connection to one store file, open only inside a `Store.batch()` block."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.con: duckdb.DuckDBPyConnection | None = None
        self.depth = 0

    def close(self) -> None:
        with self.lock:
            con, self.con = self.con, None
            if con is not None:
                with contextlib.suppress(Exception):
                    con.close()


_SHARED: dict[str, _Shared] = {}
_SHARED_LOCK = threading.Lock()


def _shared(path: str) -> _Shared:
    with _SHARED_LOCK:
        found = _SHARED.get(path)
        if found is None:
            found = _SHARED[path] = _Shared()
        return found


@atexit.register
def _close_all() -> None:
    for shared in list(_SHARED.values()):
        shared.close()


def release_store_files() -> None:
    """Close every connection this process holds, so other processes can open the files at once."""
    _close_all()


# The versioned schema (shared with the ClickHouse backend) lives in core.migrations.


class StoreBusyError(RuntimeError):
    """Another process held the store's lock for longer than we were willing to wait."""


def default_store_path() -> Path:
    """The store file: $FAULTPLANE_STORE, else $XDG_DATA_HOME/faultplane/faultplane.duckdb."""
    env = os.environ.get("FAULTPLANE_STORE")
    if env:
        return Path(env).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "faultplane" / "faultplane.duckdb"


class Store:
    """A DuckDB-file store. Cheap to construct; each call opens and closes the file unless inside `batch()`."""

    dialect = "duckdb"
    _migrated: set[tuple[str, str]] = set()
    _migrate_lock = threading.Lock()

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path).expanduser() if path else default_store_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.ensure_schema("core", _CORE_MIGRATIONS)

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Keep one read-write connection for the operations in this block (this thread's and others'), and
        close it when the block ends."""
        shared = _shared(str(self.path))
        with shared.lock:
            shared.depth += 1
        try:
            yield
        finally:
            with shared.lock:
                shared.depth -= 1
                if shared.depth == 0:
                    shared.close()

    @contextlib.contextmanager
    def connect(self, *, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection to the file for one operation, retrying while another process writes to it.

        Read-write operations reuse the connection of an enclosing `batch()`, else open and close their own.
        Read-only ones open the file read-only on their own (DuckDB enforces it), after closing a batch's
        connection, which DuckDB would not let coexist with a read-only open in the same process."""
        shared = _shared(str(self.path))
        with shared.lock:
            if read_only:
                shared.close()
                con = self._open(read_only=True)
                try:
                    yield con
                finally:
                    con.close()
                return
            if shared.con is None:
                shared.con = self._open(read_only=False)
            con = shared.con
            try:
                yield con
            except BaseException:
                # a failed operation may leave a transaction open: never hand that connection on
                shared.close()
                raise
            if shared.depth == 0:
                shared.close()

    def _open(self, *, read_only: bool) -> duckdb.DuckDBPyConnection:
        deadline = time.monotonic() + _LOCK_WAIT_S
        delay = 0.01
        while True:
            try:
                return duckdb.connect(str(self.path), read_only=read_only)
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    if "lock" in str(exc).lower():
                        raise StoreBusyError(f"store {self.path} is locked by another process") from exc
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.2)

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> None:
        with self.connect() as con:
            con.execute(sql, params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        rows = list(rows)
        if not rows:
            return
        with self.connect() as con:
            con.executemany(sql, rows)

    def query(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None, *, read_only: bool = False
    ) -> list[dict[str, Any]]:
        """Run a query and return its rows as dicts."""
        with self.connect(read_only=read_only) as con:
            cur = con.execute(sql, params)
            if cur.description is None:
                return []
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    def insert(self, table: str, rows: Iterable[Mapping[str, Any]]) -> int:
        """Insert dict rows; the columns are those of the first row."""
        rows = list(rows)
        if not rows:
            return 0
        cols = list(rows[0])
        placeholders = ", ".join("?" for _ in cols)
        sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({placeholders})"
        self.executemany(sql, [[r.get(c) for c in cols] for r in rows])
        return len(rows)

    def ensure_schema(self, owner: str, migrations: Sequence[tuple[str, Sequence[str]]]) -> None:
        """Apply each named migration once. `owner` groups them (core, plane, faults, ...)."""
        key = (str(self.path), owner)
        with self._migrate_lock:
            if key in self._migrated:
                return
            with self.connect() as con:
                con.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations "
                    "(owner VARCHAR, name VARCHAR, applied_at TIMESTAMPTZ DEFAULT now())"
                )
                done = {
                    r[0]
                    for r in con.execute(
                        "SELECT name FROM schema_migrations WHERE owner = ?", [owner]
                    ).fetchall()
                }
                for name, statements in migrations:
                    if name in done:
                        continue
                    con.execute("BEGIN")
                    for stmt in statements:
                        con.execute(stmt)
                    con.execute("INSERT INTO schema_migrations (owner, name) VALUES (?, ?)", [owner, name])
                    con.execute("COMMIT")
            self._migrated.add(key)


def open_store(path_or_url: str | os.PathLike[str] | None = None) -> Any:
    """The store at a path (DuckDB) or a `clickhouse://` URL; without an argument `$FAULTPLANE_STORE` decides."""
    from faultplane.core.store_clickhouse import open_store as _open

    return _open(path_or_url)
