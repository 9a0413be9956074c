"""Service: read-only SQL over the evidence store, and exports of its results.

Read-only is enforced by the database, not by inspecting the SQL. On DuckDB the file is opened with
`read_only=True` (no INSERT/UPDATE/DDL on the store), and before the caller's SQL runs, external access is switched
off and the configuration locked, so the query cannot read or write other files (COPY, read_csv, ATTACH, INSTALL)
or switch the setting back. On ClickHouse every query carries the server setting `readonly=1` (no writes, no DDL,
no SET, no table functions such as file() or url()) and `max_execution_time`.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from pydantic import BaseModel, Field

from faultplane.core.jsonable import to_jsonable

__all__ = [
    "DEFAULT_ROW_LIMIT",
    "MAX_EXPORT_ROWS",
    "MAX_ROW_LIMIT",
    "ExportResult",
    "QueryError",
    "QueryResult",
    "analyze",
    "export_query",
]

DEFAULT_ROW_LIMIT = 200
MAX_ROW_LIMIT = 10_000
DEFAULT_TIMEOUT_S = 30.0
MAX_EXPORT_ROWS = 10_000_000


class QueryError(ValueError):
    """The SQL was refused or failed. The message names the field and the fix."""


_JSON_TYPES = ("string", "number", "boolean", "null", "array", "object")


class QueryResult(BaseModel):
    columns: list[str]
    rows: list[list[Any]] = Field(
        description="at most `limit` rows, values made JSON-safe",
        json_schema_extra={"items": {"type": "array", "items": {"type": list(_JSON_TYPES)}}},
    )
    row_count: int
    truncated: bool = Field(description="true when the query returned more rows than the limit")


def _check(sql: Any, limit: Any, maximum: int) -> None:
    if not isinstance(sql, str) or not sql.strip():
        raise QueryError(
            "sql: is empty; fix: pass a SELECT over runs, activities, journals, audit or run_metrics"
        )
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= maximum:
        raise QueryError(f"limit: {limit!r} is outside 1-{maximum}; fix: pass a row limit in that range")


def _default_store() -> Any:
    from faultplane.core.store import open_store

    return open_store()


def _clickhouse(sql: str, store: Any, limit: int, timeout_seconds: float) -> tuple[list[str], list[Any]]:
    from faultplane.core.clickhouse_wire import ClickHouseStoreError

    try:
        return store.query_columns(
            sql,
            read_only=True,
            settings={"max_execution_time": max(1, math.ceil(timeout_seconds))},
            limit=limit + 1,
        )
    except ClickHouseStoreError as exc:
        text = str(exc)
        if "readonly" in text.lower():
            text += "; fix: the store is read-only here, write a SELECT"
        elif "timeout" in text.lower() or "Timeout exceeded" in text:
            text += "; fix: add filters or a LIMIT"
        raise QueryError(text) from None


def analyze(
    sql: str,
    *,
    store: Any = None,
    limit: int = DEFAULT_ROW_LIMIT,
    timeout_seconds: float = DEFAULT_TIMEOUT_S,
) -> QueryResult:
    """Run `sql` against the store, read-only, and return at most `limit` rows."""
    _check(sql, limit, MAX_ROW_LIMIT)
    store = store if store is not None else _default_store()
    if getattr(store, "dialect", "duckdb") == "clickhouse":
        columns, fetched = _clickhouse(sql, store, limit, timeout_seconds)
    else:
        columns, fetched = _duckdb(sql, store, timeout_seconds, lambda cur: cur.fetchmany(limit + 1))
    truncated = len(fetched) > limit
    rows = [[to_jsonable(v) for v in row] for row in fetched[:limit]]
    return QueryResult(columns=columns, rows=rows, row_count=len(rows), truncated=truncated)


def _duckdb(sql: str, store: Any, timeout_seconds: float, fetch: Any) -> tuple[list[str], Any]:
    import duckdb

    with store.connect(read_only=True) as con:
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        # A runaway query must not hold the store (and the server's worker) forever.
        timer = threading.Timer(timeout_seconds, con.interrupt)
        timer.start()
        try:
            if fetch is None:
                # relation API: Arrow straight from the result, without a row-by-row copy
                rel = con.sql(sql)
                if rel is None:
                    return [], []
                return list(rel.columns), rel.to_arrow_table()
            cur = con.execute(sql)
            if cur.description is None:
                return [], []
            columns = [d[0] for d in cur.description]
            return columns, fetch(cur)
        except duckdb.InterruptException:
            raise QueryError(
                f"sql: interrupted after {timeout_seconds:g} s; fix: add filters or a LIMIT"
            ) from None
        except duckdb.Error as exc:
            raise QueryError(f"sql: {exc}; fix: the store is read-only here, write a SELECT") from None
        finally:
            timer.cancel()


class ExportResult(BaseModel):
    path: str
    format: str
    rows: int
    columns: list[str]


def export_query(
    sql: str,
    path: str | Any,
    fmt: str | None = None,
    *,
    store: Any = None,
    max_rows: int = MAX_EXPORT_ROWS,
    timeout_seconds: float = 300.0,
) -> ExportResult:
    """Run `sql` read-only and write every row (up to `max_rows`) as Parquet, CSV, JSON or Arrow IPC.

    The format comes from `fmt` or the file's suffix (.parquet, .csv, .json, .arrow). The file is written by this
    process, not by the database, so the read-only guarantees above still hold.
    """
    from faultplane.services.evidence import EvidenceError, export_format, export_rows, export_table

    _check(sql, max_rows, MAX_EXPORT_ROWS)
    try:
        fmt = export_format(path, fmt)
    except EvidenceError as exc:
        raise QueryError(str(exc)) from None
    store = store if store is not None else _default_store()
    if getattr(store, "dialect", "duckdb") == "clickhouse":
        columns, rows = _clickhouse(sql, store, max_rows, timeout_seconds)
        if len(rows) > max_rows:
            raise QueryError(f"sql: more than {max_rows} rows; fix: add filters or raise max_rows")
        written = export_rows(columns, rows, path, fmt)
        count = len(rows)
    else:
        columns, table = _duckdb(sql, store, timeout_seconds, None)
        if not columns:
            raise QueryError("sql: the statement returns no rows to export; fix: write a SELECT")
        if table.num_rows > max_rows:
            raise QueryError(f"sql: more than {max_rows} rows; fix: add filters or raise max_rows")
        written = export_table(table, path, fmt)
        count = table.num_rows
    return ExportResult(path=str(written), format=fmt, rows=count, columns=columns)
