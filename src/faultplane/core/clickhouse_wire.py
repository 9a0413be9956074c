"""How SQL reaches a ClickHouse engine: the HTTP interface of a server, or chDB (ClickHouse in this process).

Both carry the same text: a statement with its values inlined as SQL literals, results as `FORMAT JSONCompact`
and rows in as `FORMAT JSONEachRow`. Those formats exist unchanged from ClickHouse 18.16 (Debian's server) to
26.x (chDB), so one store talks to both without a client library and without a version handshake.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "ChdbWire",
    "ClickHouseStoreError",
    "HttpWire",
    "StoreError",
    "Wire",
    "bind",
    "decode_compact",
    "literal",
]


class StoreError(RuntimeError):
    """An evidence store (DuckDB file or ClickHouse) could not be opened or reached; the message names it and says
    what to check. The CLI prints it as one line (exit 2)."""


class ClickHouseStoreError(StoreError):
    """The ClickHouse store could not be reached or refused a statement; the message says what to fix."""


# ---- values as SQL literals ----------------------------------------------------------------------------------


def _epoch(value: dt.datetime) -> float:
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.timestamp()


def literal(value: Any) -> str:
    """One Python value as a ClickHouse SQL literal (timestamps as epoch seconds, booleans as 0/1)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, dt.datetime):
        return repr(_epoch(value))
    if isinstance(value, list | tuple):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    text = str(value)
    # inside '...' ClickHouse reads backslash escapes: escape the escape character itself first
    text = text.replace("\\", "\\\\").replace("'", "\\'").replace("\0", "\\0")
    return f"'{text}'"


def bind(sql: str, params: Sequence[Any] | Mapping[str, Any] | None) -> str:
    """Substitute DuckDB-style placeholders (`?`, `$name`) outside string literals with SQL literals."""
    if params is None:
        return sql
    out: list[str] = []
    i, n = 0, len(sql)
    quote: str | None = None
    position = 0
    while i < n:
        ch = sql[i]
        if quote:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(sql[i + 1])
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in ("'", '"', "`"):
            quote = ch
            out.append(ch)
        elif ch == "?" and not isinstance(params, Mapping):
            if position >= len(params):
                raise ClickHouseStoreError(
                    f"sql: more placeholders than the {len(params)} values given (in: {sql.strip()[:120]})"
                )
            out.append(literal(params[position]))
            position += 1
        elif ch == "$" and isinstance(params, Mapping):
            m = re.match(r"\$([A-Za-z_]\w*)", sql[i:])
            if m and m.group(1) in params:
                out.append(literal(params[m.group(1)]))
                i += len(m.group(0))
                continue
            out.append(ch)
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _decode_value(ch_type: str, value: Any) -> Any:
    # ClickHouse before 19.x quotes 64-bit integers in JSON output; the column type says to read them back
    if isinstance(value, str) and re.search(r"\b(U?Int(64|128|256))\b", ch_type) and "Array" not in ch_type:
        try:
            return int(value)
        except ValueError:
            return value
    if isinstance(value, list) and ch_type.startswith("Array(") and "Int64" in ch_type:
        return [int(v) if isinstance(v, str) else v for v in value]
    return value


def decode_compact(text: str) -> tuple[list[str], list[str], list[list[Any]]]:
    """(column names, column types, rows) of a `FORMAT JSONCompact` answer."""
    doc = json.loads(text)
    meta = doc.get("meta") or []
    names = [m["name"] for m in meta]
    types = [m["type"] for m in meta]
    rows = [[_decode_value(t, v) for t, v in zip(types, row, strict=True)] for row in doc.get("data") or []]
    return names, types, rows


def _statement(sql: str, *, settings: str = "", fmt: str | None = None) -> str:
    text = sql.strip().rstrip(";").rstrip()
    if settings:
        text += f"\nSETTINGS {settings}"
    if fmt:
        text += f"\nFORMAT {fmt}"
    return text


def _reason(text: str) -> str:
    m = re.search(r"DB::Exception: (.*?)(?:, e\.what\(\)|\s*\(version|\s*\([A-Z_]+\)\s*$|$)", text, re.DOTALL)
    return (m.group(1) if m else text).strip().splitlines()[0] if text.strip() else "no reason given"


class Wire:
    """How SQL reaches one engine. Both wires build a statement's text alike: the statement, its `SETTINGS`
    where the engine takes them only inline, `FORMAT`, then the rows being inserted. They differ in how that
    text travels and where the settings go."""

    where: str

    def run(
        self,
        sql: str,
        *,
        data: str | None = None,
        settings: Mapping[str, Any] | None = None,
        fmt: str | None = None,
    ) -> str:
        """The engine's answer to `sql` as text; `data` (rows in the statement's format) follows the statement."""
        settings = settings or {}
        text = _statement(sql, settings=self._inline_settings(settings), fmt=fmt)
        if data is not None:
            text = f"{text}\n{data}"
        return self._send(sql, text, settings)

    def _inline_settings(self, settings: Mapping[str, Any]) -> str:
        """The `SETTINGS` clause for an engine that takes settings only inside the statement; none by default."""
        return ""

    def _send(self, sql: str, text: str, settings: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


# ---- a server over HTTP --------------------------------------------------------------------------------------


class HttpWire(Wire):
    """A ClickHouse server's HTTP interface (port 8123, or 8443 with TLS), through httpx."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        username: str,
        password: str,
        database: str,
        secure: bool,
        connect_timeout: float,
        timeout: float,
    ) -> None:
        import httpx

        self.database = database
        self.where = f"{'clickhouses' if secure else 'clickhouse'}://{host}:{port}/{database}"
        self._url = f"{'https' if secure else 'http'}://{host}:{port}/"
        self._auth = {"user": username, "password": password}
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            # the store's own server, never a proxy from the environment
            trust_env=False,
        )

    def _send(self, sql: str, text: str, settings: Mapping[str, Any]) -> str:
        try:
            return self._post(sql, text, settings)
        except _UnknownDatabase:
            # a store's database is created on first use, as chDB's is
            self.create_database()
            return self._post(sql, text, settings)

    def _post(self, sql: str, text: str, settings: Mapping[str, Any]) -> str:
        """One statement's text over HTTP, its settings as URL parameters."""
        import httpx

        params: dict[str, Any] = {**self._auth, "database": self.database}
        params.update({k: str(v) for k, v in settings.items()})
        try:
            response = self._client.post(self._url, params=params, content=text.encode("utf-8"))
        except httpx.TimeoutException as exc:
            raise ClickHouseStoreError(
                f"store {self.where}: ClickHouse did not answer in time ({type(exc).__name__}); "
                "check that the server runs and is not overloaded, or raise ?timeout= in the URL"
            ) from None
        except httpx.HTTPError as exc:
            raise ClickHouseStoreError(
                f"store {self.where}: cannot reach ClickHouse ({type(exc).__name__}: {exc}); "
                "check the host and port in the URL and that the server runs"
            ) from None
        if response.status_code == 200:
            return response.text
        text = response.text
        if response.status_code in (401, 403) or re.search(r"Code: (192|193|516)\b", text):
            raise ClickHouseStoreError(
                f"store {self.where}: ClickHouse refused the login ({_reason(text)}); "
                "check the user and password in the URL"
            )
        if re.search(r"Code: 81\b|UNKNOWN_DATABASE|Database \S+ doesn't exist", text):
            raise _UnknownDatabase(self.database)
        raise ClickHouseStoreError(f"sql: {_reason(text)} (in: {sql.strip()[:120]})")

    def create_database(self) -> None:
        saved, self.database = self.database, "default"
        try:
            create = f"CREATE DATABASE IF NOT EXISTS {saved}"
            self._post(create, create, {})
        finally:
            self.database = saved

    def close(self) -> None:
        self._client.close()


class _UnknownDatabase(ClickHouseStoreError):
    pass


# ---- chDB: ClickHouse in this process ------------------------------------------------------------------------

_CHDB_LOCK = threading.RLock()
_CHDB: dict[str, Any] = {"path": None, "session": None, "database": None}


class ChdbWire(Wire):
    """chDB's embedded ClickHouse on a data directory. chDB allows one data directory per process; each store
    is a database inside it, selected (under one lock) before each statement."""

    def __init__(self, path: str, database: str) -> None:
        self.path = path
        self.database = database
        self.where = f"chdb://{path}?database={database}"

    def _session(self) -> Any:
        try:
            from chdb import session as chdb_session
        except ImportError:
            raise ClickHouseStoreError(
                f"store {self.where}: chDB is not installed; fix: pip install chdb-core"
            ) from None
        if _CHDB["session"] is None:
            try:
                _CHDB["session"] = chdb_session.Session(self.path)
            except Exception as exc:
                raise ClickHouseStoreError(
                    f"store {self.where}: chDB cannot open it ({_reason(str(exc))})"
                ) from None
            _CHDB["path"], _CHDB["database"] = self.path, None
        elif _CHDB["path"] != self.path:
            raise ClickHouseStoreError(
                f"store {self.where}: this process already uses chDB at {_CHDB['path']}, and chDB allows one "
                "data directory per process; fix: use that path with another ?database="
            )
        return _CHDB["session"]

    def _inline_settings(self, settings: Mapping[str, Any]) -> str:
        return ", ".join(f"{k} = {literal(v)}" for k, v in settings.items())

    def _send(self, sql: str, text: str, settings: Mapping[str, Any]) -> str:
        with _CHDB_LOCK:
            s = self._session()
            try:
                if _CHDB["database"] != self.database:
                    s.query(f"CREATE DATABASE IF NOT EXISTS {self.database}")
                    s.query(f"USE {self.database}")
                    _CHDB["database"] = self.database
                result = s.query(text)
            except ClickHouseStoreError:
                raise
            except Exception as exc:
                raise ClickHouseStoreError(f"sql: {_reason(str(exc))} (in: {sql.strip()[:120]})") from None
        return result.data() if hasattr(result, "data") else str(result)

    def close(self) -> None:
        pass  # the process's one chDB session outlives a store object; chDB closes it at exit
