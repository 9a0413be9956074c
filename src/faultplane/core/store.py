"""The evidence store: journals, runs, activities, audit events and plane metrics in one DuckDB file.

DuckDB lets only one process hold a database file for writing, and Faultplane runs as several processes at
once (a CLI run, an MCP server, a plane proxy). So the store never keeps a connection open for long: an
operation opens the file, or reuses the connection a previous operation left, and the connection is closed
once it has been idle for `_IDLE_CLOSE_S`, releasing the file to other processes (who retry while it is held).
Opening a DuckDB database costs ~15 ms, more than everything else a short run does, so a burst of operations
(a run's schema check and policy history read) pays for one open, not one each; the engine releases the
file before a run's activities (`release`), so a hung controller never holds it. Every
operation commits before it returns, so what it wrote is durable whether or not the connection stays open.
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
    """The one read-write connection this process holds to a store file, while it is in use or recently was."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.con: duckdb.DuckDBPyConnection | None = None
        self.last_used = 0.0
        self.timer: threading.Timer | None = None

    def close(self) -> None:
        with self.lock:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            con, self.con = self.con, None
            if con is not None:
                with contextlib.suppress(Exception):
                    con.close()

    def release(self) -> None:
        """Called with the lock held after an operation: arm the idle close."""
        self.last_used = time.monotonic()
        if self.timer is None:
            self._arm(_IDLE_CLOSE_S)

    def _arm(self, delay: float) -> None:
        self.timer = threading.Timer(delay, self._idle_check)
        self.timer.daemon = True
        self.timer.start()

    def _idle_check(self) -> None:
        with self.lock:
            self.timer = None
            if self.con is None:
                return
            idle = time.monotonic() - self.last_used
            if idle >= _IDLE_CLOSE_S:
                self.close()
            else:
                self._arm(_IDLE_CLOSE_S - idle)


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
    """Close every connection this process keeps, so other processes can open the files at once."""
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
    """A DuckDB-file store. Cheap to construct; calls share one briefly-kept connection per file (see above)."""

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
    def connect(self, *, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection to the file for one operation, retrying while another process writes to it.

        Read-write operations share this process's connection (one at a time); read-only ones open the file
        read-only on their own (DuckDB enforces it), after closing the shared one, which DuckDB would not let
        coexist with a read-only open in the same process."""
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
            shared.release()

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

    def release(self) -> None:
        """Close this process's kept connection now: before work of unknown length (a run's activities), so a
        controller that hangs or is stopped mid-run never keeps other processes out of the store."""
        _shared(str(self.path)).close()

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
