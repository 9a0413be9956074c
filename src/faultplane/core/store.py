"""The evidence store in one DuckDB file (the default): journals, runs, activities, audit events, plane metrics.

What both engines share (the queue, the one journal-row writer) is `core.store_base`; this module is the DuckDB
dialect of it, and `open_store` picks the engine for a path or URL (ClickHouse: `core.clickhouse_store`).

DuckDB lets only one process hold a database file for writing, and Faultplane runs as several processes at
once (a CLI run, an MCP server, a plane proxy, a test polling the store). So the store never keeps a connection
open beyond the work that needs it: each operation opens the file and closes it before returning, and another
process that finds the file locked retries for up to `_LOCK_WAIT_S`. Opening a DuckDB database costs ~15 ms,
so a caller with several operations in a row (a policy check reading a family's history from the database)
wraps them in `with store.batch():`, which keeps one connection for the block and closes it at the end. The
scope is explicit on purpose: a connection kept "for a while" after an operation starves other processes
that poll the store. Every operation commits before it returns.

A finished run does not wait for the store: its journal file is the record, and the store is an index of
journal files. `queue_journal` leaves a marker in `<store>.pending/` (a few hundred microseconds, where a
database open costs ~20 ms, more than a whole run of quick probes). Any operation on the store, in any
process, first writes what is queued; a process writes its own queue before it exits, and a long-lived one
(the MCP server) calls `flush()` after a run. So every reader through `Store` sees every finished run, and a
run killed between its journal and its rows is indexed by the next one who looks.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faultplane.core.clickhouse_wire import StoreError
from faultplane.core.migrations import CORE_MIGRATIONS as _CORE_MIGRATIONS
from faultplane.core.paths import file_from_env
from faultplane.core.store_base import JournalStore, is_clickhouse_url, redact_url

if TYPE_CHECKING:
    import duckdb

__all__ = ["Store", "StoreBusyError", "StoreError", "default_store_path", "open_store"]

_LOCK_WAIT_S = 30.0
# a table's rows in one write from which an Arrow insert pays for importing pyarrow (once it is imported, more
# than a few rows go that way)
_ARROW_FROM_ROWS = 2_000
_log = logging.getLogger("faultplane.store")


class _Shared:
    """This process's read-write connection to one store file, open only inside a `Store.batch()` block."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.con: duckdb.DuckDBPyConnection | None = None
        self.depth = 0  # open batch() blocks
        self.inside = 0  # open connect() blocks (of the thread that holds `lock`)

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


# The versioned schema (shared with the ClickHouse backend) lives in core.migrations.


class StoreBusyError(StoreError):
    """Another process held the store's lock for longer than we were willing to wait."""


def default_store_path() -> Path:
    """The store file: $FAULTPLANE_STORE, else $XDG_DATA_HOME/faultplane/faultplane.duckdb."""
    return file_from_env("FAULTPLANE_STORE", "data", "faultplane.duckdb")


# Rows per row group of the tables this process writes (DuckDB's default: 122,880). A transaction writes its new
# rows straight to the file, compressed as they come and on all cores, only once it holds a whole row group of a
# table; below that, COMMIT writes them to the WAL, uncompressed, and a checkpoint compresses them again on one
# core. 100k journals (~470 MB of text) in one bulk ingest: ~2 s of COMMIT and checkpoint with the default, ~0.2 s
# with these. Not kept in the file: each open sets it, and row groups written before keep their size.
_ROW_GROUP_ROWS = 16_384


def _attach(path: Path) -> duckdb.DuckDBPyConnection:
    """A read-write connection whose default database is the store file: attached (the row group size is an ATTACH
    option) to an empty in-memory database, as `store`, so unqualified names and `main.` mean the store's tables."""
    import duckdb

    # where DuckDB spills: next to the file, as for a file opened directly (an in-memory database's is ./.tmp)
    con = duckdb.connect(config={"temp_directory": f"{path}.tmp"})
    try:
        literal = str(path).replace("'", "''")
        con.execute(f"ATTACH '{literal}' AS store (ROW_GROUP_SIZE {_ROW_GROUP_ROWS})")
        con.execute("USE store")
    except BaseException:
        con.close()
        raise
    return con


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


class Store(JournalStore):
    """A DuckDB-file store. Cheap to construct; each call opens and closes the file unless inside `batch()`."""

    dialect = "duckdb"
    _migrated: set[tuple[str, str]] = set()  # (file, owner) pairs migrated in this process
    _migrate_lock = threading.Lock()

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        # nothing is opened here: the schema is checked by the first operation that needs the file
        self.path = Path(path).expanduser() if path else default_store_path()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"store {self.path}: cannot create its directory ({exc.strerror or exc}); check the path and its "
                "permissions, or choose another --store / FAULTPLANE_STORE"
            ) from None
        self.pending_dir = self.path.with_name(self.path.name + ".pending")

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
        Inside another `connect()` of this thread they get its connection, and the outer block decides when
        it closes. Read-only ones open the file read-only on their own (DuckDB enforces it), after closing a
        batch's connection, which DuckDB would not let coexist with a read-only open in the same process."""
        shared = _shared(str(self.path))
        with shared.lock:
            if shared.inside:
                # the lock is held by the outer connect() for its whole block: this is the same thread
                if read_only:
                    raise StoreError(
                        f"store {self.path}: a read-only connection cannot open inside a read-write one; "
                        "fix: run the read-only query after the block"
                    )
                yield shared.con  # type: ignore[misc]
                return
            if read_only:
                if not self._ready() or self.has_pending():
                    with self.connect():  # schema and queued journals first: a read-only open can do neither
                        pass
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
            shared.inside += 1
            try:
                if not self._ready():
                    self._migrate(con, "core", _CORE_MIGRATIONS)
                if self.has_pending():
                    self._write_pending()
                yield con
            except BaseException:
                # a failed operation may leave a transaction open: never hand that connection on
                shared.close()
                raise
            finally:
                shared.inside -= 1
            if shared.depth == 0:
                shared.close()

    def _open(self, *, read_only: bool) -> duckdb.DuckDBPyConnection:
        import duckdb  # here, not at the top: a run only queues its rows and need not load DuckDB

        deadline = time.monotonic() + _LOCK_WAIT_S
        delay = 0.01
        while True:
            try:
                existed = self.path.exists()
                # read-only opens are whole read-only instances (analyze's sandbox relies on it) and write no rows.
                # The path absolute: DuckDB reads "md:…", "sqlite:…" or "s3:…" at its start as a request for an
                # extension (downloaded if missing), where the user named a file
                where = self.path.absolute()
                con = duckdb.connect(str(where), read_only=True) if read_only else _attach(where)
                if not existed:
                    self._created()
                return con
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    if "lock" in str(exc).lower():
                        raise StoreBusyError(
                            f"store {self.path} is locked by another process for more than {_LOCK_WAIT_S:.0f} s; "
                            "check for a faultplane process that holds it, or choose another --store"
                        ) from exc
                    raise StoreError(
                        f"store {self.path}: cannot open it ({_first_line(exc)}); check that it is a DuckDB file "
                        "Faultplane wrote and that its directory is writable, or choose another --store"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
            except (duckdb.Error, OSError) as exc:
                raise StoreError(
                    f"store {self.path}: cannot open it ({_first_line(exc)}); check that it is a DuckDB file "
                    "Faultplane wrote and that its directory is writable, or choose another --store"
                ) from None

    def _created(self) -> None:
        """A new database file (the first, or one made after the old was deleted): what this process and the
        history index knew of the old one does not hold."""
        from faultplane.core.history import drop_index

        with self._migrate_lock:
            self._migrated.difference_update({k for k in self._migrated if k[0] == str(self.path)})
        drop_index(self.path)

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> None:
        with self.connect() as con:
            con.execute(sql, params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        rows = list(rows)
        if not rows:
            return
        with self.connect() as con:
            # One transaction: autocommitted, DuckDB commits (and syncs the file) once per row, ~1 ms a row.
            try:
                con.execute("BEGIN")
            except Exception:  # the caller's transaction is open already: its COMMIT covers these rows
                con.executemany(sql, rows)
                return
            try:
                con.executemany(sql, rows)
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

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
        """Insert dict rows in one statement; the columns are those of the first row."""
        rows = list(rows)
        if not rows:
            return 0
        with self.connect() as con:
            self._insert_lists(con, table, rows)
        return len(rows)

    def ensure_schema(self, owner: str, migrations: Sequence[tuple[str, Sequence[str]]]) -> None:
        """Apply each named migration once. `owner` groups them (core, plane, faults, ...)."""
        if self._key(owner) in self._migrated:
            return
        with self.connect() as con:
            self._migrate(con, owner, migrations)

    def _key(self, owner: str) -> tuple[str, str]:
        return (str(self.path), owner)

    def _ready(self) -> bool:
        return self._key("core") in self._migrated

    def _migrate(
        self, con: duckdb.DuckDBPyConnection, owner: str, migrations: Sequence[tuple[str, Sequence[str]]]
    ) -> None:
        key = self._key(owner)
        with self._migrate_lock:
            if key in self._migrated:
                return
            con.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(owner VARCHAR, name VARCHAR, applied_at TIMESTAMPTZ DEFAULT now())"
            )
            done = {
                r[0]
                for r in con.execute("SELECT name FROM schema_migrations WHERE owner = ?", [owner]).fetchall()
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

    # ---- finished runs: the DuckDB dialect of core.store_base -----------------------------------------------
    def writing(self) -> contextlib.AbstractContextManager[duckdb.DuckDBPyConnection]:
        """One connection, and this process's lock on the file, for a whole run's rows and its history index."""
        return self.connect()

    def replace_rows(
        self, tables: Mapping[str, list[dict[str, Any]]], *, key: str = "run_id", keys: Iterable[Any] = ()
    ) -> None:
        """Write rows replacing the earlier rows of the same `key` values (those of the rows, and `keys`), all
        tables in one transaction. A run's few rows go in as parallel lists (row-by-row executemany costs
        DuckDB ~0.5 ms a row); a bulk ingest's many as an Arrow table, ~3x faster at 100k rows but worth its
        import (~0.5 s) only there."""
        keys = list(keys)
        with self.connect() as con:
            con.execute("BEGIN")
            try:
                for table, rows in tables.items():
                    ids = sorted({*keys, *(r[key] for r in rows)})
                    # one run's: a plain comparison (the IN subquery cost ~4x as much for a single key)
                    if len(ids) == 1:
                        con.execute(f"DELETE FROM {table} WHERE {key} = ?", ids)
                    elif ids:
                        con.execute(f"DELETE FROM {table} WHERE {key} IN (SELECT unnest(?))", [ids])
                    if len(rows) >= _ARROW_FROM_ROWS or (len(rows) > 50 and "pyarrow" in sys.modules):
                        self._insert_arrow(con, table, rows)
                    elif len(rows) == 1:
                        cols = list(rows[0])
                        con.execute(
                            f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
                            list(rows[0].values()),
                        )
                    elif rows:
                        self._insert_lists(con, table, rows)
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    def _insert_lists(
        self, con: duckdb.DuckDBPyConnection, table: str, rows: Sequence[Mapping[str, Any]]
    ) -> None:
        cols = list(rows[0])
        types = self._column_types(con, table, cols)
        # unnest() of several lists in one SELECT zips them into rows
        unnest = ", ".join(f"unnest(?::{types[c]}[])" for c in cols)
        con.execute(
            f"INSERT INTO {table} ({', '.join(cols)}) SELECT * FROM (SELECT {unnest})",
            [[r.get(c) for r in rows] for c in cols],
        )

    @staticmethod
    def _insert_arrow(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict[str, Any]]) -> None:
        import datetime as dt

        import pyarrow as pa

        arrays = {}
        for c in rows[0]:
            values = [r.get(c) for r in rows]
            # the column's type from its first non-null value: rows of one table are uniform
            sample = next((v for v in values if v is not None), None)
            if isinstance(sample, dt.datetime):
                arrays[c] = pa.array(values, type=pa.timestamp("us", tz="UTC"))
            elif isinstance(sample, list):
                arrays[c] = pa.array(values, type=pa.list_(pa.string()))
            else:
                arrays[c] = pa.array(values)
        con.register("_fp_new", pa.table(arrays))
        try:
            cols = ", ".join(arrays)
            con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _fp_new")
        finally:
            with contextlib.suppress(
                Exception
            ):  # an aborted transaction refuses it; the error is the insert's
                con.unregister("_fp_new")

    _type_cache: dict[
        tuple[str, str], dict[str, str]
    ] = {}  # (file, table) -> column -> type, in this process

    def _column_types(
        self, con: duckdb.DuckDBPyConnection, table: str, cols: Sequence[str]
    ) -> dict[str, str]:
        key = (str(self.path), table)
        types = self._type_cache.get(key)
        if types is None or any(c not in types for c in cols):
            found = con.execute(
                "SELECT column_name, data_type FROM duckdb_columns() "
                "WHERE database_name = current_database() AND schema_name = 'main' AND table_name = ?",
                [table],
            ).fetchall()
            types = self._type_cache[key] = dict(found)
        return types

    def _recorded(self, doc: dict[str, Any], blast_stage: int | None) -> None:
        # the family's history index, under the same lock as the rows it mirrors
        from faultplane.core.history import record_run

        record_run(self.path, doc, blast_stage)

    def _queued(self, run_id: str, journal_path: str) -> None:
        _QUEUED_IN.add(self.path)  # written at exit, or by the next store operation in any process

    def flush(self) -> None:
        """Write every queued journal now (a no-op when nothing is queued)."""
        if self.has_pending():
            with self.connect():
                pass


# the stores this process queued journals for: their queues are written when the process exits
_QUEUED_IN: set[Path] = set()
_exit_writer = "inline"


def write_queue_after_exit() -> None:
    """Let a detached process write this process's queued rows when it exits, instead of this process.

    `faultplane run` uses it: loading DuckDB and writing a run's rows took ~0.2 s and ~70 MiB on top of a
    small run, for rows nobody is waiting for (the journal file is the record, and every store reader
    writes the queue first). FAULTPLANE_STORE_WRITER=inline keeps the write in the run's process."""
    global _exit_writer
    if os.environ.get("FAULTPLANE_STORE_WRITER", "") != "inline":
        _exit_writer = "detached"


@atexit.register
def _index_before_exit() -> None:
    paths = [str(p) for p in _QUEUED_IN]
    if paths and _exit_writer == "detached":
        import subprocess
        import sys

        try:
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "import sys, faultplane.core.store as s; s.write_queues(sys.argv[1:])",
                    *paths,
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # not in the terminal's process group: Ctrl-C there does not stop it
                close_fds=True,
            )
            return
        except OSError:
            pass  # no process to be had: write them here
    write_queues(paths)


def write_queues(paths: Iterable[str | os.PathLike[str]]) -> None:
    """Write the queued rows of these stores; what fails stays queued for the next store operation."""
    for path in paths:
        with contextlib.suppress(Exception):
            Store(path).flush()


def open_store(path_or_url: str | os.PathLike[str] | None = None) -> Any:
    """A DuckDB `Store` for a path (or the default), a `ClickHouseStore` for a `clickhouse://` or `chdb://` URL.

    Without an argument, `$FAULTPLANE_STORE` decides, so `FAULTPLANE_STORE=clickhouse://...` routes every surface.
    Any other `scheme://` is refused with the forms that work (it would otherwise become a file of that name).
    """
    target = path_or_url if path_or_url is not None else os.environ.get("FAULTPLANE_STORE") or None
    if is_clickhouse_url(target):
        from faultplane.core.clickhouse_store import ClickHouseStore  # not loaded for a DuckDB store

        return ClickHouseStore(os.fspath(target))  # type: ignore[arg-type]
    if isinstance(target, str) and re.match(r"^[A-Za-z][\w+.-]*://", target):
        from faultplane.core.clickhouse_wire import ClickHouseStoreError

        raise ClickHouseStoreError(
            f"store: {redact_url(target)!r} is neither a file nor a store URL; fix: a DuckDB file path, "
            "clickhouse://user:password@host:8123/database, or chdb:///path/to/dir"
        )
    return Store(target)
