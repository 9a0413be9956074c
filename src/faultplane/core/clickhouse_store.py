"""The evidence store on ClickHouse, for fleets: same tables, same `query/execute/insert/ensure_schema`, the same
queue and journal-row writer (`core.store_base`); this module is the ClickHouse dialect of them.

Selected with a URL through `core.store.open_store(url_or_path)`:
- `clickhouse://user:password@host:8123/database` (HTTP) or `clickhouses://...` (HTTPS): a ClickHouse server.
- `chdb:///path/to/dir?database=name`: chDB, ClickHouse embedded in this process (the `chdb-core` package), the
  same SQL as the fleet server on a laptop.

Statements travel as text (`core.clickhouse_wire`): values inlined as SQL literals, results as JSONCompact, rows in
as JSONEachRow, which read the same from ClickHouse 18.16 (Debian's server) to 26.x (chDB).

What differs from the DuckDB store, and why:
- Timestamps are stored as Float64 epoch seconds and booleans as UInt8 (portable down to ClickHouse 18.16);
  `query` turns the known timestamp/boolean columns back into aware datetimes and bools.
- Keyed tables are ReplacingMergeTree with a `_version` column: re-writing a run inserts a newer version, and
  readers that need exactly one row per key add `FINAL` (the evidence service does).
- A finished run's rows are queued first (as on DuckDB) and written at once: if the server cannot be reached, the
  marker stays and the next operation on the same store, in any process, writes it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import logging
import math
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from faultplane.core.clickhouse_wire import (
    ChdbWire,
    ClickHouseStoreError,
    HttpWire,
    Wire,
    _epoch,
    bind,
    decode_compact,
)
from faultplane.core.migrations import (
    BOOLEAN_COLUMNS,
    CORE_MIGRATIONS,
    TIMESTAMP_COLUMNS,
    Migration,
    to_clickhouse,
)
from faultplane.core.paths import faultplane_dir
from faultplane.core.store_base import (
    CLICKHOUSE_HTTP_SCHEMES as _HTTP_SCHEMES,
)
from faultplane.core.store_base import JournalStore, is_clickhouse_url
from faultplane.core.store_base import redact_url as _redact

__all__ = ["ClickHouseStore", "ClickHouseStoreError", "is_clickhouse_url"]

_log = logging.getLogger("faultplane.store")


def _from_epoch(value: Any) -> Any:
    if isinstance(value, int | float) and not isinstance(value, bool):
        whole = int(value // 1)
        micros = round((value - whole) * 1e6)
        return dt.datetime.fromtimestamp(whole, dt.UTC) + dt.timedelta(microseconds=micros)
    return value


def _timestamp_names() -> set[str]:
    return set().union(*TIMESTAMP_COLUMNS.values()) if TIMESTAMP_COLUMNS else set()


def _boolean_names() -> set[str]:
    return set().union(*BOOLEAN_COLUMNS.values()) if BOOLEAN_COLUMNS else set()


def _parse_url(url: str) -> dict[str, Any]:
    scheme = url.split("://", 1)[0].lower()
    if scheme == "chdb":
        rest = url.split("://", 1)[1]
        path, _, qs = rest.partition("?")
        query = {k: v[-1] for k, v in parse_qs(qs).items()}
        database = query.get("database", "faultplane")
        if not path:
            raise ClickHouseStoreError(f"store: {url!r} has no directory; fix: chdb:///path/to/dir")
        _check_database(database, url)
        return {
            "kind": "chdb",
            "path": os.path.abspath(os.path.expanduser(unquote(path))),
            "database": database,
        }
    u = urlparse(url)
    if scheme not in _HTTP_SCHEMES:
        raise ClickHouseStoreError(
            f"store: {url!r} is not a ClickHouse URL; fix: use clickhouse://user:password@host:8123/database"
        )
    if not u.hostname:
        raise ClickHouseStoreError(
            f"store: {_redact(url)!r} has no host; fix: clickhouse://user:password@host:8123/db"
        )
    secure = scheme in ("clickhouses", "clickhouse+https")
    query = {k: v[-1] for k, v in parse_qs(u.query).items()}
    database = u.path.strip("/") or "default"
    _check_database(database, _redact(url))
    try:
        port = u.port or (8443 if secure else 8123)
    except ValueError:
        raise ClickHouseStoreError(
            f"store: the port in {_redact(url)!r} is not a number; fix: host:8123"
        ) from None
    try:
        connect_timeout = float(query.get("connect_timeout", 10))
        timeout = float(query.get("timeout", 300))
    except ValueError:
        raise ClickHouseStoreError(
            f"store: connect_timeout/timeout in {_redact(url)!r} must be seconds; fix: ?timeout=30"
        ) from None
    return {
        "kind": "http",
        "host": u.hostname,
        "port": port,
        "username": unquote(u.username) if u.username else "default",
        "password": unquote(u.password) if u.password else "",
        "database": database,
        "secure": secure,
        "connect_timeout": connect_timeout,
        "timeout": timeout,
    }


def _check_database(database: str, url: str) -> None:
    if not re.fullmatch(r"[A-Za-z_]\w*", database):
        raise ClickHouseStoreError(
            f"store: database {database!r} in {url!r} is not a plain identifier; fix: letters, digits, _ only"
        )


def _pending_root() -> Path:
    return faultplane_dir("state") / "pending"


class ClickHouseStore(JournalStore):
    """A ClickHouse store (server over HTTP, or chDB in process) with the surface of `core.store.Store`."""

    dialect = "clickhouse"
    _migrated: set[tuple[str, str]] = set()
    _migrate_lock = threading.Lock()

    def __init__(self, url: str, *, migrate: bool = True) -> None:
        self.url = url
        self._cfg = _parse_url(url)
        self.database: str = self._cfg["database"]
        self._wire_obj: Wire | None = None
        self._wire_lock = threading.Lock()
        self._column_types: dict[str, dict[str, str]] = {}
        self._flushing = False
        self._float_repair: bool | None = None
        self.pending_dir = _pending_root() / hashlib.sha1(self.path.encode()).hexdigest()[:16]
        if migrate:
            self.ensure_schema("core", CORE_MIGRATIONS)
        if self.has_pending():
            self.flush()

    def __repr__(self) -> str:
        return f"ClickHouseStore({self.path!r})"

    @property
    def path(self) -> str:
        """Where the store is, without credentials, for messages (the DuckDB store has a file path here)."""
        c = self._cfg
        if c["kind"] == "chdb":
            return f"chdb://{c['path']}?database={self.database}"
        scheme = "clickhouses" if c["secure"] else "clickhouse"
        return f"{scheme}://{c['host']}:{c['port']}/{self.database}"

    # ---- connection ---------------------------------------------------------------------------------------
    @property
    def _wire(self) -> Wire:
        with self._wire_lock:
            if self._wire_obj is None:
                c = self._cfg
                if c["kind"] == "chdb":
                    self._wire_obj = ChdbWire(c["path"], c["database"])
                else:
                    self._wire_obj = HttpWire(**{k: v for k, v in c.items() if k != "kind"})
            return self._wire_obj

    @property
    def server_version(self) -> str:
        return str(self.query("SELECT version() AS v")[0]["v"])

    def _imprecise_floats(self) -> bool:
        """True for a server before 21.x, whose text parser reads some decimals one unit in the last place off
        (measured on 18.16: 425 of 5,000 six-decimal durations in [0, 3) came back as 1.4086319999999999 for
        1.408632). chDB and current servers parse exactly."""
        if self._float_repair is None:
            if self._cfg["kind"] == "chdb":
                self._float_repair = False
            else:
                text = self._wire.run("SELECT version()", fmt="TabSeparated").strip()
                try:
                    self._float_repair = int(text.split(".")[0]) < 21
                except ValueError:
                    self._float_repair = False
        return self._float_repair

    def close(self) -> None:
        with self._wire_lock:
            wire, self._wire_obj = self._wire_obj, None
        if wire is not None:
            wire.close()

    def connect(self, *, read_only: bool = False) -> Iterator[Any]:
        raise ClickHouseStoreError(
            "store: a ClickHouse store has no DuckDB connection; fix: use query/execute/insert (or "
            "faultplane.services.evidence.ingest_journals to write journals)"
        )

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Nothing to hold open: each statement is one request (the DuckDB store keeps a connection here)."""
        yield

    # ---- the Store surface --------------------------------------------------------------------------------
    def execute(
        self,
        sql: str,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        *,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self._wire.run(bind(_duckdb_statement(sql), params), settings=settings)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        for row in rows:
            self.execute(sql, row)

    def query_columns(
        self,
        sql: str,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        *,
        read_only: bool = False,
        settings: Mapping[str, Any] | None = None,
        limit: int | None = None,
    ) -> tuple[list[str], list[list[Any]]]:
        """Column names and rows (values converted as in `query`)."""
        opts: dict[str, Any] = dict(settings or {})
        if read_only:
            # enforced by the server: no writes, no DDL, no SET, no table functions (file, url, remote)
            opts["readonly"] = 1
        if limit is not None:
            opts.setdefault("max_result_rows", limit)
            opts.setdefault("result_overflow_mode", "break")
        text = self._wire.run(bind(sql, params), settings=opts or None, fmt="JSONCompact")
        if not text.strip():
            return [], []
        cols, types, rows = decode_compact(text)
        ts, bools = _timestamp_names(), _boolean_names()
        repair = self._imprecise_floats()
        conv = [
            _from_epoch
            if c in ts
            else (_to_bool if c in bools else (_round_float if repair and "Float" in t else None))
            for c, t in zip(cols, types, strict=True)
        ]
        rows = [[f(v) if f is not None else v for f, v in zip(conv, row, strict=True)] for row in rows]
        return cols, rows

    def query(
        self,
        sql: str,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        *,
        read_only: bool = False,
    ) -> list[dict[str, Any]]:
        """Run a query and return its rows as dicts; known timestamp and boolean columns come back typed."""
        cols, rows = self.query_columns(sql, params, read_only=read_only)
        return [dict(zip(cols, row, strict=True)) for row in rows]

    def _types(self, table: str) -> dict[str, str]:
        types = self._column_types.get(table)
        if types is None:
            # DESCRIBE's columns differ across server versions; system.columns is stable
            rows = self.query(
                "SELECT name, type FROM system.columns WHERE database = ? AND table = ?",
                [self.database, table],
            )
            if not rows:
                raise ClickHouseStoreError(
                    f"table {table!r} does not exist in {self.path}; fix: create it with ensure_schema"
                )
            types = {r["name"]: r["type"] for r in rows}
            self._column_types[table] = types
        return types

    def insert(self, table: str, rows: Iterable[Mapping[str, Any]], *, version: int | None = None) -> int:
        """Insert dict rows; the columns are those of the first row (plus `_version` on keyed tables)."""
        rows = list(rows)
        if not rows:
            return 0
        types = self._types(table)
        cols = list(rows[0])
        unknown = [c for c in cols if c not in types]
        if unknown:
            raise ClickHouseStoreError(
                f"table {table!r} has no column(s) {', '.join(unknown)}; columns: {', '.join(types)}"
            )
        extra: dict[str, Any] = {}
        if "_version" in types and "_version" not in cols:
            extra["_version"] = version if version is not None else time.time_ns()
        from pydantic_core import to_json

        # a converter only for the columns whose type needs one (timestamps, booleans, arrays), and JSON from
        # pydantic-core's encoder: json.dumps and a conversion call per value were most of an insert's time
        conv = [(c, f) for c in cols if (f := _converter(types[c])) is not None]
        lines = []
        for r in rows:
            doc = {c: r.get(c) for c in cols}
            for c, f in conv:
                doc[c] = f(doc[c])
            doc.update(extra)
            lines.append(to_json(doc, fallback=str, inf_nan_mode="constants"))
        names = ", ".join([*cols, *extra])
        self._wire.run(f"INSERT INTO {table} ({names}) FORMAT JSONEachRow", data=b"\n".join(lines).decode())
        return len(rows)

    def ensure_schema(self, owner: str, migrations: Sequence[Migration]) -> None:
        """Apply each named migration once, translated from DuckDB DDL. Tables are created IF NOT EXISTS and columns
        only when missing, so two processes migrating at once converge on the same schema."""
        key = (self.path, owner)
        with self._migrate_lock:
            if key in self._migrated:
                return
            self.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (owner String, name String, applied_at Float64) "
                "ENGINE = MergeTree ORDER BY (owner, name)"
            )
            done = {
                r["name"] for r in self.query("SELECT name FROM schema_migrations WHERE owner = ?", [owner])
            }
            for name, statements in migrations:
                if name in done:
                    continue
                for stmt in statements:
                    for ch in to_clickhouse(stmt):
                        if self._column_exists(ch):
                            continue
                        try:
                            self.execute(ch)
                        except ClickHouseStoreError as exc:
                            # another process added the same column between our check and our ALTER
                            if "already exists" not in str(exc):
                                raise
                self.execute(
                    "INSERT INTO schema_migrations (owner, name, applied_at) VALUES (?, ?, ?)",
                    [owner, name, time.time()],
                )
            for name, min_major, statement in _CLICKHOUSE_ONLY.get(owner, ()):
                if name not in done:
                    self._engine_migration(owner, name, min_major, statement)
            self._column_types.clear()
            self._migrated.add(key)

    def _engine_migration(self, owner: str, name: str, min_major: int, statement: str) -> None:
        """A ClickHouse-only migration, applied once the server is recent enough; on an older server it is left
        unrecorded, so the first command after an upgrade applies it."""
        try:
            major = int(self.server_version.split(".")[0])
        except ValueError:
            return
        if major < min_major:
            return
        table, column = re.match(r"ALTER TABLE (\w+) MODIFY COLUMN (\w+)", statement).groups()  # type: ignore[union-attr]
        ch_type = self._types(table)[column]
        self.execute(statement.format(type=ch_type))
        self.execute(
            "INSERT INTO schema_migrations (owner, name, applied_at) VALUES (?, ?, ?)",
            [owner, name, time.time()],
        )

    def _column_exists(self, statement: str) -> bool:
        """True for an ADD COLUMN whose column is already there (another process migrated first)."""
        m = re.match(r"ALTER TABLE (\w+) ADD COLUMN (\w+)", statement)
        if not m:
            return False
        rows = self.query(
            "SELECT count() AS n FROM system.columns WHERE database = ? AND table = ? AND name = ?",
            [self.database, m.group(1), m.group(2)],
        )
        return bool(rows[0]["n"])

    # ---- finished runs: the ClickHouse dialect of core.store_base -------------------------------------------
    def replace_rows(
        self, tables: Mapping[str, list[dict[str, Any]]], *, key: str = "run_id", keys: Iterable[Any] = ()
    ) -> None:
        """A newer version of the rows: readers with FINAL see only it (ReplacingMergeTree, by each table's
        sorting key). One version for all tables, inserted in chunks a server takes in one request."""
        version = time.time_ns()
        for table, rows in tables.items():
            for i in range(0, len(rows), 50_000):
                self.insert(table, rows[i : i + 50_000], version=version)

    def _unreachable(self, exc: BaseException) -> bool:
        return isinstance(exc, ClickHouseStoreError)

    def _queued(self, run_id: str, journal_path: str) -> None:
        """Write the rows now; if the server cannot take them, one line says where the journal is."""
        try:
            self.flush(raise_errors=True)
        except ClickHouseStoreError as exc:
            _log.warning(
                "store %s: run %s not written (%s); its journal is kept at %s and is written to the store by "
                "the next command that reaches it",
                self.path,
                run_id,
                exc,
                journal_path,
            )

    def flush(self, *, raise_errors: bool = False) -> None:
        """Write every queued journal now. An unreachable server leaves them queued (and raises if asked)."""
        if self._flushing:
            return
        self._flushing = True
        try:
            self._write_pending(raise_errors=raise_errors)
        finally:
            self._flushing = False


# Storage settings only ClickHouse has, by owner: (name, first major version that has it, statement with {type}
# for the column's current type). Journal bodies are JSON text, which ZSTD stores in about half LZ4's space
# (column codecs exist from 19.x; Debian's 18.16 keeps LZ4).
_CLICKHOUSE_ONLY: dict[str, list[tuple[str, int, str]]] = {
    "core": [
        (
            "ch-core-001-zstd-journal-bodies",
            19,
            "ALTER TABLE journals MODIFY COLUMN body {type} CODEC(ZSTD(3))",
        )
    ]
}


def _round_float(value: Any) -> Any:
    """A Float64 read from an old server, to 15 significant digits: every decimal of up to 15 digits written to the
    store (durations, rates, scores rounded to 6 places) comes back as written; only the 16th-17th digits of
    full-precision values are given up, which that server's parser did not keep reliably either."""
    if isinstance(value, float) and math.isfinite(value):
        return float(f"{value:.15g}")
    return value


def _to_bool(value: Any) -> Any:
    return bool(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _value(ch_type: str, value: Any) -> Any:
    if value is None:
        return [] if ch_type.startswith("Array") else None
    if isinstance(value, dt.datetime):
        return _epoch(value)
    if isinstance(value, str) and "Float64" in ch_type and re.match(r"^\d{4}-\d\d-\d\dT", value):
        return _epoch(dt.datetime.fromisoformat(value))
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def _converter(ch_type: str) -> Any:
    """What `_value` does for a column of this type, or None for a string column, whose values (str or None) go to
    JSON as they are."""
    if re.fullmatch(r"(Nullable\()?(LowCardinality\()?String\)*", ch_type):
        return None
    return lambda v, t=ch_type: _value(t, v)


def _duckdb_statement(sql: str) -> str:
    """The DuckDB-only statement forms other modules use, in ClickHouse terms (ReplacingMergeTree replaces)."""
    return re.sub(r"^\s*INSERT\s+OR\s+REPLACE\s+INTO", "INSERT INTO", sql, flags=re.IGNORECASE)
