"""The evidence store on a ClickHouse server, for fleets: same tables, same `query/execute/insert/ensure_schema`.

Selected with a URL, `clickhouse://user:password@host:8123/database` (HTTP) or `clickhouses://...` (HTTPS), through
`open_store(url_or_path)`. Talks to the server over its HTTP interface with clickhouse-connect.

What differs from the DuckDB store, and why:
- Timestamps are stored as Float64 epoch seconds and booleans as UInt8 (portable down to ClickHouse 18.16, the
  version Debian ships); `query` turns the known timestamp/boolean columns back into aware datetimes and bools.
- Keyed tables are ReplacingMergeTree with a `_version` column: re-writing a run inserts a newer version, and
  readers that need exactly one row per key add `FINAL` (the evidence service does).
- SQL placeholders: `?` and `$name` (DuckDB style) are accepted and bound client-side.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from faultplane.core.migrations import (
    BOOLEAN_COLUMNS,
    CORE_MIGRATIONS,
    TIMESTAMP_COLUMNS,
    Migration,
    to_clickhouse,
)

__all__ = [
    "ClickHouseStore",
    "ClickHouseStoreError",
    "is_clickhouse_url",
    "journal_rows",
    "open_store",
    "translate_placeholders",
]

_SCHEMES = ("clickhouse", "clickhouses", "clickhouse+http", "clickhouse+https")


class ClickHouseStoreError(RuntimeError):
    """The ClickHouse store could not be reached or refused a statement; the message says what to fix."""


def is_clickhouse_url(value: object) -> bool:
    return isinstance(value, str) and value.split("://", 1)[0].lower() in _SCHEMES and "://" in value


def open_store(url_or_path: str | os.PathLike[str] | None = None) -> Any:
    """A DuckDB `Store` for a path (or the default), a `ClickHouseStore` for a `clickhouse://` URL.

    Without an argument, `$FAULTPLANE_STORE` decides, so `FAULTPLANE_STORE=clickhouse://...` routes every surface.
    """
    from faultplane.core.store import Store

    target = url_or_path if url_or_path is not None else os.environ.get("FAULTPLANE_STORE")
    if is_clickhouse_url(target):
        return ClickHouseStore(str(target))
    return Store(target)


def translate_placeholders(sql: str, params: Sequence[Any] | Mapping[str, Any] | None) -> str:
    """DuckDB placeholders (`?`, `$name`) to clickhouse-connect's (`%s`, `%(name)s`), outside string literals."""
    if params is None:
        return sql
    out: list[str] = []
    i, n = 0, len(sql)
    quote: str | None = None
    while i < n:
        ch = sql[i]
        if quote:
            out.append("%%" if ch == "%" else ch)
            if ch == "\\" and i + 1 < n:
                out.append(sql[i + 1])
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in ("'", '"', "`"):
            quote = ch
            out.append(ch)
        elif ch == "%":
            out.append("%%")
        elif ch == "?":
            out.append("%s")
        elif ch == "$" and isinstance(params, Mapping):
            m = re.match(r"\$([A-Za-z_]\w*)", sql[i:])
            if m:
                out.append(f"%({m.group(1)})s")
                i += len(m.group(0))
                continue
            out.append(ch)
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _epoch(value: dt.datetime) -> float:
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    # Float64 epoch seconds resolve ~0.5 us today; _from_epoch rounds back to the microsecond exactly.
    return value.timestamp()


def _from_epoch(value: Any) -> Any:
    if isinstance(value, int | float) and not isinstance(value, bool):
        whole = int(value // 1)
        micros = round((value - whole) * 1e6)
        return dt.datetime.fromtimestamp(whole, dt.UTC) + dt.timedelta(microseconds=micros)
    return value


def _param(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, dt.datetime):
        return _epoch(value)
    if isinstance(value, list | tuple):
        return [_param(v) for v in value]
    return value


def _timestamp_names() -> set[str]:
    return set().union(*TIMESTAMP_COLUMNS.values()) if TIMESTAMP_COLUMNS else set()


def _boolean_names() -> set[str]:
    return set().union(*BOOLEAN_COLUMNS.values()) if BOOLEAN_COLUMNS else set()


def _legacy_tolerant_client_class() -> type:
    """clickhouse-connect's HTTP client, able to start against servers older than ClickHouse 20.

    Its handshake reads `system.settings.readonly`, a column those servers lack (Debian bookworm ships 18.16). On
    exactly that error we redo the handshake with the column filled in as 0 (settings not read-only), which is
    what those servers mean; on a current server the stock handshake runs untouched.
    """
    from clickhouse_connect.driver._backend.orchestration import (
        InitializationResult,
        ServerInfo,
        _setting_definitions,
    )
    from clickhouse_connect.driver.exceptions import DatabaseError
    from clickhouse_connect.driver.httpclient import HttpClient

    class _Client(HttpClient):
        legacy = False

        def _init_common_settings(self, tz_source: Any) -> None:
            try:
                super()._init_common_settings(tz_source)
            except DatabaseError as exc:
                if "readonly" not in str(exc):
                    raise
                version = self.command("SELECT version()", use_database=False)
                rows = self.query(
                    "SELECT name, value, toUInt8(0) AS readonly FROM system.settings LIMIT 10000"
                ).named_results()
                self._apply_init_result(
                    InitializationResult(
                        server_info=ServerInfo(
                            version=str(version), timezone=dt.UTC, settings=_setting_definitions(list(rows))
                        ),
                        client_setting_writes=(),
                        protocol_version=0,
                        timezone_dst_safe=True,
                        apply_server_timezone=True,
                    )
                )
                self.legacy = True

    return _Client


def _parse_url(url: str) -> dict[str, Any]:
    u = urlparse(url)
    scheme = u.scheme.lower()
    if scheme not in _SCHEMES:
        raise ClickHouseStoreError(
            f"store: {url!r} is not a ClickHouse URL; fix: use clickhouse://user:password@host:8123/database"
        )
    if not u.hostname:
        raise ClickHouseStoreError(
            f"store: {url!r} has no host; fix: clickhouse://user:password@host:8123/db"
        )
    secure = scheme in ("clickhouses", "clickhouse+https")
    query = {k: v[-1] for k, v in parse_qs(u.query).items()}
    database = u.path.strip("/") or "default"
    if not re.fullmatch(r"\w+", database):
        raise ClickHouseStoreError(
            f"store: database {database!r} in {url!r} is not a plain identifier; fix: letters, digits, _ only"
        )
    try:
        port = u.port or (8443 if secure else 8123)
    except ValueError:
        raise ClickHouseStoreError(f"store: the port in {url!r} is not a number; fix: host:8123") from None
    return {
        "host": u.hostname,
        "port": port,
        "username": unquote(u.username) if u.username else "default",
        "password": unquote(u.password) if u.password else "",
        "database": database,
        "secure": secure,
        "connect_timeout": float(query.get("connect_timeout", 10)),
        "send_receive_timeout": float(query.get("timeout", 300)),
    }


class ClickHouseStore:
    """A ClickHouse-server store with the surface of `faultplane.core.store.Store`."""

    dialect = "clickhouse"
    _migrated: set[tuple[str, str]] = set()
    _migrate_lock = threading.Lock()

    def __init__(self, url: str, *, migrate: bool = True) -> None:
        self.url = url
        self._cfg = _parse_url(url)
        self.database: str = self._cfg["database"]
        self._local = threading.local()
        self._column_types: dict[str, dict[str, str]] = {}
        if migrate:
            self.ensure_schema("core", CORE_MIGRATIONS)

    def __repr__(self) -> str:
        c = self._cfg
        return f"ClickHouseStore('clickhouse://{c['username']}@{c['host']}:{c['port']}/{self.database}')"

    @property
    def path(self) -> str:
        """Where the store is, for messages (the DuckDB store has a file path here)."""
        c = self._cfg
        return f"clickhouse://{c['host']}:{c['port']}/{self.database}"

    # ---- connection ---------------------------------------------------------------------------------------
    def _new_client(self, database: str) -> Any:
        cls = _legacy_tolerant_client_class()
        c = self._cfg
        try:
            return cls(
                "https" if c["secure"] else "http",
                c["host"],
                c["port"],
                c["username"],
                c["password"],
                database,
                # servers before 19.x reject lz4-encoded request bodies; the store's traffic is small
                compress=False,
                connect_timeout=c["connect_timeout"],
                send_receive_timeout=c["send_receive_timeout"],
                # one session per client would serialise (and refuse) concurrent queries from threads
                autogenerate_session_id=False,
            )
        except Exception as exc:
            raise ClickHouseStoreError(
                f"store: cannot reach ClickHouse at {c['host']}:{c['port']} ({type(exc).__name__}: {exc}); "
                "fix: check the URL, that the server runs, and the user's password"
            ) from None

    @property
    def client(self) -> Any:
        """A clickhouse-connect client for this thread (clients are not safe to share across threads)."""
        client = getattr(self._local, "client", None)
        if client is None:
            try:
                client = self._new_client(self.database)
            except ClickHouseStoreError as exc:
                if not re.search(r"UNKNOWN_DATABASE|Code: 81\b|Database \w+ doesn't exist", str(exc)):
                    raise
                admin = self._new_client("default")
                admin.command(f"CREATE DATABASE IF NOT EXISTS {self.database}")
                admin.close()
                client = self._new_client(self.database)
            self._local.client = client
        return client

    @property
    def server_version(self) -> str:
        return str(self.client.server_version)

    def close(self) -> None:
        client = getattr(self._local, "client", None)
        if client is not None:
            client.close()
            self._local.client = None

    def connect(self, *, read_only: bool = False) -> Iterator[Any]:
        raise ClickHouseStoreError(
            "store: a ClickHouse store has no DuckDB connection; fix: use query/execute/insert (or "
            "faultplane.services.evidence.ingest_journals to write journals)"
        )

    # ---- the Store surface --------------------------------------------------------------------------------
    def _error(self, sql: str, exc: Exception) -> ClickHouseStoreError:
        text = str(exc)
        m = re.search(r"DB::Exception: (.*?)(?:, e\.what\(\)|\(version|$)", text)
        reason = m.group(1) if m else text
        return ClickHouseStoreError(f"sql: {reason.strip()} (in: {sql.strip()[:120]})")

    def execute(
        self,
        sql: str,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        *,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        sql = _duckdb_statement(sql)
        bound = None if params is None else _bind(params)
        try:
            self.client.command(translate_placeholders(sql, params), parameters=bound, settings=settings)
        except ClickHouseStoreError:
            raise
        except Exception as exc:
            raise self._error(sql, exc) from None

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
        bound = None if params is None else _bind(params)
        try:
            result = self.client.query(
                translate_placeholders(sql, params), parameters=bound, settings=opts or None
            )
        except Exception as exc:
            raise self._error(sql, exc) from None
        cols = list(result.column_names)
        ts, bools = _timestamp_names(), _boolean_names()
        conv = [_from_epoch if c in ts else (_to_bool if c in bools else None) for c in cols]
        rows = [
            [f(v) if f is not None else v for f, v in zip(conv, row, strict=True)]
            for row in result.result_rows
        ]
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
            rows = self.client.query(
                "SELECT name, type FROM system.columns WHERE database = %s AND table = %s",
                parameters=[self.database, table],
            ).result_rows
            if not rows:
                raise ClickHouseStoreError(
                    f"table {table!r} does not exist in {self.path}; fix: create it with ensure_schema"
                )
            types = {name: typ for name, typ in rows}
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
        data = [[_value(types[c], r.get(c)) for c in cols] for r in rows]
        if "_version" in types and "_version" not in cols:
            cols.append("_version")
            v = version if version is not None else time.time_ns()
            for row in data:
                row.append(v)
        try:
            self.client.insert(table, data, column_names=cols, column_type_names=[types[c] for c in cols])
        except Exception as exc:
            raise self._error(f"INSERT INTO {table}", exc) from None
        return len(rows)

    def ensure_schema(self, owner: str, migrations: Sequence[Migration]) -> None:
        """Apply each named migration once, translated from DuckDB DDL. Tables are created IF NOT EXISTS and columns
        only when missing, so two processes migrating at once converge on the same schema."""
        key = (self.url, owner)
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
                self.client.insert(
                    "schema_migrations",
                    [[owner, name, time.time()]],
                    column_names=["owner", "name", "applied_at"],
                    column_type_names=["String", "String", "Float64"],
                )
            self._column_types.clear()
            self._migrated.add(key)

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

    def persist_journal(
        self,
        journal: Any,
        body: str | None = None,
        journal_path: str | None = None,
        blast_stage: int | None = None,
    ) -> None:
        """Write one finished journal's runs/activities/journals rows (what engine.journal.persist does on DuckDB)."""
        tables = journal_rows(journal, body=body, journal_path=journal_path, blast_stage=blast_stage)
        version = time.time_ns()
        for table in ("runs", "activities", "journals"):
            self.insert(table, tables[table], version=version)


def _to_bool(value: Any) -> Any:
    return bool(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _bind(params: Sequence[Any] | Mapping[str, Any]) -> Any:
    if isinstance(params, Mapping):
        return {k: _param(v) for k, v in params.items()}
    return [_param(v) for v in params]


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


def _duckdb_statement(sql: str) -> str:
    """The DuckDB-only statement forms other modules use, in ClickHouse terms (ReplacingMergeTree replaces)."""
    return re.sub(r"^\s*INSERT\s+OR\s+REPLACE\s+INTO", "INSERT INTO", sql, flags=re.IGNORECASE)


# ---- journal -> rows -----------------------------------------------------------------------------------------


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _ts(value: Any) -> dt.datetime | None:
    if value is None or isinstance(value, dt.datetime):
        return value
    return dt.datetime.fromisoformat(str(value))


def journal_rows(
    journal: Any, *, body: str | None = None, journal_path: str | None = None, blast_stage: int | None = None
) -> dict[str, list[dict[str, Any]]]:
    """The runs/activities/journals rows of one journal (a `Journal` or its JSON dict), as persist() writes them."""
    j = journal.model_dump(mode="json") if hasattr(journal, "model_dump") else dict(journal)
    run_id = j["run_id"]
    states = j.get("steady_states") or {}
    experiment = j.get("experiment") or {}
    if blast_stage is None:
        blast_stage = (j.get("policy") or {}).get("stage")
    acts: list[tuple[str, Mapping[str, Any]]] = []
    for section, key in (("method", "run"), ("rollbacks", "rollbacks")):
        acts += [(section, r) for r in j.get(key) or []]
    for key in ("before", "after"):
        acts += [(f"hypothesis_{key}", p) for p in (states.get(key) or {}).get("probes", [])]
    runs = [
        {
            "run_id": run_id,
            "experiment_title": experiment.get("title"),
            "experiment_family": j.get("family"),
            "content_hash": j.get("content_hash"),
            "status": j.get("status"),
            "dry_run": bool(j.get("dry_run")),
            "steady_state_before": (states.get("before") or {}).get("steady_state_met"),
            "steady_state_after": (states.get("after") or {}).get("steady_state_met"),
            "started_at": _ts(j.get("start")),
            "ended_at": _ts(j.get("end")),
            "duration_s": j.get("duration"),
            "error": j.get("error"),
            "seed": j.get("seed"),
            "controller_pid": j.get("controller_pid"),
            "journal_path": journal_path,
            "tags": list(experiment.get("tags") or []),
            "blast_stage": blast_stage,
            "verdict": j.get("verdict"),
        }
    ]
    activities = [
        {
            "run_id": run_id,
            "seq": seq,
            "phase": section,
            "name": (r.get("activity") or {}).get("name"),
            "type": (r.get("activity") or {}).get("type"),
            "status": r.get("status"),
            "started_at": _ts(r.get("start")),
            "ended_at": _ts(r.get("end")),
            "duration_s": r.get("duration"),
            "output": json.dumps(r.get("output"), ensure_ascii=False, default=str),
            "error": r.get("exception"),
        }
        for seq, (section, r) in enumerate(acts)
    ]
    if body is None:
        body = json.dumps(j, ensure_ascii=False)
    journals = [{"run_id": run_id, "written_at": dt.datetime.now(dt.UTC), "body": body}]
    return {"runs": runs, "activities": activities, "journals": journals}
