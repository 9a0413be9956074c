"""PostgreSQL faults and probes (psycopg 3, blocking calls in worker threads).

Connections a fault holds open carry an ``application_name`` unique to the fault's lease. A table lock's
connection is ended by the lease recipe with ``pg_terminate_backend`` from any process, even when the
controller that opened it is hung rather than dead. Connection exhaustion holds its connections in a
separate holder process (:mod:`faultplane.drivers.holder`) whose revert is to kill it: that needs no free
slot, which a fault that took every slot (for a non-superuser, the reserved ones don't help) would not leave.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shlex
import shutil
import statistics
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Literal

import anyio
import psycopg
from psycopg import sql
from pydantic import BaseModel, ConfigDict, Field

from faultplane.drivers.base import ActivityContext, DriverError, RevertEntry, action, probe
from faultplane.drivers.blast import BlastRadius, select_targets
from faultplane.drivers.endpoints import PostgresDsn
from faultplane.drivers.holder import hold_connections, kill_holder
from faultplane.drivers.leases import (
    apply_or_revert,
    hold_then_revert,
    lease_ttl,
    leased_revert,
    revert_now,
    revert_recipe,
)
from faultplane.drivers.params import HoldSeconds, WaitSeconds
from faultplane.drivers.sealing import mask_text

__all__: list[str] = []

_CONNECT_TIMEOUT_S = 5
_held_lock = threading.Lock()
_held: dict[str, list[psycopg.Connection[Any]]] = {}


class _Dsn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dsn: PostgresDsn = Field(
        description="libpq connection string or URI, e.g. postgresql://user@127.0.0.1:5432/db"
    )


def _connect(
    dsn: str, *, application_name: str = "faultplane", autocommit: bool = True, field: str = "dsn"
) -> psycopg.Connection[Any]:
    try:
        return psycopg.connect(
            dsn, connect_timeout=_CONNECT_TIMEOUT_S, application_name=application_name, autocommit=autocommit
        )
    except psycopg.ProgrammingError as exc:  # a malformed DSN; its text may quote the password
        raise DriverError(
            f"{field}: not a libpq connection string or URI: {mask_text(str(exc).strip())}"
        ) from None
    except psycopg.OperationalError as exc:
        cause = " ".join(mask_text(str(exc)).split())
        if "timeout expired" in cause:
            cause += f" (no answer within {_CONNECT_TIMEOUT_S}s: is it a PostgreSQL server?)"
        raise DriverError(f"{field}: cannot connect to PostgreSQL at {_address(dsn)}: {cause}") from None


def _address(dsn: str) -> str:
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "?"
    return f"{info.get('host') or 'localhost'}:{info.get('port') or 5432}"


def _scalar(conn: psycopg.Connection[Any], query: Any, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    if row is None:
        raise DriverError(f"query returned no row: {query}")
    return row[0]


def _terminate_tagged(dsn: str, application_name: str) -> int:
    with _connect(dsn) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()",
            [application_name],
        ).fetchall()
    return len(rows)


def _close_held(tag: str) -> None:
    with _held_lock:
        conns = _held.pop(tag, [])
    for c in conns:
        with contextlib.suppress(psycopg.Error):
            c.rollback()
        c.close()


def _lease_tagged(ctx: ActivityContext, dsn: str, tag: str, label: str) -> RevertEntry:
    """The lease of sessions tagged ``tag``: the revert ends them here, or the watchdog from the server's own
    session list (``terminate_tagged``)."""
    return leased_revert(
        ctx,
        label=label,
        driver="postgres",
        revert="terminate_tagged",
        args={"dsn": dsn, "application_name": tag},
        fn=lambda: anyio.to_thread.run_sync(_release, dsn, tag),
    )


def _wait_gone(dsn: str, tag: str, timeout: float = 5.0) -> None:
    """Wait (bounded) until the server has let the tagged backends go, so the slots are really free again
    when the revert returns. Best effort: the revert itself never depends on getting a connection."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with psycopg.connect(dsn, connect_timeout=2, autocommit=True) as conn:
                left = _scalar(
                    conn, "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [tag]
                )
        except psycopg.Error:
            left = -1
        if left == 0:
            return
        time.sleep(0.02)


def _release(dsn: str, tag: str) -> None:
    """Close the fault's connections and wait (bounded) until the server has let their backends go."""
    _close_held(tag)
    _wait_gone(dsn, tag)


@revert_recipe("postgres", "terminate_tagged")
def _recipe_terminate_tagged(args: dict[str, Any]) -> None:
    _close_held(args["application_name"])  # when run in the controller itself
    _terminate_tagged(args["dsn"], args["application_name"])
    _release(args["dsn"], args["application_name"])


def _tag(kind: str) -> str:
    return f"faultplane-{kind}-{uuid.uuid4().hex[:10]}"


# --- terminate backends ---------------------------------------------------------------------------------------


class TerminateParams(_Dsn, BlastRadius):
    database: str | None = Field(default=None, description="only backends of this database (default: any)")
    application_name: str | None = Field(default=None, description="SQL LIKE pattern on application_name")
    usename: str | None = Field(default=None, description="only backends of this user")
    state: str | None = Field(default=None, description="only backends in this state, e.g. 'idle'")


@action("postgres", "terminate_backends", TerminateParams, fault_type="error")
def terminate_backends(ctx: ActivityContext, p: TerminateParams) -> dict[str, Any]:
    """pg_terminate_backend() client backends matching the filters (blast radius: count or percentage).

    Nothing to revert: a terminated session is gone; the fault tests whether clients reconnect.
    """
    cond: list[sql.Composable] = [
        sql.SQL("backend_type = 'client backend'"),
        sql.SQL("pid <> pg_backend_pid()"),
    ]
    args: list[Any] = []
    for col, val, op in (
        ("datname", p.database, "="),
        ("application_name", p.application_name, "LIKE"),
        ("usename", p.usename, "="),
        ("state", p.state, "="),
    ):
        if val is not None:
            cond.append(sql.SQL("{} {} %s").format(sql.Identifier(col), sql.SQL(op)))
            args.append(val)
    query = sql.SQL("SELECT pid FROM pg_stat_activity WHERE {} ORDER BY pid").format(
        sql.SQL(" AND ").join(cond)
    )
    with _connect(p.dsn) as conn:
        pids = [r[0] for r in conn.execute(query, args).fetchall()]
        chosen = select_targets(pids, count=p.count, percentage=p.percentage, rng=ctx.rng)
        done = [pid for pid in chosen if _scalar(conn, "SELECT pg_terminate_backend(%s)", [pid])]
    return {"matched": len(pids), "terminated": done}


# --- connection exhaustion ------------------------------------------------------------------------------------


class ExhaustParams(_Dsn):
    connections: int | None = Field(
        default=None,
        ge=1,
        le=10_000,
        description="connections to hold; omit to take every slot the DSN's user can get",
    )
    leave_free: int = Field(
        default=0,
        ge=0,
        description="slots to leave free when filling (the revert does not need one)",
    )
    require_all: bool = Field(
        default=False,
        description="fail (and release them) when the server gives fewer connections than requested",
    )
    duration_seconds: HoldSeconds = Field(
        default=None, description="release after this long; omit to hold until rollback"
    )


@revert_recipe("postgres", "kill_holder")
def _recipe_kill_holder(args: dict[str, Any]) -> None:
    # The holder's sockets close when it dies, and the backends exit: no connection slot is needed, which
    # matters when the fault took them all (a non-superuser cannot use the superuser-reserved ones).
    killed = kill_holder(args["application_name"])
    if not killed:
        # No holder left (it died some other way, so its sockets are closed): end any backend still tagged.
        with contextlib.suppress(DriverError, psycopg.Error):
            _terminate_tagged(args["dsn"], args["application_name"])
    _wait_gone(args["dsn"], args["application_name"], timeout=5.0 if killed else 1.0)


@action("postgres", "exhaust_connections", ExhaustParams, fault_type="resource_exhaustion")
async def exhaust_connections(ctx: ActivityContext, p: ExhaustParams) -> dict[str, Any]:
    """Hold connections open from a holder process so the server's slots run out; rollback kills the holder.

    Killing it needs no free slot (its sockets close, the backends exit), so the revert — and the lease
    watchdog when the controller is dead or hung — works even when every slot is taken.
    """
    tag = _tag("hold")
    what = p.connections if p.connections is not None else "every free slot"
    result = await hold_connections(
        ctx,
        "postgres",
        p.dsn,
        tag,
        p,
        label=f"postgres: close held connections ({tag}, {what})",
        revert="kill_holder",
        revert_args={"dsn": p.dsn, "application_name": tag},
    )
    return {**result, "application_name": tag}


# --- table lock -----------------------------------------------------------------------------------------------

LockMode = Literal[
    "ACCESS SHARE",
    "ROW SHARE",
    "ROW EXCLUSIVE",
    "SHARE UPDATE EXCLUSIVE",
    "SHARE",
    "SHARE ROW EXCLUSIVE",
    "EXCLUSIVE",
    "ACCESS EXCLUSIVE",
]


class LockParams(_Dsn):
    table: str = Field(description="table name, optionally schema-qualified (schema.table)")
    mode: LockMode = "ACCESS EXCLUSIVE"
    duration_seconds: HoldSeconds = Field(
        default=None, description="release after this long; omit to hold until rollback"
    )


def _lock(conn: psycopg.Connection[Any], tag: str, table: str, mode: str) -> None:
    with _held_lock:
        _held[tag] = [conn]
    ident = sql.Identifier(*table.split(".", 1))
    try:
        conn.execute("SET lock_timeout = '5s'")
        conn.execute(sql.SQL("LOCK TABLE {} IN {} MODE").format(ident, sql.SQL(mode)))
    except psycopg.Error as exc:
        _close_held(tag)
        raise DriverError(f"table: cannot lock {table!r}: {str(exc).strip()}") from None


@action("postgres", "lock_table", LockParams, fault_type="timeout")
async def lock_table(ctx: ActivityContext, p: LockParams) -> dict[str, Any]:
    """Take a table lock in an open transaction; queries that conflict wait. Rollback releases it."""
    tag = _tag("lock")
    # connect first: a connection that fails has locked nothing, so it leaves no lease behind
    conn = await anyio.to_thread.run_sync(lambda: _connect(p.dsn, application_name=tag, autocommit=False))
    entry = _lease_tagged(ctx, p.dsn, tag, f"postgres: release {p.mode} lock on {p.table}")
    await apply_or_revert(ctx, entry, _lock, conn, tag, p.table, p.mode)
    result: dict[str, Any] = {"table": p.table, "mode": p.mode, "application_name": tag}
    if await hold_then_revert(ctx, entry, p.duration_seconds):
        result["released_after_s"] = p.duration_seconds
    return result


# --- latency through the netproxy -----------------------------------------------------------------------------


class LatencyParams(_Dsn):
    route: str = Field(
        default="postgres", description="netproxy route name (registry target netproxy:<route>)"
    )
    listen: str = Field(default="127.0.0.1:0", description="where clients must connect to feel the latency")
    latency_ms: float = Field(ge=0, le=3_600_000)
    jitter_ms: float = Field(default=0, ge=0, le=3_600_000)
    control_url: str | None = Field(
        default=None, description="standalone netproxy control API; omit = in-process"
    )


@action("postgres", "inject_latency", LatencyParams, fault_type="latency")
async def inject_latency(ctx: ActivityContext, p: LatencyParams) -> dict[str, Any]:
    """Put a netproxy route with a latency toxic in front of the server; clients use the returned address.

    Rollback removes the toxic and the route (both are netproxy actions with their own reverts).
    """
    from faultplane.drivers import netproxy

    info = psycopg.conninfo.conninfo_to_dict(p.dsn)
    upstream = f"{info.get('host') or '127.0.0.1'}:{info.get('port') or 5432}"
    where = {"control_url": p.control_url} if p.control_url else {}
    route = await netproxy.create_route(
        ctx, netproxy.CreateRouteParams(name=p.route, upstream=upstream, listen=p.listen, **where)
    )
    await netproxy.latency(
        ctx,
        netproxy.LatencyParams(route=p.route, latency_ms=p.latency_ms, jitter_ms=p.jitter_ms, **where),
    )
    host, port = route["listen"].rsplit(":", 1)
    proxied = psycopg.conninfo.make_conninfo(p.dsn, host=host, port=port)
    return {"route": p.route, "listen": route["listen"], "dsn": proxied, "latency_ms": p.latency_ms}


# --- probes ---------------------------------------------------------------------------------------------------


class CountParams(_Dsn):
    database: str | None = None
    application_name: str | None = Field(default=None, description="SQL LIKE pattern")
    state: str | None = None


@probe("postgres", "connection_count", CountParams)
def connection_count(ctx: ActivityContext, p: CountParams) -> int:
    """Client backends connected (optionally filtered), not counting the probe's own."""
    q = (
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        " AND (%(db)s::text IS NULL OR datname = %(db)s) AND (%(app)s::text IS NULL OR application_name LIKE %(app)s)"
        " AND (%(state)s::text IS NULL OR state = %(state)s)"
    )
    with _connect(p.dsn) as conn:
        return int(_scalar(conn, q, {"db": p.database, "app": p.application_name, "state": p.state}))


class LatencyProbeParams(_Dsn):
    query: str = Field(default="SELECT 1", description="a read-only query to time")
    samples: int = Field(default=5, ge=1, le=1000)
    include_connect: bool = Field(default=False, description="time a new connection per sample")
    timeout_seconds: float = Field(default=30, gt=0, le=600)


def _read_only_conn(dsn: str) -> psycopg.Connection[Any]:
    conn = _connect(dsn, autocommit=False)
    conn.read_only = True  # every transaction psycopg opens is BEGIN READ ONLY: the server refuses writes
    return conn


def _time_read_only(conn: psycopg.Connection[Any], query: str) -> None:
    try:
        cur = conn.execute(query)
        if cur.description is not None:
            cur.fetchall()
    finally:
        # Roll back every sample: nothing the query did (a SET, say) outlives it.
        conn.rollback()


@probe("postgres", "query_latency", LatencyProbeParams)
def query_latency(ctx: ActivityContext, p: LatencyProbeParams) -> dict[str, float]:
    """Time ``query`` ``samples`` times: p50/mean/max in milliseconds.

    The query runs in a READ ONLY transaction, rolled back after each sample: a probe never changes data.
    """
    out: list[float] = []
    deadline = time.monotonic() + p.timeout_seconds
    conn = None if p.include_connect else _read_only_conn(p.dsn)
    try:
        for _ in range(p.samples):
            if time.monotonic() > deadline:
                break
            t0 = time.perf_counter()
            if p.include_connect:
                with _read_only_conn(p.dsn) as c:
                    _time_read_only(c, p.query)
            else:
                assert conn is not None
                _time_read_only(conn, p.query)
            out.append((time.perf_counter() - t0) * 1000.0)
    except psycopg.Error as exc:
        msg = str(exc).strip()
        if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
            msg += " (query_latency runs the query in a READ ONLY transaction; give it a read-only query)"
        raise DriverError(f"query: {msg}") from None
    finally:
        if conn is not None:
            conn.close()
    return {
        "p50_ms": statistics.median(out),
        "mean_ms": statistics.fmean(out),
        "max_ms": max(out),
        "samples": float(len(out)),
    }


class AvailableParams(_Dsn):
    timeout_seconds: float = Field(default=5, gt=0, le=60)


@probe("postgres", "is_available", AvailableParams)
def is_available(ctx: ActivityContext, p: AvailableParams) -> bool:
    """True when a new connection can run ``SELECT 1``."""
    try:
        with psycopg.connect(p.dsn, connect_timeout=max(1, int(p.timeout_seconds)), autocommit=True) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


# --- configuration parameter ----------------------------------------------------------------------------------

_GUC = r"^[a-z_][a-z0-9_.]{0,62}$"


def _auto_conf_value(conn: psycopg.Connection[Any], name: str) -> str | None:
    """The value ALTER SYSTEM holds for ``name`` (postgresql.auto.conf), None when it holds none."""
    rows = conn.execute(
        "SELECT setting FROM pg_file_settings WHERE name = %s AND sourcefile LIKE %s ORDER BY seqno DESC",
        [name, "%postgresql.auto.conf"],
    ).fetchall()
    return rows[0][0] if rows else None


def _wait_setting(dsn: str, name: str, before: str, timeout: float = 3.0) -> str:
    """pg_reload_conf() only signals the postmaster: wait (bounded) until a new session sees a change."""
    deadline = time.monotonic() + timeout
    while True:
        with _connect(dsn) as conn:
            now = str(_scalar(conn, "SELECT current_setting(%s)", [name]))
        if now != before or time.monotonic() > deadline:
            return now
        time.sleep(0.05)


def _set_system(dsn: str, name: str, value: str | None) -> None:
    with _connect(dsn) as conn:
        if value is None:
            conn.execute(sql.SQL("ALTER SYSTEM RESET {}").format(sql.Identifier(name)))
        else:
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
        conn.execute("SELECT pg_reload_conf()")


@revert_recipe("postgres", "restore_parameter")
def _recipe_restore_parameter(args: dict[str, Any]) -> None:
    with _connect(args["dsn"]) as conn:
        current = _auto_conf_value(conn, args["name"])
    if current != args["applied"]:
        return  # someone changed it again since the fault: their value stands
    _set_system(args["dsn"], args["name"], args["previous"])


def _lease_parameter(
    ctx: ActivityContext, dsn: str, name: str, previous: str | None, applied: str, *, label: str
) -> RevertEntry:
    """The lease that puts back what ALTER SYSTEM held for ``name`` before the fault set ``applied``
    (``previous``, None to RESET it): the arguments ``restore_parameter`` reads."""
    return leased_revert(
        ctx,
        label=label,
        driver="postgres",
        revert="restore_parameter",
        args={"dsn": dsn, "name": name, "previous": previous, "applied": applied},
    )


class ParameterParams(_Dsn):
    name: str = Field(pattern=_GUC, description="a server parameter, e.g. statement_timeout, work_mem")
    value: str = Field(max_length=1000, description="its new value, as in postgresql.conf (e.g. '50ms')")
    duration_seconds: HoldSeconds = None


@action("postgres", "set_parameter", ParameterParams, fault_type="error")
async def set_parameter(ctx: ActivityContext, p: ParameterParams) -> dict[str, Any]:
    """ALTER SYSTEM SET a reloadable parameter and reload; new sessions get it (sessions that SET it themselves
    keep theirs). Rollback puts back what ALTER SYSTEM held before (or RESETs it). Needs a superuser.

    A parameter that needs a restart (context ``postmaster``) is refused rather than half-applied."""

    def apply() -> dict[str, Any]:
        with _connect(p.dsn) as conn:
            row = conn.execute(
                "SELECT context, setting FROM pg_settings WHERE name = %s", [p.name]
            ).fetchone()
            if row is None:
                raise DriverError(f"name: PostgreSQL has no parameter {p.name!r} (see pg_settings)")
            if row[0] in ("internal", "postmaster"):
                raise DriverError(
                    f"name: {p.name} can only change with a server restart (context {row[0]}); "
                    "pick a reloadable parameter"
                )
            before = str(_scalar(conn, "SELECT current_setting(%s)", [p.name]))
            return {"before": before, "previous": _auto_conf_value(conn, p.name)}

    try:
        state = await anyio.to_thread.run_sync(apply)
    except psycopg.Error as exc:
        raise DriverError(f"dsn: {mask_text(str(exc).strip())}") from None
    entry = _lease_parameter(
        ctx, p.dsn, p.name, state["previous"], p.value, label=f"postgres: restore {p.name} (ALTER SYSTEM)"
    )
    try:
        await anyio.to_thread.run_sync(_set_system, p.dsn, p.name, p.value)
    except psycopg.Error as exc:
        from faultplane.drivers.leases import withdraw

        withdraw(ctx, entry)  # ALTER SYSTEM refused the value: nothing changed
        raise DriverError(f"value: PostgreSQL refused {p.name} = {p.value!r}: {str(exc).strip()}") from None
    except BaseException:
        await revert_now(ctx, entry)
        raise
    now = await anyio.to_thread.run_sync(_wait_setting, p.dsn, p.name, state["before"])
    result: dict[str, Any] = {"name": p.name, "before": state["before"], "now": now}
    if await hold_then_revert(ctx, entry, p.duration_seconds):
        result["restored_after_s"] = p.duration_seconds
    return result


# --- long / idle transactions ---------------------------------------------------------------------------------


class IdleTransactionParams(_Dsn):
    sessions: int = Field(default=1, ge=1, le=100, description="transactions to hold open")
    statement: str | None = Field(
        default=None,
        max_length=10_000,
        description="run inside each transaction first, e.g. SELECT ... FOR UPDATE to hold row locks",
    )
    duration_seconds: HoldSeconds = Field(
        default=None, description="end them after this long; omit to hold until rollback"
    )


def _open_idle(conns: list[psycopg.Connection[Any]], statement: str | None) -> list[int]:
    xids = []
    for conn in conns:
        conn.execute("BEGIN")
        xids.append(int(_scalar(conn, "SELECT txid_current()")))  # an xid: holds back vacuum's horizon
        if statement:
            conn.execute(statement)
    return xids


@action("postgres", "idle_transaction", IdleTransactionParams, fault_type="resource_exhaustion")
async def idle_transaction(ctx: ActivityContext, p: IdleTransactionParams) -> dict[str, Any]:
    """Hold ``sessions`` transactions open and idle ("idle in transaction"), each with an xid (so vacuum
    cannot clean up behind them) and, with ``statement``, the locks it took. Rollback ends the sessions
    (``pg_terminate_backend`` by their tag, so the watchdog can do it too)."""
    tag = _tag("idle")

    def connect() -> list[psycopg.Connection[Any]]:
        conns: list[psycopg.Connection[Any]] = []
        try:
            for _ in range(p.sessions):
                conns.append(_connect(p.dsn, application_name=tag, autocommit=True))
        except DriverError:
            for c in conns:
                c.close()
            raise
        return conns

    conns = await anyio.to_thread.run_sync(connect)  # no connection, nothing applied, no lease
    with _held_lock:
        _held[tag] = conns
    entry = _lease_tagged(ctx, p.dsn, tag, f"postgres: end {p.sessions} idle transaction(s) ({tag})")
    try:
        xids = await apply_or_revert(ctx, entry, _open_idle, conns, p.statement)
    except psycopg.Error as exc:
        raise DriverError(f"statement: {mask_text(str(exc).strip())}") from None
    result: dict[str, Any] = {"application_name": tag, "sessions": p.sessions, "xids": xids}
    if await hold_then_revert(ctx, entry, p.duration_seconds):
        result["ended_after_s"] = p.duration_seconds
    return result


# --- server restart / crash -----------------------------------------------------------------------------------


def _pg_tool(data_dir: Path, tool: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run a PostgreSQL server tool of the data directory's major version, as the directory's owner (pg_ctl
    and pg_rewind refuse to run as root)."""
    version = (data_dir / "PG_VERSION").read_text().strip()
    exe = Path(f"/usr/lib/postgresql/{version}/bin/{tool}")
    if not exe.exists():
        found = shutil.which(tool)
        if found is None:
            raise DriverError(f"data_dir: no {tool} for PostgreSQL {version} on this host")
        exe = Path(found)
    prefix: list[str] = []
    owner = data_dir.stat().st_uid
    if os.geteuid() == 0 and owner != 0:
        prefix = ["runuser", "-u", pwd.getpwuid(owner).pw_name, "--"]
    return subprocess.run([*prefix, str(exe), *args], capture_output=True, text=True, timeout=timeout)


def _pg_ctl(data_dir: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return _pg_tool(data_dir, "pg_ctl", "-D", str(data_dir), *args, timeout=timeout)


def _said(res: subprocess.CompletedProcess[str]) -> str:
    return " ".join((res.stderr or res.stdout).split())[:300]


def _start_options(data_dir: Path) -> list[str]:
    """The options the server was last started with, from ``postmaster.opts`` (written at each start, kept
    after shutdown) without the data directory: a plain ``pg_ctl start`` would lose a port or ``-c`` given on
    the command line and bring back a different server."""
    try:
        words = shlex.split((data_dir / "postmaster.opts").read_text())[1:]
    except (OSError, ValueError):
        return []
    out: list[str] = []
    it = iter(words)
    for word in it:
        if word == "-D":
            next(it, None)
        elif not word.startswith("-D"):
            out.append(word)
    return ["-o", shlex.join(out)] if out else []


def _start(data_dir: Path, timeout: float = 60, options: list[str] | None = None) -> None:
    """Start the server unless it runs, with ``options`` (taken from postmaster.opts when the fault was
    applied: tools such as pg_rewind rewrite that file) or else the file's current ones."""
    if _pg_ctl(data_dir, "status").returncode == 0:
        return  # running: nothing to undo
    log = str(data_dir / "faultplane-pg_ctl.log")
    res = _pg_ctl(
        data_dir,
        "start",
        "-w",
        "-t",
        str(int(timeout)),
        "-l",
        log,
        *(options if options else _start_options(data_dir)),
        timeout=timeout + 10,
    )
    if res.returncode != 0:
        raise DriverError(f"data_dir: pg_ctl start of {data_dir} failed: {_said(res)}")


@revert_recipe("postgres", "ensure_running")
def _recipe_ensure_running(args: dict[str, Any]) -> None:
    _start(Path(args["data_dir"]), options=args.get("options"))


class RestartParams(_Dsn):
    data_dir: str = Field(description="the server's data directory on this host (pg_ctl -D)")
    mode: Literal["fast", "immediate"] = Field(
        default="fast",
        description="fast: clean shutdown; immediate: a crash, the restart runs crash recovery",
    )
    timeout_seconds: WaitSeconds = Field(default=60, description="give up waiting for it to come back")


@action("postgres", "restart", RestartParams, fault_type="error")
async def restart(ctx: ActivityContext, p: RestartParams) -> dict[str, Any]:
    """Restart a local server with pg_ctl (``immediate``: crash and recover); every session is cut. Returns
    once it accepts queries again (``recovered_in_s``). The lease starts the server if it is left down."""
    data_dir = Path(p.data_dir)
    if not (data_dir / "PG_VERSION").exists():
        raise DriverError(f"data_dir: {p.data_dir!r} is not a PostgreSQL data directory")
    if not (data_dir / "postmaster.pid").exists():
        raise DriverError(f"data_dir: no server is running on {p.data_dir!r} (no postmaster.pid)")

    def start_time() -> str:
        with _connect(p.dsn) as conn:
            return str(_scalar(conn, "SELECT pg_postmaster_start_time()"))

    before = await anyio.to_thread.run_sync(start_time)  # the DSN must reach this server before we touch it
    entry = leased_revert(
        ctx,
        label=f"postgres: make sure the server in {p.data_dir} runs",
        driver="postgres",
        revert="ensure_running",
        args={"data_dir": str(data_dir), "options": _start_options(data_dir)},
    )
    t0 = time.monotonic()
    log = str(data_dir / "faultplane-pg_ctl.log")
    args = ("restart", "-m", p.mode, "-w", "-t", str(int(p.timeout_seconds)), "-l", log)
    res = await anyio.to_thread.run_sync(lambda: _pg_ctl(data_dir, *args, timeout=p.timeout_seconds + 10))
    if res.returncode != 0:
        await revert_now(ctx, entry)
        raise DriverError(
            f"data_dir: pg_ctl restart failed: {' '.join((res.stderr or res.stdout).split())[:300]}"
        )

    def back() -> str:
        deadline = time.monotonic() + p.timeout_seconds
        while True:
            try:
                return start_time()
            except DriverError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    after = await anyio.to_thread.run_sync(back)
    recovered = time.monotonic() - t0
    from faultplane.drivers.leases import withdraw

    withdraw(ctx, entry)  # it runs again: nothing is left to revert
    return {
        "mode": p.mode,
        "started_before": before,
        "started_after": after,
        "recovered_in_s": round(recovered, 3),
    }


# --- replication: lag and failover ----------------------------------------------------------------------------


def _replica_check(conn: psycopg.Connection[Any], dsn: str) -> None:
    if not _scalar(conn, "SELECT pg_is_in_recovery()"):
        raise DriverError(
            f"replica_dsn: the server at {_address(dsn)} is not a replica (pg_is_in_recovery() is false)"
        )


@revert_recipe("postgres", "resume_replay")
def _recipe_resume_replay(args: dict[str, Any]) -> None:
    with _connect(args["dsn"]) as conn:
        if _scalar(conn, "SELECT pg_is_in_recovery()"):  # promoted since: there is no replay to resume
            conn.execute("SELECT pg_wal_replay_resume()")


class ReplicationLagParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    replica_dsn: PostgresDsn = Field(description="libpq DSN of the streaming replica (a superuser)")
    delay_seconds: float | None = Field(
        default=None,
        gt=0,
        le=86_400,
        description="apply each commit this long after the primary made it (recovery_min_apply_delay); "
        "omit to pause replay altogether",
    )
    duration_seconds: HoldSeconds = Field(
        default=None, description="end the lag after this long; omit to hold until rollback"
    )


@action("postgres", "replication_lag", ReplicationLagParams, fault_type="latency")
async def replication_lag(ctx: ActivityContext, p: ReplicationLagParams) -> dict[str, Any]:
    """Make a streaming replica fall behind its primary: replay paused (``pg_wal_replay_pause()``), or each
    commit applied ``delay_seconds`` late (``recovery_min_apply_delay``). The replica keeps receiving WAL, so
    rollback (resume / the earlier delay) lets it catch up. Reads on the replica return stale data."""

    def check() -> str | None:
        with _connect(p.replica_dsn, field="replica_dsn") as conn:
            _replica_check(conn, p.replica_dsn)
            return _auto_conf_value(conn, "recovery_min_apply_delay")

    previous = await anyio.to_thread.run_sync(check)
    if p.delay_seconds is None:
        entry = leased_revert(
            ctx,
            label=f"postgres: resume WAL replay on {_address(p.replica_dsn)}",
            driver="postgres",
            revert="resume_replay",
            args={"dsn": p.replica_dsn},
        )

        def pause() -> None:
            with _connect(p.replica_dsn, field="replica_dsn") as conn:
                conn.execute("SELECT pg_wal_replay_pause()")

        apply: Any = pause
        result: dict[str, Any] = {"mode": "pause"}
    else:
        applied = f"{round(p.delay_seconds * 1000)}ms"
        entry = _lease_parameter(
            ctx,
            p.replica_dsn,
            "recovery_min_apply_delay",
            previous,
            applied,
            label=f"postgres: restore recovery_min_apply_delay on {_address(p.replica_dsn)}",
        )

        def apply() -> None:
            _set_system(p.replica_dsn, "recovery_min_apply_delay", applied)

        result = {"mode": "delay", "recovery_min_apply_delay": applied}
    try:
        await apply_or_revert(ctx, entry, apply)
    except psycopg.Error as exc:
        raise DriverError(f"replica_dsn: {mask_text(str(exc).strip())}") from None
    if await hold_then_revert(ctx, entry, p.duration_seconds):
        result["ended_after_s"] = p.duration_seconds
    return result


class ReplicaLagProbeParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    replica_dsn: PostgresDsn = Field(description="libpq DSN of the replica")
    primary_dsn: PostgresDsn | None = Field(
        default=None, description="its primary: lag is then measured against the primary's current WAL"
    )


@probe("postgres", "replica_lag", ReplicaLagProbeParams)
def replica_lag(ctx: ActivityContext, p: ReplicaLagProbeParams) -> dict[str, Any]:
    """How far a replica's replay is behind: ``lag_bytes`` of WAL (behind the primary's current position with
    ``primary_dsn``, else behind what the replica has received), ``replay_paused``, and
    ``last_replay_age_s`` (seconds since the last replayed commit was made on the primary; grows when the
    primary is idle too)."""
    with _connect(p.replica_dsn, field="replica_dsn") as conn:
        row = conn.execute(
            "SELECT pg_is_in_recovery(), pg_last_wal_receive_lsn()::text, pg_last_wal_replay_lsn()::text,"
            " extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8"
        ).fetchone()
        assert row is not None
        in_recovery, received, replayed, age = row
        if not in_recovery:
            _replica_check(conn, p.replica_dsn)
        paused = _scalar(conn, "SELECT pg_get_wal_replay_pause_state()") != "not paused"
    ahead = received
    if p.primary_dsn is not None:
        with _connect(p.primary_dsn, field="primary_dsn") as conn:
            ahead = str(_scalar(conn, "SELECT pg_current_wal_lsn()::text"))
    with _connect(p.replica_dsn, field="replica_dsn") as conn:
        lag = _scalar(conn, "SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", [ahead, replayed])
    return {
        "lag_bytes": max(0, int(lag)),
        "replay_paused": paused,
        "received_lsn": received,
        "replayed_lsn": replayed,
        "last_replay_age_s": None if age is None else round(float(age), 3),
    }


_CONF_FILES = ("postgresql.conf", "postgresql.auto.conf", "pg_hba.conf", "pg_ident.conf")


def _wait_role(dsn: str, in_recovery: bool, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with _connect(dsn) as conn:
                if bool(_scalar(conn, "SELECT pg_is_in_recovery()")) == in_recovery:
                    return
        except DriverError:
            pass
        if time.monotonic() > deadline:
            role = "a replica" if in_recovery else "a primary"
            raise DriverError(f"replica_dsn: {_address(dsn)} is not {role} after {timeout:.0f}s")
        time.sleep(0.1)


@revert_recipe("postgres", "rejoin_replica")
def _recipe_rejoin_replica(args: dict[str, Any]) -> None:
    """Undo a failover: the primary runs again, and the promoted replica is rewound (pg_rewind) onto the
    primary's timeline and restarted as its standby, with its own configuration."""
    replica_dir = Path(args["replica_data_dir"])
    timeout = float(args.get("timeout_seconds", 60))
    if args.get("primary_data_dir"):
        _start(Path(args["primary_data_dir"]), timeout, args.get("primary_options"))
    if _pg_ctl(replica_dir, "status").returncode == 0:
        with _connect(args["replica_dsn"]) as conn:
            if _scalar(conn, "SELECT pg_is_in_recovery()"):
                return  # still (or again) a replica: nothing to undo
        res = _pg_ctl(replica_dir, "stop", "-m", "fast", "-w", "-t", str(int(timeout)), timeout=timeout + 10)
        if res.returncode != 0:
            raise DriverError(f"replica_data_dir: pg_ctl stop failed: {_said(res)}")
    elif (replica_dir / "standby.signal").exists():
        _start(replica_dir, timeout, args.get("replica_options"))  # down, but a standby: start it as one
        return
    # pg_rewind copies the source's configuration files: keep the replica's own (port, primary_conninfo)
    kept = {name: (replica_dir / name).read_bytes() for name in _CONF_FILES if (replica_dir / name).exists()}
    owner = replica_dir.stat()
    res = _pg_tool(
        replica_dir,
        "pg_rewind",
        "-D",
        str(replica_dir),
        f"--source-server={args['primary_dsn']}",
        timeout=timeout * 5,
    )
    if res.returncode != 0:
        raise DriverError(f"replica_data_dir: pg_rewind failed: {mask_text(_said(res))}")
    for name, data in kept.items():
        (replica_dir / name).write_bytes(data)
    signal_file = replica_dir / "standby.signal"
    signal_file.touch()
    for name in (*kept, "standby.signal"):
        os.chown(replica_dir / name, owner.st_uid, owner.st_gid)
    _start(replica_dir, timeout, args.get("replica_options"))
    _wait_role(args["replica_dsn"], True, timeout)


class FailoverParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    primary_dsn: PostgresDsn = Field(
        description="libpq DSN of the primary (a superuser; pg_rewind uses it to revert)"
    )
    replica_dsn: PostgresDsn = Field(description="libpq DSN of its streaming replica (a superuser)")
    replica_data_dir: str = Field(description="the replica's data directory on this host")
    primary_data_dir: str | None = Field(
        default=None,
        description="the primary's data directory on this host: stop it (fast shutdown) before promoting, as "
        "when it is lost; omit to promote while the primary runs (two writable servers)",
    )
    timeout_seconds: WaitSeconds = 60
    duration_seconds: HoldSeconds = Field(
        default=None, description="revert after this long; omit to hold until rollback"
    )


@action("postgres", "failover", FailoverParams, fault_type="error")
async def failover(ctx: ActivityContext, p: FailoverParams) -> dict[str, Any]:
    """Promote the replica (``pg_promote()``), after stopping the primary if ``primary_data_dir`` is given.
    Rollback starts the primary again, rewinds the promoted server with ``pg_rewind`` and restarts it as a
    standby with its own configuration. Refused before anything changes unless the pair can be rewound
    (``wal_log_hints`` or data checksums, ``full_page_writes``) and the replica really replicates this
    primary."""
    replica_dir = Path(p.replica_data_dir)
    for field, d in (("replica_data_dir", p.replica_data_dir), ("primary_data_dir", p.primary_data_dir)):
        if d is not None and not (Path(d) / "PG_VERSION").exists():
            raise DriverError(f"{field}: {d!r} is not a PostgreSQL data directory")

    def check() -> None:
        with _connect(p.primary_dsn, field="primary_dsn") as conn:
            if _scalar(conn, "SELECT pg_is_in_recovery()"):
                raise DriverError(f"primary_dsn: {_address(p.primary_dsn)} is itself a replica")
            primary_id = _scalar(conn, "SELECT system_identifier FROM pg_control_system()")
        with _connect(p.replica_dsn, field="replica_dsn") as conn:
            _replica_check(conn, p.replica_dsn)
            replica_id = _scalar(conn, "SELECT system_identifier FROM pg_control_system()")
            hints, checksums, fpw = conn.execute(
                "SELECT current_setting('wal_log_hints'), current_setting('data_checksums'),"
                " current_setting('full_page_writes')"
            ).fetchone() or ("off", "off", "off")
        if primary_id != replica_id:
            raise DriverError(
                f"replica_dsn: {_address(p.replica_dsn)} is not a replica of {_address(p.primary_dsn)} "
                "(their system identifiers differ)"
            )
        if "on" not in (hints, checksums) or fpw != "on":
            raise DriverError(
                "primary_dsn: the failover could not be reverted: pg_rewind needs wal_log_hints=on (or data "
                "checksums) and full_page_writes=on on the pair"
            )
        if not (replica_dir / "postmaster.pid").exists():
            raise DriverError(f"replica_data_dir: no server is running on {p.replica_data_dir!r}")

    await anyio.to_thread.run_sync(check)
    entry = leased_revert(
        ctx,
        label=f"postgres: rejoin {_address(p.replica_dsn)} as a replica of {_address(p.primary_dsn)}",
        driver="postgres",
        revert="rejoin_replica",
        args={
            "primary_dsn": p.primary_dsn,
            "replica_dsn": p.replica_dsn,
            "replica_data_dir": p.replica_data_dir,
            "primary_data_dir": p.primary_data_dir,
            "timeout_seconds": p.timeout_seconds,
            "replica_options": _start_options(replica_dir),
            "primary_options": _start_options(Path(p.primary_data_dir)) if p.primary_data_dir else None,
        },
        ttl_s=lease_ttl(ctx, at_least=p.timeout_seconds * 3),
    )

    def apply() -> float:
        t0 = time.monotonic()
        if p.primary_data_dir is not None:
            res = _pg_ctl(
                Path(p.primary_data_dir),
                "stop",
                "-m",
                "fast",
                "-w",
                "-t",
                str(int(p.timeout_seconds)),
                timeout=p.timeout_seconds + 10,
            )
            if res.returncode != 0:
                raise DriverError(f"primary_data_dir: pg_ctl stop failed: {_said(res)}")
        with _connect(p.replica_dsn, field="replica_dsn") as conn:
            if not _scalar(conn, "SELECT pg_promote(true, %s)", [int(p.timeout_seconds)]):
                raise DriverError(f"replica_dsn: pg_promote() on {_address(p.replica_dsn)} did not finish")
        _wait_role(p.replica_dsn, False, p.timeout_seconds)
        return time.monotonic() - t0

    took = await apply_or_revert(ctx, entry, apply)
    result: dict[str, Any] = {
        "promoted": _address(p.replica_dsn),
        "primary_stopped": p.primary_data_dir is not None,
        "promoted_in_s": round(took, 3),
    }
    if await hold_then_revert(ctx, entry, p.duration_seconds):
        result["reverted_after_s"] = p.duration_seconds
    return result


# --- statement errors -----------------------------------------------------------------------------------------

# SQLSTATEs an application must handle; each is raised exactly as the server would raise the real error.
_SQLSTATES = {
    "40001": "could not serialize access due to concurrent update",
    "40P01": "deadlock detected",
    "55P03": "could not obtain lock on row",
    "57014": "canceling statement due to statement timeout",
    "53100": "could not extend file: No space left on device",
    "53200": "out of memory",
    "57P01": "terminating connection due to administrator command",
    "XX000": "internal error",
}


@revert_recipe("postgres", "drop_error_trigger")
def _recipe_drop_error_trigger(args: dict[str, Any]) -> None:
    table = sql.Identifier(*args["table"].split(".", 1))
    with _connect(args["dsn"]) as conn, conn.transaction():
        conn.execute(sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(sql.Identifier(args["name"]), table))
        conn.execute(sql.SQL("DROP FUNCTION IF EXISTS {}()").format(sql.Identifier(args["name"])))


class StatementErrorsParams(_Dsn):
    table: str = Field(
        pattern=r"^[A-Za-z_][A-Za-z0-9_$]{0,62}(\.[A-Za-z_][A-Za-z0-9_$]{0,62})?$",
        description="the table whose writes fail, optionally schema-qualified",
    )
    operations: list[Literal["INSERT", "UPDATE", "DELETE", "TRUNCATE"]] = Field(
        default=["INSERT", "UPDATE", "DELETE"], min_length=1
    )
    percent: float = Field(default=100, gt=0, le=100, description="share of statements that fail")
    sqlstate: Literal["40001", "40P01", "55P03", "57014", "53100", "53200", "57P01", "XX000"] = Field(
        default="40001",
        description="the error raised: 40001 serialization failure, 40P01 deadlock detected, 55P03 lock not "
        "available, 57014 statement timeout, 53100 disk full, 53200 out of memory, 57P01 admin shutdown, "
        "XX000 internal error",
    )
    duration_seconds: HoldSeconds = None


@action("postgres", "statement_errors", StatementErrorsParams, fault_type="error")
async def statement_errors(ctx: ActivityContext, p: StatementErrorsParams) -> dict[str, Any]:
    """Make ``percent`` of the writes (``operations``) to ``table`` fail with ``sqlstate``, the way the server
    reports a serialization failure, a deadlock, a lock timeout, a full disk...: a statement-level BEFORE
    trigger of Faultplane's raises it, so the statement and its transaction are rolled back and the client
    gets that SQLSTATE. Rollback drops the trigger and its function. Needs the table's owner or a superuser."""
    name = f"faultplane_err_{uuid.uuid4().hex[:10]}"
    table = sql.Identifier(*p.table.split(".", 1))
    message = f"{_SQLSTATES[p.sqlstate]} (injected by faultplane)"
    function = sql.SQL(
        "CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $fp$ BEGIN "
        "IF random() * 100 < {} THEN RAISE EXCEPTION USING ERRCODE = {}, MESSAGE = {}; END IF; "
        "RETURN NULL; END $fp$"
    ).format(sql.Identifier(name), sql.Literal(p.percent), sql.Literal(p.sqlstate), sql.Literal(message))
    trigger = sql.SQL("CREATE TRIGGER {} BEFORE {} ON {} FOR EACH STATEMENT EXECUTE FUNCTION {}()").format(
        sql.Identifier(name),
        sql.SQL(" OR ").join(sql.SQL(op) for op in p.operations),
        table,
        sql.Identifier(name),
    )

    conn = await anyio.to_thread.run_sync(lambda: _connect(p.dsn))  # unreachable: nothing applied, no lease
    entry = leased_revert(
        ctx,
        label=f"postgres: drop error trigger {name} on {p.table}",
        driver="postgres",
        revert="drop_error_trigger",
        args={"dsn": p.dsn, "table": p.table, "name": name},
    )

    def apply() -> None:
        with conn, conn.transaction():  # both or neither
            conn.execute(function)
            conn.execute(trigger)

    try:
        await anyio.to_thread.run_sync(apply)
    except psycopg.Error as exc:
        from faultplane.drivers.leases import withdraw

        withdraw(ctx, entry)  # the transaction rolled back: nothing was created
        raise DriverError(f"table: cannot add an error trigger to {p.table!r}: {str(exc).strip()}") from None
    except BaseException:
        await revert_now(ctx, entry)
        raise
    result: dict[str, Any] = {
        "table": p.table,
        "trigger": name,
        "sqlstate": p.sqlstate,
        "percent": p.percent,
        "operations": p.operations,
    }
    if await hold_then_revert(ctx, entry, p.duration_seconds):
        result["removed_after_s"] = p.duration_seconds
    return result


# --- real deadlocks -------------------------------------------------------------------------------------------


class DeadlockParams(_Dsn):
    table: str = Field(
        pattern=r"^[A-Za-z_][A-Za-z0-9_$]{0,62}(\.[A-Za-z_][A-Za-z0-9_$]{0,62})?$",
        description="a table with at least two rows; two of them are locked in opposite orders",
    )
    rounds: int = Field(default=1, ge=1, le=100, description="deadlocks to cause, one after the other")


def _deadlock_round(
    a: psycopg.Connection[Any], b: psycopg.Connection[Any], table: sql.Composable, rows: list[Any]
) -> str:
    lock = sql.SQL("SELECT 1 FROM {} WHERE ctid = %s FOR UPDATE").format(table)
    errors: list[str] = []

    def second(conn: psycopg.Connection[Any], row: Any) -> None:
        try:
            conn.execute(lock, [row])
        except psycopg.errors.DeadlockDetected:
            errors.append("deadlock")
        except psycopg.Error as exc:
            errors.append(f"{type(exc).__name__}: {str(exc).strip()}")

    for conn in (a, b):
        conn.execute("BEGIN")
    a.execute(lock, [rows[0]])
    b.execute(lock, [rows[1]])
    # Each now waits for the row the other holds: the server's deadlock detector (after deadlock_timeout)
    # aborts one of them, and the other gets its row.
    t = threading.Thread(target=second, args=(a, rows[1]))
    t.start()
    time.sleep(0.05)
    second(b, rows[0])
    t.join()
    for conn in (a, b):
        conn.execute("ROLLBACK")
    return errors[0] if errors else "no deadlock"


@action("postgres", "deadlock", DeadlockParams, fault_type="error")
async def deadlock(ctx: ActivityContext, p: DeadlockParams) -> dict[str, Any]:
    """Cause ``rounds`` real deadlocks: two sessions of Faultplane's each lock one of two rows of ``table``
    (``SELECT … FOR UPDATE``) and then ask for the other's. The server's deadlock detector aborts one after
    ``deadlock_timeout`` (``deadlocks`` in pg_stat_database counts it, the log shows "deadlock detected");
    meanwhile the application's writes to those two rows wait. Nothing outlives the action; the lease ends
    the two sessions if the controller dies mid-round."""
    tag = _tag("deadlock")
    table = sql.Identifier(*p.table.split(".", 1))

    def prepare() -> tuple[list[psycopg.Connection[Any]], list[Any]]:
        conns = [_connect(p.dsn, application_name=tag) for _ in range(2)]
        try:
            rows = [r[0] for r in conns[0].execute(sql.SQL("SELECT ctid FROM {} LIMIT 2").format(table))]
        except psycopg.Error as exc:
            for c in conns:
                c.close()
            raise DriverError(f"table: cannot read {p.table!r}: {str(exc).strip()}") from None
        if len(rows) < 2:
            for c in conns:
                c.close()
            raise DriverError(f"table: {p.table!r} has fewer than two rows; a deadlock needs two")
        return conns, rows

    conns, rows = await anyio.to_thread.run_sync(prepare)  # nothing locked yet: a failure leaves no lease
    with _held_lock:
        _held[tag] = conns
    entry = _lease_tagged(ctx, p.dsn, tag, f"postgres: end the deadlock sessions ({tag})")
    outcomes: list[str] = []
    try:
        for _ in range(p.rounds):
            outcomes.append(await anyio.to_thread.run_sync(_deadlock_round, conns[0], conns[1], table, rows))
    except psycopg.Error as exc:
        raise DriverError(f"table: {mask_text(str(exc).strip())}") from None
    finally:
        await revert_now(ctx, entry)
    return {
        "table": p.table,
        "rounds": p.rounds,
        "deadlocks": outcomes.count("deadlock"),
        "outcomes": outcomes,
    }
